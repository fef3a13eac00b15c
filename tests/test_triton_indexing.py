"""The Triton backend on integer data, casts and reads at computed indices (issue 27): the
generated code (64-bit gather offsets, masks, Triton's own // where it floors, names after the
DT source) and what it computes where Triton's semantics differ from DT's (signed // and %
truncate in Triton; Python numbers and narrow integers promote differently). Kernels run under
Triton's interpreter when there is no GPU; tests/test_indexing.py runs every construct on every
backend."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import dt  # noqa: E402
from test_triton_backend import program, sm90_compiled  # noqa: E402

EMBEDDING = """In E, I; Var t, d; Func o;
o[t, d] = E[I[t], d];
o.block(t:4, d:64); o.tensorize(t:4, d:64);
o.compile();"""


def flat(text: str) -> str:
    """Generated code with its statements unwrapped (every run of white space one space)."""
    return " ".join(text.split())


def source(src: str, dtypes: dict[str, str] | str = "f32") -> str:
    return flat(dt.loads(src).source("triton", dtypes))


def run(src: str, sizes=None, **args):
    return dt.loads(src)(backend="triton", sizes=sizes, **args)


# ---------------------------------------------------------------- the generated code


@pytest.mark.parametrize("ids,widened,lower_bound", [("i32", True, True), ("i64", False, True), ("u8", True, False)])
def test_an_embedding_row_offset_is_64_bit_and_its_index_masked(ids, widened, lower_bound):
    """Row index times row stride passes 2**31 for a [128256, 16384] table: an int32 or uint8
    index is widened before the product (an int64 one is wide already); a negative index or
    one past the table's rows reads 0 (uint8 ones are never negative)."""
    src = source(EMBEDDING, {"E": "bf16", "I": ids})
    index = "E_axis0_index" if widened else "I[:, None]"  # a widened index is named on its own line
    if widened:
        assert "E_axis0_index = I.to(tl.int64)[:, None]" in src
    assert f"tl.load(E_ptr + {index} * E_axis0_stride + d_offsets[None, :] * E_d_stride," in src
    bounds = f"({index} >= 0) & ({index} < E_axis0_SIZE)" if lower_bound else f"({index} < E_axis0_SIZE)"
    assert f"mask={bounds} & d_mask[None, :], other=0.0)" in src
    assert "TensorDescriptor" not in src


@pytest.mark.slow
def test_an_int32_row_index_costs_one_wide_multiply_add_on_sm90():
    """Widening the index first is free: ptxas folds sign extension, product and address into
    one mad.wide.s32, and the two bounds into one unsigned comparison."""
    ptx = sm90_compiled('t.compile_for_sm90([("embedding", "f16")], lambda k: k.asm["ptx"], index_dtype="int32")')
    kernel = ptx["embedding-f16 o_kernel"]
    assert "mad.wide.s32" in kernel and "setp.lt.u32" in kernel


def test_computed_subscripts_are_named_after_the_tensor_axis_they_index():
    src = flat(program("causal_conv").source("triton"))
    assert "X_t_index = (t_offsets[:, None] - j_arange[None, :])[None, :, :]" in src
    assert "X_t_index * X_t_stride" in src
    assert "(X_t_index >= 0) & (X_t_index < t_SIZE)" in src  # t - j may be negative


def test_a_subscript_never_negative_needs_no_lower_bound():
    src = source("In A; Var x; Func o;\no[x] = A[x + 1] * 2.0;\no.block(x:64); o.tensorize(x:64);\no.compile();",
                 {"A": "f32"})
    assert "A_x_index = x_offsets + 1" in src
    assert "mask=A_x_index < x_SIZE, other=0.0" in src


def test_floor_division_is_tritons_own_where_it_floors():
    """A dividend never negative by a positive divisor (h // 4, the pages of a block table)
    divides with Triton's // and %; one that may be negative goes through the helpers."""
    grouped = flat(program("grouped").source("triton"))
    assert "K_axis0_index = h_pid // 4" in grouped and "_floor_divide" not in grouped  # h: a block of 1
    paged = flat(program("paged").source("triton"))
    assert "T_axis1_index = l_offsets // 4" in paged
    assert "Kc_axis1_index = (l_offsets % 4)" in paged and "_remainder" not in paged
    shifted = source("Var x; Func o;\no[x] = (x - 5) // 3 + (x - 5) % 3;\no.tensorize(x:16);\no.compile();", {})
    # a remainder of a difference of non-negative terms adds the divisor's complement instead: the same
    # value never negative, so Triton's own % (and a contiguous index tile: vector loads)
    assert "o = _floor_divide(x_offsets - 5, 3) + (x_offsets + (3 - 5 % 3)) % 3" in shifted


@pytest.mark.parametrize("shift", (0, 1, 5, 16, 37))
def test_a_rotation_back_is_pythons_remainder_and_loads_the_row_in_order(shift):
    """(x - c) % len(x) reads X rotated back by c (dt.grad's rotate-half RoPE: c = len(x) // 2),
    for c past the extent too."""
    src = f"In X; Var x; Func o;\no[x] = X[(x - {shift}) % len(x)] + cast((x - len(x) // 2) % len(x), f32);\no.compile();"
    for n in (16, 13):
        X = np.arange(n, dtype=np.float32) * 10
        index = np.arange(n)
        want = X[(index - shift) % n] + (index - n // 2) % n
        np.testing.assert_array_equal(np.asarray(run(src, sizes={"x": n}, X=X)), want)
    assert "_remainder" not in source(src)


def test_a_gather_in_a_tma_kernel_reads_through_pointers():
    src = flat(program("shift_tma").source("triton", "f16"))
    assert "A = A_desc.load([" in src and "out_desc.store([" in src
    assert ("B = tl.load(B_ptr + x_offsets[:, None] * B_x_stride + B_y_index * B_y_stride, "
            "mask=x_mask[:, None] & (B_y_index < y_SIZE), other=0.0)") in src
    assert "B_desc" not in src


def test_an_integer_scalar_is_an_int64_argument():
    """DT types an integer scalar int64; Triton would make one that fits int32 (and 1, a constant)."""
    text = source("SIn k; Var x; Func o;\no[x] = x * k + 1;\no.compile();", {"k": "i64"})
    assert "def o_kernel(o_ptr, o_x_stride: tl.constexpr, k: tl.int64, x_SIZE: tl.constexpr):" in text
    assert "o_kernel[o_grid](o, *o.stride(), int(k), x_SIZE)" in text
    out = run("SIn k; Var x; Func o;\no[x] = x * k + 1;\no.compile();", sizes={"x": 5}, k=3_000_000_000)
    np.testing.assert_array_equal(np.asarray(out), np.arange(5, dtype=np.int64) * 3_000_000_000 + 1)


# ---------------------------------------------------------------- what it computes


@pytest.mark.parametrize("dtype", (np.int8, np.int16, np.int32, np.int64))
def test_floor_division_and_remainder_of_negative_integers_are_pythons(dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(-100, 100, 64).astype(dtype)
    b = rng.integers(-9, 10, 64).astype(dtype)
    b[b == 0] = 7
    out = run("In A, B; Var x; Func q, r;\nq[x] = A[x] // B[x];\nr[x] = A[x] % B[x];\nq.compile(); r.compile();",
              A=a, B=b)
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(np.asarray(out["q"]), wide_a // wide_b)
    np.testing.assert_array_equal(np.asarray(out["r"]), wide_a % wide_b)


def test_narrow_integers_promote_as_torch_not_as_triton():
    """Integers compute in int64 in DT (127 + 1 = 128 for an int8), where Triton keeps int8;
    uint8 + int8 too, where Triton, as C, makes uint8."""
    i8 = np.array([127, -128, -1, 5], np.int8)
    u8 = np.array([255, 0, 200, 3], np.uint8)
    out = run("In I, U; Var x; Func s, m;\ns[x] = I[x] + 1;\nm[x] = U[x] + I[x];\ns.compile(); m.compile();",
              I=i8, U=u8)
    np.testing.assert_array_equal(np.asarray(out["s"]), [128, -127, 0, 6])
    np.testing.assert_array_equal(np.asarray(out["m"]), [382, -128, 199, 8])
    text = source("In I; Var x; Func s;\ns[x] = I[x] + 1;\ns.compile();", {"I": "i8"})
    assert "s = I.to(tl.int64) + 1" in text


def test_casts_truncate_toward_zero_and_convert_between_dtypes():
    a = np.array([-2.7, -0.5, 0.0, 0.4, 1.9, 250.3, -129.6, 3.0], np.float32)
    mask = np.array([1, 0, 1, 1, 0, 1, 0, 0], bool)
    ids = np.array([-3, 7, 0, 2**40, 5, -1, 9, 1], np.int64)
    out = run("""In A, M, I; Var x; Func t, u, b, f;
t[x] = cast(A[x], i32); u[x] = cast(abs(A[x]), u8); b[x] = cast(M[x], i16) * 3; f[x] = cast(I[x], f32) * 0.5;
t.compile(); u.compile(); b.compile(); f.compile();""", A=a, M=mask, I=ids)
    assert np.asarray(out["t"]).dtype == np.int32 and np.asarray(out["u"]).dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(out["t"]), [-2, 0, 0, 0, 1, 250, -129, 3])
    np.testing.assert_array_equal(np.asarray(out["u"]), [2, 0, 0, 0, 1, 250, 129, 3])
    np.testing.assert_array_equal(np.asarray(out["b"]), mask * 3)
    np.testing.assert_allclose(np.asarray(out["f"]), ids.astype(np.float32) * 0.5)


def test_integer_where_maximum_minimum_abs_and_negation():
    a = np.array([0.5, -1.0, 2.0, -0.1, 3.0], np.float32)
    i = np.array([-7, 3, 10, -2, 0], np.int32)
    out = run("""In A, I; Var x; Func w, f;
w[x] = where(A[x] > 0, I[x], x);
f[x] = maximum(I[x], 3) - abs(I[x]) + minimum(-I[x], 2);
w.compile(); f.compile();""", A=a, I=i)
    np.testing.assert_array_equal(np.asarray(out["w"]), np.where(a > 0, i, np.arange(5)))
    np.testing.assert_array_equal(np.asarray(out["f"]), np.maximum(i, 3) - np.abs(i) + np.minimum(-i, 2))


def test_a_bool_tensor_gathers_and_a_constant_subscript_reads_one_element():
    mask = np.array([1, 0, 1, 1, 0], bool)
    b = np.array([2.0, 3.0, 5.0], np.float32)
    out = run("In M, B; Var x; Func o;\no[x] = where(M[x + 1], B[2], B[7]);\no.compile();", M=mask, B=b)
    np.testing.assert_array_equal(np.asarray(out), np.where(np.append(mask[1:], False), 5.0, 0.0))
