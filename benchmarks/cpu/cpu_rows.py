"""The CPU benchmark's kernels and rows, and what each provider calls.

Each kernel is the GPU catalogue's (benchmarks/gpu/cases.py: its DT inputs, dimensions,
scalars, FLOPs, and the PyTorch function that torch.compile compiles and that, on float64
copies of the inputs, is the reference), with CPU shapes, dt's CPU schedules, and the calls
of PyTorch eager and NumPy written for the same semantics (softmax and attention subtract
each row's max). A row's output is either preallocated, every provider writing into one
array passed as `out=`, or allocated by every provider on every call: preallocated unless
one of the row's providers has no `out=` (SDPA). Temporaries are each provider's own (dt's
entry function allocates its temporaries on every call too).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "gpu"), str(HERE.parents[1])]  # the GPU catalogue; dt from this checkout

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cases import EXAMPLES, KERNELS, MATMUL, ROOT, Case, Kernel  # noqa: E402

SCHEDULES = HERE / "schedules"
PROVIDERS = ("dt", "eager", "compile", "numpy", "sdpa")
PREALLOCATED, ALLOCATED = "preallocated", "allocated"


@dataclass(frozen=True)
class CpuKernel:
    kernel: Kernel                   # the GPU catalogue's, or one of its kind
    shapes: tuple[tuple[int, ...], ...]  # full-size rows, extents in kernel.dims order
    quick: tuple[int, ...]           # the tiny row of --quick (extents that divide no tile)
    schedules: tuple[Path, ...]      # dt's: the first is provider "dt", the others "dt@<file stem>"
    eager: Callable                  # (tensors, scalars, out or None) -> the call PyTorch eager times
    numpy: Callable                  # (arrays, scalars, out or None) -> the call NumPy times
    calls: dict[str, str]            # provider -> what it runs, as the report says it
    sdpa: Callable | None = None     # (tensors) -> F.scaled_dot_product_attention's call (it allocates)


# ----------------------------------------------------------------------- PyTorch eager
# Each returns the call; out=None makes every op allocate its result.
def _eager_add(t, s, out):
    A, B, alpha = t["A"], t["B"], s["alpha"]
    return lambda: torch.add(A, B, out=out).mul_(alpha)


def _eager_relu(t, s, out):
    A = t["A"]
    return lambda: torch.clamp_min(A, 0, out=out)


def _eager_swish(t, s, out):  # the catalogue's beta is 1: SiLU, one fused op
    A = t["A"]
    return (lambda: F.silu(A)) if out is None else (lambda: torch.ops.aten.silu.out(A, out=out))


def _eager_dyt(t, s, out):
    A, gamma, beta, alpha = t["A"], t["gamma"], t["beta"], s["alpha"]

    def dyt():
        o = torch.tanh(torch.mul(A, alpha, out=out), out=out)
        return torch.addcmul(beta, o, gamma, out=o)
    return dyt


def _eager_softmax(t, s, out):
    A = t["A"]
    return lambda: torch.softmax(A, 1, out=out)


def _eager_layernorm(t, s, out):
    A, W, Bias, eps = t["A"], t["W"], t["Bias"], s["eps"]
    if out is None:
        return lambda: F.layer_norm(A, (A.shape[1],), W, Bias, eps)
    # F.layer_norm has no out=; its op does, and also writes each row's mean and 1/std
    mean, rstd = torch.empty(A.shape[0], 1), torch.empty(A.shape[0], 1)
    return lambda: torch.ops.aten.native_layer_norm.out(A, [A.shape[1]], W, Bias, eps, out0=out, out1=mean,
                                                        out2=rstd)[0]


def _eager_matmul(t, s, out):
    A, B = t["A"], t["B"]
    return lambda: torch.mm(A, B, out=out)


def _eager_mmsigmoid(t, s, out):
    A, B = t["A"], t["B"]
    return lambda: torch.sigmoid(torch.mm(A, B, out=out), out=out)


def _eager_2mm(t, s, out):
    A, B, C = t["A"], t["B"], t["C"]
    return lambda: torch.mm(torch.mm(A, B), C, out=out)


def _eager_attention(t, s, out):
    A, B, C = t["A"], t["B"], t["C"]
    scale = 1 / math.sqrt(A.shape[1])
    return lambda: torch.mm(torch.softmax(torch.mm(A, B).mul_(scale), 1), C, out=out)


def _eager_heads(t, s, out):
    Q, K, V = t["Q"], t["K"], t["V"]
    scale = 1 / math.sqrt(Q.shape[-1])
    return lambda: torch.matmul(torch.softmax(torch.matmul(Q, K.transpose(-1, -2)).mul_(scale), -1), V, out=out)


def _sdpa_2d(t):
    """One head as SDPA takes it, [1, 1, m, k]; K transposed to (l x k) outside the timing."""
    q, k, v = t["A"][None, None], t["B"].t().contiguous()[None, None], t["C"][None, None]
    return lambda: F.scaled_dot_product_attention(q, k, v)[0, 0]


def _sdpa_heads(t):
    Q, K, V = t["Q"], t["K"], t["V"]
    return lambda: F.scaled_dot_product_attention(Q, K, V)


# ----------------------------------------------------------------------- NumPy
def _numpy_add(a, s, out):
    A, B, alpha = a["A"], a["B"], s["alpha"]

    def add():
        o = np.add(A, B, out=out)
        return np.multiply(o, alpha, out=o)
    return add


def _numpy_relu(a, s, out):
    A = a["A"]
    return lambda: np.maximum(A, 0, out=out)


def _numpy_swish(a, s, out):  # beta = 1: x / (1 + exp(-x))
    A = a["A"]

    def swish():
        o = np.exp(np.negative(A, out=out), out=out)
        return np.divide(A, np.add(o, 1, out=o), out=o)
    return swish


def _numpy_dyt(a, s, out):
    A, gamma, beta, alpha = a["A"], a["gamma"], a["beta"], s["alpha"]

    def dyt():
        o = np.tanh(np.multiply(A, alpha, out=out), out=out)
        return np.add(np.multiply(o, gamma, out=o), beta, out=o)
    return dyt


def _numpy_softmax(a, s, out):
    A = a["A"]

    def softmax():
        o = np.exp(np.subtract(A, A.max(axis=1, keepdims=True), out=out), out=out)
        return np.divide(o, o.sum(axis=1, keepdims=True), out=o)
    return softmax


def _numpy_layernorm(a, s, out):
    A, W, Bias, eps = a["A"], a["W"], a["Bias"], s["eps"]
    n = A.shape[1]

    def layernorm():
        o = np.subtract(A, A.mean(axis=1, keepdims=True), out=out)
        var = np.einsum("ij,ij->i", o, o) / n
        np.multiply(o, (1 / np.sqrt(var + eps))[:, None], out=o)
        return np.add(np.multiply(o, W, out=o), Bias, out=o)
    return layernorm


def _numpy_matmul(a, s, out):
    A, B = a["A"], a["B"]
    return lambda: np.matmul(A, B, out=out)


def _numpy_mmsigmoid(a, s, out):
    A, B = a["A"], a["B"]

    def mmsigmoid():
        with np.errstate(over="ignore"):  # exp(-x) = inf where x < -88: sigmoid's 0, as it should be
            o = np.exp(np.negative(np.matmul(A, B, out=out), out=out), out=out)
        return np.reciprocal(np.add(o, 1, out=o), out=o)
    return mmsigmoid


def _numpy_2mm(a, s, out):
    A, B, C = a["A"], a["B"], a["C"]
    return lambda: np.matmul(np.matmul(A, B), C, out=out)


def _numpy_softmax_rows(scores):
    """Softmax over the last axis of `scores`, in place, the max subtracted."""
    np.subtract(scores, scores.max(axis=-1, keepdims=True), out=scores)
    np.exp(scores, out=scores)
    return np.divide(scores, scores.sum(axis=-1, keepdims=True), out=scores)


def _numpy_attention(a, s, out):
    A, B, C = a["A"], a["B"], a["C"]
    scale = np.float32(1 / math.sqrt(A.shape[1]))
    return lambda: np.matmul(_numpy_softmax_rows(np.multiply(np.matmul(A, B), scale)), C, out=out)


def _numpy_heads(a, s, out):
    Q, K, V = a["Q"], a["K"], a["V"]
    scale = np.float32(1 / math.sqrt(Q.shape[-1]))
    return lambda: np.matmul(_numpy_softmax_rows(np.multiply(np.matmul(Q, K.swapaxes(-1, -2)), scale)), V, out=out)


# ----------------------------------------------------------------------- the catalogue
def _heads(Q, K, V):
    return torch.softmax(Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1]), dim=-1) @ V


HEADS = Kernel(
    "attention_safe_heads", MATMUL, SCHEDULES / "attention_safe_heads.dt",
    {"Q": ("b", "h", "m", "k"), "K": ("b", "h", "l", "k"), "V": ("b", "h", "l", "n")}, ("b", "h", "m", "n"), {},
    ("b", "h", "m", "l", "k", "n"), ((4, 8, 512, 512, 64, 64),), ((4, 8, 512, 512, 64, 64),),
    ((2, 3, 40, 72, 16, 8),), ("f32",), _heads, sdpa=True,
    gemms=lambda e: [(e["b"] * e["h"] * e["m"], e["l"], e["k"]), (e["b"] * e["h"] * e["m"], e["n"], e["l"])],
    notes="attention over batches and heads, Q, K, V as SDPA takes them ([b, h, m, k], [b, h, l, k], "
          "[b, h, l, n]); dt's products over these tiles run as scalar loops (issue 28).")

CPU = EXAMPLES / "cpu"
ROWWISE = ((4096, 4096), (128, 65536))
KERNEL_ROWS: dict[str, CpuKernel] = {name: CpuKernel({**KERNELS, HEADS.name: HEADS}[name], *rest) for name, *rest in [
    ("add", ((4096, 4096),), (5, 100), (CPU / "add.dt",), _eager_add, _numpy_add,
     {"eager": "torch.add(A, B, out=out).mul_(alpha)", "numpy": "np.add(A, B, out=out); np.multiply(out, alpha, "
      "out=out)"}),
    ("relu", ((4096, 4096),), (5, 100), (CPU / "relu.dt",), _eager_relu, _numpy_relu,
     {"eager": "torch.clamp_min(A, 0, out=out)", "numpy": "np.maximum(A, 0, out=out)"}),
    ("swish", ((4096, 4096),), (5, 100), (CPU / "swish.dt",), _eager_swish, _numpy_swish,
     {"eager": "torch.ops.aten.silu.out(A, out=out) (F.silu has no out=)",
      "numpy": "A / (1 + exp(-A)), each step with out=out"}),
    ("dyt", ROWWISE, (5, 100), (CPU / "dyt.dt",), _eager_dyt, _numpy_dyt,
     {"eager": "torch.mul, torch.tanh, torch.addcmul, each with out=out",
      "numpy": "np.multiply, np.tanh, np.multiply, np.add, each with out=out"}),
    ("softmax_safe", ROWWISE, (5, 100), (CPU / "softmax_safe.dt",), _eager_softmax, _numpy_softmax,
     {"eager": "torch.softmax(A, 1, out=out)", "numpy": "max, subtract, exp, sum, divide (out=out)"}),
    ("layernorm", ROWWISE, (5, 100), (EXAMPLES / "layernorm.dt",), _eager_layernorm, _numpy_layernorm,
     {"eager": "torch.ops.aten.native_layer_norm.out(..., out0=out, ...) (F.layer_norm has no out=; this op "
      "also writes each row's mean and 1/std)",
      "numpy": "mean, subtract, einsum (variance), multiply, multiply, add (out=out)"}),
    ("matmul", ((1024, 1024, 1024), (2048, 2048, 2048), (16, 4096, 4096)), (16, 40, 24),
     (CPU / "matmul.dt", SCHEDULES / "matmul_256x512.dt"),
     _eager_matmul, _numpy_matmul, {"eager": "torch.mm(A, B, out=out)", "numpy": "np.matmul(A, B, out=out)"}),
    ("mmsigmoid", ((1024, 1024, 1024),), (16, 40, 24), (SCHEDULES / "mmsigmoid.dt",), _eager_mmsigmoid,
     _numpy_mmsigmoid, {"eager": "torch.mm(A, B, out=out); torch.sigmoid(out, out=out)",
                        "numpy": "np.matmul(A, B, out=out), then 1 / (1 + exp(-out)) in place"}),
    ("2mm_outer", ((512, 1024, 32, 32),), (20, 40, 16, 24), (CPU / "2mm_outer.dt",), _eager_2mm, _numpy_2mm,
     {"eager": "torch.mm(torch.mm(A, B), C, out=out)", "numpy": "np.matmul(np.matmul(A, B), C, out=out)"}),
    ("2mm_inner", ((1024, 1024, 64, 64),), (40, 24, 16, 48), (CPU / "2mm_inner.dt",), _eager_2mm, _numpy_2mm,
     {"eager": "torch.mm(torch.mm(A, B), C, out=out)", "numpy": "np.matmul(np.matmul(A, B), C, out=out)"}),
    ("attention_safe", ((1024, 1024, 64, 64),), (100, 72, 16, 24),
     (SCHEDULES / "attention_safe_rows.dt", EXAMPLES / "attention_safe_onepass.dt", SCHEDULES / "attention_safe_flash.dt"),
     _eager_attention, _numpy_attention,
     {"eager": "torch.mm(torch.softmax(torch.mm(A, B).mul_(scale), 1), C)",
      "numpy": "np.matmul, multiply, max, subtract, exp, sum, divide, np.matmul",
      "sdpa": "F.scaled_dot_product_attention on [1, 1, m, k] views (one head; K transposed outside the "
              "timing)"}, _sdpa_2d),
    ("attention_safe_heads", HEADS.shapes, HEADS.tiny[0], (HEADS.program,), _eager_heads, _numpy_heads,
     {"eager": "torch.matmul(torch.softmax(torch.matmul(Q, K^T).mul_(scale), -1), V)",
      "numpy": "np.matmul (batched), multiply, max, subtract, exp, sum, divide, np.matmul",
      "sdpa": "F.scaled_dot_product_attention(Q, K, V)"}, _sdpa_heads),
]}
COMMON_CALLS = {"dt": "the generated module's entry function (what prog(...) runs), out=out or none",
                "compile": "torch.compile of the reference function; into out: out.copy_(f(...)) compiled, which "
                           "Inductor fuses into its last kernel, except after a product it hands to the BLAS "
                           "(matmul, 2mm): that lands in a buffer of Inductor's and is copied into out, one more pass "
                           "over the output than eager's torch.mm(..., out=out)"}


def rows(names, quick: bool = False) -> list[Case]:
    """The rows of the kernels `names` (full-size, or each kernel's tiny row), in f32."""
    out = []
    for name in names:
        k = KERNEL_ROWS[name]
        for shape in (k.quick,) if quick else k.shapes:
            out.append(Case(k.kernel, shape, "f32", k.kernel.extents(shape)))
    return out


def providers(case: Case, names) -> list[str]:
    """The row's providers among `names`, in that order: dt as "dt" and a "dt@<stem>" per other
    schedule; sdpa only for attention."""
    k = KERNEL_ROWS[case.kernel.name]
    out = []
    for name in names:
        if name == "dt":
            out += ["dt"] + [f"dt@{p.stem}" for p in k.schedules[1:]]
        elif name != "sdpa" or k.sdpa:
            out.append(name)
    return out


def schedule(case: Case, provider: str) -> Path:
    """The .dt file a dt provider of this row runs."""
    k = KERNEL_ROWS[case.kernel.name]
    return k.schedules[0] if provider == "dt" else next(p for p in k.schedules if f"dt@{p.stem}" == provider)


def output_mode(provider_names) -> str:
    """PREALLOCATED when every provider can write into `out=`, else ALLOCATED (for all of them)."""
    return ALLOCATED if "sdpa" in provider_names else PREALLOCATED


def relative(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
