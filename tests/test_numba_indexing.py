"""The `numba` backend on integer data, casts, gathers and 8-bit floats (issue 27), where its
rendering makes choices of its own: numba's floor division and remainder on floats, casts through
int64, integer scalars as int64, a bfloat16 output without a bfloat16 input, integer tiles kept in
their own dtype, gathers whose row checks leave the column loop and whose lane loops vectorise,
no gather joining the loop that writes its tensor, and fp8 data as uint8 bits (products on float32
tiles, outputs and temporaries rounded and saturated as ml_dtypes does). tests/test_indexing.py
runs every construct on every backend."""
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import dt
from dt import backends
from dt.backends.pysource import Names, Writer
from dt.testing import assert_close

if not backends.available("numba"):
    pytest.skip(f"the numba backend is not available: {backends.failures().get('numba')}", allow_module_level=True)

from dt.backends.numba_cpu.expr import Level  # noqa: E402
from dt.backends.numba_cpu.kernel import KernelRenderer  # noqa: E402

rng = np.random.default_rng(7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_floor_division_and_remainder_are_numpys(dtype):
    """Python's semantics (numba's own // and %), exactly NumPy's, on values that are not
    integers, of either sign: 1 // 0.1 is 9, not floor(1 / 0.1) = 10."""
    prog = dt.loads("In A, B; Var x; Func q, r;\nq[x] = A[x] // B[x];\nr[x] = A[x] % B[x];\nq.compile(); r.compile();")
    a = np.concatenate([[1.0, -1.0, 7.5, -7.5, 0.0], rng.uniform(-50, 50, 200)]).astype(dtype)
    b = np.concatenate([[0.1, 0.1, -2.0, 2.0, 3.0], rng.uniform(0.1, 5, 200) * rng.choice([-1, 1], 200)]).astype(dtype)
    out = prog(backend="numba", A=a, B=b)
    np.testing.assert_array_equal(out["q"], np.floor_divide(a, b))
    np.testing.assert_array_equal(out["r"], np.mod(a, b))
    assert out["q"][0] == 9


def test_casts_truncate_toward_zero_then_wrap():
    prog = dt.loads("In A; Var x; Func a, b, c, d, e;\na[x] = cast(A[x], i8);\nb[x] = cast(A[x], u8);\n"
                    "c[x] = cast(A[x], i16);\nd[x] = cast(A[x], i32);\ne[x] = cast(A[x], i64);\n"
                    "a.compile(); b.compile(); c.compile(); d.compile(); e.compile();")
    a = np.array([0.0, 1.9, -1.9, 127.5, 128.5, -129.7, 255.9, 300.2, -300.2, 40000.5, 3e9, -3e9], np.float32)
    out = prog(backend="numba", A=a)
    wide = np.trunc(a).astype(np.int64)
    for name, dtype in zip("abcde", (np.int8, np.uint8, np.int16, np.int32, np.int64)):
        assert out[name].dtype == dtype
        np.testing.assert_array_equal(out[name], wide.astype(dtype), err_msg=name)
        np.testing.assert_array_equal(out[name], prog.reference(A=a)[name], err_msg=name)


def test_an_integer_scalar_keeps_every_digit():
    """An integer scalar is an int64 in the kernel: 2**40 + 1 plus an index is exact (as a
    float32 it would be 2**40)."""
    prog = dt.loads("SIn s; Var l; Func o;\no[l] = l + s;\no.compile();")
    out = prog(backend="numba", s=2 ** 40 + 1, sizes={"l": 5})
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, 2 ** 40 + 1 + np.arange(5))


def test_a_bfloat16_output_without_bfloat16_inputs_takes_ml_dtypes_bfloat16():
    prog = dt.loads("In A; Var x; Func o;\no[x] = cast(A[x] * 3.0, bf16);\no.compile();")
    assert "from ml_dtypes import bfloat16" in prog.source("numba")
    a = rng.standard_normal(33).astype(np.float32)
    out = prog(backend="numba", A=a)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out, (a * np.float32(3)).astype(ml_dtypes.bfloat16))


PAGED = """In Kc, T; Var b, l, k; Func o;
SIn page;
o[b, l, k] = Kc[T[b, l // page], l % page, k];
o.block(b:1, l:8); o.tensorize(l:0, k:0);
o.compile();
"""


def test_a_gathered_index_tile_is_kept_in_its_own_dtype_and_its_checks_leave_the_column_loop():
    """The block table's entries, read once per row and used in the loop over k, are kept in an
    int32 scratch tile; the row's page and its checks are computed before that loop."""
    prog = dt.loads(PAGED)
    source = backends.get("numba").source(prog.pipeline({"Kc": "f32", "T": "i32", "page": "i64"}))
    assert "T = np.empty((8,), np.int32)" in source
    kernel = source[source.index("def o_kernel"):].splitlines()
    row = next(i for i, line in enumerate(kernel) if "Kc_axis0 = u64(i64(T[l_i]))" in line)
    assert kernel[row + 2].strip() == "for k_i in range(k_valid):"
    cache = rng.standard_normal((6, 4, 5)).astype(np.float32)
    table = np.array([[5, 0, 2], [1, 9, -4]], np.int32)  # 9 and -4: pages outside the cache read 0
    out = prog(backend="numba", Kc=cache, T=table, page=4, sizes={"l": 12})
    padded = np.concatenate([cache, np.zeros((1, 4, 5), np.float32)])
    want = np.stack([padded[np.where((t >= 0) & (t < 6), t, 6)].reshape(-1, 5) for t in table])
    np.testing.assert_array_equal(out, want)
    assert_close(out, prog.reference(Kc=cache, T=table, page=4, sizes={"l": 12}), "f32")


def _has_avx2() -> bool:
    import llvmlite.binding as llvm
    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


@pytest.mark.skipif(not _has_avx2(), reason="masked vector loads need AVX2")
def test_a_shifted_read_vectorises(tmp_path):
    """A[x + 1] and A[x - 2] in a lane loop become masked vector loads (the check per lane is
    the mask). Inspection needs code compiled in this process, not cached."""
    prog = dt.loads("In A; Var x; Func o;\no[x] = A[x + 1] * 2.0 + A[x - 2];\n"
                    "o.block(x:1024); o.tensorize(x:256);\no.compile();", "shifted")
    source = prog.source("numba", "f32")
    (tmp_path / "shifted_nocache.py").write_text(source.replace("cache=True", "cache=False"))
    sys.path.insert(0, str(tmp_path))
    try:
        import shifted_nocache as module
    finally:
        sys.path.remove(str(tmp_path))
    a = rng.standard_normal(3000).astype(np.float32)
    out = module.shifted(a, 3000)["o"]
    padded = np.concatenate([[0, 0], a, [0]]).astype(np.float32)
    np.testing.assert_array_equal(out, 2 * padded[3:] + padded[:-3])
    llvm = module.o_kernel.inspect_llvm(module.o_kernel.signatures[0])
    assert re.search(r"@llvm\.masked\.(load|gather)\.v\d+f32", llvm), "no masked vector load"


def test_a_reduction_gathering_from_a_tensor_the_previous_loop_writes_stays_out_of_that_loop():
    """A lane loop reads tiles at its own lane only, so a reduction over the lanes the previous
    statement computed joins its loop; a gather reads its tensor at other lanes, so it does not
    when that statement writes the tensor."""
    prog = dt.loads("In A; Var x; Func o;\no[x] = A[x + 1];\no.tensorize(x:0);\no.compile();")
    pipeline = prog.pipeline("f32")
    renderer = KernelRenderer(pipeline, pipeline.kernels[0], "o_kernel", Names())
    (axis, lane), = renderer.plan.lane.items()

    def store_loop():  # every lane of T written
        return Level(None, inner=Level(axis, [f"T_global[{lane}] = 1.0"]))

    def reduction():  # a sum over the same lanes, of T at other lanes when gathered
        return Level(None, ["s = 0.0", Level(axis, [f"s += T_global[{lane} - 1]"])])

    for gathered, walks in ((set(), 1), ({"T"}, 2)):
        w = Writer()
        renderer.queue(w, store_loop(), set(), set(), {"T"})
        renderer.queue(w, reduction(), {"T"}, gathered, {"s"})
        renderer.flush(w)
        assert sum(line.strip().startswith(f"for {lane} in") for line in w.lines) == walks, w.lines


FLOAT8 = {"f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}
FP8_MATMUL = Path(__file__).resolve().parents[1] / "examples" / "llm" / "fp8_matmul.dt"


@pytest.mark.parametrize("dtype", FLOAT8)
def test_fp8_matmul_matches_numpy(dtype):
    """examples/llm/fp8_matmul.dt: the fp8 operands are widened to float32 as the tiles are packed
    for the micro-kernel, and the bf16 result is rounded once, on store. With small integers every
    partial sum is exact in float32, whatever the order: the result is NumPy's, bit for bit; random
    normal values agree to bf16's precision. Sizes divide none of the 128-wide blocks."""
    prog = dt.load(FP8_MATMUL)
    source = prog.source("numba", dtype)
    assert f"X_tile[m_i, k_i] = _{dtype}_to_f32(X_global[" in source
    assert "_round_bf16" not in source and "from ml_dtypes import bfloat16" in source
    m, n, k = 131, 37, 300
    for x, w in ((rng.integers(-8, 9, (m, k)), rng.integers(-8, 9, (n, k))),
                 (rng.standard_normal((m, k)), rng.standard_normal((n, k)))):
        x, w = x.astype(FLOAT8[dtype]), w.astype(FLOAT8[dtype])
        out = prog(backend="numba", X=x, W=w, scale=0.25)
        want = x.astype(np.float64) @ w.astype(np.float64).T * 0.25
        assert out.dtype == ml_dtypes.bfloat16 and out.shape == (m, n)
        if (x.astype(np.float32) == np.round(x.astype(np.float32))).all():
            np.testing.assert_array_equal(out.view(np.uint16), want.astype(ml_dtypes.bfloat16).view(np.uint16))
        else:
            assert_close(out.astype(np.float32), want, "bf16")


def _same_float8(got, want):
    """Equal bits, but a NaN computed from NaNs may carry either sign."""
    assert got.dtype == want.dtype
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    assert ((got.view(np.uint8) == want.view(np.uint8)) | nan).all()


@pytest.mark.parametrize("dtype", FLOAT8)
def test_float8_outputs_and_temporaries_round_and_saturate_as_ml_dtypes(dtype):
    """A Func of fp8 inputs only is an fp8 output; a Func computed at root, a temporary in fp8, is
    rounded as it is stored. On every 8-bit pattern, times 3 (ties, and values past the largest:
    NaN in e4m3fn, inf in e5m2) and plus 1 (rounding) the results are ml_dtypes' bit for bit."""
    fp8 = FLOAT8[dtype]
    prog = dt.loads("In A; Var x; Func t, o;\nt[x] = A[x] * 3.0;\no[x] = t[x] + 1.0;\n"
                    "t.block(x:64);\no.block(x:64);\no.compile();", "float8_temporary")
    source = prog.source("numba", dtype)
    assert "t = np.empty((x_SIZE,), np.uint8)" in source and "o.view(np.uint8)" in source
    a = np.arange(256, dtype=np.uint16).astype(np.uint8).view(fp8)
    out = prog(backend="numba", A=a)
    with np.errstate(over="ignore", invalid="ignore"):
        t = (a.astype(np.float32) * np.float32(3)).astype(fp8)
        want = (t.astype(np.float32) + np.float32(1)).astype(fp8)
    _same_float8(out, want)
    assert np.isnan(t.astype(np.float32)).sum() > 2 if dtype == "f8e4m3" else np.isinf(t.astype(np.float32)).any()
    # into an existing array, through the module's entry function
    entry = backends.get("numba").entry(prog.pipeline(dtype))
    into = np.zeros(256, fp8)
    assert entry(a, 256, out=into)["o"] is into
    _same_float8(into, want)
    with pytest.raises(ValueError, match="C-contiguous"):
        entry(a, 256, out=np.zeros(256, np.float32))


@pytest.mark.parametrize("dtype", FLOAT8)
def test_a_cast_to_float8_without_float8_inputs(dtype):
    """cast(e, f8...) of float32 data: the output's dtype comes from ml_dtypes (imported); of
    float64 data (computed in float64), it rounds through float32, as ml_dtypes' astype does."""
    fp8 = FLOAT8[dtype]
    prog = dt.loads(f"In A; Var x; Func o;\no[x] = cast(A[x] * 2.0, {dtype});\no.compile();", "float8_cast")
    assert f"from ml_dtypes import {np.dtype(fp8).name}" in prog.source("numba")
    values = np.unique(np.arange(256, dtype=np.uint16).astype(np.uint8).view(fp8).astype(np.float64))
    values = values[np.isfinite(values)]
    above_ties = (values[1:] + values[:-1]) / 2 * (1 + 2.0 ** -35) / 2  # doubled: a hair above the midpoints
    x = np.concatenate([above_ties, rng.standard_normal(500) * 100, [1e6, -1e6, np.inf, -np.inf, 0.0, -0.0]])
    for array in (x.astype(np.float32), x):
        out = prog(backend="numba", A=array)
        assert out.dtype == fp8
        with np.errstate(over="ignore", invalid="ignore"):
            np.testing.assert_array_equal(out.view(np.uint8), (array * 2).astype(fp8).view(np.uint8))


def test_an_embedding_table_in_float8():
    """A gather from an fp8 table: rows outside it read 0; the fp8 output holds the rows exactly."""
    prog = dt.loads("In E, I; Var t, d; Func o;\no[t, d] = E[I[t], d];\no.compile();", "float8_embedding")
    table = rng.standard_normal((10, 19)).astype(ml_dtypes.float8_e4m3fn)
    ids = np.array([3, 0, 9, -1, 10, 3], np.int64)
    out = prog(backend="numba", E=table, I=ids)
    want = np.concatenate([table, np.zeros((1, 19), table.dtype)])[np.where((ids >= 0) & (ids < 10), ids, 10)]
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
