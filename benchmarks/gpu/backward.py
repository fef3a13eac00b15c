"""The backward rows of issue 32: gradient programs derived by `dt grad` from the forward kernels
(benchmarks/gpu/schedules/*_grad.dt, each with the command that wrote it), against the backward
PyTorch's autograd runs (the aten backward op it calls, eager and under torch.compile), Liger
Kernel's backward and, for attention, SDPA's (flash in eager, cuDNN in the sdpa column).

Each row's inputs are the DT program's: the forward's inputs it reads, `grad_<output>` (the
gradient flowing in) and, where the forward saves statistics for its backward (`dt grad --save`),
those. The baselines get what autograd's forward would have saved for them (Kernel.torch_saved:
1/rms where dt saves the mean square, the softmax's output where dt recomputes from its input,
flash attention's output and logsumexp), made outside the timing. The reference is the torch
function without them, in float64: the gradient from the row's inputs alone.

Saved statistics are in the row's dtype, as dt's forward stores them, and the baselines get the
same values in the dtype their forward stores (float32): drawn at random where the gradient is the
same function of any values (RMSNorm's mean square), computed from the inputs where it is not (a
layer norm's mean: Kernel.saved)."""
from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F

from cases import EXAMPLES, MATMUL, MEMORY, SCHEDULE_DIR, Kernel
from llm import _causal_conv, _conv1d, _rope_table, _targets

DTYPES = ("f32", "bf16")
ROWS = ("x", "y")


# ----------------------------------------------------------------------- inputs made for each kernel
def _positive(dim, low, high):
    """A row statistic between low and high (a mean square, a variance): any values serve a backward."""
    def make(e, g, device, dtype):
        return (torch.rand(e[dim], generator=g, device=device, dtype=torch.float64) * (high - low) + low).to(dtype)
    return make


def _ids_with_the_last(rows_dim, count_dim):
    """Token ids in [0, rows), the first token's the table's last row: the gradient program takes no
    table (its rows are a size, dt_sizes), and the torch functions read its rows off the ids (the
    largest id + 1)."""
    def make(e, g, device, dtype):
        ids = torch.randint(0, e[rows_dim], (e[count_dim],), generator=g, device=device)
        ids[0] = e[rows_dim] - 1
        return ids
    return make


def _statistics_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype autograd's forward saves a row statistic in: float32 for half-precision inputs on
    the GPU (aten's accumulation type), the input's own on the CPU (its kernels take no other)."""
    return torch.float32 if x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) else x.dtype


# ----------------------------------------------------------------------- torch functions
# Each takes the DT program's inputs (and scalars) and returns its outputs in the program's order.
# The keyword arguments after them are what torch_saved makes for the baselines; without them
# (the float64 reference) the function derives them from the DT inputs itself.
def _rmsnorm_grad(A, W, grad_rmsnorm, ms, eps, rstd=None):
    if rstd is None:
        rstd = torch.rsqrt(ms + eps)
    if A.is_cuda and rstd.dtype != torch.float64:  # what autograd calls for F.rms_norm's backward
        return torch.ops.aten._fused_rms_norm_backward(grad_rmsnorm, A, [A.shape[-1]], rstd, W, [True, True])
    # the float64 reference, and the CPU (aten has no CPU kernel): aten's own decomposition of that op
    backward = torch._decomp.decomposition_table[torch.ops.aten._fused_rms_norm_backward.default]
    return tuple(backward(grad_rmsnorm, A, [A.shape[-1]], rstd, W, [True, True]))


def _rmsnorm_saved(t, s):
    ms = t["ms"]
    return {"rstd": torch.rsqrt(ms.to(_statistics_dtype(t["A"])) + s["eps"])[:, None]}


def _layernorm_grad(A, W, grad_layernorm, mean, variance, eps, rstd=None, bias=None):
    if rstd is None:  # the float64 reference
        return _layernorm_autograd(A, W, grad_layernorm, mean, variance, eps)
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(grad_layernorm, A, [A.shape[-1]], mean, rstd, W, bias,
                                                          [True, True, True])
    return dx, dw, db


def _layernorm_autograd(A, W, grad_layernorm, mean, variance, eps):
    """autograd's gradient of the layer norm, its mean and variance held at the values given (a
    statistic's value is the saved one, its derivative that of the statistic of A): what the derived
    program computes for any statistics, and aten's backward when they are A's own."""
    a, w = A.detach().requires_grad_(), W.detach().requires_grad_()
    with torch.enable_grad():
        m = a.mean(-1)
        m = m + (mean - m).detach()
        v = ((a - m[:, None]) ** 2).mean(-1)
        v = v + (variance - v).detach()
        y = (a - m[:, None]) * torch.rsqrt(v + eps)[:, None] * w
        grad_A, grad_W = torch.autograd.grad(y, (a, w), grad_layernorm)
    return grad_A, grad_W, grad_layernorm.sum(0)


def _layernorm_statistics(t, s):
    """Each row's mean and variance of A, computed in float32 and stored in A's dtype (as dt's
    forward, `dt grad --save mean,variance`, stores them)."""
    a = t["A"].float() if t["A"].dtype != torch.float64 else t["A"]
    mean = a.mean(-1)
    return {"mean": mean.to(t["A"].dtype), "variance": ((a - mean[:, None]) ** 2).mean(-1).to(t["A"].dtype)}


def _layernorm_saved(t, s):
    stats = _statistics_dtype(t["A"])
    return {"mean": t["mean"].to(stats), "rstd": torch.rsqrt(t["variance"].to(stats) + s["eps"]),
            "bias": torch.zeros_like(t["W"])}


def _group_norm_grad(X, W, grad_out, mean, var, eps, rstd=None, bias=None):
    """aten's group norm backward (what autograd calls for F.group_norm) from the saved mean and 1/std;
    without them (the float64 reference) autograd of F.group_norm, whose statistics are X's own."""
    b, c, s = X.shape
    groups = mean.shape[1]
    if rstd is None:
        x, w = X.detach().requires_grad_(), W.detach().requires_grad_()
        with torch.enable_grad():
            y = F.group_norm(x, groups, w, torch.zeros_like(W), eps)
            grad_X, grad_W = torch.autograd.grad(y, (x, w), grad_out)
        return grad_X, grad_W, grad_out.sum((0, 2))
    return torch.ops.aten.native_group_norm_backward(grad_out, X, mean, rstd, W, b, c, s, groups, [True, True, True])


def _group_norm_statistics(t, s):
    """Each group's mean and variance of X, in float32 (what `dt grad --save mean,var` has the forward
    store: a statistic in the compute dtype) or float64 in the reference."""
    X = t["X"]
    groups = t["mean"].shape[1]
    x = X.reshape(X.shape[0], groups, -1)
    x = x if x.dtype == torch.float64 else x.float()
    return {"mean": x.mean(-1), "var": x.var(-1, unbiased=False)}


def _group_norm_saved(t, s):
    """What autograd's forward saves for F.group_norm: each group's mean and 1/std in X's dtype (aten's
    group norm keeps no float32 statistics for half-precision inputs, unlike its layer norm)."""
    dtype = t["X"].dtype
    return {"mean": t["mean"].to(dtype), "rstd": torch.rsqrt(t["var"] + s["eps"]).to(dtype),
            "bias": torch.zeros_like(t["W"])}


def _liger_group_norm_grad(lf, t, s):
    """Liger's group norm backward from the same statistics (its forward also stores them in X's dtype)."""
    from liger_kernel.ops.group_norm import group_norm_backward
    X, W, bias, dY, mean, rstd = (t[n] for n in ("X", "W", "bias", "grad_out", "mean", "rstd"))
    return lambda: group_norm_backward(dY, X, W, bias, mean, rstd, X.shape[1], mean.shape[1])


def _conv1d_grad(X, W, B, grad_out, pre=None):
    """The backward of F.silu(F.conv1d(X, W, B, padding=width - 1, groups=c)[..., :t]) as autograd runs
    it from what the forward saved (the convolution's output `pre`, X and W): silu's backward, the
    slice's (the gradient padded with zeros), then aten.convolution_backward; without `pre` (the
    float64 reference) autograd of the forward."""
    width, (b, c, t) = W.shape[1], X.shape
    if pre is None:
        x, w, bias = (v.detach().requires_grad_() for v in (X, W, B))
        with torch.enable_grad():
            return torch.autograd.grad(_conv1d(x, w, bias), (x, w, bias), grad_out)
    grad_pre = torch.ops.aten.silu_backward(grad_out, pre)
    padded = grad_pre.new_zeros((b, c, t + width - 1))
    padded[..., :t] = grad_pre
    grad_X, grad_W, grad_B = torch.ops.aten.convolution_backward(
        padded, X, W[:, None, :], [c], [1], [width - 1], [1], False, [0], c, [True, True, True])
    return grad_X, grad_W[:, 0, :], grad_B


def _conv1d_saved(t, s):
    return {"pre": _causal_conv(t["X"], t["W"], t["B"])}  # what silu saves: its input, cut to t


def _softmax_grad(A, grad__softmax, _max=None, _sum=None, out=None):
    """aten's softmax backward from the saved output (what dt's forward saved, _max and _sum, is dt's alone)."""
    if out is None:
        out = torch.softmax(A, dim=-1)
    return torch.ops.aten._softmax_backward_data(grad__softmax, out, -1, A.dtype)


def _softmax_saved(t, s):
    return {"out": torch.softmax(t["A"], dim=-1)}  # what autograd saves for softmax's backward


def _swiglu_grad(G, U, grad_swiglu, silu=None):
    """The backward of F.silu(G) * U as autograd runs it: mul's, from its saved operands silu(G) and
    U, then aten.silu_backward into G's gradient."""
    if silu is None:
        silu = F.silu(G)
    return torch.ops.aten.silu_backward(grad_swiglu * U, G), grad_swiglu * silu


def _swiglu_saved(t, s):
    return {"silu": F.silu(t["G"])}  # what autograd saves for the product (with U)


def _rope_grad(C, S, grad_q_out, grad_k_out):
    """The backward of Q * cos + rotate_half(Q) * sin (and K's) as autograd runs it: the products'
    gradients, and rotate_half's (cat's slices, the negation) sending g * sin half a row back."""
    cos, sin = C[:, None, :], S[:, None, :]

    def back(g):
        rotated = g * sin
        half = rotated.shape[-1] // 2
        return g * cos + torch.cat([rotated[..., half:], -rotated[..., :half]], dim=-1)
    return back(grad_q_out), back(grad_k_out)


def _rope_interleaved_grad(C, S, grad_q_out, grad_k_out):
    """The backward of interleaved RoPE (each pair (e, o) of a row to (e cos - o sin, o cos + e sin),
    cos and sin of half-width tables): (ge cos + go sin, go cos - ge sin) for each pair of gradients,
    what autograd computes through the forward's torch code (its products, stack and unflatten)."""
    cos, sin = C[:, None, :], S[:, None, :]

    def back(g):
        pairs = g.unflatten(-1, (-1, 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        return torch.stack([even * cos + odd * sin, odd * cos - even * sin], dim=-1).flatten(-2)
    return back(grad_q_out), back(grad_k_out)


def _cross_entropy_grad(L, T, grad_loss, row_max=None, row_sum=None, logp=None, total_weight=None):
    """F.cross_entropy(reduction='none')'s backward as autograd runs it: nll_loss's, then log_softmax's.
    What dt's forward saved (row_max, row_sum) is dt's alone."""
    if logp is None:
        logp = torch.log_softmax(L, dim=-1)
    if total_weight is None:
        total_weight = torch.zeros((), dtype=logp.dtype, device=logp.device)
    g = torch.ops.aten.nll_loss_backward(grad_loss, logp, T, None, 0, -100, total_weight)  # 0: reduction none
    return torch.ops.aten._log_softmax_backward_data(g, logp, 1, L.dtype)


def _cross_entropy_saved(t, s):
    logp = torch.log_softmax(t["L"], dim=-1)  # what autograd saves for the backward
    return {"logp": logp, "total_weight": torch.zeros((), dtype=logp.dtype, device=logp.device)}


def _embedding_grad(I, grad_out, rows=None):
    """aten.embedding_dense_backward: `rows` is the table's (the largest id + 1 without it)."""
    rows = int(I.max()) + 1 if rows is None else rows
    return torch.ops.aten.embedding_dense_backward(grad_out, I, rows, -1, False)


def _embedding_saved(t, s):
    return {"rows": int(t["I"].max()) + 1}  # read once here, outside the timing


def _causal_attention_grad(Q, K, V, grad_attention, mx=None, dvsr=None, attention=None, flash=None):
    """(grad_Q, grad_K, grad_V): flash attention's backward from its forward's saved output and
    logsumexp (what autograd calls on an H100); without them (the float64 reference, the CPU) the
    gradient of F.scaled_dot_product_attention by autograd, forward included. What dt's forward
    saved (mx, dvsr, attention) is dt's alone."""
    if flash is not None:
        out, lse, cum_q, cum_k, max_q, max_k, seed, offset = flash
        return tuple(torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad_attention, Q, K, V, out, lse, cum_q, cum_k, max_q, max_k, 0.0, True, seed, offset))
    q, k, v = (x.detach().requires_grad_() for x in (Q, K, V))
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(out, (q, k, v), grad_attention)


@functools.cache
def _saving_forward(example: str, saved: tuple[str, ...]):
    """dt's forward of examples/<example>.dt that also returns the Funcs `saved` (its statistics in
    float32: save())."""
    import dt
    return dt.grad(dt.load(EXAMPLES / f"{example}.dt"), save=saved)[0]


def _saved_by_dt(example: str, saved: tuple[str, ...], reads: tuple[str, ...]):
    """A row's Kernel.saved: what dt's forward saves for its backward, run on the row's inputs
    `reads` (Triton on a GPU, the interpreter in a dry run)."""
    def make(t, s):
        inputs = {n: t[n] for n in reads}
        backend = "triton" if next(iter(inputs.values())).is_cuda else "interp"
        out = _saving_forward(example, saved)(backend=backend, **inputs)
        return {name: out[name] for name in saved}
    return make


def _flash_saved(t, s):
    Q, K, V = t["Q"], t["K"], t["V"]
    if not Q.is_cuda or Q.dtype not in (torch.float16, torch.bfloat16):
        return {}  # a dry run: autograd, forward included
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
        Q, K, V, 0.0, True, False)
    return {"flash": (out, lse, cum_q, cum_k, max_q, max_k, seed, offset)}


def _cudnn_backward(t, e, s):
    """cuDNN's attention backward: the forward runs once here, outside the timing, under SDPA's
    cuDNN backend, and the timed call runs the autograd graph it saved (cuDNN's backward node);
    aten's cuDNN backward op cannot be called from Python without a bias (its schema takes one).
    On the CPU (a dry run), the math backend's."""
    q, k, v = (t[n].detach().requires_grad_() for n in ("Q", "K", "V"))
    grad = t["grad_attention"]
    with torch.enable_grad():
        if q.is_cuda:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


# ----------------------------------------------------------------------- Liger calls
# Each gets the row's tensors together with what torch_saved made (Liger's forwards save the same:
# float32 1/rms, mean and 1/std, the softmax's output).
def _liger_rmsnorm_grad(lf, t, s):
    from liger_kernel.ops.rms_norm import rms_norm_backward
    from liger_kernel.ops.utils import calculate_settings
    dY, A, W, rstd = t["grad_rmsnorm"], t["A"], t["W"], t["rstd"].view(-1)
    block, warps = calculate_settings(A.shape[-1])
    # Liger's defaults: offset 0, 'llama' casting; in_place=False keeps grad_rmsnorm for the next run
    return lambda: rms_norm_backward(dY, A, W, rstd, 0.0, "llama", block, warps, False, None)


def _liger_layernorm_grad(lf, t, s):
    from liger_kernel.ops.layer_norm import layer_norm_backward
    dY, A, W, bias, mean, rstd = (t[n] for n in ("grad_layernorm", "A", "W", "bias", "mean", "rstd"))
    return lambda: layer_norm_backward(dY, A, W, bias, mean, rstd)


def _liger_softmax_grad(lf, t, s):
    from liger_kernel.ops.softmax import _softmax_backward
    from liger_kernel.ops.utils import calculate_settings
    dY, out = t["grad__softmax"], t["out"]
    block, warps = calculate_settings(out.shape[-1])
    return lambda: _softmax_backward(dY, out, block, warps, out.shape[-1] > block)


def _liger_swiglu_grad(lf, t, s):
    """Liger's backward recomputes silu(G) and writes both gradients over the G and U its forward
    saved: copies made here, overwritten by every call (the same work whatever they hold)."""
    from liger_kernel.ops.swiglu import swiglu_backward
    G, U, dc = t["G"].clone(), t["U"].clone(), t["grad_swiglu"]
    return lambda: swiglu_backward(G, U, dc)


def _liger_rope_grad(lf, t, s):
    """Liger's rope_backward takes the gradients as [b, h, s, d] views of [b, s, h, d] memory and
    rotates them in place: copies made here, outside the timing."""
    from liger_kernel.ops.rope import rope_backward
    dq, dk = t["grad_q_out"].clone().transpose(1, 2), t["grad_k_out"].clone().transpose(1, 2)
    cos, sin = t["C"][None], t["S"][None]

    def call():
        grad_q, grad_k = rope_backward(dq, dk, cos, sin)
        return grad_q.transpose(1, 2), grad_k.transpose(1, 2)
    return call


def _liger_cross_entropy_grad(lf, t, s):
    """Liger computes the gradient inside its forward kernel (written over the logits, which it
    reads once) and its backward scales it by grad_loss: the timed call runs both, the forward
    also writing the loss. The logits are a copy made here (the kernel overwrites them)."""
    from liger_kernel.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward
    L, T, grad_loss = t["L"].detach().clone().requires_grad_(), t["T"], t["grad_loss"]

    def call():
        *_, grad = cross_entropy_forward(L, T, None, -100, 0.0, 0.0, "none", None, False)
        return cross_entropy_backward(grad, grad_loss)
    return call


def _liger_embedding_grad(lf, t, s):
    """Liger's (experimental) embedding backward: a zeroed table (in grad_out's dtype, the table's), then
    atomic adds; its forward saves the ids and the table, whose shape and dtype alone it reads."""
    from liger_kernel.ops.experimental.embedding import LigerEmbeddingFunction
    grad_out = t["grad_out"]
    table = torch.empty((t["rows"], grad_out.shape[1]), dtype=grad_out.dtype, device=grad_out.device)
    ctx = types.SimpleNamespace(saved_tensors=(t["I"], table))
    return lambda: LigerEmbeddingFunction.backward(ctx, grad_out)[0]


# ----------------------------------------------------------------------- bytes moved
def _norm_bytes(vectors, statistics):
    """A row-wise norm's backward: A and the incoming gradient read, grad_A written; `vectors`
    row-length vectors (W, grad_W, grad_Bias) and `statistics` per row (dt's in the row's dtype)."""
    return lambda e, item: (3 * e["x"] * e["y"] + vectors * e["y"] + statistics * e["x"]) * item


def _cross_entropy_bytes(e, item):
    # the logits read, their gradient written; T, grad_loss, and dt's two float32 statistics a row (the
    # baselines read the saved log-softmax instead of the logits: the same bytes)
    return 2 * e["r"] * e["v"] * item + e["r"] * (8 + item + 8)


def _embedding_bytes(e, item):
    # ids and the incoming gradient read, the whole table's gradient written (zeros where no id is)
    return e["t"] * 8 + e["t"] * e["d"] * item + e["E_axis0"] * e["d"] * item


def _attention_bytes(e, item):
    """Q, K, V, grad_attention and the saved output read, grad_Q, grad_K and grad_V written, and
    two float32 statistics a row read (flash's logsumexp is one)."""
    heads = e["b"] * e["h"]
    return heads * ((2 * e["m"] * e["k"] + 2 * e["l"] * (e["k"] + e["n"]) + 2 * e["m"] * e["n"]) * item + 8 * e["m"])


def _attention_backward_gemms(e):
    """The five products of flash attention's backward (scores, dP, dV, dK, dQ), each half the
    square (causal): the work the baselines do. dt's derived program does six, over the whole square."""
    rows, keys = e["b"] * e["h"] * e["m"], e["l"] // 2
    cols = e["b"] * e["h"] * e["l"]
    return [(rows, keys, e["k"]), (rows, keys, e["n"]), (cols, e["n"], e["m"] // 2), (cols, e["k"], e["m"] // 2),
            (rows, e["k"], keys)]


# ----------------------------------------------------------------------- the catalogue
_NORM_SHAPES, _NORM_QUICK, _NORM_TINY = ((4096, 4096), (16384, 4096)), ((4096, 4096),), ((8, 256), (5, 100))
_GRAD = SCHEDULE_DIR


def _attention_grad_kernel():
    shapes = tuple((4, 16, s, s, d, d) for d in (64, 128) for s in (2048, 4096))
    return Kernel("causal_mha_grad", MATMUL, _GRAD / "causal_mha_grad.dt",
                  {"Q": ("b", "h", "m", "k"), "K": ("b", "h", "l", "k"), "V": ("b", "h", "l", "n"),
                   "grad_attention": ("b", "h", "m", "n"), "mx": ("b", "h", "m"), "dvsr": ("b", "h", "m"),
                   "attention": ("b", "h", "m", "n")},
                  ("b", "h", "m", "k"), {}, ("b", "h", "m", "l", "k", "n"), shapes,
                  ((4, 16, 2048, 2048, 64, 64), (4, 16, 2048, 2048, 128, 128)), ((1, 2, 70, 70, 16, 16),),
                  ("bf16",), _causal_attention_grad, gemms=_attention_backward_gemms, sdpa=_cudnn_backward,
                  moved=_attention_bytes, torch_saved=_flash_saved, saved=_saved_by_dt("llm/causal_mha", ("mx", "dvsr", "attention"), ("Q", "K", "V")),
                  # the float64 reference (autograd of the math backend) holds about three score matrices
                  reference_bytes=lambda e: 3 * e["b"] * e["h"] * e["m"] * e["l"] * 8,
                  notes="causal attention's backward, [b, h, s, d]: grad_Q, grad_K, grad_V from grad_attention. "
                        "dt's derived program (examples/llm/causal_mha.dt, its output and each row's max and sum "
                        "saved by its forward, the statistics in float32: `dt grad --save mx,dvsr,attention`) "
                        "reads the output back for the numerator; its max gets no gradient (no output changes "
                        "with it). dt runs that algorithm with a flash-style schedule written by hand "
                        "(causal_mha_grad_flash.dt: a row sum of grad_attention and the output, then grad_K with "
                        "grad_V and grad_Q each recomputing their tiles of scores, nothing of [b, h, s, s] stored, "
                        "the tiles above the diagonal skipped). Eager is "
                        "flash attention's backward (the aten op autograd calls on an H100) from its forward's "
                        "saved output and logsumexp, SDPA cuDNN's backward (its saved autograd graph); "
                        "torch.compile calls the same flash op. TFLOP/s count "
                        "flash's five products, half the square each.")


def _rope_grad_kernel(name, fn, liger, tables, notes):
    """A RoPE backward row: the forward's shapes (benchmarks/gpu/llm.py), its cos and sin tables of
    the full width of d (Hugging Face's) or half of it (`tables`)."""
    half = tables == "half"
    width = ("C_axis1",) if half else ()
    table = ("s", "C_axis1") if half else ("s", "d")
    shapes = tuple((b, s, 32, 8, 128) + ((64,) if half else ()) for b, s in ((1, 4096), (4, 2048), (8, 1000)))
    return Kernel(name, MEMORY, _GRAD / f"{name}.dt", {"C": table, "S": table, "grad_q_out": ("b", "s", "h", "d"),
                                                       "grad_k_out": ("b", "s", "kh", "d")},
                  ("b", "s", "h", "d"), {}, ("b", "s", "h", "kh", "d") + width, shapes, shapes[1:2],
                  ((1, 5, 3, 1, 12) + ((6,) if half else ()),), DTYPES, fn, liger=liger,
                  made_inputs={"C": _rope_table(torch.cos, table[1], not half),
                               "S": _rope_table(torch.sin, table[1], not half)}, notes=notes)


BACKWARD_KERNELS: dict[str, Kernel] = {k.name: k for k in [
    Kernel("rmsnorm_grad", MEMORY, _GRAD / "rmsnorm_grad.dt",
           {"A": ROWS, "W": ("y",), "grad_rmsnorm": ROWS, "ms": ("x",)}, ROWS, {"eps": 1e-6}, ROWS,
           _NORM_SHAPES, _NORM_QUICK, _NORM_TINY, DTYPES, _rmsnorm_grad, liger=_liger_rmsnorm_grad,
           made_inputs={"ms": _positive("x", 0.25, 4.0)}, moved=_norm_bytes(2, 1), torch_saved=_rmsnorm_saved,
           notes="RMSNorm's backward (benchmarks/gpu/schedules/rmsnorm.dt): grad_A and grad_W. Saved: the mean "
                 "square ms (dt, in the row's dtype) or 1/rms (the baselines, float32, from the same values); "
                 "recomputed: nothing. Eager is aten._fused_rms_norm_backward (what autograd calls for "
                 "F.rms_norm), Liger its rms_norm_backward ('llama' casting)."),
    Kernel("layernorm_grad", MEMORY, _GRAD / "layernorm_grad.dt",
           {"A": ROWS, "W": ("y",), "grad_layernorm": ROWS, "mean": ("x",), "variance": ("x",)}, ROWS,
           {"eps": 1e-5}, ROWS, _NORM_SHAPES, _NORM_QUICK, _NORM_TINY, DTYPES, _layernorm_grad,
           liger=_liger_layernorm_grad, made_inputs={"variance": _positive("x", 0.25, 4.0)},
           saved=_layernorm_statistics, moved=_norm_bytes(3, 2), torch_saved=_layernorm_saved,
           notes="LayerNorm's backward (examples/layernorm.dt): grad_A, grad_W, grad_Bias. Saved: each row's "
                 "mean and variance of A (dt, in the row's dtype) or mean and 1/std (the baselines, float32, from "
                 "the same values); recomputed: nothing. Eager is aten.native_layer_norm_backward (what autograd "
                 "calls), Liger its layer_norm_backward. The hand-written DT backward is layernorm_backward."),
    Kernel("softmax_grad", MEMORY, _GRAD / "softmax_grad.dt",
           {"A": ROWS, "grad__softmax": ROWS, "_max": ("x",), "_sum": ("x",)}, ROWS, {}, ROWS,
           _NORM_SHAPES, _NORM_QUICK, _NORM_TINY, DTYPES, _softmax_grad, liger=_liger_softmax_grad,
           torch_saved=_softmax_saved, saved=_saved_by_dt("softmax_safe", ("_max", "_sum"), ("A",)),
           notes="softmax's backward (examples/softmax_safe.dt). dt's forward saves each row's max and sum "
                 "(float32: `dt grad --save _max,_sum`; the max gets no gradient) and the backward reads A "
                 "with them; the baselines read the forward's saved output instead of A (the same bytes): "
                 "eager is aten._softmax_backward_data (what autograd calls), Liger its _softmax_backward."),
    Kernel("swiglu_grad", MEMORY, _GRAD / "swiglu_grad.dt",
           {"G": ("t", "f"), "U": ("t", "f"), "grad_swiglu": ("t", "f")}, ("t", "f"), {}, ("t", "f"),
           ((4096, 14336), (8192, 11008)), ((4096, 14336),), ((7, 300), (5, 2100)), DTYPES, _swiglu_grad,
           liger=_liger_swiglu_grad, moved=lambda e, item: 5 * e["t"] * e["f"] * item, torch_saved=_swiglu_saved,
           notes="SwiGLU's backward (examples/llm/swiglu.dt): grad_G and grad_U, one kernel, silu(G) recomputed. "
                 "Eager is what autograd calls for F.silu(G) * U (mul's backward from the saved silu(G) and U, "
                 "then aten.silu_backward), Liger its swiglu_backward (recomputes, writes over G and U)."),
    _rope_grad_kernel("rope_grad", _rope_grad, _liger_rope_grad, "full",
                      "rotate-half RoPE's backward (examples/llm/rope.dt, `dt grad --wrt Q,K`): grad_Q and grad_K, "
                      "one kernel (grad_K fused into grad_Q's as the forward fuses k_out into q_out's), the "
                      "gradients read half a row round the other way; nothing saved. Eager is what autograd runs "
                      "for the forward's torch code (products, cat's slices, a negation), Liger its rope_backward "
                      "(in place)."),
    _rope_grad_kernel("rope_interleaved_grad", _rope_interleaved_grad, None, "half",
                      "interleaved RoPE's backward (examples/llm/rope_interleaved.dt, `dt grad --wrt Q,K`): grad_Q "
                      "and grad_K, one kernel; each lane's partner in its pair from the loaded row, lanes swapped in "
                      "pairs. Eager and torch.compile run the backward autograd computes for the forward's torch "
                      "code, written out; no Liger kernel has this form."),
    Kernel("cross_entropy_grad", MEMORY, _GRAD / "cross_entropy_grad.dt",
           {"L": ("r", "v"), "T": ("r",), "grad_loss": ("r",), "row_max": ("r",), "row_sum": ("r",)}, ("r", "v"), {},
           ("r", "v"),
           ((4096, 128256), (8192, 32000)), ((4096, 128256),), ((6, 5003),), DTYPES, _cross_entropy_grad,
           liger=_liger_cross_entropy_grad, made_inputs={"T": _targets}, moved=_cross_entropy_bytes,
           torch_saved=_cross_entropy_saved, saved=_saved_by_dt("llm/cross_entropy", ("row_max", "row_sum"), ("L", "T")),
           notes="the logits' gradient of F.cross_entropy(reduction='none', ignore_index -100, one target in "
                 "eight): dt's derived program (examples/llm/cross_entropy.dt, its forward saving each row's max "
                 "and sum in float32: `dt grad --save row_max,row_sum`; the max gets no gradient, no output "
                 "changes with it) writes the softmax's gradient in one walk of the logits and adds "
                 "-grad_loss at the target (an update: atomics), as its default schedule does; eager is what "
                 "autograd calls, aten.nll_loss_backward then aten._log_softmax_backward_data, from the "
                 "forward's saved log-softmax; Liger has no backward of its own (its forward writes the "
                 "gradient over the logits, its backward scales it): its column times both."),
    Kernel("embedding_grad", MEMORY, _GRAD / "embedding_grad.dt", {"I": ("t",), "grad_out": ("t", "d")},
           ("E_axis0", "d"), {}, ("t", "d", "E_axis0"), ((4096, 4096, 128256), (16384, 4096, 128256)),
           ((4096, 4096, 128256),), ((7, 33, 50),), DTYPES, _embedding_grad, liger=_liger_embedding_grad,
           made_inputs={"I": _ids_with_the_last("E_axis0", "t")}, dt_sizes=("E_axis0",),
           moved=_embedding_bytes, torch_saved=_embedding_saved,
           notes="the table's gradient of F.embedding (Llama 3's 128,256 x 4096 table): zeros, plus each "
                 "token's gradient added at its id. dt's derived program writes zeros, then adds with atomics "
                 "in the table's dtype (the table's rows passed as a size: no input gives them); eager is "
                 "aten.embedding_dense_backward (what autograd calls: sorts the ids, deterministic), Liger "
                 "its experimental embedding backward (atomics in the table's dtype)."),
    Kernel("group_norm_grad", MEMORY, _GRAD / "group_norm_grad.dt",
           {"X": ("b", "c", "s"), "W": ("c",), "grad_out": ("b", "c", "s"), "mean": ("b", "g"), "var": ("b", "g")},
           ("b", "c", "s"), {"eps": 1e-5}, ("b", "c", "s", "g", "cg"),
           ((8, 512, 4096, 32, 16), (2, 320, 4096, 32, 10), (16, 256, 1000, 32, 8)), ((8, 512, 4096, 32, 16),),
           ((2, 96, 37, 32, 3),), DTYPES, _group_norm_grad, liger=_liger_group_norm_grad, dt_sizes=("g", "cg"),
           saved=_group_norm_statistics, torch_saved=_group_norm_saved,
           moved=lambda e, item: 3 * e["b"] * e["c"] * e["s"] * item + 2 * e["c"] * item + 2 * e["b"] * e["g"] * 4,
           notes="F.group_norm's backward with 32 groups (examples/llm/group_norm.dt, `dt grad --save mean,var`): "
                 "grad_X, grad_W, grad_Bias. Saved: each group's mean and variance of X (dt, float32) or mean "
                 "and 1/std (the baselines, in X's dtype as their forwards store them, from the same values). Eager "
                 "is aten.native_group_norm_backward (what autograd calls), Liger its group_norm_backward."),
    Kernel("conv1d_grad", MEMORY, _GRAD / "conv1d_grad.dt",
           {"X": ("b", "c", "t"), "W": ("c", "j"), "B": ("c",), "grad_out": ("b", "c", "t")}, ("b", "c", "t"), {},
           ("b", "c", "t", "j"), ((4, 2048, 4096, 4), (8, 5120, 2048, 4), (1, 1536, 1000, 4)),
           ((4, 2048, 4096, 4),), ((2, 5, 300, 4),), DTYPES, _conv1d_grad, torch_saved=_conv1d_saved,
           moved=lambda e, item: 3 * e["b"] * e["c"] * e["t"] * item,
           notes="Mamba's causal depthwise conv1d (width 4, bias, SiLU; examples/llm/conv1d.dt)'s backward: grad_X, "
                 "grad_W, grad_B. dt's derived program recomputes the convolution from X (no save); eager is what "
                 "autograd runs from the forward's saved convolution output: aten.silu_backward, the slice's "
                 "zero padding, aten.convolution_backward (cuDNN); no Liger kernel has it."),
    _attention_grad_kernel(),
]}
