"""The kernels, shapes and dtypes of issue 7, the PyTorch/Liger function each baseline
calls, the bytes and FLOPs each row must move or compute, and the table of DT schedules
(which .dt file the `dt` provider runs for each kernel, shape and dtype).

Every kernel's torch function is written once and serves three roles: PyTorch eager, the
function torch.compile compiles, and (on float64 copies of the inputs) the reference that
every provider is checked against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import devices
from devices import Device

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCHEDULE_DIR = Path(__file__).resolve().parent / "schedules"

MEMORY, MATMUL = "memory-bound", "matmul-like"


@dataclass(frozen=True)
class Kernel:
    name: str
    kind: str                                  # MEMORY or MATMUL
    program: Path                              # the DT program whose algorithm this is (its example)
    inputs: dict[str, tuple[str, ...]]         # DT input name -> its dimensions, in index order
    out_dims: tuple[str, ...]                  # the output's (of several: the largest's)
    scalars: dict[str, float]
    dims: tuple[str, ...]                      # the order shapes are written in
    shapes: tuple[tuple[int, ...], ...]        # full-size rows (extents in `dims` order)
    quick: tuple[tuple[int, ...], ...]         # the headline rows (--quick)
    tiny: tuple[tuple[int, ...], ...]          # CPU dry-run rows
    dtypes: tuple[str, ...]
    torch_fn: Callable                         # fn(**tensors, **scalars) -> tensor
    gemms: Callable[[dict], list] | None = None  # extents -> [(M, N, K)] of its matrix products
    liger: Callable | None = None              # (liger functional module, tensors, scalars) -> fn()
    sdpa: bool | Callable = False              # attention: also time F.scaled_dot_product_attention
    notes: str = ""
    # Inputs not drawn from the standard normal (ids, targets, block tables, int8 and fp8 data,
    # RoPE's cos/sin tables): name -> fn(extents, generator, device, the row's torch dtype)
    made_inputs: dict[str, Callable] = field(default_factory=dict)
    dt_sizes: tuple[str, ...] = ()             # extents the dt provider passes as sizes= (no input gives them)
    # (extents, item bytes) -> bytes moved, for kernels that read only part of an input (a gather)
    moved: Callable[[dict, int], int] | None = None
    # extents -> bytes the float64 reference holds besides the inputs (attention's scores)
    reference_bytes: Callable[[dict], int] | None = None
    # A backward row's (backward.py): (tensors, scalars) -> what autograd's forward saves for the
    # baselines where dt reads something else (1/rms for dt's mean square, the softmax's output, flash
    # attention's output and logsumexp), made outside the timing and passed to torch_fn, the Liger
    # call and the SDPA call as extra keyword arguments (torch_fn derives them itself without them:
    # the float64 reference)
    torch_saved: Callable[[dict, dict], dict] | None = None
    # A backward row's: (the row's inputs as drawn, scalars) -> the statistics dt's forward saves for
    # it (`dt grad --save`), computed from those inputs and replacing the drawn ones (a layer norm's
    # mean must be its input's: the derived gradient has a term that vanishes only then)
    saved: Callable[[dict, dict], dict] | None = None

    def extents(self, shape: tuple[int, ...]) -> dict[str, int]:
        return dict(zip(self.dims, shape))


@dataclass(frozen=True)
class Case:
    kernel: Kernel
    shape: tuple[int, ...]
    dtype: str
    extents: dict[str, int] = field(hash=False, compare=False, default_factory=dict)

    @property
    def shape_text(self) -> str:
        """As in the talk's plot titles: 'x=128, y=65536'."""
        return ", ".join(f"{d}={n}" for d, n in self.extents.items())

    @property
    def title(self) -> str:
        return f"{self.kernel.name} [{self.shape_text}] {self.dtype}"

    def input_shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.extents[d] for d in self.kernel.inputs[name])

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.extents[d] for d in self.kernel.out_dims)

    @property
    def bytes(self) -> int:
        """The fewest bytes the kernel must move: each input read once, the output written once,
        at the row dtype's size (or what the kernel's `moved` says: gathers, integer or 8-bit data)."""
        item = DTYPE_BYTES[self.dtype]
        if self.kernel.moved is not None:
            return self.kernel.moved(self.extents, item)
        n = sum(math.prod(self.input_shape(i)) for i in self.kernel.inputs) + math.prod(self.out_shape)
        return n * item

    @property
    def gemm_shapes(self) -> list[tuple[int, int, int]]:
        return self.kernel.gemms(self.extents) if self.kernel.gemms else []

    @property
    def flops(self) -> int | None:
        """Matrix-product FLOPs (2*M*N*K each); element-wise work is not counted."""
        return sum(2 * m * n * k for m, n, k in self.gemm_shapes) or None


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


# ----------------------------------------------------------------------- torch functions
def _dyt(A, gamma, beta, alpha):
    return gamma * torch.tanh(alpha * A) + beta


def _softmax(A):
    return torch.softmax(A, dim=-1)


def _layernorm(A, W, Bias, eps):
    return F.layer_norm(A, (A.shape[-1],), W, Bias, eps)


def _rmsnorm(A, W, eps):
    return F.rms_norm(A, (A.shape[-1],), W, eps)


def _relu(A):
    return torch.relu(A)


def _add(A, B, alpha):
    return alpha * (A + B)


def _swish(A, beta):
    # beta = 1 is SiLU, which a PyTorch user calls as one fused op
    return F.silu(A) if beta == 1.0 else A * torch.sigmoid(beta * A)


def _matmul(A, B):
    return A @ B


def _mmsigmoid(A, B):
    return torch.sigmoid(A @ B)


def _2mm(A, B, C):
    return (A @ B) @ C


def _attention(A, B, C):
    return torch.softmax((A @ B) / math.sqrt(A.shape[1]), dim=-1) @ C


# ----------------------------------------------------------------------- Liger calls
# Each returns the zero-argument callable that is timed; anything Liger needs that a model
# would hold as a parameter (DyT's alpha is a 1-element tensor) is made here, outside timing.
def _liger_dyt(lf, t, s):
    A, gamma, beta = t["A"], t["gamma"], t["beta"]
    alpha = torch.full((1,), s["alpha"], dtype=A.dtype, device=A.device)
    return lambda: lf.liger_dyt(A, alpha, gamma, beta)


def _liger_softmax(lf, t, s):
    A = t["A"]
    return lambda: lf.liger_softmax(A)


def _liger_layernorm(lf, t, s):
    A, W, Bias, eps = t["A"], t["W"], t["Bias"], s["eps"]
    return lambda: lf.liger_layer_norm(A, W, Bias, eps)


def _liger_rmsnorm(lf, t, s):
    A, W, eps = t["A"], t["W"], s["eps"]
    return lambda: lf.liger_rms_norm(A, W, eps)


# ----------------------------------------------------------------------- the catalogue
ROWS = ("x", "y")
LLM_ROWS = ((128, 65536), (4096, 4096), (4096, 8192), (4096, 1000))
TINY_ROWS = ((8, 256), (5, 100))
MEMORY_DTYPES = ("f32", "bf16")
MATMUL_DTYPES = ("f16", "bf16")


def _rowwise(name, program, inputs, fn, scalars=None, liger=None, quick=((4096, 4096),), notes=""):
    return Kernel(name, MEMORY, program, inputs, ROWS, scalars or {}, ROWS, LLM_ROWS, quick, TINY_ROWS,
                  MEMORY_DTYPES, fn, liger=liger, notes=notes)


def _two_gemms(e):
    return [(e["m"], e["l"], e["k"]), (e["m"], e["n"], e["l"])]


KERNELS: dict[str, Kernel] = {k.name: k for k in [
    _rowwise("dyt", EXAMPLES / "dyt.dt", {"A": ROWS, "gamma": ("y",), "beta": ("y",)}, _dyt,
             {"alpha": 0.5}, _liger_dyt, quick=((128, 65536),)),
    _rowwise("softmax", EXAMPLES / "softmax.dt", {"A": ROWS}, _softmax, liger=_liger_softmax,
             notes="DT's softmax is the talk's exp(A)/sum(exp(A)) without max-subtraction; PyTorch and "
                   "Liger subtract the row max (one more reduction, the same bytes)."),
    _rowwise("softmax_safe", EXAMPLES / "softmax_safe.dt", {"A": ROWS}, _softmax, liger=_liger_softmax,
             notes="DT's softmax with the row max subtracted, as PyTorch and Liger do; the max and the sum "
                   "may share one walk over the row (compute_with: the online softmax)."),
    _rowwise("layernorm", EXAMPLES / "layernorm.dt", {"A": ROWS, "W": ("y",), "Bias": ("y",)}, _layernorm,
             {"eps": 1e-5}, _liger_layernorm,
             notes="Liger's layer norm also writes each row's mean and 1/std (for the backward pass)."),
    _rowwise("rmsnorm", SCHEDULE_DIR / "rmsnorm.dt", {"A": ROWS, "W": ("y",)}, _rmsnorm, {"eps": 1e-6},
             _liger_rmsnorm,
             notes="Liger's rms_norm (default 'llama' casting) multiplies by W in the input dtype and "
                   "also writes each row's 1/rms."),
    _rowwise("relu", EXAMPLES / "relu.dt", {"A": ROWS}, _relu),
    _rowwise("add", EXAMPLES / "add.dt", {"A": ROWS, "B": ROWS}, _add, {"alpha": 0.5}),
    _rowwise("swish", EXAMPLES / "swish.dt", {"A": ROWS}, _swish, {"beta": 1.0},
             notes="beta = 1 (SiLU): the PyTorch baselines call F.silu."),
    Kernel("matmul", MATMUL, EXAMPLES / "matmul.dt", {"A": ("x", "k"), "B": ("k", "y")}, ("x", "y"), {},
           ("x", "y", "k"), ((4096, 4096, 4096), (16, 4096, 4096)), ((4096, 4096, 4096),),
           ((64, 48, 32), (16, 40, 24)), MATMUL_DTYPES, _matmul, gemms=lambda e: [(e["x"], e["y"], e["k"])]),
    Kernel("mmsigmoid", MATMUL, EXAMPLES / "mmsigmoid.dt", {"A": ("x", "k"), "B": ("k", "y")}, ("x", "y"), {},
           ("x", "y", "k"), ((4096, 4096, 4096),), ((4096, 4096, 4096),), ((64, 48, 32),), MATMUL_DTYPES,
           _mmsigmoid, gemms=lambda e: [(e["x"], e["y"], e["k"])]),
    Kernel("2mm_outer", MATMUL, EXAMPLES / "2mm_outer.dt", {"A": ("m", "k"), "B": ("k", "l"), "C": ("l", "n")},
           ("m", "n"), {}, ("m", "n", "k", "l"),
           ((64, 128, 32, 32), (128, 256, 32, 32), (256, 512, 32, 32), (512, 1024, 32, 32)),
           ((512, 1024, 32, 32),), ((32, 64, 32, 32), (20, 40, 16, 24)), MATMUL_DTYPES, _2mm, gemms=_two_gemms),
    Kernel("2mm_inner", MATMUL, EXAMPLES / "2mm_inner.dt", {"A": ("m", "k"), "B": ("k", "l"), "C": ("l", "n")},
           ("m", "n"), {}, ("m", "n", "k", "l"),
           ((128, 128, 64, 64), (256, 256, 64, 64), (512, 512, 64, 64), (1024, 1024, 64, 64)),
           ((1024, 1024, 64, 64),), ((64, 64, 64, 64), (40, 24, 16, 48)), MATMUL_DTYPES, _2mm, gemms=_two_gemms),
    Kernel("attention", MATMUL, EXAMPLES / "attention.dt", {"A": ("m", "k"), "B": ("k", "l"), "C": ("l", "n")},
           ("m", "n"), {}, ("m", "l", "k", "n"), ((1024, 1024, 64, 64), (4096, 4096, 64, 64)),
           ((4096, 4096, 64, 64),), ((64, 64, 16, 16),), MATMUL_DTYPES, _attention, gemms=_two_gemms, sdpa=True,
           notes="One head: A is Q (m x k), B is K transposed (k x l), C is V (l x n). DT's softmax has no "
                 "max-subtraction; SDPA gets K as (l x k), transposed outside the timing."),
    Kernel("attention_safe", MATMUL, EXAMPLES / "attention_safe.dt",
           {"A": ("m", "k"), "B": ("k", "l"), "C": ("l", "n")}, ("m", "n"), {}, ("m", "l", "k", "n"),
           ((1024, 1024, 64, 64), (4096, 4096, 64, 64)), ((4096, 4096, 64, 64),), ((64, 64, 16, 16),), MATMUL_DTYPES,
           _attention, gemms=_two_gemms, sdpa=True,
           notes="attention with the row max subtracted, as every baseline does: in one pass over the keys as flash "
                 "attention (the max, the sums and the product in one loop, rescaled as the max grows: compute_with) "
                 "or in two (max and sum, then the product)."),
]}


def cases(kernels, dtypes=None, quick=False, tiny=False) -> list[Case]:
    out = []
    for name in kernels:
        k = KERNELS[name]
        shapes = k.tiny if tiny else k.quick if quick else k.shapes
        for dtype in k.dtypes:
            if dtypes and dtype not in dtypes:
                continue
            for shape in shapes:
                out.append(Case(k, shape, dtype, k.extents(shape)))
    return out


def matching(rows: list[Case], patterns: list[str] | None) -> list[Case]:
    """The rows whose title ('softmax [x=128, y=65536] f32') contains any of `patterns`
    (every row when there are none)."""
    return [c for c in rows if any(p in c.title for p in patterns)] if patterns else rows


from llm import LLM_KERNELS  # noqa: E402  (the kernels of issue 27: they use Kernel)
from backward import BACKWARD_KERNELS  # noqa: E402  (issue 32's backward rows)

KERNELS.update(LLM_KERNELS)
KERNELS.update(BACKWARD_KERNELS)


# ----------------------------------------------------------------------- DT schedules
# The schedule the `dt` provider runs where neither `--schedule` nor a tuned file
# (schedules/tuned/<device>/<kernel>_<shape>_<dtype>.dt, written by tune.py: the device's own,
# else one of another device of its architecture; see schedule_choice) names one: the first row
# whose kernel matches and whose shape ('x=4096, y=1000', as Case.shape_text) and dtype match
# or are None. Tune on the GPU with `bench.py --tune` (times
# every candidate below) and edit this table. Paths are relative to the repository root.
_S = "benchmarks/gpu/schedules/"
SCHEDULES: list[tuple[str, str | None, str | None, str]] = [
    ("dyt", "x=4096, y=1000", None, _S + "dyt_row.dt"),
    ("dyt", None, None, "examples/dyt.dt"),
    ("softmax", "x=128, y=65536", None, _S + "softmax_tiled.dt"),
    ("softmax", None, None, _S + "softmax_row.dt"),
    ("layernorm", "x=128, y=65536", None, _S + "layernorm_tiled.dt"),
    ("layernorm", None, None, _S + "layernorm_row.dt"),
    ("rmsnorm", "x=128, y=65536", None, _S + "rmsnorm_tiled.dt"),
    ("rmsnorm", None, None, _S + "rmsnorm_row.dt"),
    ("relu", None, None, _S + "relu_1024.dt"),
    ("add", None, None, _S + "add_1024.dt"),
    ("swish", None, None, "examples/swish.dt"),
    ("matmul", "x=16, y=4096, k=4096", None, _S + "matmul_skinny.dt"),
    ("matmul", None, None, _S + "matmul_128x128x64.dt"),
    ("mmsigmoid", None, None, _S + "mmsigmoid_128x128x64.dt"),
    ("2mm_outer", None, None, "examples/2mm_outer.dt"),
    ("2mm_inner", None, None, "examples/2mm_inner.dt"),
    # the talk's attention schedule keeps whole rows of scores and of V on chip: likely too big at 1024+
    ("attention", None, None, _S + "attention_2pass.dt"),
    ("batched_matmul", "b=32, x=1024, y=1024, k=1024", None, _S + "batched_matmul_tma.dt"),
    ("batched_matmul", "b=512, x=128, y=128, k=64", None, _S + "batched_matmul_64x128.dt"),
    # argmax: the example's 4096-wide tiles of 32 warps, streamed, at 64 rows, and the same without
    # stream() at 4096 rows in bf16; dt tune's 512-wide tiles of 16 warps, one stage, streamed, at 256
    # rows in f32; dt tune's 256-wide tiles of 4 warps, one stage, streamed, at 1000 rows (1.06x /
    # 1.24x the 512- and 2048-wide tiles there, H100); 2048-wide tiles of 8 warps in 3 stages at 4096
    # rows in f32 (the fastest of seven schedules side by side, H100); at GPT-2's 256 rows in bf16 dt
    # tune's 2048-wide tiles of 32 warps, streamed
    ("argmax", "r=256, v=50257", "bf16", _S + "argmax_r256_2048.dt"),
    ("argmax", "r=4096, v=128256", "bf16", _S + "argmax_4096_w32.dt"),
    ("argmax", "r=256, v=50257", "f32", _S + "argmax_512_w16.dt"),
    ("argmax", "r=1000, v=32000", None, _S + "argmax_256_w4.dt"),
    ("argmax", "r=4096, v=128256", "f32", _S + "argmax_2048_w8.dt"),
    # dt tune's 2048-wide walks of each row (three of them: the second and third find it in L1/L2) at
    # 4096 x 4096, and in bf16 at 16384 x 4096 and 4096 x 8192: 1.02x / 1.02x / 1.00x / 1.00x the example's
    # whole row in one tile there, 0.91-0.99x at 3000 columns and in f32 at 8192 columns or 16384 rows (H100)
    ("layernorm_stats", "x=4096, k=4096", None, _S + "layernorm_stats_2048.dt"),
    ("layernorm_stats", "x=16384, k=4096", "bf16", _S + "layernorm_stats_2048.dt"),
    ("layernorm_stats", "x=4096, k=8192", "bf16", _S + "layernorm_stats_2048.dt"),
    # dt tune's 2048-wide walk of each row, at 4096 x 4096 f32: 1.04-1.05x the whole row in one tile on the
    # f32 rows, 0.95-0.98x on the bf16 ones (H100)
    ("softmax_grad", None, "f32", _S + "softmax_grad_2048.dt"),
    # stream() (rows read once leave L2 first): faster at 1000 rows and in bf16, 4% slower at 4096-8192 rows in f32
    ("cross_entropy", "r=1000, v=50257", None, _S + "cross_entropy_stream.dt"),
    ("cross_entropy", None, "bf16", _S + "cross_entropy_stream.dt"),
    # a batch of 4096 rows: narrow tiles, one warp (examples/llm/topk.dt's 4096-wide tiles suit 64 rows)
    ("topk", "r=4096, v=32000, i=16", "f32", _S + "topk_rows_256.dt"),
    ("cumsum", "x=16384, y=1024", None, _S + "cumsum_short_rows.dt"),
    # dw and db summed in dx's walk over chunks of rows: 128-row chunks at 16384 rows (128 programs)
    ("layernorm_backward", "x=16384, k=4096", None, _S + "layernorm_backward_128.dt"),
    # attention's derived backward stores [b, h, s, s] scores: the algorithm as derived, scheduled by
    # hand flash-style (the derived file is --tune's other candidate)
    ("causal_mha_grad", "b=4, h=16, m=2048, l=2048, k=128, n=128", None, _S + "causal_mha_grad_flash_d128.dt"),
    ("causal_mha_grad", "b=4, h=16, m=4096, l=4096, k=128, n=128", None, _S + "causal_mha_grad_flash_d128.dt"),
    ("causal_mha_grad", None, None, _S + "causal_mha_grad_flash.dt"),
    # 1024 queries: blocks of 64 queries with 4 warps, twice the programs: 4-9% faster than the example's 128
    # (H100, side by side); a tie at 4096 and d = 64, 3-9% slower at d = 128 from 4096 and at 16384
    ("mha", "b=4, h=16, m=1024, l=1024, k=64, n=64", None, _S + "mha_m64.dt"),
    # from 4096 queries, and at 1024 with heads of 128: the warp-specialised Gluon twin's schedule (128 queries,
    # 128-key tiles, 8 warps, 2 stages): 1.13x / 1.17x the example at 4096 / 16384 with heads of 64, 1.14x /
    # 1.12x with heads of 128, 1.10x mha_m64.dt at 1024 (H200, side by side; not run on an H100)
    ("mha", "b=4, h=16, m=1024, l=1024, k=128, n=128", None, _S + "mha_hopper.dt"),
    ("mha", "b=4, h=16, m=4096, l=4096, k=64, n=64", None, _S + "mha_hopper.dt"),
    ("mha", "b=4, h=16, m=16384, l=16384, k=64, n=64", None, _S + "mha_hopper.dt"),
    ("mha", "b=4, h=16, m=4096, l=4096, k=128, n=128", None, _S + "mha_hopper.dt"),
    ("mha", "b=4, h=16, m=16384, l=16384, k=128, n=128", None, _S + "mha_hopper.dt"),
    # causal, 1024 queries (and 4096 at d=64): blocks of 64 queries with 4 warps, twice the programs: 11-15%
    # faster than the example's 128 at s = 1024, 3% at s = 4096, d = 64; 3-11% slower at d = 128, s >= 4096
    ("causal_mha", "b=4, h=16, m=1024, l=1024, k=64, n=64", None, _S + "causal_mha_m64.dt"),
    ("causal_mha", "b=4, h=16, m=1024, l=1024, k=128, n=128", None, _S + "causal_mha_m64.dt"),
    ("causal_mha", "b=4, h=16, m=4096, l=4096, k=64, n=64", None, _S + "causal_mha_m64.dt"),
    # d=128 causal: 128-key tiles in 3 stages: 2-7% faster than in 2 stages, which were 2-4.5% faster than
    # the example's 64 at s >= 4096 (H100, side by side); at 4096 the twin's 2 stages, 8 warps: 1.02x
    # causal_mha_l128.dt (H200, side by side; 0.98x at 16384)
    ("causal_mha", "b=4, h=16, m=4096, l=4096, k=128, n=128", None, _S + "causal_mha_hopper.dt"),
    ("causal_mha", "b=4, h=16, m=16384, l=16384, k=128, n=128", None, _S + "causal_mha_l128.dt"),
    # ... and at 16384 queries with heads of 64: 1.16x the example (H200, side by side)
    ("causal_mha", "b=4, h=16, m=16384, l=16384, k=64, n=64", None, _S + "causal_mha_l128.dt"),
    # 32-128 heads are too few programs: the cache is split over programs (flash decoding)
    ("decode", "b=1, h=32, l=32768, k=128, d=128", None, "examples/llm/decode_split.dt"),
    ("decode", "b=4, h=32, l=8192, k=128, d=128", None, "examples/llm/decode_split.dt"),
    ("decode", "b=1, h=32, l=8192, k=128, d=128", None, "examples/llm/decode_split.dt"),
    ("paged_decode", "b=1, h=32, d=128, l=16384, Kc_axis0=1024, Kc_axis1=16, Kc_axis2=8, T_axis1=1024", None,
     _S + "paged_decode_split.dt"),
    # group norm in two kernels instead of the example's three: each channel's mean and variance in one walk
    # (compute_with), merged per group in the output's kernel; a channel a program, whole in one tile, 4 warps:
    # 1.28-1.89x the example, 1.03x (8x512x4096 f32) to 1.50x torch.compile (H100, side by side)
    ("group_norm", None, None, _S + "group_norm_channels_whole_w4.dt"),
    # prefill: the weights converted to bf16 in a kernel of their own, then a bf16 product (128x256, persistent,
    # TMA): 1.32x int8_matmul_256x128_tma.dt (converting in the product's loop) at 4096 x 4096 and
    # 4096 x 14336 (H200, side by side)
    ("int8_matmul", "m=4096, n=4096, k=4096", None, _S + "int8_matmul_dequant.dt"),
    ("int8_matmul", "m=4096, n=14336, k=4096", None, _S + "int8_matmul_dequant.dt"),
    # a decode step: all 16 tokens in one tile, 32 channels a program (dt tune, H100): 3.8x the example's
    ("int8_matmul", "m=16, n=4096, k=4096", None, _S + "int8_matmul_m16.dt"),
    # 32 tokens: all in one tile, 16 channels a program (dt tune, H100): 1.9x the example's 128x128 blocks
    ("w8a8_matmul", "m=32, n=4096, k=4096", None, _S + "w8a8_matmul_m32.dt"),
]


# Each device's schedule-search winners (tune.py), in a folder named by its slug (devices.slug:
# tuned/h100/, tuned/h200/): a schedule fast on one GPU can be a poor choice on another.
TUNED_DIR = SCHEDULE_DIR / "tuned"


def tuned_name(kernel: str, shape_text: str, dtype: str) -> str:
    """'softmax', 'x=4096, y=1000', 'f32' -> 'softmax_4096x1000_f32.dt'."""
    extents = "x".join(part.split("=")[1] for part in shape_text.split(", "))
    return f"{kernel}_{extents}_{dtype}.dt"


def tuned_devices() -> list[str]:
    """The slugs of the devices with tuned schedules (the folders of TUNED_DIR), sorted."""
    return sorted(p.name for p in TUNED_DIR.iterdir() if p.is_dir()) if TUNED_DIR.is_dir() else []


def schedule_keys(case: Case) -> tuple[str, str, str]:
    """The names a command line gives a row's schedule by, the most specific first:
    'kernel:shape:dtype' (the shape as Case.shape_text, 'add:x=4096, y=8192:bf16'),
    'kernel:shape' (every dtype of that shape) or 'kernel' (every row of the kernel)."""
    row = f"{case.kernel.name}:{case.shape_text}"
    return f"{row}:{case.dtype}", row, case.kernel.name


# Where a row's schedule came from (bench.py records it as `schedule_origin`)
OVERRIDE = "override"    # --schedule
TUNED = "tuned"          # the device's own search winner, tuned/<its slug>/
FALLBACK = "fallback"    # the search winner of another device of its architecture, tuned/<that slug>/
TABLE = "table"          # SCHEDULES
EXAMPLE = "example"      # no row of SCHEDULES: the kernel's example
CANDIDATE = "candidate"  # a file the provider was given (bench.py --tune, --contender; tune_goals.py)


@dataclass(frozen=True)
class ScheduleChoice:
    path: Path
    origin: str             # one of OVERRIDE, TUNED, FALLBACK, TABLE, EXAMPLE, CANDIDATE
    tuned_on: str | None = None  # TUNED, FALLBACK: the slug of the device whose search chose it


def schedule_choice(case: Case, overrides: dict | None = None, device: Device | str | None = None) -> ScheduleChoice:
    """The .dt file for this case and why: an override (its most specific key of schedule_keys),
    else the row's schedule-search winner (tune.py) on `device` (a devices.Device, or a slug;
    None: devices.current()), else the winner on another device of the same architecture (the
    first of them by slug; an H200 runs the H100's), else the table's, else the kernel's example."""
    overrides = overrides or {}
    for key in schedule_keys(case):
        if key in overrides:
            return ScheduleChoice(Path(overrides[key]), OVERRIDE)
    device = devices.current() if device is None else Device.named(device) if isinstance(device, str) else device
    name = tuned_name(case.kernel.name, case.shape_text, case.dtype)
    own = TUNED_DIR / device.slug / name
    if own.exists():
        return ScheduleChoice(own, TUNED, device.slug)
    if device.arch is not None:
        for other in tuned_devices():
            if other != device.slug and devices.ARCH.get(other) == device.arch and (TUNED_DIR / other / name).exists():
                return ScheduleChoice(TUNED_DIR / other / name, FALLBACK, other)
    for kernel, shape, dtype, path in SCHEDULES:
        if kernel == case.kernel.name and shape in (None, case.shape_text) and dtype in (None, case.dtype):
            return ScheduleChoice(ROOT / path, TABLE)
    return ScheduleChoice(case.kernel.program, EXAMPLE)


def schedule_for(case: Case, overrides: dict | None = None, device: Device | str | None = None) -> Path:
    """The .dt file for this case (schedule_choice's)."""
    return schedule_choice(case, overrides, device).path


def candidates(kernel: Kernel) -> list[Path]:
    """Every schedule of a kernel (--tune): its example and schedules/<kernel>.dt, <kernel>_*.dt,
    but those of a kernel whose name starts with this one's (layernorm_grad.dt is layernorm_grad's,
    not layernorm's)."""
    def owner(stem: str) -> str | None:  # the longest kernel name the file is named after
        return max((k for k in KERNELS if stem == k or stem.startswith(k + "_")), key=len, default=None)
    found = [kernel.program]
    found += sorted(p for p in SCHEDULE_DIR.glob("*.dt") if owner(p.stem) == kernel.name and p != kernel.program)
    return found
