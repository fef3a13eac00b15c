"""Skipped tiles (issue 28): a reduction loop masked by an index condition walks only the tiles
some lane of the block needs, where every reduction of the loop gets its identity on the masked
lanes (dt.ir.lower.skipping); anything else walks the whole extent. Results never change."""
import numpy as np
import pytest

import dt
from dt.ir import scheduled as S
from test_llm_examples import BACKENDS, LLM, normal, run_program

ROWS = "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = {expr};\nout.block(m:16); out.tensorize(m:16, l:16); out.compile();"


def reduction_steps(prog, kernel: int = 0, **extents) -> list[tuple[int, ...]]:
    """How many tiles each loop of each program of the `kernel`th kernel walks: the Fors' bounds,
    evaluated per program (a walk's last, cut tile counted with the whole ones before it)."""
    kernel = prog.pipeline("f32").kernels[kernel]
    sizes = {S.size_name(d): n for d, n in extents.items()}
    steps = []
    for pid in range(S.evaluate_index(kernel.program_count, sizes)):
        names, loops = dict(sizes, pid=pid), []
        for s in kernel.body:
            if isinstance(s, S.Let):
                names[s.name] = S.evaluate_index(s.value, names)
            elif isinstance(s, S.For):
                n = len(range(S.evaluate_index(s.start, names), S.evaluate_index(s.stop, names), s.step))
                if s.kind == "tail":
                    loops[-1] += n
                else:
                    loops.append(n)
        steps.append(tuple(loops))
    return steps


def loop_texts(prog) -> list[str]:
    return [line.strip() for line in prog.ir().splitlines() if line.strip().startswith("for ")]


# A causal condition alone splits the walk: tiles below the block's diagonal in a loop without the
# where or a mask, then the tiles the diagonal cuts. Its blocks of m go in descending order: the
# program walking longest (the last block's) starts first.
@pytest.mark.parametrize("expr, steps", [
    ("rsum(where(l <= m, A[m, l], 0.0), l)", [(3, 1), (2, 1), (1, 1), (0, 1)]),
    ("rmax(where(l < m, A[m, l], -inf), l)", [(3, 1), (2, 1), (1, 1), (0, 1)]),
    ("rsum(where(l <= m, where(l > m - 5, A[m, l], 0.0), 0.0), l)", [(1,), (2,), (2,), (2,)]),  # a window: no split
    ("rsum(where(m >= l + 20, A[m, l], 0.0), l)", [(1, 2), (0, 2), (0, 1), (0, 0)]),  # block 0 masked throughout
    ("rmax(where(l <= m, A[m, l], 0.0), l)", [(4,)] * 4),  # 0 is no identity of max
    ("rsum(where(l <= m, A[m, l], -1e30), l)", [(4,)] * 4),  # -1e30 is not 0
    ("rsum(where(l <= m, A[m, l], 0.0), l) + rmax(A[m, l], l)", [(3, 1, 4), (2, 1, 4), (1, 1, 4), (0, 1, 4)]),
])
def test_a_loop_walks_the_tiles_its_condition_leaves(expr, steps):
    prog = dt.loads(ROWS.format(expr=expr))
    assert reduction_steps(prog, m=64, l=64) == steps
    a = normal(64, 64)
    np.testing.assert_allclose(prog(A=a, backend="interp"), prog.reference(A=a), rtol=1e-5, atol=1e-5)


def test_the_tiles_below_the_diagonal_have_no_where_and_no_mask():
    prog = dt.loads(ROWS.format(expr="rsum(where(l <= m, A[m, l], 0.0), l)"))
    first, second = prog.ir().split("for l_iter")[1:]
    assert "where" not in first and "valid(" not in first
    assert "where" in second and "valid(l_2)" in second


def test_causal_attention_walks_half_the_keys():
    causal, full = (dt.load(LLM / f"{name}.dt") for name in ("causal_mha", "mha"))
    extents = dict(b=1, h=1, m=1024, l=1024, k=64, n=64)
    assert reduction_steps(full, **extents) == [(16,)] * 8
    # 72 of 128 tiles, the longest walk first
    assert reduction_steps(causal, **extents) == [(2 * i, 2) for i in reversed(range(8))]


def test_programs_walking_longest_start_first_and_others_keep_their_order():
    # an upper bound (keys up to the block's last row) runs the blocks of m last to first; a lower
    # bound (rows from the key block's first) is longest first already, in ascending order
    upper = dt.loads(ROWS.format(expr="rsum(where(l <= m, A[m, l], 0.0), l)"))
    lower = dt.loads(ROWS.format(expr="rsum(where(l >= m, A[m, l], 0.0), l)"))
    assert [sum(s) for s in reduction_steps(upper, m=64, l=64)] == [4, 3, 2, 1]
    assert [sum(s) for s in reduction_steps(lower, m=64, l=64)] == [4, 3, 2, 1]
    assert "m_pid = m_BLOCK_COUNT - 1 - m_order" in upper.source("triton", "f32")
    a = normal(50, 64)  # a last block cut short: its program (pid 0) masks its rows
    for prog in (upper, lower):
        for backend in ("interp", "numba"):
            np.testing.assert_allclose(prog(A=a, backend=backend), prog.reference(A=a), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("order", ["", "out.map(m, b, j);", "out.map(b, m, j);", "out.map(b, j:j1/3, m, j1);"])
def test_reversed_blocks_still_cover_every_block(order):
    # two dimensions reversed (both bound a walk from above), in any program order, next to a
    # grouped one: every block is computed once
    prog = dt.loads("Func out;\nIn A, B;\nVar b, m, j;\nRVar l, p;\n"
                    "out[b, m, j] = rsum(where(l <= m, A[b, m, l], 0.0), l) + rsum(where(p <= j, B[j, p], 0.0), p);\n"
                    f"out.block(b:1, m:16, j:16); out.tensorize(m:16, j:16, l:16, p:16); {order} out.compile();")
    source = prog.source("triton", "f32")
    assert ("m_pid = m_BLOCK_COUNT - 1 - m_order" in source) and (("j_pid = j_BLOCK_COUNT - 1 - j_order" in source)
                                                                  == ("j:j1/3" not in order))
    a, b = normal(3, 50, 50), normal(40, 40)
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(prog(A=a, B=b, backend=backend), prog.reference(A=a, B=b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_skipping_keeps_rows_masked_throughout(backend):
    """l < m masks row 0 entirely: its max is -inf with or without the skipped tiles."""
    prog = dt.loads(ROWS.format(expr="rmax(where(l < m, A[m, l], -inf), l)"))
    a = normal(37, 45)
    want = np.array([-np.inf] + [a[i, :i].max() for i in range(1, 37)], np.float32)
    np.testing.assert_array_equal(run_program(prog, backend, A=a), want)


@pytest.mark.parametrize("source, steps", [
    # a Func read at other subscripts: its condition means something else here (not analysed)
    ("Func out, f; In A; Var m; RVar l;\nf[m, l] = where(l <= m, A[m, l], 0.0);\nout[m] = rsum(f[l, m], l);", None),
    ("Func out, f; In A; Var m; RVar l;\nf[m, l] = where(l <= m, A[m, l], 0.0);\nout[m] = rsum(f[m, l - 20], l);",
     None),
    # a nested reduction over the same name inside the split loop keeps its own where
    ("Func out; In A; Var m; RVar l;\nout[m] = rsum(where(l <= m, A[m, l] * rsum(where(l <= m, A[m, l], 0.0), l), "
     "0.0), l);", None),
    # exp(-inf - mx) with mx a separate (two-pass) max: -inf on rows masked throughout, so not skipped
    ("Func out, mx; In A; Var m; RVar l;\nmx[m] = rmax(where(l <= m - 20, A[m, l], -inf), l);\n"
     "out[m] = rsum(exp(where(l <= m - 20, A[m, l], -inf) - mx[m]), l);\nmx.fuse_at(out, m);",
     [(1, 2, 4), (0, 2, 4), (0, 1, 4), (0, 0, 4)]),  # mx's loop skips (a max of -inf), out's walks all
    # 0 / 0 is NaN: a division is not taken to vanish
    ("Func out; In A, B; Var m; RVar l;\nout[m] = rsum(where(l <= m, A[m, l], 0.0) / B[m, l], l);", [(4,)] * 4),
], ids=["transposed", "shifted", "nested", "two_pass_max", "division"])
@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_skipping_never_changes_a_result(source, steps, backend):
    prog = dt.loads(source + "\nout.block(m:16); out.tensorize(m:16, l:16); out.compile();")
    args = {"A": normal(64, 64)}
    if "B" in prog.inputs:
        args["B"] = np.ones((64, 64), np.float32)
        args["B"][0, 63] = 0.0
    if steps is not None:
        assert reduction_steps(prog, m=64, l=64) == steps
    want = prog.reference(**args)
    np.testing.assert_allclose(run_program(prog, backend, **args), want, rtol=1e-4, atol=1e-4)


# A max of a causal row computed in a kernel of its own is finite (lane 0 always counts), so a sum
# of exp(score - max) reading it skips too; a window that can mask a row throughout does not.
@pytest.mark.parametrize("mask, skips", [("l <= m", True), ("l <= m + 3", True), ("l <= m - 1", False),
                                          ("l >= m", False)])
def test_a_causal_max_from_another_kernel_lets_its_readers_skip(mask, skips):
    prog = dt.loads(f"Func mx, s;\nIn A;\nVar m;\nRVar l;\nmx[m] = rmax(where({mask}, A[m, l], -inf), l);\n"
                    f"s[m] = rsum(exp(where({mask}, A[m, l], -inf) - mx[m]), l);\n"
                    "mx.block(m:16); mx.tensorize(m:16, l:16);\ns.block(m:16); s.tensorize(m:16, l:16); s.compile();")
    total = sum(sum(steps) for steps in reduction_steps(prog, kernel=1, m=64, l=64))
    assert (total < 16) == skips
    a = normal(64, 64)
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(prog(A=a, backend=backend), prog.reference(A=a), rtol=1e-5, atol=1e-6)


def test_a_causal_max_of_a_func_masked_elsewhere_too_is_not_taken_as_finite():
    # g (a kernel of its own) is -inf on the first three keys of every row: rows 0 to 2 of the causal
    # max are -inf, their exp(-inf - -inf) NaN, so the sum reading the max walks every tile (skipping
    # would give 0 for the tiles it skips)
    prog = dt.loads("Func g, mx, s;\nIn A;\nVar m;\nRVar l;\ng[m, l] = where(l >= 3, A[m, l], -inf);\n"
                    "mx[m] = rmax(where(l <= m, g[m, l], -inf), l);\n"
                    "s[m] = rsum(exp(where(l <= m, g[m, l], -inf) - mx[m]), l);\n"
                    "mx.block(m:16); mx.tensorize(m:16, l:16);\ns.block(m:16); s.tensorize(m:16, l:16); s.compile();")
    assert sum(sum(steps) for steps in reduction_steps(prog, kernel=2, m=64, l=64)) == 16  # g, mx, s
    a = normal(64, 64)
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(prog(A=a, backend=backend), prog.reference(A=a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_a_lower_bound_walks_the_cut_tiles_then_the_whole_ones_without_a_where(backend):
    # grad_K's walk over the rows of a causal key block: m >= l holds on every lane from the tile of
    # the block's last key on; those tiles need no where, the last one (past the extent) its mask
    prog = dt.loads(ROWS.format(expr="rsum(where(l >= m, A[m, l], 0.0), l)"))
    loops = prog.ir().split("for l_iter")[1:]
    assert len(loops) == 3 and ">=" in loops[0] and ">=" not in loops[1] and ">=" not in loops[2]
    assert "where" not in loops[1] and "valid(" in loops[2]
    for m, l in ((64, 64), (50, 70), (70, 37)):
        a = normal(m, l)
        np.testing.assert_allclose(prog(A=a, backend=backend), prog.reference(A=a), rtol=1e-5, atol=1e-5)
