"""Index expressions, gathers, integer data and casts (issue 27), on every backend: each
construct against the reference evaluator and, where the answer is easy to state, against an
independent NumPy formula; reads outside a tensor give 0 whatever the schedule."""
import warnings

import numpy as np
import pytest

import dt
import dt.debug
import dt.testing
from dt import backends
from dt.debug.errors import DTOutOfRangeWarning
from dt.errors import DTNameError, DTScheduleError, DTTypeError
from dt.testing import assert_close

BACKENDS = ("interp", "example", "numba", pytest.param("triton", marks=pytest.mark.needs_triton))


def run(prog, backend, sizes=None, **args):
    """prog on `backend` (torch tensors on the GPU, or the CPU under Triton's interpreter, for
    Triton), as NumPy arrays."""
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    if backend == "triton":
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        args = {k: torch.from_numpy(v).to(device) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        out = prog(backend=backend, sizes=sizes, **args)
        return {k: v.cpu().numpy() for k, v in out.items()} if isinstance(out, dict) else out.cpu().numpy()
    return prog(backend=backend, sizes=sizes, **args)


def check(prog, backend, sizes=None, want=None, **args):
    """prog's output on `backend` equals its reference (and `want`, when given), exactly for
    integer outputs; returns the output."""
    out = run(prog, backend, sizes, **args)
    reference = prog.reference(sizes=sizes, **args)
    if np.issubdtype(out.dtype, np.integer) or out.dtype == bool:
        np.testing.assert_array_equal(out, reference)
    else:
        assert_close(out, reference, "f32")
    if want is not None:
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    return out


rng = np.random.default_rng(0)

SHIFT = """In A; Var x; Func o;
o[x] = A[x + 1] * 2.0 + A[x - 2];
o.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("schedule", ("", "o.block(x:8);", "o.block(x:16); o.tensorize(x:4);", "o.tensorize(x:0);"))
def test_a_shifted_read_gives_zero_past_either_end(backend, schedule):
    prog = dt.loads(SHIFT + schedule)
    a = rng.standard_normal(37).astype(np.float32)
    padded = np.concatenate([[0, 0], a, [0]]).astype(np.float32)
    want = 2 * padded[3:] + padded[:-3]
    out = check(prog, backend, A=a, want=want)
    assert out.shape == (37,)


CONV = """In W, X; Var c, t; RVar j; Func o;
o[c, t] = rsum(W[c, j] * X[c, t - j], j);
o.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("schedule", ("", "o.block(c:2, t:16); o.tensorize(c:0, t:16, j:0);"))
def test_causal_conv1d_binds_t_to_the_input_length(backend, schedule):
    """X[c, t - j] binds t to X's length (j is bound by W): no sizes= needed."""
    prog = dt.loads(CONV + schedule)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((3, 50)).astype(np.float32)
    want = np.stack([np.convolve(x[c], w[c])[:50] for c in range(3)])
    check(prog, backend, W=w, X=x, want=want)


ROW_MAX = """In A; Var x; RVar y; Func o;
o[x] = rmax(A[x, y - 1], y);
o.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("schedule", ("", "o.tensorize(y:16);", "o.tensorize(y:0);"))
def test_a_max_over_shifted_reads_sees_the_zero_shifted_in_and_no_padding(backend, schedule):
    """y - 1 reads 0 at y = 0 (inside the reduction): negative rows max to 0; lanes past the
    reduction's end still hold its identity, not a 0."""
    prog = dt.loads(ROW_MAX + schedule)
    a = -rng.uniform(1, 2, (5, 21)).astype(np.float32)
    a[3] = rng.standard_normal(21)
    want = np.maximum(a[:, :-1].max(axis=1), 0.0)
    check(prog, backend, A=a, want=want)


GROUPED = """In K; Var h, l; Func o;
o[h, l] = K[h // 4, l] + K[(h + 1) % len(h), l];
o.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_floor_division_and_remainder_select_rows(backend):
    """h // 4 binds nothing: h's extent comes from sizes=; K's rows from K itself."""
    prog = dt.loads(GROUPED + "o.block(h:3); o.tensorize(l:8);")
    k = rng.standard_normal((2, 13)).astype(np.float32)
    h = np.arange(8)
    rows = np.concatenate([k, np.zeros((6, 13), np.float32)])
    want = rows[h // 4] + rows[(h + 1) % 8]
    check(prog, backend, sizes={"h": 8}, K=k, want=want)


ROPE = """In X; Var s, i, d; Func even, rotated;
even[s, i] = X[s, 2 * i] - X[s, 2 * i + 1];
rotated[s, d] = X[s, (d + len(d) // 2) % len(d)];
even.compile(); rotated.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_interleaved_and_rotate_half_subscripts(backend):
    prog = dt.loads(ROPE)
    x = rng.standard_normal((5, 12)).astype(np.float32)
    out = run(prog, backend, sizes={"i": 6, "d": 12}, X=x)
    np.testing.assert_allclose(out["even"], x[:, 0::2] - x[:, 1::2], rtol=1e-6)
    np.testing.assert_array_equal(out["rotated"], np.roll(x, -6, axis=1))


EMBEDDING = """In E, I; Var t, d; Func o;
o[t, d] = E[I[t], d];
o.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index_dtype", (np.int32, np.int64, np.int16, np.uint8))
@pytest.mark.parametrize("schedule", ("", "o.block(t:4, d:16); o.tensorize(t:0, d:0);"))
def test_an_embedding_gathers_rows_repeated_and_out_of_range_give_zero(backend, index_dtype, schedule):
    prog = dt.loads(EMBEDDING + schedule)
    e = rng.standard_normal((10, 19)).astype(np.float32)
    ids = np.array([3, 3, 0, 9, 10, 255 if index_dtype == np.uint8 else -1, 7], dtype=index_dtype)
    inside = (ids.astype(np.int64) >= 0) & (ids.astype(np.int64) < 10)
    want = np.where(inside[:, None], e[np.where(inside, ids, 0)], 0.0)
    check(prog, backend, E=e, I=ids, want=want)


PAGED = """In Kc, T; Var b, l, k; Func o;
SIn page;
o[b, l, k] = Kc[T[b, l // page], l % page, k];
o.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_paged_cache_reads_through_its_block_table(backend):
    prog = dt.loads(PAGED + "o.block(b:1, l:8); o.tensorize(l:0, k:0);")
    page, pages, k = 4, 6, 5
    cache = rng.standard_normal((pages, page, k)).astype(np.float32)
    table = np.array([[5, 0, 2], [1, 1, 4]], dtype=np.int32)
    want = np.stack([cache[table[b]].reshape(-1, k)[:10] for b in range(2)])
    check(prog, backend, sizes={"l": 10}, Kc=cache, T=table, page=page, want=want)


INTEGERS = """In A; Var x; Func q, r, s;
q[x] = (x - 5) // 3;
r[x] = (x - 5) % 3 + A[x] * 0;
s[x] = cast(A[x] * 10.0, i32);
q.compile(); r.compile(); s.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_funcs_are_stored_as_integers_and_casts_truncate(backend):
    prog = dt.loads(INTEGERS)
    a = np.array([-1.27, -0.05, 0.0, 0.31, 2.99, 7.5, -9.99, 1e-3, 3.3], np.float32)
    out = run(prog, backend, A=a)
    x = np.arange(9)
    assert out["q"].dtype == np.int64 and out["s"].dtype == np.int32
    np.testing.assert_array_equal(out["q"], (x - 5) // 3)
    np.testing.assert_allclose(out["r"], (x - 5) % 3)
    np.testing.assert_array_equal(out["s"], np.trunc(a * np.float32(10)).astype(np.int32))
    for name, value in prog.reference(A=a).items():
        np.testing.assert_array_equal(out[name], value)


TARGETS = """In L, T; Var r, v; Func o;
o[r, v] = where(T[r] == -100, 0.0, L[r, v] * (T[r] == v));
o.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_inputs_compare_with_dimensions(backend):
    prog = dt.loads(TARGETS)
    logits = rng.standard_normal((4, 7)).astype(np.float32)
    targets = np.array([2, -100, 6, 0], np.int64)
    want = np.where(targets[:, None] == -100, 0, logits * (targets[:, None] == np.arange(7)))
    check(prog, backend, L=logits, T=targets, want=want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_integer_scalar_offsets_a_subscript_and_a_bool_input_selects(backend):
    prog = dt.loads("In K, M; SIn start; Var l; Func o;\no[l] = where(M[l], K[l + start], -1.0);\no.compile();")
    k = rng.standard_normal(9).astype(np.float32)
    mask = np.array([1, 0, 1, 1, 0, 1, 1, 1, 1], bool)
    check(prog, backend, K=k, M=mask, start=3, want=np.where(mask, np.concatenate([k[3:], np.zeros(3)]), -1))


PRODUCER = """In A; Var x; Func f, g;
f[x] = exp(A[x]);
g[x] = f[x + 1];
g.compile();
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("schedule", ("", "f.inline();", "g.block(x:4); f.inline();"))
def test_a_producer_read_past_its_end_gives_zero_stored_or_inlined(backend, schedule):
    prog = dt.loads(PRODUCER + schedule)
    a = rng.standard_normal(11).astype(np.float32)
    check(prog, backend, A=a, want=np.append(np.exp(a[1:]), 0.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fused_producer_read_at_a_shift_by_another_kernel_reads_what_its_kernel_stored(backend):
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    prog = dt.loads("Func f, g, h; In A; Var x;\nf[x] = exp(A[x]);\ng[x] = f[x] * 2.0;\nh[x] = f[x + 1] + g[x];\n"
                    "g.block(x:4); f.fuse_at(g, x);\ng.compile(); h.compile();\n")
    a = rng.standard_normal(11).astype(np.float32)
    got = prog(backend=backend, A=a)
    np.testing.assert_allclose(got["h"], np.append(np.exp(a[1:]), 0.0) + 2 * np.exp(a), rtol=1e-6)


def test_a_fused_producer_read_at_a_shift_is_refused_naming_the_shift():
    with pytest.raises(DTScheduleError) as info:
        dt.loads(PRODUCER + "g.block(x:4); f.fuse_at(g, x);")
    assert "reads it at computed indices, f[x + 1]" in info.value.message
    assert "inline it" in info.value.hint


@pytest.mark.parametrize("source,error,fragment", [
    ("In A; Var x; Func o;\no[x + 1] = A[x];\no.compile();", DTNameError, "'o' is updated before it is defined"),
    ("In A; Var x; Func o;\no[x] = A[x / 2];\no.compile();", DTTypeError, "'/' divides as floats"),
    ("In A; Var x; Func o;\no[x] = A[x * 0.5];\no.compile();", DTTypeError, "0.5 is a float"),
    ("In A; Var x, y; Func o;\no[x, y] = A[x // y];\no.compile();", DTTypeError, "may not be a positive integer"),
    ("In A; Var x; Func o;\no[x] = A[x % 0];\no.compile();", DTTypeError, "divides by 0"),
    ("In A; Var x; Func o;\no[x] = A[exp(x)];\no.compile();", DTTypeError, "exp(x) is not integer arithmetic"),
])
def test_subscript_errors_point_at_the_subscript(source, error, fragment):
    with pytest.raises(error) as info:
        dt.loads(source)
    assert fragment in info.value.message
    assert info.value.loc is not None and info.value.loc.line == 2 and info.value.hint


def test_a_float_tensor_used_as_gather_indices_is_a_type_error_at_the_call():
    prog = dt.loads(EMBEDDING)
    with pytest.raises(DTTypeError) as info:
        prog(backend="interp", E=np.ones((3, 2), np.float32), I=np.zeros(4, np.float32))
    assert "'I' indexes 'E' (E[I[t], d]) but holds f32 values" in info.value.message
    assert info.value.loc.line == 2


def test_a_float_scalar_in_a_subscript_is_a_type_error_at_the_call():
    prog = dt.loads("In K; SIn start; Var l; Func o;\no[l] = K[l + start];\no.compile();")
    with pytest.raises(DTTypeError, match="scalar 'start' indexes 'K'"):
        prog(backend="interp", K=np.ones(4, np.float32), start=1.5)


def test_an_unbound_input_axis_is_named_after_its_tensor():
    prog = dt.loads(EMBEDDING)
    assert prog.checked.input_axes == {"E": ("E_axis0", "d"), "I": ("t",)}
    args = dt.testing.random_inputs(prog, {"t": 30, "d": 4, "E_axis0": 5})
    assert args["E"].shape == (5, 4) and args["I"].shape == (30,)
    assert args["I"].dtype == np.int64 and set(args["I"]) == set(range(5))  # indices within E's rows


def test_the_bounds_sanitizer_reports_reads_outside_a_tensor_once_with_the_element():
    prog = dt.loads(EMBEDDING + "o.block(t:4); o.tensorize(t:0, d:0);", file="emb.dt")
    e = np.ones((4, 3), np.float32)
    with dt.debug.sanitize("bounds"), pytest.warns(DTOutOfRangeWarning) as caught:
        out = prog(E=e, I=np.array([0, 5, 1, 7, 2], np.int64))
    assert len(caught) == 1  # once per statement and run, with the first element
    text = str(caught[0].message)
    assert text.startswith("emb.dt:2:11: read outside a tensor: 'E' is read at E[5, 0], outside its shape (4, 3)")
    assert "on 6 lane(s)" in text and "^^^^^^^^^^" in text
    np.testing.assert_array_equal(out[[1, 3]], 0)


def test_the_bounds_sanitizer_is_quiet_for_lanes_past_an_extent():
    """A tile of 8 over 5 elements computes x + 1 on padding lanes too: those are masked, not reads."""
    prog = dt.loads("In A; Var x; Func o;\no[x] = A[x + 1] + A[x];\no.tensorize(x:8);\no.compile();")
    with dt.debug.sanitize("bounds"), pytest.warns(DTOutOfRangeWarning, match="A\\[5\\]"):
        prog(A=np.ones(5, np.float32))  # x = 4 reads A[5]: reported; padding lanes 5..7 are not
    with dt.debug.sanitize("bounds"), warnings.catch_warnings():
        warnings.simplefilter("error")
        dt.loads("In A; Var x; Func o;\no[x] = A[x - 0] * 2.0;\no.tensorize(x:8);\no.compile();")(
            A=np.ones(5, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_data_casts_to_bool_and_counts_as_one_in_arithmetic(backend):
    """A bool Func is stored as bool; bools added are 0/1 floats; a bool with an integer is an
    integer; a shifted bool read selects."""
    prog = dt.loads("In A, M; Var x; Func flag, twice, plus, pick;\nflag[x] = cast(A[x], bool);\n"
                    "twice[x] = M[x - 1] + M[x];\nplus[x] = M[x] + x;\npick[x] = where(M[x + 1], A[x], -1.0);\n"
                    "flag.compile(); twice.compile(); plus.compile(); pick.compile();")
    a, m = np.array([0, 1, 2, 0, 5], np.float32), np.array([1, 0, 1, 1, 0], bool)
    out = run(prog, backend, A=a, M=m)
    assert out["flag"].dtype == bool and out["plus"].dtype == np.int64 and out["twice"].dtype == np.float32
    np.testing.assert_array_equal(out["flag"], a != 0)
    np.testing.assert_array_equal(out["twice"], np.concatenate([[0], m[:-1]]) + m)
    np.testing.assert_array_equal(out["plus"], m + np.arange(5))
    np.testing.assert_array_equal(out["pick"], np.where(np.append(m[1:], False), a, -1))


def test_the_bounds_sanitizer_reports_casts_whose_result_is_undefined():
    prog = dt.loads("In A; Var x; Func o;\no[x] = cast(A[x] * 1e9, i32);\no.tensorize(x:8);\no.compile();", file="c.dt")
    with dt.debug.sanitize("bounds"), pytest.warns(DTOutOfRangeWarning) as caught:
        prog(A=np.array([0.5, 1.0, 3.0, np.nan, 1.5], np.float32))
    assert len(caught) == 1
    assert str(caught[0].message).startswith("c.dt:2:1: cast out of range: 3e+09 cannot be converted to i32")
    assert "on 2 lane(s)" in str(caught[0].message)  # 3e9 and NaN; padding lanes are not reported
    with dt.debug.sanitize("bounds"), warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(prog(A=np.array([0.5, -2.0], np.float32)), [500000000, -2000000000])


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_arithmetic_is_64_bit_and_narrow_data_widens(backend):
    """x * 100000000 passes 2**31 at x = 22: the read must still be masked, not wrapped into the
    tensor; i8 * i8 and u8 - u8 compute in 64 bits, as the reference does."""
    far = dt.loads("In A; Var x; Func o;\no[x] = A[x * 100000000] + 1.0;\no.block(x:32); o.tensorize(x:32);\n"
                   "o.compile();")
    check(far, backend, sizes={"x": 32}, A=np.ones(10, np.float32), want=np.r_[2.0, np.ones(31)])
    narrow = dt.loads("In P, Q, U, V; Var x; Func o;\no[x] = P[x] * Q[x] + (U[x] - V[x]);\no.compile();")
    out = check(narrow, backend, P=np.array([100, -3], np.int8), Q=np.array([100, 5], np.int8),
                U=np.array([3, 200], np.uint8), V=np.array([5, 100], np.uint8))
    np.testing.assert_array_equal(out, [10000 - 2, -15 + 100])


def test_the_reference_casts_integers_exactly():
    prog = dt.loads("In P; Var x; Func o;\no[x] = cast(P[x] + 16777216, i64);\no.compile();")
    np.testing.assert_array_equal(prog.reference(P=np.array([1, 3], np.int64)), [16777217, 16777219])


def test_a_scalar_dividing_a_subscript_must_be_positive():
    prog = dt.loads("In K; SIn p; Var l; Func o;\no[l] = K[l // p];\no.compile();")
    for bad in (0, -2):
        with pytest.raises(DTTypeError) as info:
            prog(backend="interp", K=np.ones(3, np.float32), p=bad, sizes={"l": 3})
        assert f"scalar 'p' divides a subscript (// or %) but is {bad}" in info.value.message
        assert info.value.loc.line == 2 and info.value.hint == "pass p as a positive integer"


def test_a_divisor_of_lens_is_checked_when_called():
    # RoPE over half-width tables: C[s, d % (len(d) // 2)] (0 where len(d) is 1)
    prog = dt.loads("In X, C; Var s, d; Func o;\no[s, d] = X[s, d] * C[s, d % (len(d) // 2)];\no.compile();")
    rng = np.random.default_rng(0)
    X, C = rng.standard_normal((3, 8)), rng.standard_normal((3, 4))
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(prog(backend=backend, X=X, C=C), X * np.concatenate([C, C], 1))
    with pytest.raises(DTTypeError, match=r"divides by len\(d\) // 2, which is 0 at this call") as info:
        prog(backend="interp", X=X[:, :1], C=C)
    assert info.value.loc.line == 2 and info.value.loc.col == 26

I8_PRODUCT = "In X, W; Var m, n; RVar k; Func o;\no[m, n] = rdot(X[m, k], W[n, k], k);\n"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("schedule", (
    pytest.param("", marks=pytest.mark.slow),  # Triton's interpreter: 3 x 5 programs, 2051 steps each
    "o.block(m:16, n:16); o.tensorize(m:16, n:16, k:32);",  # matrix units (Triton: int8 tl.dot)
    "o.block(m:16, n:16); o.tensorize(m:16, n:16, k:16);",  # a reduction tile int8 tl.dot does not take
    "o.block(m:1, n:16); o.tensorize(n:16, k:64);",  # a row at a time: multiply and sum
))
def test_a_product_of_two_i8_operands_is_exact_in_i32(backend, schedule):
    """Odd sums of i8 products past 2**24 (where float32 accumulation rounds) come out exact, stored
    as i64 (an integer Func); the inputs divide no tile."""
    m, n, k = 5, 3, 2051
    x = np.where(rng.random((m, k)) < 0.9, 127, rng.integers(-128, 128, (m, k))).astype(np.int8)
    w = np.where(rng.random((n, k)) < 0.9, 126, rng.integers(-128, 128, (n, k))).astype(np.int8)
    want = x.astype(np.int64) @ w.T.astype(np.int64)
    assert want.min() > 2 ** 24 and (want % 2).any()  # float32 would round these
    out = check(dt.loads(I8_PRODUCT + schedule + "\no.compile();"), backend, X=x, W=w)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, want)


@pytest.mark.slow  # Triton's interpreter: 4 s
@pytest.mark.parametrize("backend", BACKENDS)
def test_i8_products_scaled_to_floats_and_mixed_operands(backend):
    """W8A8: the exact i32 product times float scales is a float; an i8 operand beside a float one
    still converts to floats (weight-only quantization)."""
    prog = dt.loads("In X, W, Sx, Sw, F; Var m, n; RVar k; Func o, w;\n"
                    "o[m, n] = rdot(X[m, k], W[n, k], k) * Sx[m] * Sw[n];\nw[m, n] = rdot(F[m, k], W[n, k], k);\n"
                    "o.block(m:16, n:16); o.tensorize(m:16, n:16, k:32); o.compile(); w.compile();")
    x, w = rng.integers(-128, 128, (20, 70)).astype(np.int8), rng.integers(-128, 128, (18, 70)).astype(np.int8)
    sx, sw, f = rng.uniform(0.5, 2, 20).astype(np.float32), rng.uniform(0.5, 2, 18).astype(np.float32), \
        rng.standard_normal((20, 70)).astype(np.float32)
    out = run(prog, backend, X=x, W=w, Sx=sx, Sw=sw, F=f)
    assert out["o"].dtype == np.float32 and out["w"].dtype == np.float32
    exact = x.astype(np.int64) @ w.T.astype(np.int64)
    assert_close(out["o"], exact * sx[:, None].astype(np.float64) * sw[None, :], "f32")
    assert_close(out["w"], f.astype(np.float64) @ w.T.astype(np.float64), "f32")


def test_an_i8_product_is_an_i32_dot_in_the_scheduled_ir_and_in_triton():
    prog = dt.loads(I8_PRODUCT + "o.block(m:16, n:16); o.tensorize(m:16, n:16, k:32);\no.compile();")
    ir = prog.ir({"X": "i8", "W": "i8"})
    assert "dot(X, W, k, acc=k_accumulator, i32)" in ir and "outputs o: i64[m, n]" in ir
    text = backends.get("triton").source(prog.pipeline({"X": "i8", "W": "i8"}))
    assert "tl.zeros((16, 16), tl.int32)" in text and "tl.dot(X, W, k_accumulator, out_dtype=tl.int32)" in text


def test_a_split_i8_product_is_refused_at_its_split():
    prog = dt.loads(I8_PRODUCT + "o.split(k:512);\no.compile();")
    x = np.ones((3, 1000), np.int8)
    with pytest.raises(DTScheduleError, match="adds? the chunks in floats|add the chunks in floats") as e:
        prog(X=x, W=x, backend="interp")
    assert "o.split" in str(e.value)
    np.testing.assert_array_equal(prog(X=x.astype(np.float32), W=x.astype(np.float32), backend="interp"),
                                  np.full((3, 3), 1000.0))  # float operands split as before


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("schedule", ("q.inline();", "q.fuse_at(o, k);", ""))
def test_an_i8_product_of_a_func_cast_to_i8_is_exact(backend, schedule):
    """q = cast(X * 10, i8) is int8 data wherever it is computed: inlined (its cast), fused or stored."""
    m, n, k = 5, 3, 2051
    x = np.where(rng.random((m, k)) < 0.9, 12.7, rng.uniform(-12.8, 12.7, (m, k))).astype(np.float32)
    w = np.where(rng.random((n, k)) < 0.9, 126, rng.integers(-128, 128, (n, k))).astype(np.int8)
    prog = dt.loads("In X, W; Var m, n; RVar k; Func q, o;\nq[m, k] = cast(X[m, k] * 10.0, i8);\n"
                    "o[m, n] = rdot(q[m, k], W[n, k], k);\no.block(m:16, n:16); o.tensorize(m:16, n:16, k:32);\n"
                    + schedule + "\no.compile();")
    want = np.trunc(x * np.float32(10.0)).astype(np.int64) @ w.T.astype(np.int64)
    assert want.min() > 2 ** 24 and (want % 2).any()
    np.testing.assert_array_equal(run(prog, backend, X=x, W=w), want)


def test_a_float_factor_of_an_i8_operand_keeps_the_product_in_floats():
    """rdot(X * S, W) is a float product as written (an i8 times a float): taking S out of it, as
    scales are, must not make it an i32 product, which would wrap past 2**31."""
    prog = dt.loads("In X, W, S; Var m, n; RVar k; Func o;\no[m, n] = rdot(X[m, k] * S[m], W[n, k], k);\n"
                    "o.block(m:16, n:16); o.tensorize(m:16, n:16, k:32);\no.compile();")
    ir = prog.ir({"X": "i8", "W": "i8", "S": "f32"})
    assert "i32" not in ir and "outputs o: f32" in ir
    x = np.full((2, 140000), 127, np.int8)
    out = prog(X=x, W=x, S=np.ones(2, np.float32), backend="interp")
    np.testing.assert_allclose(out, np.full((2, 2), 127.0 * 127 * 140000), rtol=1e-3)  # i32 would be 2**32 off


def test_a_split_reaching_an_i8_product_through_an_inlined_func_is_refused():
    prog = dt.loads("In X, W; Var m, n; RVar k; Func p, o;\np[m, n] = rdot(X[m, k], W[n, k], k);\n"
                    "o[m, n] = p[m, n] + 1;\np.inline();\no.split(k:512);\no.compile();")
    x = np.ones((3, 1000), np.int8)
    with pytest.raises(DTScheduleError, match="'o' multiplies two i8 operands") as e:
        prog(X=x, W=x, backend="interp")
    assert "o.split(k:512)" in str(e.value)


def test_an_inlined_copy_of_i8_data_is_an_i8_operand_as_the_product_reads_it():
    """q[m, k] = X[m, k] (an integer Func, stored i64 when stored) inlined is X itself in the product:
    an i32 product, as its type says (a type of f32 over an i32 product would wrap past 2**31)."""
    prog = dt.loads("In X, W; Var m, n; RVar k; Func q, o;\nq[m, k] = X[m, k];\no[m, n] = rdot(q[m, k], W[n, k], k);\n"
                    "q.inline(); o.block(m:16, n:16); o.tensorize(m:16, n:16, k:32);\no.compile();")
    ir = prog.ir({"X": "i8", "W": "i8"})
    assert "outputs o: i64" in ir and "k_accumulator: i32" in ir
    stored = dt.loads("In X, W; Var m, n; RVar k; Func q, o;\nq[m, k] = X[m, k];\no[m, n] = rdot(q[m, k], W[n, k], k);\n"
                      "o.block(m:16, n:16); o.tensorize(m:16, n:16, k:32); q.compile();\no.compile();")
    assert "outputs q: i64[m, k], o: f32" in stored.ir({"X": "i8", "W": "i8"})  # q read as stored: i64 data


def test_a_factored_scale_of_i8_data_leaves_a_float_product_of_unrounded_data():
    """rdot(X * S, W) with i8 X, W and a bf16 scale: S applies after the sum (X * S is not rounded
    to bf16 element by element), and the product is a float one; a shifted read of an inlined
    i8 Func is int8 data as its unshifted read is."""
    rng2 = np.random.default_rng(5)
    x, w = rng2.integers(-128, 128, (20, 300)).astype(np.int8), rng2.integers(-128, 128, (18, 300)).astype(np.int8)
    s = rng2.uniform(0.5, 2, 20).astype(np.float32)
    prog = dt.loads("In X, W, S; Var m, n; RVar k; Func o;\no[m, n] = cast(rdot(X[m, k] * S[m], W[n, k], k), f32);\n"
                    "o.block(m:16, n:16); o.tensorize(m:16, n:16, k:32);\no.compile();")
    ir = prog.ir({"X": "i8", "W": "i8", "S": "bf16"})
    assert "i32" not in ir and "(k_accumulator * expand(S, [m, n]))" in ir  # S after the sum, not in the tiles
    want = (x.astype(np.float64) @ w.T.astype(np.float64)) * s.astype(np.float64)[:, None]
    got = prog(X=x, W=w, S=s, backend="interp")  # S as f32 here: the factor's rounding is the point
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    shifted = dt.loads("In X, W; Var m, n; RVar k; Func q, o;\nq[m, k] = cast(X[m, k] * 10.0, i8);\n"
                       "o[m, n] = rdot(q[m, k + 1], W[n, k], k);\nq.inline(); o.block(m:16, n:16); "
                       "o.tensorize(m:16, n:16, k:32);\no.compile();")
    ir = shifted.ir({"X": "f32", "W": "i8"})
    assert "outputs o: i64" in ir and "k_accumulator: i32" in ir


def test_an_eight_bit_rule_of_the_space_leaves_16_bit_products_alone():
    prog = dt.loads("In A, B; Var m, n; RVar k; Func o;\no[m, n] = rdot(A[m, k] * 2.0, B[n, k] * 3.0, k);\no.compile();")
    assert not any("k128" in c.name for c in prog.space(dict(m=4096, n=4096, k=4096), "bf16", "triton"))
