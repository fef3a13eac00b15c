"""The Python API: DT written inline in Python, the call conventions, torch interop and
backend selection."""
import numpy as np
import pytest

import dt
from dt import RVar, Var, In, SIn, Func, exp, rsum
from dt.testing import assert_close


def softmax_in_python():
    x, y = Var("x"), RVar("y")
    A = In("A")
    s, sm = Func("s"), Func("sm")
    s[x] = rsum(exp(A[x, y]), y)
    sm[x, y] = exp(A[x, y]) / dt.reshape(s[x], x, 1)
    sm.block(x=4)
    sm.tensorize(x=0, y=64)
    s.fuse_at(sm, x)
    sm.compile_to_kernel()
    return dt.program(sm)


def test_inline_python_program_matches_the_dt_file():
    prog = softmax_in_python()
    from_file = dt.load("examples/softmax.dt")
    a = np.random.default_rng(0).standard_normal((9, 130)).astype(np.float32)
    assert_close(prog(A=a, backend="interp"), from_file(A=a, backend="interp"), "f32")
    assert len(prog.pipeline().kernels) == 1


def test_python_api_schedule_primitives_and_scalars():
    x, y, k = Var("x"), Var("y"), RVar("k")
    A, B, alpha = In("A"), In("B"), SIn("alpha")
    mm, out = Func("mm"), Func("out")
    mm[x, y] = dt.rdot(A[x, k], B[k, y], k)
    out[x, y] = dt.maximum(alpha * mm[x, y], 0)
    out.block(x=16, y=16).tensorize(x=16, y=8, k=4).map("x:x1/3", y, "x1").num_warps(4).num_stages(2)
    mm.fuse_at(out, y)
    prog = dt.program(out)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((70, 9)).astype(np.float32), rng.standard_normal((9, 40)).astype(np.float32)
    assert_close(prog(A=a, B=b, alpha=0.5, backend="interp"), np.maximum(0.5 * (a @ b), 0), "f32")


def test_several_outputs_return_a_dict():
    prog = dt.loads("Func s, m;\nIn A;\nVar x;\nRVar y;\ns[x] = rsum(A[x, y], y);\nm[x] = rmax(A[x, y], y);\n"
                    "s.compile();\nm.compile();\n")
    a = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    out = prog(A=a, backend="interp")
    assert set(out) == {"s", "m"}
    assert_close(out["s"], a.sum(1), "f32")
    assert_close(out["m"], a.max(1), "f32")


def test_root_funcs_become_separate_kernels_through_temporaries():
    prog = dt.loads("Func s, o;\nIn A;\nVar x;\nRVar y;\ns[x] = rsum(A[x, y], y);\no[x, y] = A[x, y] - s[x];\n"
                    "s.block(x:2);\no.block(x:3, y:4);\no.compile();\n")
    pipeline = prog.pipeline("f32")
    assert [k.name for k in pipeline.kernels] == ["s_kernel", "o_kernel"]
    assert [t.name for t in pipeline.temporaries] == ["s"]
    a = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    assert_close(prog(A=a, backend="interp"), a - a.sum(1, keepdims=True), "f32")


def test_sizes_for_extents_no_input_binds():
    prog = dt.loads("Func f;\nIn A;\nVar x, n;\nf[x, n] = A[x] * len(n) + n;\nf.compile();\n")
    out = prog(A=np.ones(3, np.float32), sizes={"n": 4}, backend="interp")
    np.testing.assert_allclose(out, np.ones((3, 1)) * 4 + np.arange(4))


def test_source_is_the_generated_code():
    prog = dt.load("examples/matmul.dt")
    text = prog.source("interp")
    assert "def mm_kernel(pid" in text and "k_accumulator" in text and "x_group_size" in text


def test_dt_backend_environment_variable_is_read_at_call_time(monkeypatch):
    prog = dt.load("examples/add.dt")
    a = np.ones((2, 3), np.float32)
    monkeypatch.setenv("DT_BACKEND", "nope")
    with pytest.raises(dt.DTBackendError, match="unknown backend 'nope'"):
        prog(A=a, B=a, alpha=1.0)
    monkeypatch.setenv("DT_BACKEND", "interp")
    np.testing.assert_allclose(prog(A=a, B=a, alpha=1.0), 2 * a)


def test_default_backend_is_a_cpu_backend_for_numpy(monkeypatch):
    from dt.runtime import resolve_backend
    monkeypatch.delenv("DT_BACKEND", raising=False)
    assert resolve_backend(None) in ("numba", "interp")
    assert resolve_backend("interp") == "interp"


def test_f64_inputs_compute_in_f64():
    prog = dt.load("examples/softmax.dt")
    a = np.random.default_rng(0).standard_normal((3, 70))
    out = prog(A=a, backend="interp")
    assert out.dtype == np.float64
    assert_close(out, prog.reference(A=a), "f64")


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    prog = dt.load("examples/softmax.dt")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a = torch.randn(5, 77, dtype=dtype)
        out = prog(A=a, backend="interp")
        assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == a.device
        assert_close(out, torch.softmax(a.double(), dim=1), {torch.float32: "f32", torch.float16: "f16",
                                                            torch.bfloat16: "bf16"}[dtype])
        ref = prog.reference(A=a)
        assert isinstance(ref, torch.Tensor) and ref.dtype == torch.float64


def test_program_names_never_shadow_what_generated_code_calls():
    for name in ("min", "range", "np", "class"):
        prog = dt.loads("Func out;\nIn A;\nVar x;\nout[x] = A[x] * 2;\nout.block(x:4);\nout.compile();\n", name=name)
        np.testing.assert_array_equal(prog(A=np.arange(5, dtype=np.float32), backend="interp"), np.arange(5) * 2.0)


def test_dt_names_never_shadow_what_generated_code_calls():
    prog = dt.loads("Func np, max;\nIn range;\nVar x;\nnp[x] = range[x] * 2;\nmax[x] = np[x] + 1;\n"
                    "np.fuse_at(max, x);\nmax.block(x:4);\nmax.compile();\n")
    np.testing.assert_array_equal(prog(range=np.arange(5, dtype=np.float32), backend="interp"), np.arange(5) * 2.0 + 1)


def test_compute_with_from_python_matches_the_dt_source():
    """Two moments of each row accumulated in one loop (compute_with), built in Python."""
    x, y = dt.Var("x"), RVar("y")
    A = dt.In("A")
    s1, s2, out = dt.Func("s1"), dt.Func("s2"), dt.Func("out")
    s1[x] = rsum(A[x, y], y)
    s2[x] = rsum(A[x, y] * A[x, y], y)
    out[x, y] = A[x, y] * s1[x] - s2[x]
    out.block(x=2)
    out.tensorize(x=0, y=8)
    s1.fuse_at(out, x)
    s2.fuse_at(out, x)
    s2.compute_with(s1, y)
    out.compile_to_kernel()
    prog = dt.program(out)
    # one walk over y for both sums (its whole tiles, then the last, cut one), one loop for out's
    # tiles; without compute_with, a walk per sum
    assert prog.source("interp").count("for y_iter") == 3
    separate = ("Func s1, s2, out;\nIn A;\nVar x;\nRVar y;\ns1[x] = rsum(A[x, y], y);\n"
                "s2[x] = rsum(A[x, y] * A[x, y], y);\nout[x, y] = A[x, y] * s1[x] - s2[x];\nout.block(x:2);\n"
                "out.tensorize(x:0, y:8);\ns1.fuse_at(out, x);\ns2.fuse_at(out, x);\nout.compile_to_kernel();")
    assert dt.loads(separate).source("interp").count("for y_iter") == 5
    a = np.random.default_rng(0).standard_normal((5, 21)).astype(np.float32)
    want = a * a.sum(1, keepdims=True) - (a * a).sum(1, keepdims=True)
    np.testing.assert_allclose(prog(A=a), want, rtol=1e-5, atol=1e-5)


def test_tuning_a_program_built_in_python_says_it_has_no_dt_text():
    x, A, f = dt.Var("x"), dt.In("A"), dt.Func("f")
    f[x] = A[x] * 2.0
    with pytest.raises(dt.DTError, match="built with the Python API: tuning rewrites a program's DT text"):
        dt.program(f).tune({"x": 8}, backend="numba", budget=1)


def test_an_infinite_reference_is_matched_exactly():
    from dt.testing import compare
    ref = np.array([np.inf, -np.inf, 1.0])
    assert compare(np.array([np.inf, -np.inf, 1.0], np.float32), ref, "f32").ok
    for wrong in ([0.0, -np.inf, 1.0], [np.inf, 3.0e38, 1.0], [np.inf, np.nan, 1.0]):
        result = compare(np.array(wrong, np.float32), ref, "f32")
        assert not result.ok and result.first_bad == ([w == r for w, r in zip(wrong, ref)].index(False),)
