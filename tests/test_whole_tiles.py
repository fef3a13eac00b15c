"""A reduction's walk in two loops (dt/ir/lower/reductions.py): its whole tiles without masks, then
its last, cut tile (a loop of kind "tail"). Walks that compute a product or store an output keep
one masked loop. Results never depend on where the extent falls against the tile."""
import numpy as np
import pytest

import dt
from dt.ir import scheduled as S
from test_llm_examples import BACKENDS, LLM, run_program

ROWS = """Func s, m, a;
In A;
Var x;
RVar y;
s[x] = rsum(A[x, y], y);
m[x] = rmax(A[x, y], y);
a[x] = rargmax(A[x, y], y);
s.block(x:2); s.tensorize(x:2, y:16); m.block(x:2); m.tensorize(x:2, y:16); a.block(x:1); a.tensorize(y:16);
s.compile(); m.compile(); a.compile();
"""


def _loops(kernel: S.Kernel) -> list[S.For]:
    return [s for s in kernel.body if isinstance(s, S.For)]


def _axes(loop: S.For) -> list[S.Axis]:
    return [s for s in loop.body if isinstance(s, S.Axis)]


def test_the_whole_tiles_have_no_mask_and_the_last_tile_has_its_own_loop():
    for kernel in dt.loads(ROWS).pipeline("f32").kernels:
        whole, tail = _loops(kernel)
        assert (whole.kind, tail.kind) == ("reduction", "tail")
        assert S.evaluate_index(whole.stop, {"y_SIZE": 70}) == 64 == S.evaluate_index(tail.start, {"y_SIZE": 70})
        assert [ax.limit for ax in _axes(whole)] == [None]
        assert [ax.limit for ax in _axes(tail)] == [S.IVar("y_SIZE")]
        assert not any(isinstance(n, S.Mask) for t in whole.body if isinstance(t, S.Assign)
                       for n in S.walk_texpr(t.value))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("y", [5, 16, 48, 70])  # under a tile, whole tiles only, a cut tile
def test_the_walk_gives_the_reference_wherever_the_extent_ends(backend, y):
    prog = dt.loads(ROWS)
    a = np.random.default_rng(y).standard_normal((5, y)).astype(np.float32)
    a[1, -1] = 9.0  # the max in the last tile
    out = run_program(prog, backend, A=a)
    np.testing.assert_allclose(out["s"], a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["m"], a.max(1))
    np.testing.assert_array_equal(out["a"], a.argmax(1))


def test_a_walk_computing_a_product_stays_one_masked_loop():
    kernel = dt.load(LLM / "mha.dt").pipeline("bf16").kernels[0]
    loops = [s for s in S.walk_statements(kernel.body) if isinstance(s, S.For)]
    assert [loop.kind for loop in loops] == ["reduction"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_output_stored_in_a_siblings_walk_keeps_one_loop(backend):
    """p is stored from s2's walk, computed with s1's: every tile of p is stored, the last one too."""
    prog = dt.loads("""Func p, s1, s2, o; In A; Var x; RVar y;
p[x, y] = A[x, y] * 2.0;
s1[x] = rsum(A[x, y], y);
s2[x] = rsum(p[x, y], y);
o[x] = s1[x] + s2[x];
p.inline(); o.block(x:1); s1.tensorize(y:16); s2.tensorize(y:16);
s1.fuse_at(o, x); s2.fuse_at(o, x); s2.compute_with(s1, y);
o.compile(); p.compile();""")
    assert [s.kind for k in prog.pipeline("f32").kernels for s in S.walk_statements(k.body)
            if isinstance(s, S.For)] == ["reduction"]
    a = np.random.default_rng(6).standard_normal((3, 70)).astype(np.float32)
    out = run_program(prog, backend, A=a)
    np.testing.assert_array_equal(out["p"], a * 2)
    np.testing.assert_allclose(out["o"], 3 * a.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_empty_walk_walks_no_tile(backend):
    """Block m's walk over l spans [16 m, 16 m + 16) within the extent: empty for m = 3 of 40 keys
    (an exact condition, so no where guards its lanes). Its whole tiles end at its start."""
    prog = dt.loads("""Func out; In A; Var m; RVar l;
out[m] = rsum(where(l >= m * 16, where(l < m * 16 + 16, A[l], 0.0), 0.0), l);
out.block(m:1); out.tensorize(l:16); out.compile();""")
    a = np.arange(40, dtype=np.float32)
    np.testing.assert_array_equal(run_program(prog, backend, A=a, sizes={"m": 4}), [120, 376, 284, 0])


def test_a_producer_recomputed_in_a_walk_counts_its_last_tile_once():
    prog = dt.loads("""Func o, p; In A, W; Var x; RVar y, z;
p[x] = rsum(W[x, z], z);
o[x] = rsum(A[x, y] * p[x], y);
o.block(x:1); o.tensorize(y:16); p.tensorize(z:16); p.fuse_at(o, y); o.compile();""")
    for y, times in ((64, 4), (70, 5), (16, None)):
        found = [w.message for w in prog.lint({"x": 64, "y": y, "z": 64}, "f32") if w.code == "recomputed"]
        assert found == ([] if times is None else
                         [f"'p' is computed {times} times in kernel 'o_kernel', where it does not change: once per "
                          f"step of the loop over y ({times})"])
