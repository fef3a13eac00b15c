"""Properties of the scheduled IR the lowering produces."""
import itertools

import pytest

import dt
from dt.ir import scheduled as S


def block_of_every_program(pipeline, extents):
    """Run each program id through the kernel's Let statements: the blocks it computes."""
    kernel = pipeline.kernels[0]
    env0 = {S.size_name(d): n for d, n in extents.items()}
    count = S.evaluate_index(kernel.program_count, env0)
    blocks = []
    for pid in range(count):
        env = dict(env0, pid=pid)
        starts = {}
        for stmt in kernel.body:
            if isinstance(stmt, S.Let):
                env[stmt.name] = S.evaluate_index(stmt.value, env)
            elif isinstance(stmt, S.Axis):
                starts[stmt.dim] = S.evaluate_index(stmt.start, env)
        blocks.append((starts["x"], starts["y"]))
    return blocks


@pytest.mark.parametrize("order", ["x:x1/3, y, x1", "y:y1/5, x, y1", "x:x1/2, y:y1/3, x1, y1", "y, x", "x, y"])
def test_map_is_a_bijection_for_every_block_count(order):
    prog = dt.loads(f"Func f;\nIn A;\nVar x, y;\nf[x, y] = A[x, y];\nf.block(x:1, y:1);\nf.map({order});\nf.compile();\n")
    pipeline = prog.pipeline()
    for nx, ny in itertools.product(range(1, 12), range(1, 9)):
        blocks = block_of_every_program(pipeline, {"x": nx, "y": ny})
        assert sorted(blocks) == sorted(itertools.product(range(nx), range(ny))), (nx, ny)


def test_grouped_order_walks_groups_first():
    prog = dt.loads("Func f;\nIn A;\nVar x, y;\nf[x, y] = A[x, y];\nf.block(x:1, y:1);\nf.map(x:x1/2, y, x1);\n"
                    "f.compile();\n")
    blocks = block_of_every_program(prog.pipeline(), {"x": 3, "y": 2})
    assert blocks == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]


def test_default_order_first_dimension_fastest():
    prog = dt.loads("Func f;\nIn A;\nVar x, y;\nf[x, y] = A[x, y];\nf.block(x:1, y:1);\nf.compile();\n")
    assert block_of_every_program(prog.pipeline(), {"x": 2, "y": 2}) == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_masks_only_where_tiles_can_overhang():
    prog = dt.load("examples/add.dt")
    axes = {s.dim: s for s in S.walk_statements(prog.pipeline().kernels[0].body) if isinstance(s, S.Axis)}
    assert axes["x"].limit is None  # blocks of 1 row never overhang
    assert axes["y"].limit is not None


def test_fused_producer_is_never_stored():
    pipeline = dt.load("examples/attention_talk.dt").pipeline()
    stores = [s.tensor for s in S.walk_statements(pipeline.kernels[0].body) if isinstance(s, S.Store)]
    assert stores == ["attention"] and not pipeline.temporaries


def test_rdot_becomes_a_dot_fed_straight_from_f16_loads():
    pipeline = dt.load("examples/matmul.dt").pipeline("f16")
    assigns = {s.name: s.value for s in S.walk_statements(pipeline.kernels[0].body) if isinstance(s, S.Assign)}
    dots = [n for v in assigns.values() for n in S.walk_texpr(v) if isinstance(n, S.Dot)]
    assert len(dots) == 1 and dots[0].acc_dtype == "f32"
    for operand in (dots[0].a, dots[0].b):  # loaded in f16, no round trip through f32
        assert isinstance(operand, S.Ref) and assigns[operand.name].dtype == "f16"
    assert pipeline.outputs[0].dtype == "f16" and pipeline.compute_dtype == "f32"


def test_every_node_carries_a_dt_location():
    pipeline = dt.load("examples/softmax.dt").pipeline()
    for stmt in S.walk_statements(pipeline.kernels[0].body):
        if isinstance(stmt, (S.Axis, S.Assign, S.For, S.Store)):
            assert stmt.loc is not None and stmt.loc.file.endswith("softmax.dt"), stmt


ROW_STATS = """Func out, mean, variance;
In A;
Var x;
RVar y;
mean[x] = rsum(A[x, y], y) / len(y);
variance[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);
out[x, y] = (A[x, y] - mean[x]) * rsqrt(variance[x] + 0.00001);
out.block(x:2);
out.tensorize(x:0, y:64);
mean.fuse_at(out, x);
variance.fuse_at(out, x);
"""


def _reduction_loops(prog) -> int:
    return sum(isinstance(s, S.For) and s.kind == "reduction" for s in S.walk_statements(prog.pipeline("f32").kernels[0].body))


@pytest.mark.parametrize("backend", ("interp", "numba"))
def test_a_variance_computed_with_its_mean_walks_the_row_once_and_stays_accurate(backend):
    import numpy as np
    three = dt.loads(ROW_STATS + "out.compile_to_kernel();")
    one = dt.loads(ROW_STATS + "variance.compute_with(mean, y);\nout.compile_to_kernel();")
    assert _reduction_loops(three) == 2 and _reduction_loops(one) == 1
    one_kernel = one.pipeline("f32").kernels[0]
    assert {s.name for s in S.walk_statements(one_kernel.body) if isinstance(s, S.Assign)} >= {
        "y_count", "y_mean", "y_m2", "y_tile_mean"}
    # a mean 10^4 times the spread: E[x^2] - E[x]^2 would lose every digit in float32
    rng = np.random.default_rng(3)
    a = (1e4 + rng.standard_normal((3, 1000))).astype(np.float32)
    expected = three(A=a, backend=backend)
    got = one(A=a, backend=backend)
    assert np.abs(got - expected).max() < 1e-2, np.abs(got - expected).max()
    exact = (a - a.astype(np.float64).mean(axis=1, keepdims=True))
    variance = a.astype(np.float64).var(axis=1, keepdims=True)
    assert np.abs(got - exact / np.sqrt(variance + 1e-5)).max() < 5e-2
