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
