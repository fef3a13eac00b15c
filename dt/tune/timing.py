"""Timing GPU kernels the way dt's benchmark does (benchmarks/gpu, docs/performance.md): a
memory-bound kernel on a cold L2 for every run (`cold_bench`), a compute-bound one with
triton.testing.do_bench as is; `compute_bound` says which a program is at given extents. The
benchmark harness and `dt tune` share these.
"""
from __future__ import annotations

import contextlib
import functools
import os
import statistics
import tempfile
import time
from pathlib import Path

RIDGE_FLOP_PER_BYTE = 200  # about the H100's ridge point: cuBLAS's 650-760 TFLOP/s over ~3,000 GB/s


def compute_bound(prog, extents: dict[str, int], item_bytes: int) -> bool:
    """Whether the program's matrix products do RIDGE_FLOP_PER_BYTE FLOPs or more per byte its
    inputs and outputs move (2 FLOPs per multiply-add of each rdot at these extents)."""
    from dt.ir import algorithm as A
    checked = prog.checked
    flops = 0
    for f in prog.ast.funcs:  # each definition once, at its own dimensions (inlined ones too)
        for e in A.walk(f.expr):
            if isinstance(e, A.Reduce) and e.op == "dot":
                flops += 2 * extents.get(e.dim, 1) * _elements(f.dims, extents)
    moved = sum(_elements(axes, extents) for axes in checked.input_axes.values())
    moved += sum(_elements(checked.funcs[o].dims, extents) for o in checked.outputs)
    return flops >= RIDGE_FLOP_PER_BYTE * moved * item_bytes


def _elements(dims, extents: dict[str, int]) -> int:
    n = 1
    for d in dims:
        n *= extents.get(d, 1)
    return n


@contextlib.contextmanager
def gpu_held(key: str | None = None):
    """This process alone running timed work on its GPU among dt's processes on this machine:
    an exclusive lock on a file named after the GPU (`key`, default the current CUDA device's
    UUID) in the temporary directory, held until the block ends. Several `dt tune` searches on
    one GPU then time one at a time while their compiles overlap. Without fcntl (not POSIX) it
    holds nothing."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path = Path(tempfile.gettempdir()) / f"dt-gpu-{key or _gpu_key()}.lock"
    try:
        lock = open(path, "a")
        with contextlib.suppress(PermissionError):  # every user's searches share it, whatever the umask
            os.fchmod(lock.fileno(), 0o666)
    except PermissionError:  # another user's file: a lock on it is taken read-only all the same
        lock = open(path)
    with lock:  # closing the file releases the lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _gpu_key() -> str:
    import torch
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(properties, "uuid", None)
    if uuid is not None:
        return str(uuid)
    bus = [getattr(properties, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    if None not in bus:  # the physical card, whatever CUDA_VISIBLE_DEVICES numbers it
        return "pci-" + "-".join(map(str, bus))
    return f"{properties.name}-{torch.cuda.current_device()}".replace(" ", "_")


@functools.cache
def libcuda():
    """The CUDA driver library, loaded once (ctypes)."""
    import ctypes
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise RuntimeError(f"the cold timer needs the CUDA driver library (libcuda.so.1): {e}; "
                           "time with do_bench where it is missing (bench.py: --timer do_bench)") from None


def reset_persisting_l2() -> None:
    """Demote every L2 line marked evict_last (or persisting) to normal priority
    (cuCtxResetPersistingL2Cache). It acts when called, not in stream order, so queued kernels
    could mark lines after it: call it with the GPU idle. A flush by memset does not evict such
    lines: a kernel that read a tensor with evict_last leaves part of it in L2, through every
    later flush, for any kernel that reads it again (docs/performance.md, "Lines kept in L2
    through the flush")."""
    status = libcuda().cuCtxResetPersistingL2Cache()
    if status != 0:
        raise RuntimeError(f"cuCtxResetPersistingL2Cache failed with CUDA error {status}")


# GPU cycles of a spin kernel queued before each cold run (about 0.5 ms at 2 GHz): the host
# queues the run behind it, so a provider's host work (torch.compile's guards and wrapper took
# over the flush's 90 µs) is not counted, as do_bench's deep queue does not count it. A run
# whose host work outlasts it (a garbage collection, say) is discarded and the spin doubled,
# up to MAX_HEAD_START_CYCLES.
HEAD_START_CYCLES = 1_000_000
MAX_HEAD_START_CYCLES = 64_000_000


def cold_bench(fn, warmup: float = 25, rep: float = 100) -> float:
    """The median time of `fn` in milliseconds, every run on a cold L2: do_bench's method (a
    warm-up of `warmup` ms, then runs for `rep` ms, each timed with CUDA events after a 256 MB
    write that flushes the L2), with the GPU idle and the evict_last lines demoted
    (reset_persisting_l2) before each run's flush, then a spin kernel (HEAD_START_CYCLES) that
    gives the host time to queue the run. A run whose start event had passed by the time the
    host finished queuing it (the GPU waited for the host) is not kept, unless the head start
    is already the longest (a call that synchronizes inside)."""
    import torch
    import triton
    driver = triton.runtime.driver.active
    fn()
    torch.cuda.synchronize()
    cache = driver.get_empty_cache_for_benchmark()
    begin = time.perf_counter()
    while time.perf_counter() - begin < warmup / 1e3:
        fn()
    runs, head_start = [], HEAD_START_CYCLES
    begin = time.perf_counter()
    while len(runs) < 10 or time.perf_counter() - begin < rep / 1e3:
        torch.cuda.synchronize()
        reset_persisting_l2()
        torch.cuda._sleep(head_start)
        driver.clear_cache(cache)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        # The GPU reached the run before the host had queued it: give the host a longer head start.
        # At the longest, keep the run: a call that waits for the GPU itself (Liger's cross-entropy
        # reads a count back) is never queued ahead, and its wait is part of its cost.
        if start.query() and head_start < MAX_HEAD_START_CYCLES:
            head_start = min(2 * head_start, MAX_HEAD_START_CYCLES)
            continue
        runs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in runs)
