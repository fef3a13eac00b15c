"""How the harness measures: device description, timers, the two ceilings (copy bandwidth
and cuBLAS), random inputs, and the correctness check against a float64 reference."""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import time

import torch

from cases import DTYPES
# the cold timer and the ridge point (a row is compute-bound at this many FLOPs per byte or more)
from dt.tune.timing import (HEAD_START_CYCLES, MAX_HEAD_START_CYCLES, RIDGE_FLOP_PER_BYTE, cold_bench,  # noqa: F401
                            libcuda, reset_persisting_l2)

# Relative error ||out - ref|| / ||ref|| allowed per output dtype. f32 arithmetic lands far
# below 1e-4; f16/bf16 round the inputs, the output and (in matrix products and in eager
# PyTorch) intermediates, a few units of 2**-11 (f16) or 2**-8 (bf16) at most.
TOLERANCE = {"f32": 1e-4, "f16": 5e-3, "bf16": 1e-2}

COPY_BYTES_GPU = 1 << 30   # 1 GiB copied, 2 GiB moved: far beyond the L2 cache
COPY_BYTES_CPU = 1 << 24
PEAK_GEMM_GPU = 8192       # the cuBLAS ceiling: an 8192^3 product
PEAK_GEMM_CPU = 256


class Timer:
    """On the GPU, "cold" (cold_bench: do_bench's method with every run on a cold L2),
    triton.testing.do_bench itself (by default 25 ms warm-up, 100 ms repetition, median; it
    flushes the L2 cache before every run, but leaves the lines a kernel read with evict_last)
    or do_bench_cudagraph (launch gaps removed; no L2 flush); on the CPU (dry run), the median
    of time.perf_counter over a few runs. row_timer says which a row gets by default."""

    def __init__(self, mode: str, warmup: float = 25, rep: float = 100):
        self.mode, self.warmup, self.rep = mode, warmup, rep

    def __call__(self, fn) -> float:
        if self.mode == "cold":
            return cold_bench(fn, warmup=self.warmup, rep=self.rep)
        if self.mode == "do_bench":
            import triton.testing
            return float(triton.testing.do_bench(fn, warmup=self.warmup, rep=self.rep, return_mode="median"))
        if self.mode == "cudagraph":
            import triton.testing
            return float(triton.testing.do_bench_cudagraph(fn, rep=self.rep, return_mode="median"))
        fn()
        times, start = [], time.perf_counter()
        while len(times) < 3 or (len(times) < 20 and time.perf_counter() - start < 0.2):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)


def row_timer(mode: str, flops: float | None, nbytes: int, warmup: float = 25, rep: float = 100) -> Timer:
    """The Timer for a row doing `flops` and moving `nbytes`: `mode`'s, or for "auto" (bench.py's
    default, and what tune.py always uses) do_bench if it is compute-bound and cold otherwise.
    Cold, because lines an earlier kernel kept in L2 would serve part of the bytes a memory-bound
    row is measured for (docs/studies.md, first_timing); do_bench, because L2 cannot change a
    compute-bound row's time, and after the cold timer's idle GPU 4096^3 products ran 6-12%
    slower, every provider alike, with rounds 8% apart (median) against 3.5% (docs/studies.md,
    timer_rounds)."""
    if mode == "auto":
        mode = "do_bench" if flops and flops >= RIDGE_FLOP_PER_BYTE * nbytes else "cold"
    return Timer(mode, warmup, rep)


def round_robin(timer, calls: dict, rounds: int, on_error=None):
    """Yields (name, timer(call)) over `rounds` round-robin rounds (every call timed once per
    round, so that drift reaches every call alike), after one discarded timing of the first
    call (a warm-up, so that no kept timing is the first after the row's compilations and
    checks). A call that raises drops out of the later rounds and
    `on_error(name, exception)` is told (it may raise to stop everything); without on_error
    the exception propagates."""
    failed = set()

    def timed(name):
        try:
            return timer(calls[name])
        except Exception as e:
            if on_error is None:
                raise
            failed.add(name)
            on_error(name, e)
            return _FAILED

    for name in calls:  # the discarded timing: the first call that does not fail
        if timed(name) is not _FAILED:
            break
    for _ in range(rounds):
        for name in calls:
            if name not in failed:
                ms = timed(name)
                if ms is not _FAILED:
                    yield name, ms


_FAILED = object()  # round_robin's mark of a timing that raised


def device_description(device: torch.device) -> dict:
    """The device's name and driver (or the CPU in a dry run), and the software versions."""
    info = {"torch": torch.__version__, "python": platform.python_version(),
            # dt's settings that change which kernels run (DT_TRITON_GLUON, DT_TRITON_F32_DOT, ...)
            "dt_environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("DT_")}}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(device=f"{torch.cuda.get_device_name(device)}, driver {_driver_version()}",
                    sm_count=props.multi_processor_count, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    cuda=torch.version.cuda)
    else:
        info["device"] = f"CPU ({platform.machine()}) - dry run"
    return info


def positive_int(text: str) -> int:
    """An argparse type: an int of 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, not {value}")
    return value


def list_arg(choices):
    """An argparse type: a comma-separated list of some of `choices`."""
    def parse(text: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(bad)} (choose from {', '.join(choices)})")
        return items
    return parse


def _driver_version() -> str:
    try:
        import pynvml
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml missing or failing: ask nvidia-smi instead
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def random_tensor(shape, dtype: torch.dtype, device: torch.device, generator: torch.Generator):
    """Standard-normal data drawn in float32 and rounded to `dtype` (never zeros: zeros hide
    unwritten outputs and can run faster than real data)."""
    return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)


def case_inputs(case, device, seed: int) -> dict:
    """A row's input tensors (cases.Case), by DT name: drawn as random_tensor does, or by the
    kernel's own functions (cases.Kernel.made_inputs: ids, targets, tables, 8-bit data), then a
    backward row's saved statistics computed from the others (cases.Kernel.saved)."""
    g, dtype, made = generator(device, seed), DTYPES[case.dtype], case.kernel.made_inputs
    inputs = {n: made[n](case.extents, g, device, dtype) if n in made
              else random_tensor(case.input_shape(n), dtype, device, g) for n in case.kernel.inputs}
    if case.kernel.saved is not None:
        inputs.update(case.kernel.saved(inputs, case.kernel.scalars))
    return inputs


def short_error(e: BaseException) -> str:
    """An exception as one short line, for a results record."""
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def copy_call(device: torch.device, moved: int | None = None):
    """A device-to-device copy and the bytes it moves (read plus write): by default a large one
    (the device's sustained bandwidth); with `moved`, one that moves that many bytes, the
    ceiling a kernel of that size can reach (launch and ramp-up included)."""
    nbytes = moved // 2 if moved else COPY_BYTES_GPU if device.type == "cuda" else COPY_BYTES_CPU
    src = random_tensor((max(1, nbytes // 4),), torch.float32, device, generator(device, 1))
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * src.numel() * 4


def copy_bandwidth(timer: Timer, device: torch.device, moved: int | None = None) -> dict:
    """copy_call's copy timed on its own; GB/s counts the bytes read plus the bytes written."""
    call, nbytes = copy_call(device, moved)
    ms = timer(call)
    return {"bytes": nbytes, "ms": ms, "gbps": nbytes / ms / 1e6}


SAME_SIZE_COPY = "same-size copy"  # the copy's name among the timed calls of a row's rounds


def by_row(records: list[dict], *fields: str) -> dict[tuple, list[dict]]:
    """Records grouped by the values of `fields` (a report's rows), in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r[f] for f in fields), []).append(r)
    return groups


CUBLAS = "cuBLAS"  # the products' name among the timed calls of a matmul-like row's rounds


def cublas_call(device: torch.device, shapes, dtype: torch.dtype):
    """One call running torch.matmul (cuBLAS on the GPU) at each (m, n, k) of `shapes` in turn,
    on random inputs: the cuBLAS time of a row whose products those are, timed in its rounds."""
    operands = []
    for m, n, k in shapes:
        g = generator(device, m * 31 + n * 17 + k)
        operands.append((random_tensor((m, k), dtype, device, g), random_tensor((k, n), dtype, device, g)))
    return lambda: [torch.matmul(a, b) for a, b in operands]


def cublas_peak(device: torch.device, dtype: torch.dtype, timer: Timer) -> dict:
    """cuBLAS's peak for context: one large square product, timed once per run."""
    n = PEAK_GEMM_GPU if device.type == "cuda" else PEAK_GEMM_CPU
    ms = timer(cublas_call(device, [(n, n, n)], dtype))
    return {"shape": f"{n}x{n}x{n}", "ms": ms, "tflops": 2 * n**3 / ms / 1e9}


def poison_allocator(shape, dtype: torch.dtype, device: torch.device):
    """Best effort to make an unwritten output element visible: release the cached blocks,
    then leave three NaN-filled blocks of the output's size in PyTorch's caching allocator,
    so the provider's output (and its temporaries) most likely land on NaN. CPU allocations
    cannot be poisoned this way."""
    if device.type != "cuda":
        return
    torch.cuda.empty_cache()
    blocks = [torch.full(shape, math.nan, dtype=dtype, device=device) for _ in range(3)]
    del blocks


def relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64; NaN when out has non-finite values; integer outputs (ids):
    the number of elements that differ. Several outputs (a tuple, or dt's dict in output order):
    the largest of their errors."""
    if isinstance(ref, tuple):
        outs = tuple(out.values()) if isinstance(out, dict) else out
        if not isinstance(outs, (tuple, list)) or len(outs) != len(ref):
            raise ValueError(f"the provider returned {type(out).__name__}, not {len(ref)} outputs")
        return max(relative_error(o, r) for o, r in zip(outs, ref))
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the provider returned {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if not ref.is_floating_point():  # ids: the number of elements that differ, so any difference fails
        return float((out.detach().to(ref.device, ref.dtype) != ref).sum())
    out64 = out.detach().to(ref.device, torch.float64)
    if not bool(torch.isfinite(out64).all()):
        return math.nan
    return float(torch.linalg.vector_norm(out64 - ref) / torch.linalg.vector_norm(ref))


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def empty_cache(device: torch.device):
    if device.type == "cuda":
        torch.cuda.empty_cache()


def cuda_usable(device: torch.device) -> bool:
    """False when the CUDA context is broken (an illegal memory access poisons it for the
    rest of the process)."""
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        torch.zeros(1, device=device).add_(1).item()
        return True
    except Exception:  # any CUDA error here means the context is gone
        return False
