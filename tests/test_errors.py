"""Every kind of bad input gets a DTError with a message, the DT file, line, column and a caret,
and never a traceback from dt's internals; user data is never modified."""
from pathlib import Path

import numpy as np
import pytest

import dt
from dt.errors import (DTDimensionError, DTError, DTExtentError, DTInputError, DTNameError, DTScheduleError,
                       DTSyntaxError)

SOFTMAX = """Func _softmax, _sum;
In A;
Var x;
RVar y;
_sum[x] = rsum(exp(A[x, y]), y);
_softmax[x, y] = exp(A[x, y]) / _sum[x];
_softmax.block(x:4);
_sum.fuse_at(_softmax, x);
_softmax.compile_to_kernel();
"""


def error_of(source: str, cls=DTError) -> DTError:
    with pytest.raises(cls) as info:
        dt.loads(source, file="bad.dt")
    return info.value


def assert_at(err: DTError, line: int, col: int, *fragments: str):
    assert err.loc is not None, err.render()
    assert (err.loc.file, err.loc.line, err.loc.col) == ("bad.dt", line, col), err.render()
    text = err.render()
    assert text.startswith(f"bad.dt:{line}:{col}:"), text
    assert "^" in text, text
    for fragment in fragments:
        assert fragment in text, text


def test_missing_semicolon():
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = A[x]\nf.compile();\n", DTSyntaxError)
    assert_at(err, 5, 1, "unexpected 'f'", "';'")


def test_unexpected_character():
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = A[x] @ 2;\n", DTSyntaxError)
    assert_at(err, 4, 13, "unexpected character '@'")


def test_unfinished_file():
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = A[x] +", DTSyntaxError)
    assert "unexpected end of file" in err.render()
    assert err.loc.line == 4


@pytest.mark.parametrize("tail", ["", "\n", "\n\n\n", "  # the output\n# end\n\n"])
def test_unfinished_file_points_just_after_the_last_code(tail):
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = A[x];\nf.compile()" + tail, DTSyntaxError)
    assert_at(err, 5, 12, "unexpected end of file", "f.compile()", "expected ';'")


def test_unknown_tensor():
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = A[x] + B[x];\nf.compile();\n", DTNameError)
    assert_at(err, 4, 15, "unknown name 'B'", "In B;")


def test_unknown_function_suggests():
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = expp(A[x]);\nf.compile();\n", DTNameError)
    assert_at(err, 4, 8, "unknown function 'expp'", "did you mean exp?")


def test_unknown_index_dimension():
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = A[x, z];\nf.compile();\n", DTNameError)
    assert_at(err, 4, 13, "'z'")


def test_redeclared_name():
    err = error_of("Func f;\nIn A, f;\nVar x;\nf[x] = A[x];\nf.compile();\n", DTNameError)
    assert_at(err, 2, 7, "'f' is declared twice", "first declared here")


def test_func_defined_twice():
    err = error_of("Func f;\nIn A;\nVar x;\nf[x] = A[x];\nf[x] = 2 * A[x];\nf.compile();\n", DTNameError)
    assert_at(err, 5, 1, "Func 'f' is defined twice", "first definition here", "bad.dt:4:1")


def test_rvar_outside_its_reduction():
    err = error_of("Func f;\nIn A;\nVar x;\nRVar k;\nf[x] = A[x, k];\nf.compile();\n", DTDimensionError)
    assert_at(err, 5, 13, "RVar 'k' is used outside a reduction", "rsum(..., k)")


def test_free_dimension_missing_from_lhs():
    err = error_of("Func f;\nIn A;\nVar x, y;\nf[x] = A[x, y];\nf.compile();\n", DTDimensionError)
    assert_at(err, 4, 13, "'y' appears on the right of 'f' but not on its left", "f[x, y]")


def test_reduction_over_pure_var():
    err = error_of("Func f;\nIn A;\nVar x, y;\nf[x] = rsum(A[x, y], y);\nf.compile();\n", DTDimensionError)
    assert_at(err, 4, 22, "reduction over 'y'", "RVar y;")


def test_cycle():
    err = error_of("Func f, g;\nIn A;\nVar x;\nf[x] = g[x] + A[x];\ng[x] = f[x];\nf.compile();\n",
                   DTDimensionError)
    assert "cycle" in err.render() and ("f -> g -> f" in err.render() or "g -> f -> g" in err.render())
    assert err.loc.line in (4, 5)


def test_schedule_names_missing_dimension():
    err = error_of(SOFTMAX.replace("_softmax.block(x:4);", "_softmax.block(x:4, z:8);").replace("Var x;", "Var x, z;"),
                   DTScheduleError)
    assert_at(err, 7, 21, "block names 'z'", "'_softmax' has no dimension 'z'")


def test_tensorize_names_dimension_outside_kernel():
    src = SOFTMAX.replace("Var x;", "Var x, z;").replace("_softmax.block(x:4);", "_softmax.block(x:4);\n_softmax.tensorize(z:8);")
    err = error_of(src, DTScheduleError)
    assert_at(err, 8, 20, "tensorize names 'z'", "its dimensions: x, y")


def test_fuse_at_into_non_consumer():
    src = ("Func f, g, h;\nIn A;\nVar x;\nf[x] = A[x];\ng[x] = f[x];\nh[x] = A[x] * 2;\n"
           "f.fuse_at(h, x);\ng.compile();\nh.compile();\n")
    err = error_of(src, DTScheduleError)
    # f is stored by h's kernel for kernels that run later; g's runs before
    assert_at(err, 7, 1, "'f' is fused into 'h' and stored by h's kernel, but 'g' reads it in g's kernel, which runs before")


def test_fuse_at_missing_loop():
    err = error_of(SOFTMAX.replace("_sum.fuse_at(_softmax, x);", "_sum.fuse_at(_softmax, k);").replace(
        "RVar y;", "RVar y, k;"), DTScheduleError)
    assert_at(err, 8, 24, "'_softmax' has no loop over 'k'", "the loops of _softmax are: x, y")


def test_fused_producer_indexed_by_other_names():
    src = ("Func f, g;\nIn A;\nVar x, y;\nf[x, y] = A[x, y];\ng[x, y] = f[y, x];\n"
           "f.fuse_at(g, y);\ng.compile();\n")
    err = error_of(src, DTScheduleError)
    assert_at(err, 5, 11, "must be indexed by its own dimension names, f[x, y]", "f[y, x]")


def test_compile_to_kernel_with_unfused_producer():
    err = error_of(SOFTMAX.replace("_sum.fuse_at(_softmax, x);\n", ""), DTScheduleError)
    assert_at(err, 8, 1, "compile_to_kernel(_softmax) needs one kernel", "'_sum'", "_sum.fuse_at(_softmax, x)")


def test_tile_larger_than_block():
    prog = dt.loads("Func f;\nIn A;\nVar x;\nf[x] = A[x];\nf.block(x:4);\nf.tensorize(x:8);\nf.compile();\n",
                    file="bad.dt")
    with pytest.raises(DTScheduleError) as info:
        prog(A=np.ones(10, np.float32))
    assert_at(info.value, 6, 13, "larger than the block of 4")


def test_nothing_compiled():
    with pytest.raises(DTScheduleError, match="no Func is compiled"):
        dt.loads("Func f;\nIn A;\nVar x;\nf[x] = A[x];\n")


# ------------------------------------------------------------------------- call-time errors


@pytest.fixture
def softmax():
    return dt.loads(SOFTMAX, file="bad.dt")


def test_extents_disagree_names_dimension_and_both_sources():
    prog = dt.loads("Func f;\nIn A, B;\nVar x, y;\nf[x, y] = A[x, y] + B[x, y];\nf.compile();\n", file="bad.dt")
    with pytest.raises(DTExtentError) as info:
        prog(A=np.ones((4, 8), np.float32), B=np.ones((4, 9), np.float32))
    assert_at(info.value, 4, 21, "the extent of 'y' disagrees", "8 from A[x, y] axis 1", "9 from B[x, y] axis 1")


def test_wrong_rank(softmax):
    with pytest.raises(DTExtentError) as info:
        softmax(A=np.ones((2, 3, 4), np.float32))
    assert_at(info.value, 5, 20, "indexed with 2 dimension(s)", "rank 3")


def test_unsupported_dtype(softmax):
    with pytest.raises(DTInputError) as info:
        softmax(A=np.ones((2, 3), np.uint32))
    assert_at(info.value, 5, 20, "dtype uint32", "float32, float16, bfloat16 or float64", "int32 or int64")


def test_missing_input(softmax):
    with pytest.raises(DTInputError) as info:
        softmax()
    assert_at(info.value, 2, 4, "missing input 'A'")


def test_unknown_input(softmax):
    with pytest.raises(DTInputError, match="'B' is not an input"):
        softmax(A=np.ones((2, 3), np.float32), B=1)


def test_unbound_extent_needs_sizes():
    prog = dt.loads("Func f;\nVar x;\nf[x] = x * 2;\nf.compile();\n")
    with pytest.raises(DTExtentError, match=r"sizes=\{'x': \.\.\.\}"):
        prog(backend="interp")
    np.testing.assert_array_equal(prog(backend="interp", sizes={"x": 5}), np.arange(5) * 2.0)


def test_unknown_backend(softmax):
    with pytest.raises(dt.DTBackendError, match="unknown backend 'nope'"):
        softmax(A=np.ones((2, 3), np.float32), backend="nope")


def test_inputs_are_never_modified(softmax):
    a = np.random.default_rng(0).standard_normal((9, 33)).astype(np.float32)
    before = a.copy()
    softmax(A=a, backend="interp")
    softmax.reference(A=a)
    np.testing.assert_array_equal(a, before)


def test_errors_from_the_python_api_point_at_python_lines():
    x = dt.Var("x")
    A = dt.In("A")
    f = dt.Func("f")
    f[x] = A[x]
    f.block(y=4)  # noqa: the mistake under test
    with pytest.raises(DTError) as info:
        dt.program(f)
    assert info.value.loc.file == __file__
    assert "f.block(y=4)" in info.value.render()


def test_division_after_a_dimension_parses():
    prog = dt.loads("Func f;\nIn A;\nVar x;\nRVar k;\nf[x] = rsum(A[x, k] * k / len(k), k);\nf.map(x:x1/2, x1);\n"
                    "f.block(x:1);\nf.compile();\n")
    a = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(prog(A=a, backend="interp"), np.full(3, (0 + 1 + 2 + 3) / 4))


ONEPASS = """Func attention, mm, e, num, dvsr;
In A, B, C;
Var m, n;
RVar k, l;
mm[m, l] = rdot(A[m, k], B[k, l], k);
e[m, l] = exp(mm[m, l]);
dvsr[m] = rsum(e[m, l], l);
num[m, n] = rdot(e[m, l], C[l, n], l);
attention[m, n] = num[m, n] / reshape(dvsr[m], m, 1);
attention.block(m:16);
attention.tensorize(m:16, n:0, k:0, l:16);
mm.inline();
e.fuse_at(num, l);
num.fuse_at(attention, m);
dvsr.fuse_at(attention, m);
dvsr.compute_with(num, l);
attention.compile_to_kernel();
"""


def test_compute_with_needs_both_fused_at_one_loop():
    err = error_of(ONEPASS.replace("dvsr.fuse_at(attention, m);\n", ""), DTScheduleError)
    assert_at(err, 15, 1, "'dvsr' is computed with 'num', so both must be fused at the same loop",
              "'dvsr' is computed at root", "dvsr.compute_with(num, l)")
    both = error_of(ONEPASS.replace("dvsr.fuse_at(attention, m);\n", "").replace("num.fuse_at(attention, m);\n", "")
                    .replace("attention.compile_to_kernel", "attention.compile"), DTScheduleError)
    assert "both are computed at root, each in a kernel of its own" in both.message, both.render()


def test_compute_with_names_a_shared_rvar():
    err = error_of(ONEPASS.replace("dvsr.compute_with(num, l)", "dvsr.compute_with(num, m)"), DTScheduleError)
    assert_at(err, 16, 24, "'m' is not an RVar")
    err = error_of(ONEPASS.replace("dvsr.compute_with(num, l)", "dvsr.compute_with(num, k)").replace(
        "mm.inline();\n", "mm.fuse_at(num, l);\n"), DTScheduleError)
    assert_at(err, 16, 1, "'dvsr' has no reduction over 'k' to share")


def test_compute_with_sibling_must_be_a_computed_func():
    err = error_of(ONEPASS.replace("dvsr.compute_with(num, l)", "dvsr.compute_with(A, l)"), DTScheduleError)
    assert_at(err, 16, 19, "'A' is not a defined Func")
    err = error_of(ONEPASS.replace("dvsr.compute_with(num, l)", "dvsr.compute_with(dvsr, l)"), DTScheduleError)
    assert_at(err, 16, 19, "'dvsr' cannot be computed with itself")


def test_compute_with_dims_and_tiles():
    err = error_of(ONEPASS.replace("dvsr.compute_with(num, l)", "num.compute_with(dvsr, l)"), DTScheduleError)
    assert_at(err, 16, 1, "'num' has dimension 'n', which 'dvsr' does not", "compute dvsr with num instead")
    # found by the checker (`dt check`), not only when the program is lowered
    err = error_of(ONEPASS.replace("dvsr.compute_with(num, l);", "dvsr.compute_with(num, l);\ndvsr.tensorize(l:32);"),
                   DTScheduleError)
    assert_at(err, 17, 16, "'dvsr' is accumulated in 'num''s loop over 'l', in tiles of 16",
              "its own tile over 'l' is 32")
    assert "make it 16" in err.hint


def test_without_compute_with_the_sibling_cannot_read_the_shared_tile():
    err = error_of(ONEPASS.replace("dvsr.compute_with(num, l);\n", ""), DTScheduleError)
    assert_at(err, 13, 1, "'e' is fused into 'num', but 'dvsr' also uses it and is not computed inside 'num'")


VARIANCE = """Func out, mean, variance;
In A;
Var x;
RVar y;
mean[x] = rsum(A[x, y], y) / len(y);
variance[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);
out[x, y] = (A[x, y] - mean[x]) * rsqrt(variance[x] + 0.00001);
out.block(x:1);
out.tensorize(y:16);
mean.fuse_at(out, x);
variance.fuse_at(out, x);
variance.compute_with(mean, y);
out.compile_to_kernel();
"""


def test_compute_with_reading_the_sibling_must_be_a_variance_around_its_mean():
    dt.loads(VARIANCE)  # the one accepted form
    dt.loads(VARIANCE.replace("(A[x, y] - mean[x]) * (A[x, y] - mean[x])", "pow(A[x, y] - mean[x], 2)"))
    err = error_of(VARIANCE.replace("(A[x, y] - mean[x]) * (A[x, y] - mean[x])", "abs(A[x, y] - mean[x])"),
                   DTScheduleError)
    assert_at(err, 6, 34, "'variance' reads 'mean' inside its reduction over 'y', but 'mean' is computed in the same "
              "loop over 'y' (compute_with) and is complete only after that loop",
              "sum of squared deviations from a mean",
              "rsum(pow(e - mean[x], 2), y)", "mean is indexed by its own dimensions",
              "bad.dt:12:1: note: 'variance' is computed with 'mean' here",
              "hint: remove variance's compute_with (then variance walks 'y' again, after that loop), or write it in "
              "that form")
    # deviations of another value than the one mean averages
    err = error_of(VARIANCE.replace("(A[x, y] - mean[x]) * (A[x, y] - mean[x])",
                                    "(exp(A[x, y]) - mean[x]) * (exp(A[x, y]) - mean[x])"), DTScheduleError)
    assert_at(err, 6, 36, "'variance' reads 'mean' inside its reduction")
    # a mean that is not rsum(e) / len(y): the error is at the mean
    err = error_of(VARIANCE.replace("mean[x] = rsum(A[x, y], y) / len(y);", "mean[x] = rsum(A[x, y], y) / 2;"),
                   DTScheduleError)
    assert_at(err, 5, 1, "compute_with allows only for a mean, mean = rsum(e, y) / len(y)",
              "write mean as rsum(..., y) / len(y)")


SAFE_SOFTMAX = """Func out, m, s;
In A;
Var x;
RVar y;
m[x] = rmax(A[x, y], y);
s[x] = rsum(exp(A[x, y] - m[x]), y);
out[x, y] = exp(A[x, y] - m[x]) / s[x];
out.block(x:1);
out.tensorize(y:16);
m.fuse_at(out, x);
s.fuse_at(out, x);
s.compute_with(m, y);
out.compile_to_kernel();
"""


def test_compute_with_reading_a_max_must_be_the_exponentials_shifted_by_it():
    dt.loads(SAFE_SOFTMAX)  # the one accepted form
    err = error_of(SAFE_SOFTMAX.replace("rsum(exp(A[x, y] - m[x]), y)", "rsum(exp(A[x, y] - m[x]) * 2, y)"),
                   DTScheduleError)
    assert_at(err, 6, 27, "'s' reads 'm' inside its reduction over 'y', but 'm' is computed in the same loop",
              "the sum or product of exponentials shifted by a max, rsum(exp(e - m[x]), y) or "
              "rdot(exp(e - m[x]), v, y), where e is written as in m's rmax, m is indexed by its own dimensions",
              "hint: remove s's compute_with (then s walks 'y' again, after that loop), or write it in that form")
    # exponentials of another value than the one m is the max of
    err = error_of(SAFE_SOFTMAX.replace("rsum(exp(A[x, y] - m[x]), y)", "rsum(exp(2 * A[x, y] - m[x]), y)"),
                   DTScheduleError)
    assert_at(err, 6, 31, "'s' reads 'm' inside its reduction")
    # a max that is not rmax(e, y): the error is at it
    err = error_of(SAFE_SOFTMAX.replace("m[x] = rmax(A[x, y], y);", "m[x] = rmax(A[x, y], y) + 1;"),
                   DTScheduleError)
    assert_at(err, 5, 1, "compute_with accepts a sum of exponentials shifted by 'm' only when 'm' is a max, "
              "m = rmax(e, y)", "if m is meant to be the max, write it as rmax(..., y); else remove s's compute_with")


def test_a_max_may_be_computed_with_its_exp_sum_either_way():
    """The sum may own the loop and read the max computed with it (as flash attention's product
    does, the loop's owner reading the max); a use of the max outside the sum stays an error."""
    swapped = dt.loads(SAFE_SOFTMAX.replace("s.compute_with(m, y);", "m.compute_with(s, y);"))
    a = (100 + 10 * np.random.default_rng(3).standard_normal((3, 50))).astype(np.float32)
    assert np.abs(swapped(A=a, backend="interp") - swapped.reference(A=a)).max() < 1e-6
    err = error_of(SAFE_SOFTMAX.replace("s.compute_with(m, y);", "m.compute_with(s, y);")
                   .replace("s[x] = rsum(exp(A[x, y] - m[x]), y);", "s[x] = rsum(exp(A[x, y] - m[x]), y) + m[x];"),
                   DTScheduleError)
    assert_at(err, 12, 1, "'s' uses 'm', but 'm' is accumulated in 's''s loop over 'y' and is complete only after it")


def test_flash_attentions_product_may_read_only_the_max_of_its_loop():
    source = (Path(__file__).resolve().parent.parent / "examples" / "attention_safe_onepass.dt").read_text()
    dt.loads(source)
    err = error_of(source.replace("rdot(e[m, l], C[l, n], l)", "rdot(e[m, l], C[l, n] * dvsr[m], l)"),
                   DTScheduleError)
    assert_at(err, 16, 43, "'num' reads 'dvsr' inside its reduction over 'l', but 'dvsr' is computed in the same loop",
              "hint: remove the compute_with of dvsr and mx (then they walk 'l' before num)")
    # the product's other operand reading the max is not the shifted form
    err = error_of(source.replace("rdot(e[m, l], C[l, n], l)", "rdot(e[m, l], C[l, n] * reshape(mx[m], m, 1), l)"),
                   DTScheduleError)
    assert_at(err, 26, 1, "'num' uses 'mx', but 'mx' is accumulated in 'num''s loop over 'l'",
              "rdot(exp(e - mx[m]), v, l)")
    # the owner of the loop may hold only its shifted reduction
    err = error_of(source.replace("rdot(e[m, l], C[l, n], l)", "rdot(e[m, l], C[l, n], l) + rsum(C[l, n], l)"),
                   DTScheduleError)
    assert_at(err, 16, 47, "'num' has 2 reductions over 'l', one of them shifted by a max computed in its loop",
              "compute the other reductions in Funcs of their own")


def test_an_exponential_written_through_another_func_is_told_to_inline_it():
    through = SAFE_SOFTMAX.replace("s[x] = rsum(exp(A[x, y] - m[x]), y);",
                                   "e[x, y] = exp(A[x, y] - m[x]);\ns[x] = rsum(e[x, y], y);") \
        .replace("Func out, m, s;", "Func out, m, s, e;")
    err = error_of(through.replace("out.compile_to_kernel();", "e.fuse_at(s, y);\nout.compile_to_kernel();"),
                   DTScheduleError)
    assert_at(err, 7, 13, "'s' reads 'e' inside its reduction over 'y', which uses 'm'",
              "inline e (replace e.fuse_at(...) with e.inline();), so that the reduction is written as the "
              "exponentials shifted by 'm'")
    dt.loads(through.replace("out.compile_to_kernel();", "e.inline();\nout.compile_to_kernel();"))


SHARED_LOOP = """Func out, s, a, b, p;
In A;
Var x;
RVar y;
s[x] = rsum(A[x, y], y);
a[x] = rsum(A[x, y] * A[x, y], y);
b[x] = rsum(A[x, y] * a[x], y);
p[x] = a[x] * 2;
out[x, y] = A[x, y] * s[x] + a[x] + b[x] + p[x];
out.block(x:1);
out.tensorize(y:16);
s.fuse_at(out, x);
a.fuse_at(out, x);
b.fuse_at(out, x);
p.fuse_at(out, x);
a.compute_with(s, y);
b.compute_with(s, y);
out.compile_to_kernel();
"""


def test_compute_with_reading_a_value_of_the_same_loop_is_reported_at_check_time():
    """a and b share s's loop over y; b's sum reads a, which is complete only after that loop."""
    err = error_of(SHARED_LOOP, DTScheduleError)
    assert_at(err, 7, 23, "'b' reads 'a' inside its reduction over 'y', but 'a' is computed in the same loop over "
              "'y' (compute_with) and is complete only after that loop",
              "bad.dt:17:1: note: 'b' is computed with 's' here",
              "hint: remove b's compute_with (then b walks 'y' again, after that loop)")
    assert "squared deviations" not in err.render()  # a is no mean: no variance form to suggest
    # the same through a chain (b shares a's loop, which is s's), and through another Func
    err = error_of(SHARED_LOOP.replace("b.compute_with(s, y)", "b.compute_with(a, y)"), DTScheduleError)
    assert_at(err, 7, 23, "'b' reads 'a' inside its reduction", "note: 'b' is computed with 'a' here")
    err = error_of(SHARED_LOOP.replace("rsum(A[x, y] * a[x], y)", "rsum(A[x, y] * p[x], y)"), DTScheduleError)
    assert_at(err, 7, 23, "'b' reads 'p' inside its reduction over 'y', which uses 'a', but 'a' is computed in the "
              "same loop", "remove b's compute_with")
    # the fix the hint gives: b walks y again, after the loop
    dt.loads(SHARED_LOOP.replace("b.compute_with(s, y);\n", ""))


def test_the_owner_of_a_shared_loop_cannot_use_what_it_accumulates():
    err = error_of(SHARED_LOOP.replace("s[x] = rsum(A[x, y], y);", "s[x] = rsum(A[x, y] * p[x], y);").replace(
        "rsum(A[x, y] * a[x], y)", "rsum(A[x, y], y)"), DTScheduleError)
    assert_at(err, 16, 1, "'s' uses 'a' (through 'p'), but 'a' is accumulated in 's''s loop over 'y' and is "
              "complete only after it", "hint: remove a's compute_with (then a walks 'y' in a loop of its own, "
              "before s)")
    # outside its reduction too: s's value is computed right after the loop, before a's
    err = error_of(SHARED_LOOP.replace("s[x] = rsum(A[x, y], y);", "s[x] = rsum(A[x, y], y) * b[x];").replace(
        "rsum(A[x, y] * a[x], y)", "rsum(A[x, y], y)").replace("b.compute_with(s, y)", "b.compute_with(a, y)"),
        DTScheduleError)
    assert_at(err, 17, 1, "'s' uses 'b', but 'b' is accumulated in 's''s loop over 'y'", "remove b's compute_with")


def test_compute_with_cycles_and_second_siblings_are_errors():
    base = SHARED_LOOP.replace("rsum(A[x, y] * a[x], y)", "rsum(A[x, y], y)")
    err = error_of(base.replace("a.compute_with(s, y)", "a.compute_with(b, y)").replace(
        "b.compute_with(s, y)", "b.compute_with(a, y)"), DTScheduleError)
    assert_at(err, 16, 1, "compute_with forms a cycle: a -> b -> a, so no Func of it owns the loop over 'y'",
              "remove the compute_with of the one whose loop the others should share")
    err = error_of(base.replace("b.compute_with(s, y);", "b.compute_with(s, y);\nb.compute_with(a, y);"),
                   DTScheduleError)
    assert_at(err, 18, 1, "'b' is already computed with 's' over 'y'; a Func has one compute_with",
              "bad.dt:17:1: note: first compute_with here",
              "keep one compute_with")
    dt.loads(base.replace("b.compute_with(s, y);", "b.compute_with(s, y);\nb.compute_with(s, y);"))  # a repeat


TWO_RVARS = """Func out, a, b, c;
In A, B;
Var x;
RVar y, z;
a[x] = rsum(A[x, y], y);
b[x] = rsum(A[x, y] * 2, y) + rsum(B[x, z], z);
c[x] = rsum(B[x, z] * 3, z) * a[x];
out[x] = a[x] + b[x] + c[x];
out.block(x:1);
out.tensorize(y:4, z:4);
a.fuse_at(out, x);
b.fuse_at(out, x);
c.fuse_at(out, x);
a.compute_with(b, y);
b.compute_with(c, z);
out.compile_to_kernel();
"""


def test_compute_with_over_two_rvars_that_leaves_no_order_of_loops_is_an_error():
    # c needs a, which b's loop over y computes, and b's reduction over z runs in c's loop
    err = error_of(TWO_RVARS, DTScheduleError)
    assert_at(err, 14, 1, "these compute_with leave no order to compute the loops in: 'a' is accumulated in "
              "'b''s loop over 'y'; 'b' is accumulated in 'c''s loop over 'z'; 'c' uses 'a'",
              "remove a's compute_with")
    dt.loads(TWO_RVARS.replace("* a[x];", ";"))  # without that use, c's loop runs first


def test_a_chained_compute_with_needs_the_dimensions_of_the_loop_it_shares():
    chain = """Func out, f, g, h;
In A, B;
Var x, z;
RVar y;
f[x, z] = rsum(A[x, z, y], y);
g[x] = rsum(B[x, y], y);
h[x, z] = rmax(A[x, z, y], y);
out[x, z] = f[x, z] + g[x] + h[x, z];
out.block(x:1);
out.tensorize(z:0, y:4);
f.fuse_at(out, x);
g.fuse_at(out, x);
h.fuse_at(out, x);
g.compute_with(f, y);
h.compute_with(g, y);
out.compile_to_kernel();
"""
    dt.loads(chain)  # h shares f's loop, over f's dimensions x and z
    err = error_of(chain.replace("g.compute_with(f, y);", "f.compute_with(g, y);"), DTScheduleError)
    assert_at(err, 14, 1, "'f' has dimension 'z', which 'g' does not")
    err = error_of(chain.replace("f[x, z] = rsum(A[x, z, y], y);", "f[x] = rsum(B[x, y] * 2, y);")
                   .replace("f[x, z] +", "f[x] +"), DTScheduleError)
    assert_at(err, 15, 1, "'h' has dimension 'z', which 'f' (whose loop 'g' shares) does not",
              "compute h with a Func that has dimension 'z'")


def test_a_mean_computed_with_its_variance_is_told_to_swap_them():
    err = error_of(VARIANCE.replace("variance.compute_with(mean, y);", "mean.compute_with(variance, y);"),
                   DTScheduleError)
    assert_at(err, 12, 1, "'variance' uses 'mean', but 'mean' is accumulated in 'variance''s loop over 'y'",
              "compute the variance with its mean instead: variance.compute_with(mean, y)")


def test_a_deviation_written_through_another_func_is_told_to_inline_it():
    through = VARIANCE.replace("variance[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);",
                               "d[x, y] = A[x, y] - mean[x];\nvariance[x] = rsum(d[x, y] * d[x, y], y) / len(y);") \
        .replace("Func out, mean, variance;", "Func out, mean, variance, d;")
    err = error_of(through.replace("out.compile_to_kernel();", "d.fuse_at(variance, y);\nout.compile_to_kernel();"),
                   DTScheduleError)
    assert_at(err, 7, 20, "'variance' reads 'd' inside its reduction over 'y', which uses 'mean'",
              "inline d (replace d.fuse_at(...) with d.inline();)")
    dt.loads(through.replace("out.compile_to_kernel();", "d.inline();\nout.compile_to_kernel();"))


def test_a_reduction_reading_a_value_of_the_owner_s_other_loop_is_reported_at_check_time():
    program = """Func out, s, a, b;
In A, B;
Var x;
RVar y, z;
s[x] = rsum(A[x, y], y) + rsum(B[x, z], z);
a[x] = rsum(A[x, y] * b[x], y);
b[x] = rsum(B[x, z] * 2, z);
out[x] = s[x] + a[x] + b[x];
out.block(x:1);
out.tensorize(y:4, z:4);
s.fuse_at(out, x);
a.fuse_at(out, x);
b.fuse_at(out, x);
a.compute_with(s, y);
b.compute_with(s, z);
out.compile_to_kernel();
"""
    err = error_of(program, DTScheduleError)
    assert_at(err, 15, 1, "'a' reads 'b' inside its reduction over 'y', but 'b' is accumulated in 's''s loop over "
              "'z' (compute_with) and is complete only after s's loops", "remove b's compute_with")
    dt.loads(program.replace("b.compute_with(s, z);\n", ""))


def test_a_chain_that_ends_at_a_func_not_computed_is_reported_at_its_link():
    chain = """Func out, h, g, f;
In A;
Var x;
RVar y;
h[x] = rsum(A[x, y] * 3, y);
g[x] = rsum(A[x, y] * 2, y);
f[x] = rsum(A[x, y], y);
out[x] = h[x] + g[x];
out.block(x:1);
out.tensorize(y:4);
h.fuse_at(out, x);
g.fuse_at(out, x);
f.inline();
h.compute_with(g, y);
g.compute_with(f, y);
out.compile_to_kernel();
"""
    err = error_of(chain, DTScheduleError)
    assert_at(err, 15, 1, "'g' is computed with 'f', which is not computed (it is inlined or unused)")


def test_a_func_computed_with_a_sibling_takes_the_sibling_s_own_tile():
    program = """Func out, s, a;
In A;
Var x;
RVar y;
s[x] = rsum(A[x, y], y);
a[x] = rmax(A[x, y], y);
out[x] = s[x] + a[x];
out.block(x:1);
s.fuse_at(out, x);
a.fuse_at(out, x);
s.tensorize(y:16);
a.compute_with(s, y);
out.compile_to_kernel();
"""
    import numpy as np
    prog = dt.loads(program)  # a names no tile over y, so it takes s's 16
    a = np.random.default_rng(1).standard_normal((3, 37)).astype(np.float32)
    np.testing.assert_allclose(prog(A=a, backend="interp"), a.sum(axis=1) + a.max(axis=1), rtol=1e-5)
    err = error_of(program.replace("a.compute_with(s, y);", "a.compute_with(s, y);\na.tensorize(y:8);"),
                   DTScheduleError)
    assert_at(err, 13, 13, "'a' is accumulated in 's''s loop over 'y', in tiles of 16, but its own tile over 'y' is 8")


def test_a_no_order_error_names_the_reduction_that_reads_across_loops():
    program = TWO_RVARS.replace("Func out, a, b, c;", "Func out, s, t, a, b;").replace(
        """a[x] = rsum(A[x, y], y);
b[x] = rsum(A[x, y] * 2, y) + rsum(B[x, z], z);
c[x] = rsum(B[x, z] * 3, z) * a[x];
out[x] = a[x] + b[x] + c[x];""", """s[x] = rsum(A[x, y], y);
t[x] = rsum(A[x, y] * 2, y) + rsum(B[x, z], z);
a[x] = rsum(A[x, y] * b[x], y);
b[x] = rmax(B[x, z], z);
out[x] = s[x] + t[x] + a[x] + b[x];""").replace("""a.fuse_at(out, x);
b.fuse_at(out, x);
c.fuse_at(out, x);
a.compute_with(b, y);
b.compute_with(c, z);""", """s.fuse_at(out, x);
t.fuse_at(out, x);
a.fuse_at(out, x);
b.fuse_at(out, x);
t.compute_with(s, y);
a.compute_with(s, y);
b.compute_with(t, z);""")
    err = error_of(program, DTScheduleError)
    assert "'a''s reduction over 'y' (in 's''s loop) reads 'b'; 'b' is accumulated in 't''s loop over 'z'" in str(err)
