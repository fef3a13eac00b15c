"""Updates (`g[I[t], d] += e`, `c[b, P[b], k] = x[b, k]`): results against np.add.at on every
backend, the order of updates and of their readers, the Python API, the generated code's writes
(atomic adds on Triton, programs one after another on numba), and the errors."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dt
from dt import backends
from dt.errors import DTBackendError, DTError, DTScheduleError, DTSyntaxError

EMBEDDING_GRAD = """Func g;
In E, I, G;
Var v, d, t;
g[v, d] = E[v, d];
g[I[t], d] += G[t, d];
g.block(v:4, d:16);
g.update().block(t:8, d:16);
g.update().tensorize(t:4, d:8);
g.compile();
"""
BACKENDS = ["interp", "numba", "example", pytest.param("triton", marks=pytest.mark.needs_triton)]


def _run(prog, backend, **args):
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    if backend == "triton":
        import torch
        args = {k: v if k == "sizes" else torch.tensor(v) for k, v in args.items()}
    out = prog(backend=backend, **args)
    to_numpy = (lambda v: v.cpu().numpy()) if backend == "triton" else np.asarray
    return {k: to_numpy(v) for k, v in out.items()} if isinstance(out, dict) else to_numpy(out)


def _added(E, I, G):
    out = E.astype(np.float64)
    inside = (I >= 0) & (I < len(E))
    np.add.at(out, I[inside], G[inside])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeated_ids_add_up_and_ids_outside_write_nothing(backend):
    rng = np.random.default_rng(0)
    E = rng.standard_normal((10, 37)).astype(np.float32)
    I = np.array([3, 3, 3, 0, -1, 10, 9, 3, 5, 3, 3, 0, 9])  # repeats inside one tile of 4 tokens, both ends outside
    G = rng.standard_normal((len(I), 37)).astype(np.float32)
    got = _run(dt.loads(EMBEDDING_GRAD), backend, E=E, I=I, G=G)
    np.testing.assert_allclose(got, _added(E, I, G), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stored_update_writes_the_new_token_into_its_row(backend):
    prog = dt.loads("Func c;\nIn C, P, X;\nVar b, s, k;\nc[b, s, k] = C[b, s, k];\nc[b, P[b], k] = X[b, k];\n"
                    "c.block(b:1, s:8);\nc.tensorize(s:8, k:0);\nc.update().block(b:2);\nc.update().tensorize(k:0);\n"
                    "c.compile();\n")
    rng = np.random.default_rng(1)
    C, X = rng.standard_normal((3, 20, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    P = np.array([4, 19, 20])  # the last one past the cache: dropped
    want = C.copy()
    want[0, 4], want[1, 19] = X[0], X[1]
    np.testing.assert_array_equal(_run(prog, backend, C=C, P=P, X=X), want)


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_readers_read_the_func_updated_and_updates_run_in_order(backend):
    prog = dt.loads("""Func g, o;
In E, I, G, J;
Var v, d, t, u;
RVar r;
g[v, d] = E[v, d];
g[I[t], d] += G[t, d];
g[J[u], d] = -1.0;
o[v] = rsum(g[v, r], r);
o.block(v:2);
o.compile();
""")
    assert prog.checked.kernel_roots == ("g", "g_update", "g_update1", "o")  # g, its updates, then its reader
    rng = np.random.default_rng(2)
    E, G = rng.standard_normal((6, 4)), rng.standard_normal((5, 4))
    I, J = np.array([1, 1, 2, 5, 0]), np.array([2, 4])
    want = _added(E, I, G)
    want[[2, 4]] = -1.0  # the store comes after the adds: row 2's adds are overwritten
    got = _run(prog, backend, E=E, I=I, G=G, J=J, sizes={"r": 4})
    np.testing.assert_allclose(got, want.sum(1), rtol=1e-12)
    assert "g" not in prog.outputs  # a temporary, written by three kernels


def test_the_python_api_updates_with_plus_equals_and_schedules_the_update():
    E, I, G = dt.In("E"), dt.In("I"), dt.In("G")
    v, d, t = dt.Var("v"), dt.Var("d"), dt.Var("t")
    g = dt.Func("g")
    g[v, d] = E[v, d] * 0.0
    g[I[t], d] += G[t, d]
    g.update().block(t=2, d=8).tensorize(d=8)
    g.compile()
    prog = dt.program(g)
    assert prog.checked.schedules["g_update"].block == {"t": 2, "d": 8}
    ids, grads = np.array([2, 0, 2]), np.arange(15.0).reshape(3, 5)
    np.testing.assert_allclose(prog(E=np.ones((4, 5)), I=ids, G=grads, backend="interp"),
                               _added(np.zeros((4, 5)), ids, grads))


def test_triton_adds_atomically_and_stores_plainly():
    added = dt.loads(EMBEDDING_GRAD).source("triton")
    assert 'tl.atomic_add(g_ptr + g_v_index * g_v_stride + g_d_index * g_d_stride, g_update,' in added
    assert 'sem="relaxed")' in added
    stored = dt.loads(EMBEDDING_GRAD.replace("+=", "=")).source("triton")
    assert "tl.atomic_add" not in stored and "tl.store(g_ptr + g_v_index * g_v_stride" in stored


def test_numba_runs_an_adding_update_one_program_after_another():
    source = dt.loads(EMBEDDING_GRAD).source("numba")
    assert "_launch(g_kernel," in source and "_launch(g_update_kernel," not in source
    assert "g_update_kernel(0, " in source and "+= " in source


def test_numba_adds_into_bfloat16_in_float32_rounding_once_per_add():
    rng = np.random.default_rng(3)
    E, G = rng.standard_normal((10, 16)), rng.standard_normal((9, 16))
    I = np.array([1, 1, 1, 4, 4, 7, 0, 9, 9])
    bf16 = pytest.importorskip("ml_dtypes").bfloat16
    prog = dt.loads(EMBEDDING_GRAD)
    got = np.asarray(prog(E=E.astype(bf16), I=I, G=G.astype(bf16), backend="numba"), np.float64)
    want = prog(E=E.astype(bf16), I=I, G=G.astype(bf16), backend="interp")
    np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(got, _added(E.astype(bf16).astype(float), I, G.astype(bf16).astype(float)),
                               rtol=5e-2, atol=5e-2)


def test_a_backend_without_scatters_refuses_an_update(monkeypatch):
    if not backends.available("example"):
        pytest.skip("the example backend is not installed")
    example = backends.get("example")
    monkeypatch.setattr(example, "capabilities", dataclasses.replace(example.capabilities, scatters=False))
    with pytest.raises(DTBackendError, match="cannot run updates"):
        dt.loads(EMBEDDING_GRAD)(E=np.zeros((3, 2)), I=np.zeros(2, np.int64), G=np.zeros((2, 2)), backend="example")


@pytest.mark.parametrize("source,error,match", [
    ("Func g;\nIn I, G;\nVar d, t;\ng[I[t], d] += G[t, d];\ng.compile();", DTError,
     "'g' is updated before it is defined over its dimensions"),
    ("Func g;\nIn E, I;\nVar v, t;\ng[v] = E[v];\ng[I[t]] += g[t];\ng.compile();", DTError,
     "reads 'g', the Func it writes"),
    ("Func g;\nIn E, I;\nVar v, t;\ng[v] = E[v];\ng[I[t]] += 1.0;\ng.update().inline();\ng.compile();",
     DTScheduleError, "an update cannot be scheduled with inline"),
    ("Func g, o;\nIn E, I;\nVar v, t;\ng[v] = E[v];\ng[I[t]] += 1.0;\no[v] = g[v];\ng.inline();\no.compile();",
     DTScheduleError, "'g' is updated, so it cannot be scheduled with inline"),
    ("Func g;\nIn E, I;\nVar v, t;\ng[v] = E[v];\ng[I[t] / 2] += 1.0;\ng.compile();", DTError,
     "is not an integer"),
    ("Func g;\nIn E, I;\nVar v, t;\ng[v] = E[v];\ng[I[t], t] += 1.0;\ng.compile();", DTError,
     "'g' has 1 dimension"),
    ("Func g;\nIn E, I;\nVar v, t;\ng[v] = E[v];\ng[I[t]] += 1.0;\ng.updates().block(t:4);\ng.compile();",
     DTSyntaxError, r"'g.updates\(...\)' is not a schedule stage"),
    ("Func g;\nIn E, I;\nVar v, t;\ng[v] = E[v];\ng[cast(g[t], i64)] += 1.0;\ng.compile();", DTError,
     "indexes 'g' by its own elements"),
    ("Func g;\nIn E, I;\nVar v, t;\ng[v] = E[v];\nE[I[t]] += 1.0;\ng.compile();", DTError,
     "'E' is updated .* but it is not a Func"),
])
def test_errors_point_at_the_update(source, error, match):
    with pytest.raises(error, match=match) as info:
        dt.loads(source, file="update.dt").pipeline("f32")
    assert "update.dt:" in info.value.render()


def test_dt_tune_searches_an_updates_schedule_with_extents_no_input_gives():
    backward = dt.grad(dt.load("examples/llm/embedding.dt"))  # the table's rows (E_axis0): no input has them
    result = backward.tune(dict(t=16, d=64, E_axis0=20), "f32", backend="numba", budget=5, cache=False, workers=0)
    assert result.timed and not result.failed
    assert any("grad_E_update." in t.candidate.text for t in result.timed)  # the update's own blocks and tiles


@pytest.mark.needs_triton
def test_triton_adds_into_bfloat16_as_numba_does():
    import torch
    bf16 = pytest.importorskip("ml_dtypes").bfloat16
    rng = np.random.default_rng(4)
    E, G = rng.standard_normal((10, 37)), rng.standard_normal((9, 37))
    I = np.array([3, 3, 3, 0, -1, 10, 9, 3, 5])
    prog = dt.loads(EMBEDDING_GRAD)
    got = prog(E=torch.tensor(E, dtype=torch.bfloat16), I=torch.tensor(I), G=torch.tensor(G, dtype=torch.bfloat16),
               backend="triton")
    want = prog(E=E.astype(bf16), I=I, G=G.astype(bf16), backend="numba")  # each add in f32, rounded once
    np.testing.assert_allclose(got.float().numpy(), np.asarray(want, np.float32), rtol=1e-2, atol=1e-2)
