"""The LLM kernels of examples/llm/, each against an independent NumPy reference (written from
the operation's definition, not from dt's reference evaluator), on every backend, at sizes that
divide nothing."""
from pathlib import Path

import numpy as np
import pytest

import dt
from dt import backends
from dt.arrays import to_torch
from dt.testing import assert_close, to_numpy

LLM = Path(__file__).resolve().parents[1] / "examples" / "llm"
BACKENDS = ("interp", "numba", pytest.param("triton", marks=pytest.mark.needs_triton))
# where Triton's interpreter takes more than 3 s
SLOW_ON_TRITON = ("interp", "numba", pytest.param("triton", marks=[pytest.mark.needs_triton, pytest.mark.slow]))
rng = np.random.default_rng(7)


def run(name, backend, sizes=None, **args):
    return run_program(dt.load(LLM / f"{name}.dt"), backend, sizes, **args)


def run_program(prog, backend, sizes=None, **args):
    """prog's outputs on `backend` as NumPy arrays (Triton's on the GPU, or its interpreter)."""
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    if backend == "triton":
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        args = {k: to_torch(v).to(device) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        out = prog(backend=backend, sizes=sizes, **args)
        return {k: to_numpy(v) for k, v in out.items()} if isinstance(out, dict) else to_numpy(out)
    return prog(backend=backend, sizes=sizes, **args)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def rope_tables(s, half):
    inv_freq = 1.0 / (10000 ** (np.arange(half) / half))
    angles = np.arange(s)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rope_rotate_half(backend):
    b, s, h, kh, d = 2, 5, 3, 1, 12
    q, k = normal(b, s, h, d), normal(b, s, kh, d)
    cos, sin = rope_tables(s, d // 2)
    cos, sin = np.concatenate([cos, cos], 1), np.concatenate([sin, sin], 1)  # Hugging Face's layout

    def rotate_half(x):
        return np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)

    out = run("rope", backend, Q=q, K=k, C=cos, S=sin)
    assert_close(out["q_out"], q * cos[:, None] + rotate_half(q) * sin[:, None], "f32")
    assert_close(out["k_out"], k * cos[:, None] + rotate_half(k) * sin[:, None], "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_rope_interleaved(backend):
    b, s, h, kh, d = 2, 5, 3, 2, 10
    q, k = normal(b, s, h, d), normal(b, s, kh, d)
    cos, sin = rope_tables(s, d // 2)

    def rotate(x):  # as complex numbers: (x[2i] + i x[2i+1]) * e^{i angle}
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * (cos + 1j * sin)[:, None]
        return np.stack([z.real, z.imag], -1).reshape(x.shape)

    out = run("rope_interleaved", backend, Q=q, K=k, C=cos, S=sin)
    assert_close(out["q_out"], rotate(q), "f32")
    assert_close(out["k_out"], rotate(k), "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding(backend):
    table = normal(50, 33)
    ids = np.array([0, 49, 3, 3, 17, 49, 0, 8, 25, 1, 2], np.int64)
    assert_close(run("embedding", backend, E=table, I=ids), table[ids], "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_conv1d(backend):
    b, c, t, width = 2, 5, 300, 4
    x, w, bias = normal(b, c, t), normal(c, width), normal(c)
    padded = np.concatenate([np.zeros((b, c, width - 1), np.float32), x], -1)
    pre = bias[None, :, None] + sum(w[None, :, j, None] * padded[:, :, j:j + t] for j in range(width))
    assert_close(run("conv1d", backend, X=x, W=w, B=bias), pre / (1 + np.exp(-pre)), "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_with_ignored_targets(backend):
    rows, vocab = 6, 5003
    logits = (normal(rows, vocab) * 4 + 30).astype(np.float32)  # exp overflows f32 unless shifted
    targets = np.array([0, vocab - 1, -100, 17, 4096, -100], np.int64)
    shifted = logits.astype(np.float64) - logits.max(1, keepdims=True)
    logsumexp = np.log(np.exp(shifted).sum(1)) + logits.max(1)
    picked = logits[np.arange(rows), np.where(targets < 0, 0, targets)]
    want = np.where(targets == -100, 0.0, logsumexp - picked)
    assert_close(run("cross_entropy", backend, L=logits, T=targets), want, "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_norm(backend):
    b, groups, per_group, s = 2, 3, 4, 37
    x, w, bias = normal(b, groups * per_group, s) + 3, normal(groups * per_group), normal(groups * per_group)
    grouped = x.reshape(b, groups, -1).astype(np.float64)
    mean, var = grouped.mean(-1, keepdims=True), grouped.var(-1, keepdims=True)
    want = ((grouped - mean) / np.sqrt(var + 1e-5)).reshape(x.shape) * w[:, None] + bias[:, None]
    out = run("group_norm", backend, sizes={"g": groups, "cg": per_group}, X=x, W=w, B=bias, eps=1e-5)
    assert_close(out, want, "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_swiglu_gate(backend):
    g, u = normal(7, 2100) * 4, normal(7, 2100)  # wide enough that the sigmoid saturates both ways
    gate = g.astype(np.float64)
    assert_close(run("swiglu", backend, G=g, U=u), gate / (1 + np.exp(-gate)) * u, "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_residual_add_rmsnorm_writes_both_outputs_from_one_kernel(backend):
    x, r, w = normal(13, 300), normal(13, 300), normal(300)
    h = x.astype(np.float64) + r
    out = run("add_rmsnorm", backend, X=x, R=r, W=w, eps=1e-6)
    assert_close(out["h"], h, "f32")
    assert_close(out["y"], h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6) * w, "f32")
    assert len(dt.load(LLM / "add_rmsnorm.dt").pipeline("f32").kernels) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_layernorm_returns_its_statistics_in_float32(backend):
    a, w, bias = normal(11, 301) + 5, normal(301), normal(301)
    rows = a.astype(np.float64)
    mean, rstd = rows.mean(-1), 1 / np.sqrt(rows.var(-1) + 1e-5)
    out = run("layernorm_stats", backend, A=a.astype(np.float16), W=w.astype(np.float16),
              Bias=bias.astype(np.float16), eps=1e-5)
    assert out["mean"].dtype == np.float32 and out["rstd"].dtype == np.float32
    assert_close(out["mean"], mean, "f16")
    assert_close(out["rstd"], rstd, "f16")
    assert_close(out["y"], (rows - mean[:, None]) * rstd[:, None] * w + bias, "f16")


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_decoding_picks_the_first_largest_logit(backend):
    logits = rng.integers(-20, 20, (5, 9001)).astype(np.float32)  # ties across tiles of 4096
    logits[1, 5000] = np.nan
    out = run("argmax", backend, L=logits)
    np.testing.assert_array_equal(out, np.argmax(logits, axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layernorm_backward_from_saved_statistics(backend):
    dy, a, w = normal(37, 301), normal(37, 301) + 2, normal(301)
    mean, rstd = a.mean(-1).astype(np.float32), (1 / np.sqrt(a.var(-1) + 1e-5)).astype(np.float32)
    xhat = (a.astype(np.float64) - mean[:, None]) * rstd[:, None]
    wdy = w * dy.astype(np.float64)
    dx = rstd[:, None] * (wdy - wdy.mean(-1, keepdims=True) - xhat * (wdy * xhat).mean(-1, keepdims=True))
    out = run("layernorm_backward", backend, DY=dy, A=a, W=w, Mean=mean, Rstd=rstd)
    assert_close(out["dx"], dx, "f32")
    assert_close(out["dw"], (dy * xhat).sum(0), "f32")
    assert_close(out["db"], dy.astype(np.float64).sum(0), "f32")


@pytest.mark.parametrize("backend", SLOW_ON_TRITON)
def test_top_k_logits_and_their_ids(backend):
    # three rows (programs), each over two whole 4096-logit tiles and a cut one
    logits = normal(3, 9001)
    out = run("topk", backend, sizes={"i": 16}, L=logits)
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :16]
    np.testing.assert_array_equal(out["ti"], ids)
    np.testing.assert_array_equal(out["tv"], np.take_along_axis(logits, ids, 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_prefix_sums_along_rows(backend):
    a = normal(5, 3001)  # a row no power of two divides, in one tile
    np.testing.assert_allclose(run("cumsum", backend, A=a), np.cumsum(a.astype(np.float64), axis=1),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_weight_only_int8_matmul(backend):
    m, n, k = 37, 21, 70
    x = normal(m, k)
    weights = rng.integers(-127, 128, (n, k)).astype(np.int8)
    scales = (rng.uniform(0.5, 2.0, n) / 127).astype(np.float32)
    want = x.astype(np.float64) @ weights.T.astype(np.float64) * scales
    assert_close(run("int8_matmul", backend, X=x, Wq=weights, S=scales), want, "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_w8a8_int8_matmul(backend):
    m, n, k = 37, 21, 300
    x, w = rng.integers(-128, 128, (m, k)).astype(np.int8), rng.integers(-128, 128, (n, k)).astype(np.int8)
    sx, sw = (rng.uniform(0.5, 2.0, m) / 127).astype(np.float32), (rng.uniform(0.5, 2.0, n) / 127).astype(np.float32)
    exact = x.astype(np.int64) @ w.T.astype(np.int64)
    out = run("w8a8_matmul", backend, Xq=x, Wq=w, Sx=sx, Sw=sw)
    assert_close(out, exact * sx[:, None].astype(np.float64) * sw[None, :], "bf16")


@pytest.mark.parametrize("backend", BACKENDS)
def test_paged_decode_attends_through_the_block_table(backend):
    batch, heads, kv_heads, d, page = 3, 4, 2, 8, 16
    lengths = np.array([37, 1, 64], np.int64)
    pages_per_seq = 4
    cache_pages = 13
    kc, vc = normal(cache_pages, page, kv_heads, d), normal(cache_pages, page, kv_heads, d)
    table = rng.permutation(cache_pages)[:batch * pages_per_seq].reshape(batch, pages_per_seq).astype(np.int32)
    q = normal(batch, heads, d)
    want = np.zeros((batch, heads, d))
    for b in range(batch):  # gather the sequence's tokens, then plain softmax attention
        keys = kc[table[b]].reshape(-1, kv_heads, d)[:lengths[b]]
        values = vc[table[b]].reshape(-1, kv_heads, d)[:lengths[b]]
        for h in range(heads):
            s = keys[:, h // (heads // kv_heads)] @ q[b, h] / np.sqrt(d)
            p = np.exp(s - s.max())
            want[b, h] = p @ values[:, h // (heads // kv_heads)] / p.sum()
    out = run("paged_decode", backend, sizes={"l": pages_per_seq * page}, Q=q, Kc=kc, Vc=vc, T=table, L=lengths,
              scale=float(1 / np.sqrt(d)), group=heads // kv_heads)
    assert_close(out, want, "f32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp8_matmul_with_per_tensor_scales(backend):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if backend != "interp" and "f8e4m3" not in backends.get(backend).capabilities.dtypes:
        pytest.skip(f"backend {backend} has no f8e4m3")
    m, n, k = 37, 21, 70
    x = normal(m, k).astype(ml_dtypes.float8_e4m3fn)
    w = normal(n, k).astype(ml_dtypes.float8_e4m3fn)
    want = x.astype(np.float64) @ w.astype(np.float64).T * 0.25
    out = run("fp8_matmul", backend, X=x, W=w, scale=0.25)
    assert out.dtype == ml_dtypes.bfloat16
    assert_close(out.astype(np.float32), want, "bf16")


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_query_causal_attention(backend):
    batch, heads, kv_heads, seq, d = 2, 4, 2, 19, 8
    q, k, v = normal(batch, heads, seq, d), normal(batch, kv_heads, seq, d), normal(batch, kv_heads, seq, d)
    keys, values = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
    s = q.astype(np.float64) @ keys.transpose(0, 1, 3, 2) / np.sqrt(d)
    s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = p / p.sum(-1, keepdims=True) @ values
    out = run("gqa_attention", backend, Q=q, K=k, V=v, group=heads // kv_heads)
    assert_close(out, want, "f32")


@pytest.mark.parametrize("path", sorted(LLM.glob("*.dt")), ids=lambda p: p.stem)
def test_each_example_documents_a_complete_command(path):
    """The `dt run` line in each example's header names every extent a run needs (input axes no
    dimension spans included) and every scalar that indexes (random floats do for the others),
    and nothing else."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#   dt run"))
    words = " ".join([lines[start]] + [line for line in lines[start + 1:] if line.startswith("#     --")]).split()
    sizes = {w.split("=")[0] for flag, w in zip(words, words[1:]) if flag == "--size"}
    scalars = {w.split("=")[0] for flag, w in zip(words, words[1:]) if flag == "--scalar"}
    prog = dt.load(path)
    assert sizes == set(prog.checked.needed_dims), path.name
    assert prog.checked.index_scalars <= scalars <= set(prog.scalars), path.name
