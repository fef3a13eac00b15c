"""The LLM kernels of issues 27, 28 and 29 (examples/llm/): the torch function each baseline calls (eager,
and what torch.compile compiles), their Liger and SDPA calls, the integer data each reads, and
the bytes each must move. Shapes are Llama 3 8B's (32 query heads, 8 key/value heads of 128,
a 128,256-entry vocabulary, width 4096), Mamba's and Stable Diffusion's where those apply."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from cases import EXAMPLES, MATMUL, MEMORY, Kernel

LLM = EXAMPLES / "llm"
DTYPES = ("f32", "bf16")


# ----------------------------------------------------------------------- inputs made for each kernel
def _ids(rows_dim, count_dim):
    """Token ids in [0, rows): every id a valid row of the table."""
    return lambda e, g, device, dtype: torch.randint(0, e[rows_dim], (e[count_dim],), generator=g, device=device)


def _rope_table(fn, width_dim, duplicated):
    """cos or sin of Llama's angles, [s, width]: position s times frequency 500000^(-i / half);
    Hugging Face's layout repeats the half-width table (Liger reads only its first half)."""
    def make(e, g, device, dtype):
        half = e[width_dim] // 2 if duplicated else e[width_dim]
        freq = 500000.0 ** (-torch.arange(half, device=device, dtype=torch.float64) / half)
        table = fn(torch.arange(e["s"], device=device, dtype=torch.float64)[:, None] * freq[None, :])
        return (torch.cat([table, table], dim=1) if duplicated else table).to(dtype)
    return make


def _targets(e, g, device, dtype):
    """Class targets, one in eight the ignore index -100 (padding tokens)."""
    t = torch.randint(0, e["v"], (e["r"],), generator=g, device=device)
    ignored = torch.rand(e["r"], generator=g, device=device) < 0.125
    return torch.where(ignored, torch.full_like(t, -100), t)


def _int8_weights(e, g, device, dtype):
    return torch.randint(-127, 128, (e["n"], e["k"]), generator=g, device=device, dtype=torch.int32).to(torch.int8)


def _int8(*dims):
    """int8 data over the whole range but -128 (symmetric quantization's)."""
    return lambda e, g, device, dtype: torch.randint(-127, 128, [e[d] for d in dims], generator=g, device=device,
                                                     dtype=torch.int32).to(torch.int8)


def _scales(dim):
    """float32 quantization scales, about 1/127 (a row's absolute max maps to 127)."""
    return lambda e, g, device, dtype: torch.rand(e[dim], generator=g, device=device) / 127 + 0.5 / 127


def _fp8(*dims):
    """Standard-normal data stored as float8_e4m3fn (fp8 inputs ride the integer-data hook: their
    dtype is not the row's)."""
    return lambda e, g, device, dtype: torch.randn([e[d] for d in dims], generator=g, device=device).to(
        torch.float8_e4m3fn)


def _block_table(e, g, device, dtype):
    """Each sequence's pages, scattered over the shared cache (no page shared)."""
    pages = e["l"] // 16
    return torch.randperm(e["Kc_axis0"], generator=g, device=device)[:e["b"] * pages].view(e["b"], pages).int()


def _lengths(e, g, device, dtype):
    """Sequence lengths between half the context and all of it."""
    return torch.randint(e["l"] // 2, e["l"] + 1, (e["b"],), generator=g, device=device)


# ----------------------------------------------------------------------- torch functions
def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _rope(Q, K, C, S):
    cos, sin = C[:, None, :], S[:, None, :]  # [s, 1, d]: broadcast over heads
    return Q * cos + _rotate_half(Q) * sin, K * cos + _rotate_half(K) * sin


def _rope_interleaved(Q, K, C, S):
    def rotate(x):
        pairs = x.unflatten(-1, (-1, 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        cos, sin = C[:, None, :], S[:, None, :]
        return torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1).flatten(-2)
    return rotate(Q), rotate(K)


def _embedding(E, I):
    return F.embedding(I, E)


def _cross_entropy(L, T):
    return F.cross_entropy(L, T, reduction="none", ignore_index=-100)


def _causal_conv(X, W, B):
    """The depthwise causal convolution of width W.shape[1] with bias, before the SiLU."""
    width = W.shape[1]
    return F.conv1d(X, W[:, None, :], B, padding=width - 1, groups=X.shape[1])[..., :X.shape[2]]


def _conv1d(X, W, B):
    return F.silu(_causal_conv(X, W, B))


def _group_norm(X, W, B, eps):
    return F.group_norm(X, 32, W, B, eps)


def _add_rmsnorm(X, R, W, eps):
    """Hugging Face's LlamaRMSNorm after the residual add: the sum in the input dtype, the norm in
    float32, (h, y) in dt's output order."""
    h = X + R
    hf = h if h.dtype == torch.float64 else h.float()  # float64: the reference
    return h, (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(X.dtype) * W


def _swiglu(G, U):
    return F.silu(G) * U


def _layernorm_stats(A, W, Bias, eps):
    """The layer norm autograd saves statistics of: (mean, rstd, y) in dt's output order, the
    statistics float32."""
    if A.dtype == torch.float64:  # the reference, its statistics rounded to float32 as they are stored
        mean = A.mean(-1).float().double()
        rstd = torch.rsqrt(((A - mean[:, None]) ** 2).mean(-1) + eps).float().double()
        return mean, rstd, (A - mean[:, None]) * rstd[:, None] * W + Bias
    y, mean, rstd = torch.native_layer_norm(A, (A.shape[-1],), W, Bias, eps)
    return mean.view(-1).float(), rstd.view(-1).float(), y


def _cumsum(A):
    return torch.cumsum(A, dim=1)


def _topk16(L):
    values, ids = torch.topk(L, 16, dim=-1)
    return ids, values  # dt's output order: ti, tv


def _distinct_logits(e, g, device, dtype):
    """Logits with no two equal (a permutation of evenly spaced values, exact in float32): the
    order among equal values is torch.topk's own."""
    return (torch.stack([torch.randperm(e["v"], generator=g, device=device) for _ in range(e["r"])]).to(dtype)
            / e["v"] * 8.0 - 4.0)


def _argmax(L):
    return torch.argmax(L, dim=-1)


def _layernorm_backward(DY, A, W, Mean, Rstd):
    """What autograd runs for a layer norm's gradients: (dx, dw, db)."""
    if not A.is_cuda:  # the CPU kernel takes statistics in the input's dtype (a dry run)
        Mean, Rstd = Mean.to(A.dtype), Rstd.to(A.dtype)
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(DY, A, [A.shape[-1]], Mean[:, None], Rstd[:, None], W,
                                                           torch.zeros_like(W), [True, True, True])
    return dx, dw, db


def _int8_matmul(X, Wq, S):
    return (X @ Wq.to(X.dtype).t()) * S  # dequantize, then the product


def _w8a8_matmul(Xq, Wq, Sx, Sw):
    if Xq.is_cuda and Sx.dtype != torch.float64:  # what a PyTorch user calls: cuBLASLt's int8 product, i32 out
        return (torch._int_mm(Xq, Wq.t()) * Sx[:, None] * Sw[None, :]).to(torch.bfloat16)
    # the float64 reference (its scales are float64; the int8 data is not widened for it), a CPU dry run
    out = (Xq.to(Sx.dtype) @ Wq.to(Sx.dtype).t()) * Sx[:, None] * Sw[None, :]
    return out if Sx.dtype == torch.float64 else out.to(torch.bfloat16)


def _fp8_matmul(X, W, scale):
    if X.dtype == torch.float8_e4m3fn:  # what a PyTorch user calls: cuBLASLt's fp8 product
        one = torch.ones((), device=X.device)
        return torch._scaled_mm(X, W.t(), scale_a=one, scale_b=one * scale, out_dtype=torch.bfloat16)
    return (X @ W.t()) * scale  # the float64 reference


def _gathered(Kc, Vc, T, L, group):
    """The cache's pages of each sequence gathered in token order, key/value heads expanded:
    [b, h, l, d], and the mask of tokens within each length."""
    b, pages = T.shape
    keys = Kc[T.long()].flatten(1, 2).transpose(1, 2).repeat_interleave(group, dim=1)
    values = Vc[T.long()].flatten(1, 2).transpose(1, 2).repeat_interleave(group, dim=1)
    within = torch.arange(pages * Kc.shape[1], device=Kc.device)[None, :] < L[:, None]
    return keys, values, within[:, None, None, :]


def _paged_decode(Q, Kc, Vc, T, L, scale, group):
    keys, values, within = _gathered(Kc, Vc, T, L, group)
    return F.scaled_dot_product_attention(Q[:, :, None, :], keys, values, attn_mask=within, scale=scale)[:, :, 0]


def _sdpa_paged(t, e, s):
    """SDPA on K and V already gathered and expanded (outside the timing): SDPA alone."""
    keys, values, within = _gathered(t["Kc"], t["Vc"], t["T"], t["L"], s["group"])
    q = t["Q"][:, :, None, :]
    return lambda: F.scaled_dot_product_attention(q, keys, values, attn_mask=within, scale=s["scale"])[:, :, 0]


def _attention(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V)


def _causal_attention(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)


def _cudnn(causal):
    """SDPA restricted to its cuDNN backend (the eager column is the backend PyTorch picks)."""
    def make(t, e, s):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        Q, K, V = t["Q"], t["K"], t["V"]

        def call():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(Q, K, V, is_causal=causal)
        return call
    return make


def _gqa_attention(Q, K, V, group):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True)


def _bmm(A, B):
    return torch.bmm(A, B)


def _decode(Q, K, V):
    return F.scaled_dot_product_attention(Q[:, :, None, :], K, V)[:, :, 0]


def _attention_gemms(causal):
    """The two products of every head; causal attention computes half the square."""
    def gemms(e):
        rows, keys = e["b"] * e["h"] * e["m"], e["l"] // 2 if causal else e["l"]
        return [(rows, keys, e["k"]), (rows, e["n"], keys)]
    return gemms


def _attention_kernel(name, causal):
    shapes = tuple((4, 16, s, s, d, d) for d in (64, 128) for s in (1024, 4096, 16384))
    return Kernel(name, MATMUL, LLM / f"{name}.dt",
                  {"Q": ("b", "h", "m", "k"), "K": ("b", "h", "l", "k"), "V": ("b", "h", "l", "n")},
                  ("b", "h", "m", "n"), {}, ("b", "h", "m", "l", "k", "n"), shapes,
                  ((4, 16, 4096, 4096, 64, 64), (4, 16, 4096, 4096, 128, 128)), ((1, 2, 70, 70, 16, 16),),
                  ("bf16", "f16"), _causal_attention if causal else _attention, gemms=_attention_gemms(causal),
                  sdpa=_cudnn(causal), reference_bytes=lambda e: e["b"] * e["h"] * e["m"] * e["l"] * 8,
                  notes=("causal " if causal else "") + "multi-head attention, [b, h, s, d]; eager is "
                        "F.scaled_dot_product_attention (the backend PyTorch picks: flash on an H100), SDPA its "
                        "cuDNN backend" + ("; TFLOP/s count half the square" if causal else "") + ".")


# ----------------------------------------------------------------------- Liger calls
def _liger_rope(lf, t, s):
    # Liger takes q and k as [b, h, s, d] views of [b, s, h, d] memory and rotates them in place:
    # copies made here, outside the timing, keep the row's inputs intact.
    q, k = t["Q"].clone().transpose(1, 2), t["K"].clone().transpose(1, 2)
    cos, sin = t["C"][None], t["S"][None]

    def call():
        q_out, k_out = lf.liger_rope(q, k, cos, sin)
        return q_out.transpose(1, 2), k_out.transpose(1, 2)
    return call


def _liger_add_rmsnorm(lf, t, s):
    X, R, W, eps = t["X"], t["R"], t["W"], s["eps"]

    def call():
        y, h = lf.liger_fused_add_rms_norm(X, R, W, eps, in_place=False)
        return h, y
    return call


def _liger_swiglu(lf, t, s):
    G, U = t["G"], t["U"]
    return lambda: lf.liger_swiglu(G, U)


def _liger_layernorm_stats(lf, t, s):
    from liger_kernel.ops.layer_norm import layer_norm_forward  # the forward that keeps the statistics
    A, W, B, eps = t["A"], t["W"], t["Bias"], s["eps"]

    def call():
        y, _, mean, rstd, _, _ = layer_norm_forward(A, W, B, eps)
        return mean, rstd, y
    return call


def _liger_layernorm_backward(lf, t, s):
    from liger_kernel.ops.layer_norm import layer_norm_backward
    DY, A, W, Mean, Rstd = (t[n] for n in ("DY", "A", "W", "Mean", "Rstd"))
    B = torch.zeros_like(W)
    return lambda: layer_norm_backward(DY, A, W, B, Mean, Rstd)


def _statistics(kind):
    """A row's mean (normal) or 1/std (between 0.5 and 2): any values serve a backward pass. In
    float32 for half-precision rows, as a forward saves them (autograd's, Liger's, dt's save())."""
    def make(e, g, device, dtype):
        values = torch.rand(e["x"], generator=g, device=device, dtype=torch.float64)
        wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        return (values * 1.5 + 0.5 if kind == "rstd" else values * 2.0 - 1.0).to(wide)
    return make


def _liger_cross_entropy(lf, t, s):
    L, T = t["L"], t["T"]
    return lambda: lf.liger_cross_entropy(L, T, ignore_index=-100, reduction="none")


# ----------------------------------------------------------------------- bytes moved
def _embedding_bytes(e, item):
    return e["t"] * 8 + 2 * e["t"] * e["d"] * item  # ids, the rows read, the rows written


def _add_rmsnorm_bytes(e, item):
    return (4 * e["t"] * e["d"] + e["d"]) * item  # X and R read, h and y written, W


def _layernorm_stats_bytes(e, item):
    return (2 * e["x"] * e["k"] + 2 * e["k"]) * item + 8 * e["x"]  # A read, y written, W, Bias; f32 statistics


def _argmax_bytes(e, item):
    return e["r"] * e["v"] * item + e["r"] * 8  # the logits read, the int64 ids written


def _topk_bytes(e, item):
    return e["r"] * e["v"] * item + e["r"] * e["i"] * (8 + item)  # the logits read, the ids and values written


def _layernorm_backward_bytes(e, item):
    return (3 * e["x"] * e["k"] + 3 * e["k"] + 2 * e["x"]) * item  # DY and A read, dx written; W, dw, db; statistics


def _paged_bytes(e, item):
    tokens = e["b"] * e["l"] * 3 // 4  # lengths average three quarters of the context
    return (2 * tokens * e["Kc_axis2"] * e["d"] + 2 * e["b"] * e["h"] * e["d"]) * item + e["b"] * (e["l"] // 16) * 4


def _rope_kernel(name, fn, liger, tables):
    dims = ("b", "s", "h", "kh", "d") + (("C_axis1",) if tables == "half" else ())
    half = ("s", "C_axis1") if tables == "half" else ("s", "d")
    shapes = ((1, 4096, 32, 8, 128), (4, 2048, 32, 8, 128), (8, 1000, 32, 8, 128))
    if tables == "half":
        shapes = tuple(sh + (64,) for sh in shapes)
    return Kernel(name, MEMORY, LLM / f"{name}.dt", {"Q": ("b", "s", "h", "d"), "K": ("b", "s", "kh", "d"),
                                                     "C": half, "S": half},
                  ("b", "s", "h", "d"), {}, dims, shapes, shapes[:1],
                  ((1, 5, 3, 1, 12) + ((6,) if tables == "half" else ()),), DTYPES, fn, liger=liger,
                  made_inputs={"C": _rope_table(torch.cos, half[1], tables == "full"),
                               "S": _rope_table(torch.sin, half[1], tables == "full")},
                  notes="q and k of Llama 3 8B (32 and 8 heads of 128); two outputs"
                        + (". Liger rotates in place." if liger else "; no Liger kernel has this form."))


LLM_KERNELS: dict[str, Kernel] = {k.name: k for k in [
    _rope_kernel("rope", _rope, _liger_rope, "full"),
    _rope_kernel("rope_interleaved", _rope_interleaved, None, "half"),
    Kernel("embedding", MEMORY, LLM / "embedding.dt", {"E": ("E_axis0", "d"), "I": ("t",)}, ("t", "d"), {},
           ("t", "d", "E_axis0"), ((4096, 4096, 128256), (16384, 4096, 128256), (1000, 2048, 50257)),
           ((4096, 4096, 128256),), ((7, 33, 50),), DTYPES, _embedding, made_inputs={"I": _ids("E_axis0", "t")},
           moved=_embedding_bytes, notes="F.embedding; the bytes count the rows read, not the whole table."),
    Kernel("cross_entropy", MEMORY, LLM / "cross_entropy.dt", {"L": ("r", "v"), "T": ("r",)}, ("r",), {},
           ("r", "v"), ((4096, 128256), (8192, 32000), (1000, 50257)), ((4096, 128256),), ((6, 5003),), DTYPES,
           _cross_entropy, liger=_liger_cross_entropy, made_inputs={"T": _targets},
           notes="loss per row, reduction='none', ignore_index -100 (one target in eight). Liger's loss is f32."),
    Kernel("conv1d", MEMORY, LLM / "conv1d.dt", {"X": ("b", "c", "t"), "W": ("c", "j"), "B": ("c",)},
           ("b", "c", "t"), {}, ("b", "c", "t", "j"), ((4, 2048, 4096, 4), (8, 5120, 2048, 4), (1, 1536, 1000, 4)),
           ((4, 2048, 4096, 4),), ((2, 5, 300, 4),), DTYPES, _conv1d,
           notes="Mamba's causal depthwise conv1d (width 4) with bias and SiLU: F.conv1d(groups=c) then F.silu."),
    Kernel("group_norm", MEMORY, LLM / "group_norm.dt", {"X": ("b", "c", "s"), "W": ("c",), "B": ("c",)},
           ("b", "c", "s"), {"eps": 1e-5}, ("b", "c", "s", "g", "cg"),
           ((8, 512, 4096, 32, 16), (2, 320, 4096, 32, 10), (16, 256, 1000, 32, 8)), ((8, 512, 4096, 32, 16),),
           ((2, 96, 37, 32, 3),), DTYPES, _group_norm, dt_sizes=("g", "cg"), notes="F.group_norm with 32 groups."),
    Kernel("add_rmsnorm", MEMORY, LLM / "add_rmsnorm.dt", {"X": ("t", "d"), "R": ("t", "d"), "W": ("d",)},
           ("t", "d"), {"eps": 1e-6}, ("t", "d"), ((4096, 4096), (16384, 4096), (4096, 8192), (2000, 3584)),
           ((4096, 4096),), ((7, 300),), DTYPES, _add_rmsnorm, liger=_liger_add_rmsnorm, moved=_add_rmsnorm_bytes,
           notes="residual add + RMSNorm, two outputs (the sum and the norm): Llama 3 8B and 70B widths, Qwen2 "
                 "7B's 3584; eager is Hugging Face's LlamaRMSNorm after the add."),
    Kernel("swiglu", MEMORY, LLM / "swiglu.dt", {"G": ("t", "f"), "U": ("t", "f")}, ("t", "f"), {}, ("t", "f"),
           ((4096, 14336), (8192, 11008), (2000, 3000)), ((4096, 14336),), ((7, 300),), DTYPES, _swiglu,
           liger=_liger_swiglu,
           notes="SwiGLU's gate silu(G) * U between an MLP's projections: Llama 3 8B's 14336, Llama 2 7B's "
                 "11008; Liger's is its LigerSiLUMulFunction."),
    Kernel("layernorm_stats", MEMORY, LLM / "layernorm_stats.dt", {"A": ("x", "k"), "W": ("k",), "Bias": ("k",)},
           ("x", "k"), {"eps": 1e-5}, ("x", "k"), ((4096, 4096), (16384, 4096), (4096, 8192), (2000, 3000)),
           ((4096, 4096),), ((7, 300),), DTYPES, _layernorm_stats, liger=_liger_layernorm_stats,
           moved=_layernorm_stats_bytes,
           notes="layer norm forward returning y and each row's float32 mean and 1/std: eager is "
                 "torch.native_layer_norm (what autograd calls), Liger its layer_norm_forward."),
    Kernel("layernorm_backward", MEMORY, LLM / "layernorm_backward.dt",
           {"DY": ("x", "k"), "A": ("x", "k"), "W": ("k",), "Mean": ("x",), "Rstd": ("x",)}, ("x", "k"), {},
           ("x", "k"), ((4096, 4096), (16384, 4096), (4096, 8192)), ((4096, 4096),), ((7, 300),), DTYPES,
           _layernorm_backward, liger=_liger_layernorm_backward, moved=_layernorm_backward_bytes,
           made_inputs={"Mean": _statistics("mean"), "Rstd": _statistics("rstd")},
           notes="dx, dw and db from the forward's statistics: torch.ops.aten.native_layer_norm_backward (what "
                 "autograd calls), Liger's layer_norm_backward; the statistics float32 in the bf16 rows too "
                 "(dt's outputs take the dtype of its widest inputs: bf16 gradients)."),
    Kernel("argmax", MEMORY, LLM / "argmax.dt", {"L": ("r", "v")}, ("r",), {}, ("r", "v"),
           ((64, 128256), (4096, 128256), (256, 50257), (1000, 32000)), ((64, 128256), (4096, 128256)),
           ((7, 5003),), DTYPES, _argmax, moved=_argmax_bytes,
           notes="greedy decoding over Llama 3's vocabulary (64 rows: a decode batch; 4096: a prefill) and "
                 "GPT-2's and Llama 2's: torch.argmax(dim=-1), int64 ids."),
    Kernel("topk", MEMORY, LLM / "topk.dt", {"L": ("r", "v")}, ("r", "i"), {}, ("r", "v", "i"),
           ((64, 128256, 16), (4096, 32000, 16)), ((64, 128256, 16),), ((7, 5003, 16),), ("f32",), _topk16,
           made_inputs={"L": _distinct_logits}, dt_sizes=("i",), moved=_topk_bytes,
           notes="top-16 ids and logits per row (sampling): torch.topk(L, 16); distinct float32 logits, since "
                 "torch.topk orders equal values as it likes."),
    Kernel("cumsum", MEMORY, LLM / "cumsum.dt", {"A": ("x", "y")}, ("x", "y"), {}, ("x", "y"),
           ((4096, 8192), (16384, 1024), (1000, 32000)), ((4096, 8192),), ((7, 3001),), DTYPES, _cumsum,
           notes="prefix sums along rows: torch.cumsum(dim=1)."),
    Kernel("int8_matmul", MATMUL, LLM / "int8_matmul.dt", {"X": ("m", "k"), "Wq": ("n", "k"), "S": ("n",)},
           ("m", "n"), {}, ("m", "n", "k"), ((4096, 4096, 4096), (16, 4096, 4096), (4096, 14336, 4096)),
           ((4096, 4096, 4096),), ((37, 21, 70),), ("bf16",), _int8_matmul, gemms=lambda e: [(e["m"], e["n"], e["k"])],
           made_inputs={"Wq": _int8_weights},
           notes="weight-only int8 with a scale per output channel; baselines dequantize then multiply."),
    Kernel("w8a8_matmul", MATMUL, LLM / "w8a8_matmul.dt", {"Xq": ("m", "k"), "Wq": ("n", "k"), "Sx": ("m",),
                                                          "Sw": ("n",)},
           ("m", "n"), {}, ("m", "n", "k"), ((4096, 4096, 4096), (32, 4096, 4096), (4096, 14336, 4096)),
           ((4096, 4096, 4096),), ((37, 21, 70),), ("bf16",), _w8a8_matmul, gemms=lambda e: [(e["m"], e["n"], e["k"])],
           made_inputs={"Xq": _int8("m", "k"), "Wq": _int8("n", "k"), "Sx": _scales("m"), "Sw": _scales("n")},
           notes="int8 activations (a scale per token) times int8 weights (a scale per output channel), "
                 "accumulated in i32, a bf16 result; eager is torch._int_mm (cuBLASLt, m > 16) and the scaling. "
                 "The cuBLAS column is a bf16 product of the same shape."),
    Kernel("fp8_matmul", MATMUL, LLM / "fp8_matmul.dt", {"X": ("m", "k"), "W": ("n", "k")}, ("m", "n"),
           {"scale": 0.25}, ("m", "n", "k"), ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096)),
           ((4096, 4096, 4096),), ((32, 32, 64),), ("bf16",), _fp8_matmul, gemms=lambda e: [(e["m"], e["n"], e["k"])],
           made_inputs={"X": _fp8("m", "k"), "W": _fp8("n", "k")},
           notes="e4m3 operands, per-tensor scales, a bf16 result; eager is torch._scaled_mm (cuBLASLt). The "
                 "cuBLAS column is a bf16 product of the same shape."),
    Kernel("paged_decode", MEMORY, LLM / "paged_decode.dt",
           {"Q": ("b", "h", "d"), "Kc": ("Kc_axis0", "Kc_axis1", "Kc_axis2", "d"),
            "Vc": ("Kc_axis0", "Kc_axis1", "Kc_axis2", "d"), "T": ("b", "T_axis1"), "L": ("b",)},
           ("b", "h", "d"), {"scale": 1 / math.sqrt(128), "group": 4},
           ("b", "h", "d", "l", "Kc_axis0", "Kc_axis1", "Kc_axis2", "T_axis1"),
           ((8, 32, 128, 4096, 2048, 16, 8, 256), (32, 32, 128, 2048, 4096, 16, 8, 128),
            (1, 32, 128, 16384, 1024, 16, 8, 1024)),
           ((8, 32, 128, 4096, 2048, 16, 8, 256),), ((3, 8, 128, 64, 13, 16, 2, 4),), ("bf16",), _paged_decode,
           sdpa=_sdpa_paged, dt_sizes=("l",), made_inputs={"T": _block_table, "L": _lengths}, moved=_paged_bytes,
           notes="one query token per sequence, pages of 16 tokens (vLLM's layout), 4 query heads per key/value "
                 "head; SDPA gets K and V gathered and expanded outside its timing, eager includes the gather."),
    _attention_kernel("mha", causal=False),
    _attention_kernel("causal_mha", causal=True),
    Kernel("gqa_attention", MATMUL, LLM / "gqa_attention.dt",
           {"Q": ("b", "h", "m", "k"), "K": ("b", "kh", "l", "k"), "V": ("b", "kh", "l", "n")}, ("b", "h", "m", "n"),
           {"group": 4}, ("b", "h", "kh", "m", "l", "k", "n"),
           ((2, 32, 8, 4096, 4096, 128, 128), (1, 32, 8, 16384, 16384, 128, 128)),
           ((2, 32, 8, 4096, 4096, 128, 128),), ((1, 4, 1, 70, 70, 16, 16),), ("bf16", "f16"), _gqa_attention,
           gemms=lambda e: [(e["b"] * e["h"] * e["m"], e["l"] // 2, e["k"]), (e["b"] * e["h"] * e["m"], e["n"],
                                                                             e["l"] // 2)],
           reference_bytes=lambda e: e["b"] * e["h"] * e["m"] * e["l"] * 8,
           notes="Llama 3 8B's grouped-query causal attention (32 query heads, 8 key/value heads of 128): "
                 "F.scaled_dot_product_attention(is_causal=True, enable_gqa=True); TFLOP/s count half the square."),
    Kernel("decode", MEMORY, LLM / "decode.dt", {"Q": ("b", "h", "k"), "K": ("b", "h", "l", "k"),
                                                 "V": ("b", "h", "l", "d")}, ("b", "h", "d"), {},
           ("b", "h", "l", "k", "d"), ((32, 32, 1024, 128, 128), (32, 32, 8192, 128, 128), (32, 32, 32768, 128, 128),
                                       (1, 32, 32768, 128, 128), (4, 32, 8192, 128, 128), (1, 32, 8192, 128, 128)),
           ((32, 32, 8192, 128, 128),), ((2, 3, 300, 16, 16),), ("bf16", "f16"), _decode,
           notes="one query token per sequence and head against its K and V cache: F.scaled_dot_product_attention "
                 "on a query of length 1 (eager)."),
    Kernel("batched_matmul", MATMUL, LLM / "batched_matmul.dt", {"A": ("b", "x", "k"), "B": ("b", "k", "y")},
           ("b", "x", "y"), {}, ("b", "x", "y", "k"), ((32, 1024, 1024, 1024), (512, 128, 128, 64)),
           ((32, 1024, 1024, 1024),), ((3, 40, 33, 20),), ("bf16", "f16"), _bmm,
           gemms=lambda e: [(e["b"] * e["x"], e["y"], e["k"])], notes="torch.bmm."),
]}
