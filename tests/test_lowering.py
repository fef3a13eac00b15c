"""Properties of the scheduled IR the lowering produces."""
import itertools
from importlib.metadata import entry_points

import numpy as np
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


def _assigned(program):
    return {s.name for k in program.pipeline().kernels for s in S.walk_statements(k.body) if isinstance(s, S.Assign)}


def test_accumulators_are_named_after_their_func_where_several_funcs_walk_one_dimension():
    """layernorm walks y for its mean, then for its variance: each loop's accumulator says which
    (not y_accumulator and y_accumulator_2); a kernel with one such loop keeps the talk's names."""
    layernorm = _assigned(dt.load("examples/layernorm.dt"))
    assert {"y_mean_accumulator", "y_variance_accumulator"} <= layernorm
    assert not any(name.startswith("y_accumulator") for name in layernorm)
    safe = "".join(line for line in open("examples/softmax_safe.dt") if "compute_with" not in line)
    assert {"y_max_accumulator", "y_sum_accumulator"} <= _assigned(dt.loads(safe, "softmax_walks"))
    assert "y_accumulator" in _assigned(dt.load("examples/softmax.dt"))
    assert "k_accumulator" in _assigned(dt.load("examples/matmul.dt"))
    # the product over k is recomputed inside dvsr's walk over l and inside sm's: both named
    attention = _assigned(dt.load("examples/attention.dt"))
    assert {"k_dvsr_accumulator", "k_sm_accumulator", "l_dvsr_accumulator", "l_attention_accumulator"} <= attention
    # flash attention walks l once (mx and dvsr computed with num) and k once inside it: plain names
    flash = _assigned(dt.load("examples/attention_safe_onepass.dt"))
    assert "k_accumulator" in flash and not any(name.startswith("k_") and name.endswith("_accumulator")
                                                and name != "k_accumulator" for name in flash)
    # the mean in a kernel of its own: each kernel walks y once, and keeps the plain name
    algorithm = "".join(line for line in open("examples/layernorm.dt") if "." not in line or "(" not in line)
    kernels = dt.loads(algorithm + "mean.block(x:1);\nmean.tensorize(y:64);\nmean.compile_to_kernel();\n"
                       "layernorm.block(x:1);\nlayernorm.tensorize(y:64);\nvariance.fuse_at(layernorm, x);\n"
                       "layernorm.compile();\n", "layernorm_two_kernels").pipeline().kernels
    for kernel in kernels:
        names = {s.name for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign)}
        assert "y_accumulator" in names and not any("mean_accumulator" in n or "variance_accumulator" in n
                                                    for n in names)
    # two Funcs whose names differ only in underscores keep them apart
    names = _assigned(dt.loads("Func out, _m, m;\nIn A;\nVar x;\nRVar y;\n_m[x] = rsum(A[x, y], y);\n"
                               "m[x] = rmax(A[x, y], y);\nout[x, y] = A[x, y] - _m[x] - m[x];\n"
                               "out.block(x:1);\nout.tensorize(y:8);\n_m.fuse_at(out, x);\nm.fuse_at(out, x);\n"
                               "out.compile_to_kernel();\n", "stems"))
    assert {"y__m_accumulator", "y_m_accumulator"} <= names
    shared = _assigned(dt.loads("Func out, _m, m;\nIn A;\nVar x;\nRVar y;\n_m[x] = rsum(A[x, y], y);\n"
                                "m[x] = rmax(A[x, y], y);\nout[x, y] = A[x, y] - _m[x] - m[x];\n"
                                "out.block(x:1);\nout.tensorize(y:8);\n_m.fuse_at(out, x);\nm.fuse_at(out, x);\n"
                                "_m.compute_with(m, y);\nout.compile_to_kernel();\n", "shared_stems"))
    assert {"y__m_accumulator", "y_m_accumulator"} <= shared


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


# Every backend; triton's runs skip without torch and triton (tests/conftest.py).
BACKENDS = ("interp", "numba", pytest.param("triton", marks=pytest.mark.needs_triton))


def _reduction_loops(prog) -> int:
    return sum(isinstance(s, S.For) and s.kind == "reduction" for s in S.walk_statements(prog.pipeline("f32").kernels[0].body))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_variance_computed_with_its_mean_walks_the_row_once_and_stays_accurate(backend):
    import numpy as np
    three = dt.loads(ROW_STATS + "out.compile_to_kernel();")
    one = dt.loads(ROW_STATS + "variance.compute_with(mean, y);\nout.compile_to_kernel();")
    assert _reduction_loops(three) == 2 and _reduction_loops(one) == 1
    one_kernel = one.pipeline("f32").kernels[0]
    assert {s.name for s in S.walk_statements(one_kernel.body) if isinstance(s, S.Assign)} >= {
        "y_seen", "y_mean", "y_m2", "y_tile_mean"}
    # a mean 10^4 times the spread: E[x^2] - E[x]^2 would lose every digit in float32
    rng = np.random.default_rng(3)
    a = (1e4 + rng.standard_normal((3, 1000))).astype(np.float32)
    expected = three(A=a, backend=backend)
    got = one(A=a, backend=backend)
    assert np.abs(got - expected).max() < 1e-2, np.abs(got - expected).max()
    exact = (a - a.astype(np.float64).mean(axis=1, keepdims=True))
    variance = a.astype(np.float64).var(axis=1, keepdims=True)
    assert np.abs(got - exact / np.sqrt(variance + 1e-5)).max() < 5e-2


def _running_values(kernel) -> dict[str, int]:
    """Names assigned both before the reduction loop and in it (values carried from tile to
    tile), each with how many times the loop assigns it."""
    loop = next(s for s in kernel.body if isinstance(s, S.For) and s.kind == "reduction")
    before = {s.name for s in kernel.body[:kernel.body.index(loop)] if isinstance(s, S.Assign)}
    inside = [s.name for s in S.walk_statements(loop.body) if isinstance(s, S.Assign)]
    return {n: inside.count(n) for n in before if n in inside}


TWO_VARIANCES = """Func out, mean, variance, unbiased;
In A;
Var x;
RVar y;
mean[x] = rsum(A[x, y], y) / len(y);
variance[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);
unbiased[x] = rsum(pow(A[x, y] - mean[x], 2), y) / (len(y) - 1);
out[x, y] = (A[x, y] - mean[x]) * rsqrt(variance[x] + 0.00001) + unbiased[x];
out.block(x:2);
out.tensorize(x:0, y:64);
mean.fuse_at(out, x);
variance.fuse_at(out, x);
unbiased.fuse_at(out, x);
variance.compute_with(mean, y);
unbiased.compute_with(mean, y);
out.compile_to_kernel();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_variances_around_one_mean_share_its_running_values(backend):
    """The loop carries the mean's sum, one running mean and one sum of squared deviations,
    shared by both variances; the count of lanes before a tile is the tile's start, and the
    tile's count and mean are computed once."""
    import numpy as np
    prog = dt.loads(TWO_VARIANCES)
    kernel = prog.pipeline("f32").kernels[0]
    assert _reduction_loops(prog) == 1
    assert _running_values(kernel) == {"y_mean_accumulator": 1, "y_m2": 1, "y_mean": 1}  # named after its Func
    names = [s.name for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign)]
    assert names.count("y_tile_count") == names.count("y_tile_mean") == names.count("y_tile_sum") == 1
    # the lanes seen before the tile are the loop variable itself, not a reduction over a one-lane axis
    seen = [s.value for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign) and s.name == "y_seen"]
    assert seen == [S.Index(S.IVar("y_iter"), "f32")]
    assert all(s.size != S.IConst(1) for s in S.walk_statements(kernel.body) if isinstance(s, S.Axis) and s.dim == "y")
    rng = np.random.default_rng(5)
    a = (1e4 + rng.standard_normal((5, 300))).astype(np.float32)
    a64 = a.astype(np.float64)
    exact = (a64 - a64.mean(axis=1, keepdims=True)) / np.sqrt(a64.var(axis=1, keepdims=True) + 1e-5) \
        + a64.var(axis=1, ddof=1, keepdims=True)
    assert np.abs(prog(A=a, backend=backend) - exact).max() < 5e-2


LONG_ROW_VARIANCE = """Func out, mean, variance;
In A;
Var x;
RVar y;
mean[x] = rsum(A[x, y], y) / len(y);
variance[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);
out[x] = variance[x];
out.block(x:1);
mean.fuse_at(out, x);
variance.fuse_at(out, x);
variance.compute_with(mean, y);
out.compile_to_kernel();
"""


def test_the_one_pass_variance_stays_accurate_over_a_long_row_walked_lane_by_lane():
    """65536 lanes of mean 1e4, one at a time: an f32 running sum drifts there by more than the
    spread (each add rounds), so Chan's update must carry its own running mean."""
    import numpy as np
    a = (1e4 + np.random.default_rng(11).standard_normal((1, 65536))).astype(np.float32)
    exact = a.astype(np.float64).var(axis=1)
    got = dt.loads(LONG_ROW_VARIANCE)(A=a, backend="numba")
    assert abs(got[0] - exact[0]) / exact[0] < 1e-3, (got, exact)


@pytest.mark.skipif(not any(e.name == "example" for e in entry_points(group="dt.backends")),
                    reason="the example backend is not installed: pip install -e dt/conformance/example_backend")
def test_the_interpreter_runs_the_one_pass_update_in_float32():
    """The interpreter's Chan update must stay in the compute dtype (as on the GPU): it then
    agrees bit for bit with the example backend, which evaluates the same IR in float32."""
    import numpy as np
    prog = dt.loads(LONG_ROW_VARIANCE.replace("out.block(x:1);", "out.block(x:1);\nout.tensorize(y:16);"))
    a = (3 + np.random.default_rng(4).standard_normal((3, 37))).astype(np.float32)
    interp, example = prog(A=a, backend="interp"), prog(A=a, backend="example")
    assert interp.dtype == np.float32 and np.array_equal(interp, example), (interp, example)


SAFE_SOFTMAX = """Func out, m, s;
In A;
Var x;
RVar y;
m[x] = rmax(A[x, y], y);
s[x] = rsum(exp(A[x, y] - m[x]), y);
out[x, y] = exp(A[x, y] - m[x]) / s[x];
out.block(x:2);
out.tensorize(x:0, y:64);
m.fuse_at(out, x);
s.fuse_at(out, x);
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tile", (64, 0))
def test_a_sum_shifted_by_its_max_walks_the_row_once_and_never_overflows(backend, tile):
    """The online softmax: one loop carries the running max and the sum rescaled to it. Logits
    around 100 overflow float32 unless shifted by the max; a row whose first tiles are all
    -inf must not turn the sum into NaN (-inf - -inf)."""
    import numpy as np
    schedule = SAFE_SOFTMAX.replace("y:64", f"y:{tile}")
    two = dt.loads(schedule + "out.compile_to_kernel();")
    one = dt.loads(schedule + "s.compute_with(m, y);\nout.compile_to_kernel();")
    assert _reduction_loops(two) == (2 if tile else 0) and _reduction_loops(one) == (1 if tile else 0)
    if tile:
        assert _running_values(one.pipeline("f32").kernels[0]) == {"y_m_accumulator": 1, "y_s_accumulator": 1}
    rng = np.random.default_rng(7)
    a = (100 + 10 * rng.standard_normal((3, 300))).astype(np.float32)
    a[1, :200] = -np.inf  # three whole tiles of -inf, then values
    a64 = a.astype(np.float64)
    exact = np.exp(a64 - a64.max(axis=1, keepdims=True))
    exact /= exact.sum(axis=1, keepdims=True)
    got = one(A=a, backend=backend)
    got = got.numpy() if hasattr(got, "numpy") else got
    assert not np.isnan(got).any() and np.abs(got - exact).max() < 1e-6, np.abs(got - exact).max()
    assert np.abs(got - two(A=a, backend=backend)).max() < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shifted_sum_may_span_dimensions_its_max_does_not(backend):
    """s[x, z] shifted by m[x, z] = rmax(A[x, y], y): the max's rescale and tile sum are laid
    out over (x) and must be broadcast to the sum's (x, z) block, whose extent divides nothing."""
    import numpy as np
    prog = dt.loads("Func out, m, s;\nIn A, B;\nVar x, z;\nRVar y;\nm[x, z] = rmax(A[x, y], y);\n"
                    "s[x, z] = rsum(exp(A[x, y] - m[x, z]), y);\nout[x, z] = s[x, z] + B[x, z];\n"
                    "out.block(x:2, z:4);\nout.tensorize(x:0, y:16, z:0);\nm.fuse_at(out, z);\ns.fuse_at(out, z);\n"
                    "s.compute_with(m, y);\nout.compile_to_kernel();")
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((4, 37)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    got = prog(A=a, B=b, backend=backend)
    got = got.numpy() if hasattr(got, "numpy") else got
    assert np.abs(got - prog.reference(A=a, B=b)).max() < 1e-5


@pytest.mark.parametrize("tile", (16, 0))
def test_a_row_of_minus_inf_gets_the_sum_it_has_without_compute_with(tile):
    """exp(-inf - -inf) is NaN: shifting by 0 while the max is -inf must not turn a row that is
    -inf throughout into a sum of 0 (log of it would be -inf instead of NaN)."""
    import numpy as np
    prog = dt.loads("Func out, m, s;\nIn A;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y], y);\n"
                    "s[x] = rsum(exp(A[x, y] - m[x]), y);\nout[x] = m[x] + log(s[x]);\nout.block(x:1);\n"
                    f"out.tensorize(y:{tile});\nm.fuse_at(out, x);\ns.fuse_at(out, x);\ns.compute_with(m, y);\n"
                    "out.compile_to_kernel();")
    a = np.random.default_rng(9).standard_normal((3, 40)).astype(np.float32)
    a[0], a[1, :20] = -np.inf, -np.inf
    ref = prog.reference(A=a)
    for backend in ("interp", "numba"):
        got = prog(A=a, backend=backend)
        assert np.isnan(got[0]) and np.isnan(ref[0]) and np.abs(got[1:] - ref[1:]).max() < 1e-5, (backend, got, ref)


def test_exp_sums_share_their_max_and_its_tile_through_a_chain():
    """Two sums shifted by one max, the max itself computed with a plain sum: one loop, the
    tile's exponentials summed once for both."""
    import numpy as np
    prog = dt.loads(SAFE_SOFTMAX.replace("Func out, m, s;", "Func out, m, s, s2, t;")
                    .replace("out[x, y] = exp(A[x, y] - m[x]) / s[x];",
                             "s2[x] = rsum(exp(A[x, y] - m[x]), y) * 2;\nt[x] = rsum(A[x, y], y);\n"
                             "out[x, y] = exp(A[x, y] - m[x]) / s[x] + s2[x] + t[x];")
                    + "s2.fuse_at(out, x);\nt.fuse_at(out, x);\ns.compute_with(m, y);\ns2.compute_with(m, y);\n"
                      "m.compute_with(t, y);\nout.compile_to_kernel();")
    kernel = prog.pipeline("f32").kernels[0]
    assert _reduction_loops(prog) == 1
    names = [s.name for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign)]
    assert names.count("y_tile_exp_sum") == names.count("y_max") == 1
    a = (100 + 10 * np.random.default_rng(2).standard_normal((5, 70))).astype(np.float32)
    ref = prog.reference(A=a)
    assert np.abs(prog(A=a, backend="interp") - ref).max() < 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_flash_attention_rescales_its_product_in_one_pass_over_the_keys(backend):
    """examples/attention_safe_onepass.dt: the max, the row sums and the product of the shifted
    exponentials with V share one loop over l; each tile of scores is computed once (one Dot
    for the scores per tile, one for the product), and scores whose exponentials overflow
    float32 unshifted give the reference's attention."""
    import numpy as np
    prog = dt.load("examples/attention_safe_onepass.dt")
    kernel = prog.pipeline("f32").kernels[0]
    assert _reduction_loops(prog) == 1  # the loop over l (the products over k are whole tiles)
    dots = [n for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign) for n in S.walk_texpr(s.value)
            if isinstance(n, S.Dot)]
    assert len(dots) == 2 and isinstance(dots[1].acc, S.Binary)  # the product so far, rescaled
    rng = np.random.default_rng(12)
    a, b = (20 * rng.standard_normal((33, 16))).astype(np.float32), (20 * rng.standard_normal((16, 150))).astype(np.float32)
    c = rng.standard_normal((150, 24)).astype(np.float32)
    got = prog(A=a, B=b, C=c, backend=backend)
    got = got.numpy() if hasattr(got, "numpy") else got
    ref = prog.reference(A=a, B=b, C=c)
    assert not np.isnan(got).any() and np.abs(got - ref).max() < 1e-4 * np.abs(ref).max(), np.abs(got - ref).max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shifted_product_of_one_dimensional_tiles_is_a_sum_of_products(backend):
    """rdot(exp(A - mx), c, l) with a vector c has no 2-D Dot: the tile's product is summed
    lane by lane, rescaled like the sum."""
    import numpy as np
    prog = dt.loads("Func out, mx, num, dvsr;\nIn A, c;\nVar m;\nRVar l;\nmx[m] = rmax(A[m, l], l);\n"
                    "dvsr[m] = rsum(exp(A[m, l] - mx[m]), l);\nnum[m] = rdot(exp(A[m, l] - mx[m]), c[l], l);\n"
                    "out[m] = num[m] / dvsr[m];\nout.block(m:4);\nout.tensorize(m:0, l:16);\nnum.fuse_at(out, m);\n"
                    "mx.fuse_at(out, m);\ndvsr.fuse_at(out, m);\nmx.compute_with(num, l);\ndvsr.compute_with(num, l);\n"
                    "out.compile_to_kernel();")
    assert not any(isinstance(n, S.Dot) for s in S.walk_statements(prog.pipeline("f32").kernels[0].body)
                   if isinstance(s, S.Assign) for n in S.walk_texpr(s.value))
    rng = np.random.default_rng(13)
    a, c = (30 * rng.standard_normal((10, 45))).astype(np.float32), rng.standard_normal(45).astype(np.float32)
    got = prog(A=a, c=c, backend=backend)
    got = got.numpy() if hasattr(got, "numpy") else got
    assert np.abs(got - prog.reference(A=a, c=c)).max() < 1e-5


LAYERNORM_CHAIN = """Func layernorm, s, mean, variance;
In A, W, Bias;
SIn eps;
Var x;
RVar y;
s[x]            = rsum(A[x, y], y);
mean[x]         = rsum(A[x, y], y) / len(y);
variance[x]     = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);
layernorm[x, y] = (A[x, y] - mean[x]) * rsqrt(variance[x] + eps) * W[y] + Bias[y] + s[x];
layernorm.block(x:1);
layernorm.tensorize(y:256);
s.fuse_at(layernorm, x);
mean.fuse_at(layernorm, x);
variance.fuse_at(layernorm, x);
mean.compute_with(s, y);
variance.compute_with(mean, y);
layernorm.compile_to_kernel();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_chain_of_compute_with_shares_the_loop_at_its_end(backend):
    """variance with mean, mean with s: all three accumulate in s's one loop over y, as when
    both are computed with s, the variance still by Chan's update around mean."""
    import numpy as np
    chain = dt.loads(LAYERNORM_CHAIN)
    both = dt.loads(LAYERNORM_CHAIN.replace("variance.compute_with(mean, y)", "variance.compute_with(s, y)"))
    kernel = chain.pipeline("f32").kernels[0]
    assert _reduction_loops(chain) == 1
    assert kernel.body == both.pipeline("f32").kernels[0].body
    assert set(_running_values(kernel)) == {"y_s_accumulator", "y_mean_accumulator", "y_m2", "y_mean"}
    rng = np.random.default_rng(7)
    a = (50 + rng.standard_normal((4, 1000))).astype(np.float32)
    w, bias = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    a64 = a.astype(np.float64)
    exact = (a64 - a64.mean(axis=1, keepdims=True)) / np.sqrt(a64.var(axis=1, keepdims=True) + 1e-5) * w + bias \
        + a64.sum(axis=1, keepdims=True)
    got = chain(A=a, W=w, Bias=bias, eps=1e-5, backend=backend)
    assert np.abs(got - exact).max() < 5e-2, np.abs(got - exact).max()


SHARED_SUMS = """Func out, a, b, s, t;
In A;
Var x;
RVar y;
a[x] = rsum(A[x, y] * A[x, y], y);
b[x] = rsum(t[x, y], y) * a[x];
s[x] = rmax(A[x, y], y);
t[x, y] = exp(A[x, y]);
out[x, y] = b[x] + A[x, y] * s[x];
out.block(x:2);
out.tensorize(x:0, y:16);
a.fuse_at(out, x);
b.fuse_at(out, x);
s.fuse_at(out, x);
t.fuse_at(b, y);
a.compute_with(s, y);
b.compute_with(s, y);
out.compile_to_kernel();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_funcs_computed_with_one_sibling_run_in_dependency_order_with_their_own_producers(backend):
    """a and b are defined before s, whose loop they share, and b's value reads a: the loop runs
    first, then a, then b. t, fused at b's loop over y, is computed in the shared loop."""
    import numpy as np
    prog = dt.loads(SHARED_SUMS)
    assert _reduction_loops(prog) == 1
    a = np.random.default_rng(2).standard_normal((5, 40)).astype(np.float32)
    expected = (np.exp(a).sum(axis=1) * (a * a).sum(axis=1))[:, None] + a * a.max(axis=1, keepdims=True)
    np.testing.assert_allclose(prog(A=a, backend=backend), expected, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_producer_of_a_func_computed_with_another_is_computed_only_in_the_loop_that_accumulates_it(backend):
    """s has two reductions over y, so two loops; a and b are accumulated in the first, so t,
    fused at b's loop, is computed there only."""
    import numpy as np
    prog = dt.loads(SHARED_SUMS.replace("s[x] = rmax(A[x, y], y);", "s[x] = rmax(A[x, y], y) + rsum(A[x, y], y);"))
    kernel = prog.pipeline("f32").kernels[0]
    loops = [s for s in kernel.body if isinstance(s, S.For) and s.kind == "reduction"]
    exps = [sum(isinstance(n, S.Unary) and n.op == "exp" for s in S.walk_statements(loop.body)
                if isinstance(s, S.Assign) for n in S.walk_texpr(s.value)) for loop in loops]
    assert exps == [1, 0]
    a = np.random.default_rng(2).standard_normal((5, 40)).astype(np.float32)
    s = a.max(axis=1, keepdims=True) + a.sum(axis=1, keepdims=True)
    expected = (np.exp(a).sum(axis=1) * (a * a).sum(axis=1))[:, None] + a * s
    np.testing.assert_allclose(prog(A=a, backend=backend), expected, rtol=1e-4)


@pytest.mark.parametrize("expr", ["rdot(A[x, k] / s[x], B[k, y] * 0.5, k)", "rdot(A[x, k] + s[x], B[k, y], k)"])
def test_a_products_scales_apply_to_its_result_and_loads_no_step_changes_come_before_the_loop(expr):
    # s[x] and 0.5 do not vary along k: as factors they apply to the product's result (a divisor
    # as its reciprocal), and the operands load straight into it; otherwise s's tile (the block's
    # own rows) loads once, before the loop over k, while A's and B's move with k
    prog = dt.loads(f"Func o;\nIn A, B, s;\nVar x, y;\nRVar k;\no[x, y] = {expr};\n"
                    "o.block(x:16, y:16); o.tensorize(x:16, y:16, k:16); o.compile();")
    source = prog.source("triton", "bf16")
    before, loop = source.split("for k_iter")
    assert ("tl.dot(A, B," in loop) == ("/" in expr)
    assert ("s = tl.load(" in before) == ("+" in expr)  # factored, s is read once, after the loop
    if "/" in expr:  # a divisor taken out divides once a row: its reciprocal scales the tile
        assert "(1.0 / s)[:, None]" in loop and "/ s[:, None]" not in loop
    assert "A = tl.load(" in loop and "B = tl.load(" in loop
    rng = np.random.default_rng(0)
    args = dict(A=rng.standard_normal((40, 50)), B=rng.standard_normal((50, 30)), s=rng.uniform(1, 2, 40))
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(prog(backend=backend, **args), prog.reference(**args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("source", [
    # a factor moved onto an online softmax's exponential would hide it from compute_with
    "Func o, mx, num;\nIn A, V, d;\nVar x, n;\nRVar y;\nmx[x] = rmax(A[x, y], y);\n"
    "num[x, n] = rdot(V[y, n] / d[y], exp(A[x, y] - mx[x]), y);\no[x, n] = num[x, n] * 1.0;\n"
    "o.block(x:4); o.tensorize(x:0, n:0, y:16); mx.fuse_at(o, x); num.fuse_at(o, x); mx.compute_with(num, y);\n"
    "o.compile_to_kernel();",
    # a factor computed inside the product's loop stays inside it
    "Func o, p;\nIn A, V, d;\nVar x, n;\nRVar y;\np[x] = d[x] * 2.0;\no[x, n] = rdot(A[x, y] * p[x], V[y, n], y);\n"
    "o.block(x:16, n:16); o.tensorize(x:16, n:16, y:16); p.fuse_at(o, y); o.compile();",
])
def test_products_whose_factors_must_stay_where_they_are_lower_and_compute_what_they_say(source):
    rng = np.random.default_rng(0)
    args = dict(A=rng.standard_normal((8, 64)) * 3, V=rng.standard_normal((64, 5)), d=rng.uniform(1, 2, 64))
    if "p[x]" in source:
        args["d"] = rng.uniform(1, 2, 8)
    prog = dt.loads(source)
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(prog(backend=backend, **args), prog.reference(**args), rtol=1e-5, atol=1e-5)


def test_storage_follows_the_widest_inputs_and_row_statistics_stay_in_the_compute_dtype():
    # bf16 rows normalised by float32 statistics: the result is bf16 (the statistics do not widen it),
    # as a layer norm's backward from float32 mean and 1/std returns bf16 gradients
    prog = dt.loads("Func o;\nIn A, s;\nVar x, y;\no[x, y] = A[x, y] * s[x];\no.compile();\n")
    pipeline = prog.pipeline({"A": "bf16", "s": "f32"})
    assert [t.dtype for t in pipeline.outputs] == ["bf16"] and pipeline.compute_dtype == "f32"
    assert prog.pipeline({"A": "f32", "s": "f64"}).compute_dtype == "f64"  # any f64 input computes in f64
    # a row sum stored between kernels keeps its f32 sum (a copy rounded to bf16 loses 3 bits for
    # every kernel reading it), an element-wise temporary its row's dtype; save() an output the same way
    two = dt.loads("Func m, t, s, o;\nIn A;\nVar x, y;\nRVar z;\nm[x] = rsum(A[x, z], z);\nt[x, y] = A[x, y] * 2.0;\n"
                   "s[x] = rsum(A[x, z] * A[x, z], z);\no[x, y] = t[x, y] / m[x] + s[x];\ns.save();\no.compile();\n")
    pipeline = two.pipeline("bf16")
    assert {t.name: t.dtype for t in pipeline.temporaries} == {"m": "f32", "t": "bf16"}
    assert {t.name: t.dtype for t in pipeline.outputs} == {"s": "f32", "o": "bf16"}
    A = np.random.default_rng(0).standard_normal((3, 700)).astype(np.float32) + 0.25
    got = two(backend="numba", A=A)
    assert got["s"].dtype == np.float32
    np.testing.assert_allclose(got["s"], (A.astype(np.float64) ** 2).sum(1), rtol=1e-5)
