"""Several outputs from one kernel (issue 29): an output fused into another output's kernel is
stored from there, once; a guarded store where programs or loop iterations compute it again."""
from pathlib import Path

import numpy as np
import pytest

import dt
from dt.testing import to_numpy
from dt.conformance import outputs as cases
from dt.errors import DTScheduleError
from dt.ir import scheduled as S
from test_llm_examples import BACKENDS

RNG = np.random.default_rng(29)
ROOT = Path(__file__).resolve().parents[1]


def program(algorithm: str, schedule: str) -> dt.Program:
    return dt.loads(f"{algorithm}\n{schedule}\n")


def stores(p: dt.Program) -> dict[str, S.Store]:
    pipeline = p.pipeline("f32")
    return {s.tensor: s for k in pipeline.kernels for s in S.walk_statements(k.body) if isinstance(s, S.Store)}


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_residual_rmsnorm_stores_the_sum_and_the_norm_from_one_kernel(backend):
    p = program(cases.RESIDUAL_RMSNORM, cases.RESIDUAL_SCHEDULES["rows"])
    pipeline = p.pipeline("f32")
    assert len(pipeline.kernels) == 1 and pipeline.kernels[0].writes == ("y", "h")
    x, r, w = normal(13, 100), normal(13, 100), normal(100)
    out = p(X=x, R=r, W=w, eps=1e-5, backend=backend)
    want = cases._residual_rmsnorm(x, r, w, 1e-5)
    assert set(out) == {"h", "y"}
    for name in want:
        np.testing.assert_allclose(np.asarray(out[name]), want[name], rtol=1e-4, atol=1e-5)


def test_an_output_computed_once_per_tile_is_stored_unguarded():
    store = stores(program(cases.LAYERNORM_STATS, cases.LAYERNORM_SCHEDULES["row_tiles"]))
    assert store["mean"].guard == () and store["rstd"].guard == () and store["y"].guard == ()


def test_an_output_recomputed_along_a_dimension_it_lacks_is_stored_by_the_first_program():
    p = program(cases.TWO_MM, cases.TWO_MM_SCHEDULES["inner"])
    store = stores(p)
    assert [S.index_names(g) for g in store["mm"].guard] == [{"n_block_start"}]
    assert "if n_block_start == 0" in p.source("interp")


def test_an_output_recomputed_in_each_tile_of_a_loop_is_stored_by_the_first_iteration():
    store = stores(program(cases.REPEATED, cases.REPEATED_SCHEDULES["y_tiles"]))
    names = set().union(*(S.index_names(g) for g in store["total"].guard))
    assert "y_block_start" in names and any(n.startswith("y_iter") for n in names)


@pytest.mark.parametrize("case,schedule", [("TWO_MM", "inner"), ("TWO_MM", "outer"), ("REPEATED", "y_tiles")])
def test_each_element_has_one_writer_in_any_launch_order(case, schedule):
    """The race sanitizer fails a store of an element another program of the launch wrote."""
    p = program(getattr(cases, case), getattr(cases, f"{case}_SCHEDULES")[schedule])
    args = {"A": normal(37, 19), "B": normal(19, 21), "C": normal(21, 50)} if case == "TWO_MM" else \
        {"A": normal(9, 11), "B": normal(9, 21)}
    with dt.debug.sanitize(), dt.debug.shuffle(3):
        out = p(**args)
    want = cases._two_mm(**args) if case == "TWO_MM" else cases._repeated(**args)
    for name in want:
        np.testing.assert_allclose(out[name], want[name], rtol=1e-4, atol=1e-4)


CAUSAL_ROWS = """Func out, p;
In A;
Var m;
RVar l;
p[m, l] = where(l <= m, A[m, l], 0.0);
out[m] = rsum(p[m, l], l);
out.block(m:4);
out.tensorize(m:4, l:4);
p.fuse_at(out, l);
p.compile();
out.compile();"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_output_in_a_loop_keeps_every_tile_the_condition_would_skip(backend):
    """Tiles above the diagonal reduce to 0 and would be skipped; p's zeros there are stored."""
    p = dt.loads(CAUSAL_ROWS)
    a = normal(10, 10)
    out = p(A=a, backend=backend)
    np.testing.assert_array_equal(np.asarray(out["p"]), np.tril(a))
    np.testing.assert_allclose(np.asarray(out["out"]), np.tril(a).sum(axis=1), rtol=1e-5, atol=1e-6)
    loops = [s for k in p.pipeline("f32").kernels for s in S.walk_statements(k.body) if isinstance(s, S.For)]
    assert [s.stop for s in loops] == [S.IVar("l_SIZE")]


@pytest.mark.parametrize("schedule,message", [
    ("h.fuse_at(y, t);\nh.compile_to_kernel();\ny.compile();", "cannot be both fused into another Func and "
                                                               "compile_to_kernel"),
])
def test_what_an_output_cannot_also_be(schedule, message):
    with pytest.raises(DTScheduleError, match=message):
        program(cases.RESIDUAL_RMSNORM, "ss.fuse_at(y, t);\n" + schedule)


def test_a_func_fused_into_one_kernel_is_read_by_a_later_one_never_an_earlier_one():
    schedule = "h.fuse_at(y, t);\nh.compile();\ny.compile();"  # ss is a kernel of its own, run first, reading h
    with pytest.raises(DTScheduleError, match="stored by y's kernel, but 'ss' reads it in ss's kernel, which runs before"):
        program(cases.RESIDUAL_RMSNORM, schedule)
    # h computed (and stored) in ss's kernel, then loaded by y's, which runs after: output or not
    args = {"X": normal(9, 40), "R": normal(9, 40), "W": normal(40), "eps": 1e-6}
    for outputs in ("h.compile();\ny.compile();", "y.compile();"):
        prog = program(cases.RESIDUAL_RMSNORM, "ss.block(t:2);\nss.tensorize(d:16);\nh.fuse_at(ss, d);\n" + outputs)
        assert len(prog.checked.kernel_roots) == 2 and prog.checked.stored_fused == ("h",)
        want = prog.reference(**args)
        for backend in ("interp", "numba"):
            got = prog(backend=backend, **args)
            for name in prog.outputs:
                np.testing.assert_allclose(got[name] if len(prog.outputs) > 1 else got,
                                           want[name] if len(prog.outputs) > 1 else want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- outputs the caller provides
ADD_RMSNORM = "examples/llm/add_rmsnorm.dt"


def add_rmsnorm_args():
    x = normal(13, 300)
    return {"X": x, "R": 0.5 * x, "W": normal(300), "eps": 1e-6}


@pytest.mark.parametrize("backend", ["interp", "numba", "example",
                                     pytest.param("triton", marks=pytest.mark.needs_triton)])
def test_outputs_are_written_into_the_callers_arrays_in_place(backend, monkeypatch):
    import dt.runtime
    from dt import backends
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available")
    monkeypatch.setattr(dt.runtime, "copy_into", lambda *a: pytest.fail("copied, not written in place"))
    p = dt.load(ROOT / ADD_RMSNORM)
    args = add_rmsnorm_args()
    if backend == "triton":  # its arrays are tensors: given on the inputs' device, written there
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        args = {k: torch.from_numpy(v).to(device) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        h = torch.full((13, 300), float("nan"), device=device)
    else:
        h = np.full((13, 300), np.nan, np.float32)
    out = p(**args, backend=backend, out={"h": h})  # y is allocated
    assert out["h"] is h and out["y"].shape == (13, 300)
    np.testing.assert_allclose(to_numpy(h), to_numpy(args["X"] + args["R"]), rtol=1e-6)


def test_one_output_takes_its_array_and_a_numpy_array_for_gpu_kernels_is_copied_into():
    p = program(cases.TWO_MM, cases.TWO_MM_SCHEDULES["inner"].replace("mm.compile();\n", ""))
    a, b, c = normal(37, 19), normal(19, 21), normal(21, 50)
    target = np.empty((37, 50), np.float32)
    assert p(A=a, B=b, C=c, out=target, backend="interp") is target
    np.testing.assert_allclose(target, a.astype(np.float64) @ b @ c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("out,message", [
    ({"h": np.empty((13, 300), np.float64)}, "out 'h' is f64 \\(13, 300\\); the output is f32 \\(13, 300\\)"),
    ({"h": np.empty((13, 301), np.float32)}, "out 'h' is f32 \\(13, 301\\)"),
    ({"h": np.empty((300, 13), np.float32).T}, "not contiguous"),
    ({"h": np.broadcast_to(np.float32(0), (13, 300))}, "read-only"),
    ({"q": np.empty((13, 300), np.float32)}, "out= names 'q', which is not an output"),
    (np.empty((13, 300), np.float32), "out= must be a dict of arrays by output name"),
    ({"h": [[0.0] * 300] * 13}, "must be a NumPy array"),
    ("X", "shares memory with 'X'"),
    ("y and h", "shares memory with 'h'"),
])
def test_what_out_must_be(out, message):
    p = dt.load(ROOT / ADD_RMSNORM)
    args = add_rmsnorm_args()
    if isinstance(out, str) and out == "X":
        out = {"h": args["X"]}
    elif isinstance(out, str):  # y and h in one array
        both = np.empty((13, 300), np.float32)
        out = {"h": both, "y": both}
    with pytest.raises(dt.DTInputError, match=message):
        p(**args, out=out)


def test_an_input_cannot_be_called_out():
    with pytest.raises(dt.DTNameError, match="an input cannot be named 'out'"):
        dt.loads("Func f;\nIn out;\nVar x;\nf[x] = out[x];\nf.compile();")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inlined_output_is_stored_where_a_kernel_first_reads_it_at_plain_dimensions(backend):
    p = program(cases.RESIDUAL_RMSNORM, cases.RESIDUAL_SCHEDULES["inlined"])
    store = stores(p)
    assert store["h"].guard == ()  # in ss's loop over d: each tile of each row once
    x, r, w = normal(13, 300), normal(13, 300), normal(300)
    out = p(X=x, R=r, W=w, eps=1e-5, backend=backend)
    want = cases._residual_rmsnorm(x, r, w, 1e-5)
    for name in want:
        np.testing.assert_allclose(np.asarray(out[name]), want[name], rtol=1e-4, atol=1e-5)


def test_an_inlined_output_read_by_two_kernels_is_stored_by_the_first():
    p = program("Func a, b, s;\nIn X;\nVar x;\ns[x] = exp(X[x]);\na[x] = s[x] + 1.0;\nb[x] = s[x] * 2.0;",
                "s.inline();\ns.compile();\na.compile();\nb.compile();")
    kernels = p.pipeline("f32").kernels
    assert [k.writes for k in kernels] == [("a", "s"), ("b",)]
    x = normal(50)
    out = p(X=x)
    np.testing.assert_allclose(out["s"], np.exp(x), rtol=1e-6)
    with dt.debug.sanitize():
        p(X=x)


def test_an_inlined_output_needs_a_read_at_plain_dimensions():
    with pytest.raises(DTScheduleError, match="no Func computed in a kernel reads it at its own dimensions"):
        program("Func a, s;\nIn X;\nVar x;\ns[x] = exp(X[x]);\na[x] = s[x + 1];", "s.inline();\ns.compile();\n"
                "a.compile();")


def test_an_inlined_output_read_at_other_dimensions_is_stored_whole_or_refused():
    """p[y] with y shorter than p's x would store part of p: only a read at p's own x stores it."""
    two = "p.inline();\np.compile();\ng.compile();"
    with pytest.raises(DTScheduleError, match="reads it at its own dimensions, p\\[x\\]"):
        program("Func p, g;\nIn A, B;\nVar x, y;\np[x] = A[x] * 2.0 + 1.0;\ng[y] = p[y] + B[y];", two)
    p = program("Func p, g, h;\nIn A, B;\nVar x, y;\np[x] = A[x] * 2.0 + 1.0;\ng[y] = p[y] + B[y];\n"
                "h[x] = p[x] * A[x];", two + "\nh.compile();")
    a, b = normal(8), normal(3)
    out = p(A=a, B=b)
    np.testing.assert_allclose(out["p"], a * 2.0 + 1.0, rtol=1e-6)


def test_an_inlined_integer_func_indexes_a_gather():
    p = dt.loads("Func q, o;\nIn A, E;\nVar x, d;\nq[x] = cast(A[x], i32);\no[x, d] = E[q[x], d];\n"
                 "q.inline();\no.compile();")
    a, e = np.array([0.1, 1.7, 5.2], np.float32), normal(6, 4)
    np.testing.assert_array_equal(p(A=a, E=e), e[[0, 1, 5]])


def test_an_out_sharing_memory_with_an_input_of_the_other_kind_is_refused():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install dt[torch])")
    p = dt.loads("Func o; In A, B; Var x, y;\no[x, y] = A[y, x] + B[x, y];\no.compile();\n")
    a = np.arange(36, dtype=np.float32).reshape(6, 6)
    with pytest.raises(dt.DTInputError, match="out 'o' shares memory with 'A'"):  # A NumPy, out torch over it
        p(A=a, B=torch.zeros(6, 6), out=torch.from_numpy(a), backend="interp")
    apart = torch.empty(6, 6)
    assert p(A=a, B=torch.zeros(6, 6), out=apart, backend="interp") is apart
    np.testing.assert_array_equal(apart.numpy(), a.T)
