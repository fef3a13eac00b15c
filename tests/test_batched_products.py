"""Batched and multi-head products (issue 28): a block of 1 along a batch or a head is a scalar
axis, so the products under it are 2-D matrix-unit Dots, on every backend; examples/llm's
attention, batched matmul and decode kernels against independent NumPy references."""
import numpy as np
import pytest

import dt
from dt.ir import scheduled as S
from test_llm_examples import BACKENDS, LLM, SLOW_ON_TRITON, normal, run


def attention_reference(q, k, v, causal):
    s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("backend", SLOW_ON_TRITON)
def test_multi_head_attention(backend, causal):
    b, h, s, d = 2, 3, 133, 24  # a sequence that no tile divides, a head dim under a power of two
    q, k, v = normal(b, h, s, d), normal(b, h, s, d), normal(b, h, s, d)
    out = run("causal_mha" if causal else "mha", backend, Q=q, K=k, V=v)
    np.testing.assert_allclose(out, attention_reference(q, k, v, causal), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_matmul(backend):
    a, b = normal(3, 130, 70), normal(3, 70, 129)
    out = run("batched_matmul", backend, A=a, B=b)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_attention(backend):
    b, h, l, d = 2, 3, 300, 40
    q, k, v = normal(b, h, d), normal(b, h, l, d), normal(b, h, l, d)
    want = attention_reference(q[:, :, None, :], k, v, causal=False)[:, :, 0]
    np.testing.assert_allclose(run("decode", backend, Q=q, K=k, V=v), want, rtol=1e-4, atol=1e-5)


def products(pipeline: S.Pipeline) -> list[S.TExpr]:
    return [n for k in pipeline.kernels for s in S.walk_statements(k.body) if isinstance(s, (S.Assign, S.Store))
            for n in S.walk_texpr(s.value) if isinstance(n, (S.Dot, S.Reduce))]


def scalar_axes(pipeline: S.Pipeline) -> set[str]:
    return {s.name for k in pipeline.kernels for s in S.walk_statements(k.body) if isinstance(s, S.Axis) and s.scalar}


@pytest.mark.parametrize("name", ["mha", "causal_mha"])
def test_four_dimensional_attention_is_two_matrix_unit_dots(name):
    pipeline = dt.load(LLM / f"{name}.dt").pipeline("bf16")
    assert scalar_axes(pipeline) == {"b", "h"}
    dots = [n for n in products(pipeline) if isinstance(n, S.Dot)]
    loops = 2 if name == "causal_mha" else 1  # below the diagonal, then on it
    dims = [tuple(tuple(a.split("_")[0] for a in x.dims) for x in (d.a, d.b)) for d in dots]  # l_2: l's axis
    assert dims == [(("m", "k"), ("k", "l")), (("m", "l"), ("l", "n"))] * loops
    for k in pipeline.kernels:
        for s in S.walk_statements(k.body):
            if isinstance(s, (S.Assign, S.Store)):
                assert not any(set(n.dims) & {"b", "h"} for n in S.walk_texpr(s.value)), s
    source = dt.load(LLM / f"{name}.dt").source("triton", "bf16")
    assert source.count("tl.dot(") == 2 * loops and "tl.arange(0, 1)" not in source
    assert "b_pid * Q_b_stride + h_pid * Q_h_stride + m_offsets[:, None] * Q_m_stride" in " ".join(source.split())


BMM = """In A, B; Var b, x, y; RVar k; Func C;
C[b, x, y] = rdot(A[b, x, k], B[b, k, y], k);
C.compile(); C.tensorize(x:32, y:32, k:16); """


@pytest.mark.parametrize("schedule, dot", [
    ("C.block(b:1, x:32, y:32);", True),  # a block of 1: a scalar axis
    ("C.block(b:2, x:32, y:32); C.tensorize(b:1);", True),  # two batches, one at a time: a loop of dots
    ("C.block(b:2, x:32, y:32); C.tensorize(b:2);", False),  # a tile of 2 batches: multiply and sum
    ("C.block(x:32, y:32);", True),  # b unblocked: tiles of 1 by default
])
def test_a_batched_product_is_a_dot_under_batch_tiles_of_one(schedule, dot):
    prog = dt.loads(BMM + schedule)
    found = products(prog.pipeline("f16"))
    assert any(isinstance(n, S.Dot) for n in found) == dot
    assert ("tl.dot(" in prog.source("triton", "f16")) == dot
    a, b = normal(3, 40, 20), normal(3, 20, 35)
    np.testing.assert_allclose(prog(A=a, B=b, backend="interp"), a @ b, rtol=1e-5, atol=1e-5)


def test_a_scalar_axis_is_addressed_at_its_start_in_loads_and_stores():
    kernel = dt.loads(BMM + "C.block(b:1, x:32, y:32);").pipeline("f32").kernels[0]
    loads = [n for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign)
             for n in S.walk_texpr(s.value) if isinstance(n, S.Load)]
    assert {(n.indices, n.order) for n in loads} == {(("b", "x", "k"), ("x", "k")), (("b", "k", "y"), ("k", "y"))}
    store = next(s for s in S.walk_statements(kernel.body) if isinstance(s, S.Store))
    assert store.indices == ("b", "x", "y") and store.value.dims == ("x", "y")


def test_a_transposed_operand_moves_by_tma_in_its_tensors_order():
    """K[b, h, l, k] feeds the product as [k, l]: with tma() it is loaded as a box in K's order
    (boxes of 1 along the scalar axes b and h) and transposed in registers."""
    source = " ".join(dt.load(LLM.parents[1] / "benchmarks/gpu/schedules/mha_tma.dt").source("triton", "bf16").split())
    assert "K = tl.trans(K_desc.load([b_pid, h_pid, l_iter, 0]).reshape((64, k_TILE)))" in source.replace(
        "tl.cast(b_pid, tl.int32)", "b_pid").replace("tl.cast(h_pid, tl.int32)", "h_pid")


def test_a_causal_walks_box_coordinates_are_int32():
    """The tiles below a causal diagonal run to a bound computed from m_block_start, an int64
    (from the program id): the loop counts in int64, and TMA takes int32 coordinates (Triton
    refused to compile the box load otherwise)."""
    source = " ".join(dt.load(LLM.parents[1] / "benchmarks/gpu/schedules/causal_mha_tma.dt").source(
        "triton", "bf16").split())
    for loop in ("l_iter", "l_iter_2"):
        assert f"tl.cast({loop}, tl.int32), 0]).reshape((64, k_TILE)))" in source
        assert f", {loop}, 0]" not in source
