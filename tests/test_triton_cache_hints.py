"""L2 eviction hints of the Triton backend (dt/backends/triton/cache_hints.py): which load
sites get them, and that hinted modules compute the same as the reference. Their speed is
measured on the GPU (docs/performance.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

import dt
from dt.backends.triton import codegen
from dt.backends.triton.cache_hints import KEEP, RELEASE, eviction_policies, streamed
from dt.ir import scheduled as S
from dt.testing import assert_close, random_inputs

ROWS = """Func out, total;
In A, W;
Var x;
RVar y;
total[x]  = rsum(A[x, y] * W[y], y);
out[x, y] = A[x, y] * W[y] / reshape(total[x], x, 1);
"""


def _policies(source: str, dtype: str = "f32") -> list[tuple[str, str | None]]:
    """(tensor, policy) of every load site, in program order."""
    kernel = dt.loads(source).pipeline(dtype).kernels[0]
    policies = eviction_policies(kernel)
    sites = []
    for s in S.walk_statements(kernel.body):
        if isinstance(s, (S.Assign, S.Store)):
            sites += [n for n in S.walk_texpr(s.value) if isinstance(n, S.Load) and n not in sites]
    return [(load.tensor, policies.get(load)) for load in sites]


def test_a_private_row_read_twice_is_kept_then_released_and_a_shared_vector_is_not_hinted():
    two_passes = ROWS + "out.block(x:1); out.tensorize(y:64); total.fuse_at(out, x); out.compile_to_kernel();"
    # total's walk is its whole tiles, then its last, cut one: one pass over A, then out's
    assert _policies(two_passes) == [("A", KEEP), ("W", None), ("A", KEEP), ("W", None), ("A", RELEASE), ("W", None)]


def test_the_loops_of_one_walk_read_one_pass_and_get_no_hint():
    one_walk = ROWS.replace("out[x, y] = A[x, y] * W[y] / reshape(total[x], x, 1);\n", "") + \
        "total.block(x:1); total.tensorize(y:64); total.compile();"
    kernel = dt.loads(one_walk).pipeline("f32").kernels[0]
    assert [s.kind for s in kernel.body if isinstance(s, S.For)] == ["reduction", "tail"]
    assert eviction_policies(kernel) == {}


def test_a_row_held_whole_is_read_once_and_gets_no_hint():
    one_pass = ROWS + "out.block(x:1); out.tensorize(y:0); total.fuse_at(out, x); out.compile_to_kernel();"
    kernel = dt.loads(one_pass).pipeline("f32").kernels[0]
    assert eviction_policies(kernel) == {}


def test_element_wise_and_matmul_get_no_hints():
    for name in ("add", "matmul", "dyt"):
        prog = dt.load(f"examples/{name}.dt")
        assert all(eviction_policies(k) == {} for k in prog.pipeline("f16").kernels), name


def test_a_query_block_loaded_before_each_pass_is_kept_for_the_second():
    """Two-pass attention loads its query block once before each loop over the keys (no step
    changes it: dt.ir.lower.invariant_loads), not in every step: the first load keeps it in L2
    for the second pass, which releases it."""
    kernel = dt.load("examples/attention.dt").pipeline("f16").kernels[0]
    loops = [s for s in kernel.body if isinstance(s, S.For)]
    assert len(loops) == 2 and not any(isinstance(n, S.Load) and n.tensor == "A" for loop in loops
                                       for s in S.walk_statements(loop.body) if isinstance(s, S.Assign)
                                       for n in S.walk_texpr(s.value))
    policies = {load.indices: policy for load, policy in eviction_policies(kernel).items() if load.tensor == "A"}
    assert list(policies.values()) == [KEEP, RELEASE]


def test_hints_are_rendered_on_the_loads():
    pipeline = dt.load("examples/layernorm.dt").pipeline("f32")
    source = codegen.render(pipeline).source
    # the mean's and the variance's walks (their whole tiles, then the last) keep, the output's releases
    assert source.count('eviction_policy="evict_last"') == 4 and source.count('eviction_policy="evict_first"') == 1


@pytest.mark.needs_triton
@pytest.mark.parametrize("dtype", ("f32", "bf16"))
def test_hinted_kernels_match_the_reference(dtype):
    two_passes = ROWS + "out.block(x:2); out.tensorize(y:64); total.fuse_at(out, x); out.compile_to_kernel();"
    prog = dt.loads(two_passes)
    assert eviction_policies(prog.pipeline(dtype).kernels[0])
    args = random_inputs(prog, {"x": 5, "y": 300}, dtype, seed=3)
    assert_close(prog(backend="triton", **args), prog.reference(**args), dtype)


def test_walks_nested_in_each_loop_of_one_walk_are_one_pass():
    nested = "Func s; In A; Var x; RVar y, z;\ns[x] = rsum(rmax(A[x, y, z], z), y);\n" \
             "s.block(x:1); s.tensorize(y:8, z:16); s.compile();"
    kernel = dt.loads(nested).pipeline("f32").kernels[0]
    assert [s.kind for s in S.walk_statements(kernel.body) if isinstance(s, S.For)] == \
        ["reduction", "reduction", "tail", "tail", "reduction", "tail"]
    assert eviction_policies(kernel) == {}


ONE_WALK = ROWS.replace("out[x, y] = A[x, y] * W[y] / reshape(total[x], x, 1);\n", "") + \
    "total.block(x:1); total.tensorize(y:64); total.stream(); total.compile();"


def test_stream_releases_a_row_read_once_and_leaves_a_shared_vector_alone():
    """total reads its row of A in one walk (two loops: whole tiles, the last one) and W, which
    every program reads: stream() releases A at both of its sites, never W."""
    assert _policies(ONE_WALK) == [("A", RELEASE), ("W", None), ("A", RELEASE), ("W", None)]
    assert _policies(ONE_WALK.replace(" total.stream();", "")) == [("A", None), ("W", None), ("A", None), ("W", None)]
    assert "(stream)" in dt.loads(ONE_WALK).ir()


def test_stream_keeps_the_passes_of_a_row_read_twice():
    two_passes = ROWS + "out.block(x:1); out.tensorize(y:64); out.stream(); total.fuse_at(out, x); out.compile_to_kernel();"
    assert _policies(two_passes) == [("A", KEEP), ("W", None), ("A", KEEP), ("W", None), ("A", RELEASE), ("W", None)]
    kernel = dt.loads(two_passes).pipeline("f32").kernels[0]
    assert kernel.stream and streamed(kernel) == []
    warning = next(w for w in dt.loads(two_passes).lint({"x": 64, "y": 4096}, "f32") if w.code == "nothing-to-stream")
    assert "out.stream()" in warning.message and warning.hint == "remove out.stream()"
    assert not any(w.code == "nothing-to-stream" for w in dt.loads(ONE_WALK).lint({"x": 64, "y": 4096}, "f32"))


def test_stream_leaves_operands_other_programs_read():
    """A matmul's A[x, k] is read by every program along y, B[k, y] by every one along x: neither
    streams, and the hint changes nothing."""
    source = Path("examples/matmul.dt").read_text().replace("mm.compile();", "mm.stream();\nmm.compile();")
    kernel = dt.loads(source).pipeline("f16").kernels[0]
    assert kernel.stream and eviction_policies(kernel) == {}
    assert [w.code for w in dt.loads(source).lint({"x": 512, "y": 512, "k": 512}, "f16")] == ["nothing-to-stream"]
    rows = dt.load("examples/llm/decode.dt").pipeline("bf16").kernels[0]  # K and V: one (b, h) each, read once
    assert sorted({load.tensor for load in streamed(rows)}) == ["K", "Q", "V"]


def test_streamed_loads_are_rendered_evict_first():
    source = codegen.render(dt.load("examples/llm/argmax.dt").pipeline("f32")).source
    loads = [line for line in source.splitlines() if "tl.load(" in line]
    assert len(loads) == 2 and source.count('eviction_policy="evict_first"') == 2


@pytest.mark.needs_triton
def test_a_streamed_kernel_matches_the_reference():
    prog = dt.loads(ONE_WALK)
    args = random_inputs(prog, {"x": 3, "y": 150}, "f32", seed=4)
    assert_close(prog(backend="triton", **args), prog.reference(**args), "f32")


def _streamed_tensors(source: str, dtype: str = "f32") -> list[list[str]]:
    return [sorted({load.tensor for load in streamed(k)}) for k in dt.loads(source).pipeline(dtype).kernels]


def test_stream_leaves_rows_several_programs_read():
    """A causal prefix (every query of a row walks it from 0) and a row recomputed in each program
    along another dimension are read by several programs: not streamed, and the warning says so."""
    causal = "Func out; In A; Var b, m; RVar l;\nout[b, m] = rsum(where(l <= m, A[b, l], 0.0), l);\n" \
             "out.block(b:1, m:1); out.tensorize(l:64); out.stream(); out.compile();"
    assert _streamed_tensors(causal) == [[]]
    assert [w.code for w in dt.loads(causal).lint({"b": 4, "m": 512, "l": 512}, "f32")] == ["nothing-to-stream"]
    wide = "Func out, s; In A, B; Var x, y; RVar k;\ns[x] = rsum(A[x, k], k);\nout[x, y] = s[x] * B[x, y];\n" \
           "out.block(x:1, y:1024); out.tensorize(y:64, k:64); s.fuse_at(out, x); out.stream(); out.compile_to_kernel();"
    assert _streamed_tensors(wide) == [["B"]]  # s's row of A is read by every program along y


def test_stream_takes_a_split_chunk_and_not_a_tensor_gathered_in_tiles():
    split = "Func s; In A; Var x; RVar y;\ns[x] = rsum(A[x, y], y);\n" \
            "s.tensorize(y:1024); s.split(y:8192); s.stream(); s.compile();"
    assert _streamed_tensors(split) == [["A"], ["s_chunks"]]  # each program its chunk, then the chunks
    assert "nothing-to-stream" not in [w.code for w in dt.loads(split).lint({"x": 64, "y": 65536}, "f32")]
    rope = Path("examples/llm/rope.dt").read_text() + "\nq_out.stream();\n"
    assert _streamed_tensors(rope, "bf16")[0] == []  # Q and K are gathered again (their rotated halves)
    # one gathered element (the target's logit) is a line: the row of logits still streams
    assert _streamed_tensors(Path("benchmarks/gpu/schedules/cross_entropy_stream.dt").read_text()) == [["L", "T"]]


def test_nothing_to_stream_through_tma_and_once_for_a_split():
    tma = "Func out; In A; Var x; RVar y;\nout[x] = rsum(A[x, y], y);\n" \
          "out.block(x:2); out.tensorize(x:2, y:64); out.tma(); out.stream(); out.compile();"
    assert _streamed_tensors(tma) == [["A"]]  # a box: TMA moves it, and a descriptor's load takes no hint
    assert "nothing-to-stream" in [w.code for w in dt.loads(tma).lint({"x": 4096, "y": 16384}, "f32")]
    # a split's two kernels take one stream(): its chunks' programs each load the whole row here
    # (nothing of theirs streams), the kernel adding the chunks streams them: no warning
    whole_rows = "Func s; In A; Var x; RVar y;\ns[x] = rsum(A[x, y], y);\n" \
                 "s.block(x:1); s.tensorize(y:0); s.split(y:8192); s.stream(); s.compile();"
    assert _streamed_tensors(whole_rows) == [[], ["s_chunks"]]
    assert "nothing-to-stream" not in [w.code for w in dt.loads(whole_rows).lint({"x": 64, "y": 65536}, "f32")]
