"""Lane accumulators of the Triton backend (dt/backends/triton/lane_accumulators.py): which
reductions get them, the code they render, and that the kernels still compute the
reference. Their speed is measured on the GPU (docs/performance.md)."""
from __future__ import annotations

import dataclasses

import pytest

import dt
from dt.backends.triton import codegen
from dt.backends.triton.lane_accumulators import int32_index_dims, with_lane_accumulators
from dt.ir import scheduled as S
from dt.testing import assert_close, random_inputs

STATS = """Func out, top, low, total;
In A;
Var x;
RVar y;
top[x]    = rmax(A[x, y], y);
low[x]    = rmin(A[x, y], y);
total[x]  = rsum(exp(A[x, y] - top[x]), y);
out[x, y] = (exp(A[x, y] - top[x]) + low[x]) / reshape(total[x], x, 1);
out.block(x:4); out.tensorize(x:0, y:64);
top.fuse_at(out, x); low.fuse_at(out, x); total.fuse_at(out, x);
out.compile_to_kernel();
"""


def _lane_tiles(kernel: S.Kernel) -> list[S.Assign]:
    """The lane accumulators' updates inside loops."""
    return [t for s in S.walk_statements(kernel.body) if isinstance(s, S.For) for t in s.body
            if isinstance(t, S.Assign) and t.name.endswith("_lanes")]


def test_each_tiled_reduction_is_accumulated_lane_by_lane_and_reduced_after_its_loop():
    kernel = with_lane_accumulators(dt.loads(STATS).pipeline("f32").kernels[0])
    updates = _lane_tiles(kernel)
    assert [u.value.op for u in updates] == ["maximum", "minimum", "+"]
    assert all(not any(isinstance(n, S.Reduce) for n in S.walk_texpr(u.value)) for u in updates)
    top_level = [s for s in kernel.body if isinstance(s, S.Assign)]
    for u in updates:  # initialised before the loop with the reduction's identity, over the whole tile
        init = next(s for s in top_level if s.name == u.name)
        assert isinstance(init.value, S.Full) and len(init.value.axes) == 2
    reduced = [s for s in top_level if isinstance(s.value, S.Reduce)]
    assert [r.value.op for r in reduced] == ["max", "min", "sum"]


def test_the_rendered_loop_has_no_cross_lane_reduction():
    source = codegen.render(dt.load("benchmarks/gpu/schedules/softmax_tiled.dt").pipeline("f32")).source
    loop = source[source.index("for y_iter"):source.index("y_accumulator = ")]
    # the whole tiles: no mask either
    assert "y_accumulator_lanes = y_accumulator_lanes + tl.exp(A)" in loop and "tl.sum" not in loop
    assert "y_accumulator = tl.sum(y_accumulator_lanes, axis=0)" in source  # x: a block of 1, a scalar axis
    tail = source[source.index("for y_iter_2"):]
    assert "y_accumulator = y_accumulator + tl.sum(tl.where(y_2_mask," in tail  # the last, cut tile


def test_reductions_of_tensor_core_tiles_and_whole_rows_are_left_alone():
    for path in ("examples/attention_onepass.dt", "examples/attention.dt",
                 "benchmarks/gpu/schedules/softmax_row.dt",
                 "examples/2mm_inner.dt"):
        kernels = dt.load(path).pipeline("f16").kernels
        assert all(with_lane_accumulators(k) is k for k in kernels), path


def test_an_accumulator_read_inside_its_loop_keeps_its_per_tile_reduction():
    """A running value another statement of the loop reads must be complete at every step."""
    kernel = dt.loads(STATS).pipeline("f32").kernels[0]
    loop = next(s for s in kernel.body if isinstance(s, S.For))
    step = next(t for t in loop.body if isinstance(t, S.Assign) and isinstance(t.value, S.Binary)
                and isinstance(t.value.b, S.Reduce))
    reader = S.Assign("peek", S.Ref(step.name, step.value.dims, step.value.dtype), "peek")
    body = tuple(kernel.body[:kernel.body.index(loop)]) + (
        S.For(loop.var, loop.start, loop.stop, loop.step, loop.body + (reader,), loop.dim, loop.kind, loop.loc),
    ) + tuple(kernel.body[kernel.body.index(loop) + 1:])
    kernel = S.Kernel(kernel.name, kernel.func, kernel.program_count, body, kernel.num_warps)
    assert not any(u.name == f"{step.name}_lanes" for u in _lane_tiles(with_lane_accumulators(kernel)))


def test_an_accumulator_not_starting_at_the_identity_is_left_alone():
    kernel = dt.loads(STATS).pipeline("f32").kernels[0]
    body = tuple(S.Assign(s.name, S.Full(1.0, s.value.axes, s.value.dtype), s.dt_name, s.loc)
                 if isinstance(s, S.Assign) and isinstance(s.value, S.Full) and s.value.value == 0.0 else s
                 for s in kernel.body)
    kernel = S.Kernel(kernel.name, kernel.func, kernel.program_count, body, kernel.num_warps)
    assert [u.value.op for u in _lane_tiles(with_lane_accumulators(kernel))] == ["maximum", "minimum"]


@pytest.mark.needs_triton
def test_a_lane_accumulator_takes_no_name_the_kernel_uses():
    """A scalar input named like the new tile must keep its value."""
    source = STATS.replace("In A;", "In A;\nSIn y_accumulator_lanes;").replace(
        "out[x, y] = (", "out[x, y] = y_accumulator_lanes + (")
    prog = dt.loads(source)
    kernel = with_lane_accumulators(prog.pipeline("f32").kernels[0])
    assert "y_accumulator_lanes" not in {s.name for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign)}
    args = random_inputs(prog, {"x": 5, "y": 100}, "f32", seed=4)
    assert_close(prog(backend="triton", **args), prog.reference(**args), "f32")


@pytest.mark.needs_triton
@pytest.mark.parametrize("dtype", ("f32", "bf16"))
@pytest.mark.parametrize("sizes", ({"x": 6, "y": 300}, {"x": 3, "y": 64}, {"x": 1, "y": 1}))
@pytest.mark.parametrize("shift", (-4.0, 4.0))
def test_lane_accumulated_kernels_match_the_reference(dtype, sizes, shift):
    """Sizes off the tile: masked lanes must hold the identity. All-negative inputs catch a
    masked lane read as 0 in rmax, all-positive ones in rmin."""
    prog = dt.loads(STATS)
    args = random_inputs(prog, sizes, dtype, seed=5)
    args["A"] = args["A"] + shift
    assert_close(prog(backend="triton", **args), prog.reference(**args), dtype)


@pytest.mark.needs_triton
def test_tiled_layernorm_matches_the_reference():
    prog = dt.load("benchmarks/gpu/schedules/tuned/h100/layernorm_128x65536_bf16.dt")
    assert _lane_tiles(with_lane_accumulators(prog.pipeline("bf16").kernels[0]))
    args = random_inputs(prog, {"x": 2, "y": 20000}, "bf16", seed=2)
    assert_close(prog(backend="triton", **args), prog.reference(**args), "bf16")


ARGMAX = """Func out, mx;
In A;
Var x;
RVar y;
mx[x]  = rmax(A[x, y], y);
out[x] = rargmin(A[x, y], y) + mx[x];
out.block(x:2); out.tensorize(x:2, y:8);
mx.fuse_at(out, x);
out.compile_to_kernel();
"""


def test_an_arg_reduction_keeps_each_lanes_best_and_reduces_the_lanes_once():
    kernel = with_lane_accumulators(dt.loads(ARGMAX).pipeline("f32").kernels[0])
    loops = [s for s in S.walk_statements(kernel.body) if isinstance(s, S.For) and s.kind != "tail"]
    arg_loop = loops[-1]  # rargmin's loop (its whole tiles) follows rmax's
    assert not any(isinstance(n, S.Reduce) for t in arg_loop.body if isinstance(t, S.Assign)
                   for n in S.walk_texpr(t.value))
    lanes = [t.name for t in arg_loop.body if isinstance(t, S.Assign)][-2:]
    assert lanes == ["y_out_accumulator_lanes", "y_out_min_lanes"]  # the index, then the value, per lane
    after = kernel.body[kernel.body.index(arg_loop) + 1:]
    assert [s.name for s in after if isinstance(s, S.Assign)][-1:] == ["out"]
    # the lanes reduced once, before the last, cut tile, which updates their result tile by tile
    tail = after[[type(s) for s in after].index(S.For)]
    assert tail.kind == "tail" and [s.name for s in after[:after.index(tail)] if isinstance(s, S.Assign)][-2:] == \
        ["y_out_accumulator", "y_out_min"]
    assert any(isinstance(n, S.Reduce) for t in tail.body if isinstance(t, S.Assign) for n in S.walk_texpr(t.value))


def test_an_arg_reductions_lanes_hold_int32_indices_and_its_kernel_bounds_the_extent():
    kernel = with_lane_accumulators(dt.loads(ARGMAX).pipeline("f32").kernels[0])
    index_lanes = [s for s in S.walk_statements(kernel.body)
                   if isinstance(s, S.Assign) and s.name == "y_out_accumulator_lanes"]
    assert [s.value.dtype for s in index_lanes] == ["i32", "i32"]  # its start, its update in the loop
    assert int32_index_dims(kernel) == ("y",)
    assert int32_index_dims(with_lane_accumulators(dt.loads(STATS).pipeline("f32").kernels[0])) == ()
    source = codegen.render(dt.loads(ARGMAX).pipeline("f32")).source
    assert 'tl.static_assert(y_SIZE < 2**31, "an arg-reduction over y indexes it in int32")' in source
    assert "y_out_accumulator_lanes = tl.zeros((2, 8), tl.int32)" in source


@pytest.mark.needs_triton
def test_an_arg_reduction_by_lanes_ranks_ties_as_before():
    import numpy as np
    a = np.random.default_rng(3).integers(-2, 3, (9, 37)).astype(np.float32)  # ties across lanes and tiles
    a[1, 30], a[2] = -np.inf, -np.inf  # (NaN: the conformance cases; Triton's rmax may drop it)
    prog = dt.loads(ARGMAX)
    got = np.asarray(prog(A=a, backend="triton")) if _runs() else None
    if got is None:
        pytest.skip("Triton kernels run on a GPU or under TRITON_INTERPRET=1")
    assert_close(got, prog.reference(A=a), "f32")


def _runs() -> bool:
    from dt import backends
    return backends.available("triton")


DECODE = """Func out, scores, row_max, weights, row_sum, num;
In Q, K, V;
Var b, d;
RVar l, k;
scores[b, l]  = rsum(Q[b, k] * K[b, l, k], k);
row_max[b]    = rmax(scores[b, l], l);
weights[b, l] = exp(scores[b, l] - row_max[b]);
row_sum[b]    = rsum(weights[b, l], l);
num[b, d]     = rdot(weights[b, l], V[b, l, d], l);
out[b, d]     = num[b, d] / row_sum[b];
out.block(b:ROWS); out.tensorize(b:ROWS, d:0, k:0, l:16);
scores.inline(); weights.inline();
num.fuse_at(out, b); row_max.fuse_at(out, b); row_sum.fuse_at(out, b);
row_max.compute_with(num, l); row_sum.compute_with(num, l);
out.compile_to_kernel();
"""


@pytest.mark.parametrize("rows", (1, 2))
def test_a_sum_rescaled_every_step_keeps_rescaled_lanes(rows):
    """A decode step's weighted values (`num = num * exp(old max - new max) + sum(tile)`) keep a
    lane each, every lane rescaled; the running max and sum, read in the loop, keep theirs."""
    kernel = with_lane_accumulators(dt.loads(DECODE.replace("ROWS", str(rows))).pipeline("f32").kernels[0])
    updates = _lane_tiles(kernel)
    assert [u.name for u in updates] == ["l_num_accumulator_lanes"]
    update = updates[0].value
    assert update.op == "+" and isinstance(update.a, S.Binary) and update.a.op == "*"
    assert update.a.a == S.Ref("l_num_accumulator_lanes", update.dims, "f32")
    scale = update.a.b  # the row's factor, laid out along the lanes when there are several rows
    assert {n.name for n in S.walk_texpr(scale) if isinstance(n, S.Ref)} == {"l_rescale"}
    assert scale.dims == (update.dims if rows > 1 else ())
    assert not any(isinstance(n, S.Reduce) for n in S.walk_texpr(update))
    after = [s for s in kernel.body if isinstance(s, S.Assign) and s.name == "l_num_accumulator"]
    assert [s.value for s in after][-1:] and isinstance(after[0].value, S.Reduce)
    source = codegen.render(dt.loads(DECODE.replace("ROWS", str(rows))).pipeline("f32")).source
    factor = "l_rescale[:, None, None]" if rows > 1 else "l_rescale"
    assert f"l_num_accumulator_lanes = (l_num_accumulator_lanes * {factor} +" in source
    assert "l_row_sum_accumulator = l_row_sum_accumulator * l_rescale + l_tile_exp_sum" in source


def test_the_split_decode_example_rescales_its_lanes():
    source = codegen.render(dt.load("examples/llm/decode_split.dt").pipeline("bf16")).source
    loop = source[source.index("for l_iter"):source.index("l_num_chunks_accumulator = tl.sum(")]
    assert "l_num_chunks_accumulator_lanes = (l_num_chunks_accumulator_lanes * l_rescale +" in loop
    assert "l_exp[None, :] * V" in loop and "tl.sum(tl.where(l_mask[None, :], l_exp" not in loop  # summed after it


@pytest.mark.needs_triton
@pytest.mark.parametrize("rows", (1, 2))
@pytest.mark.parametrize("dtype", ("f32", "bf16"))
@pytest.mark.parametrize("growing", (False, True))
def test_rescaled_lanes_match_the_reference(rows, dtype, growing):
    """Keys off the tile (50 = 3 x 16 + 2) and sequences not a multiple of the rows; `growing`
    scores rise along l, so every step raises the max and rescales every lane."""
    import numpy as np
    prog = dt.loads(DECODE.replace("ROWS", str(rows)))
    args = random_inputs(prog, {"b": 3, "l": 50, "k": 8, "d": 8}, dtype, seed=7)
    if growing:
        q = np.asarray(args["Q"], dtype=np.float32)
        ramp = np.linspace(0.0, 4.0, 50, dtype=np.float32)[None, :, None]
        args["K"] = (np.sign(q)[:, None, :] * ramp).astype(np.asarray(args["K"]).dtype)
    assert_close(prog(backend="triton", **args), prog.reference(**args), dtype)


def test_a_rescaled_row_sum_is_taken_into_lanes_from_its_tile():
    """The online softmax's sum of a step (`tile_exp_sum`, a tile of its own that only the update
    reads) is added lane by lane instead: no reduction is left in the loop of whole tiles."""
    source = codegen.render(dt.load("benchmarks/gpu/schedules/cross_entropy_stream.dt").pipeline("bf16")).source
    loop = source[source.index("for v_iter "):source.index("v_row_sum_accumulator = tl.sum(")]
    assert "v_row_sum_accumulator_lanes = v_row_sum_accumulator_lanes * v_rescale + tl.exp(L - v_shift)" in loop
    assert "tile_exp_sum" not in loop and "tl.sum" not in loop
    assert "v_row_sum_accumulator = tl.sum(v_row_sum_accumulator_lanes, axis=0)" in source
    tail = source[source.index("for v_iter_2"):]  # the cut tile adds its sum to the lanes' total
    assert "v_row_sum_accumulator = v_row_sum_accumulator * v_rescale_2 + v_tile_exp_sum_2" in tail


def test_a_narrow_tiles_sum_stays_in_its_step():
    """64 keys a step in 4 warps: fewer lanes than threads, so decode's row sum keeps its per-step
    sum (taken in, paged decode ran 5-7% slower); its weighted values, 64 x 128 lanes, do not."""
    source = codegen.render(dt.load("examples/llm/decode_split.dt").pipeline("bf16")).source
    assert "l_row_sum_chunks_accumulator = l_row_sum_chunks_accumulator * l_rescale + l_tile_exp_sum" in source
    assert "l_num_chunks_accumulator_lanes = (l_num_chunks_accumulator_lanes * l_rescale +" in source


def test_a_tile_another_statement_reads_is_not_taken_in():
    kernel = dt.load("examples/softmax_safe.dt").pipeline("f32").kernels[0]
    assert any(u.name == "y_sum_accumulator_lanes" for u in _lane_tiles(with_lane_accumulators(kernel)))
    loop = next(s for s in kernel.body if isinstance(s, S.For))
    tile = next(t for t in loop.body if isinstance(t, S.Assign) and t.name == "y_tile_exp_sum")
    reader = S.Assign("peek", S.Ref(tile.name, tile.value.dims, tile.value.dtype), "peek")
    at = kernel.body.index(loop)
    body = kernel.body[:at] + (S.For(loop.var, loop.start, loop.stop, loop.step, loop.body + (reader,), loop.dim,
                                     loop.kind, loop.loc),) + kernel.body[at + 1:]
    kernel = S.Kernel(kernel.name, kernel.func, kernel.program_count, body, kernel.num_warps)
    assert not any(u.name == "y_sum_accumulator_lanes" for u in _lane_tiles(with_lane_accumulators(kernel)))


def _changed(statements: dict) -> bool:
    """Whether softmax_safe's row sum is still taken into lanes with its loop's statements changed
    (name -> the statements standing for it there)."""
    kernel = dt.load("examples/softmax_safe.dt").pipeline("f32").kernels[0]
    at, loop = next((k, s) for k, s in enumerate(kernel.body) if isinstance(s, S.For))
    body = tuple(t for s in loop.body for t in statements.get(getattr(s, "name", None), (s,)))
    body = kernel.body[:at] + (dataclasses.replace(loop, body=body),) + kernel.body[at + 1:]
    kernel = S.Kernel(kernel.name, kernel.func, kernel.program_count, body, kernel.num_warps)
    return any(u.name == "y_sum_accumulator_lanes" for u in _lane_tiles(with_lane_accumulators(kernel)))


def test_a_step_the_lanes_cannot_reproduce_keeps_its_sum():
    """The tile's sum moves to the update: a name it reads, assigned between them, would be read
    changed. A factor reading the accumulator would read it where the lanes leave it unassigned."""
    kernel = dt.load("examples/softmax_safe.dt").pipeline("f32").kernels[0]
    loop = next(s for s in kernel.body if isinstance(s, S.For))
    tile, shift, update = (next(t for t in loop.body if getattr(t, "name", None) == name)
                           for name in ("y_tile_exp_sum", "y_shift", "y_sum_accumulator"))
    assert _changed({})
    halved = S.Assign(shift.name, S.Binary("*", S.Ref(shift.name, shift.value.dims, "f32"), S.Literal(0.5, "f32")))
    assert not _changed({tile.name: (tile, halved)})
    acc = update.value.a.a
    assert not _changed({update.name: (dataclasses.replace(update, value=S.Binary(
        "+", S.Binary("*", acc, acc), update.value.b)),)})
    # a write to memory between them; a factor reading the tile, which would be dropped
    store = S.Store("A", (), S.Literal(0.0, "f32"))
    assert not _changed({tile.name: (tile, store)})
    tile_ref = S.Ref(tile.name, tile.value.dims, "f32")
    assert not _changed({update.name: (dataclasses.replace(update, value=S.Binary(
        "+", S.Binary("*", acc, S.Binary("*", update.value.a.b, tile_ref)), update.value.b)),)})


@pytest.mark.needs_triton
@pytest.mark.parametrize("dtype", ("f32", "bf16"))
@pytest.mark.parametrize("path,sizes", [("examples/softmax_safe.dt", {"x": 6, "y": 1100}),
                                        ("examples/llm/cross_entropy.dt", {"r": 3, "v": 9000})])
def test_rows_summed_by_rescaled_lanes_match_the_reference(dtype, path, sizes):
    """Rows off the tile and rising along the row, so that every step raises the max."""
    import numpy as np
    prog = dt.load(path)
    args = random_inputs(prog, sizes, dtype, seed=9)
    name = "A" if "A" in args else "L"
    rows = np.asarray(args[name], dtype=np.float32)
    args[name] = (rows + np.linspace(0.0, 30.0, rows.shape[1], dtype=np.float32)).astype(np.asarray(args[name]).dtype)
    assert_close(prog(backend="triton", **args), prog.reference(**args), dtype)
