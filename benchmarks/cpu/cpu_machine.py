"""The machine a CPU benchmark runs on: the CPU's model, vector ISA and caches, the libraries'
BLAS kernels and thread counts, and the environment the measuring processes get.

OpenBLAS picks its kernel for the CPU it finds unless OPENBLAS_CORETYPE names one (and
OPENBLAS_L2_SIZE overrides the cache size it blocks for); a machine's environment may set
them (forcing Haswell's AVX2 kernel on an AVX-512 CPU halves NumPy's matmul). The measuring
processes run with both unset, so that NumPy gets the kernel OpenBLAS chooses itself; a
forced choice is recorded beside it.

    python benchmarks/cpu/cpu_machine.py    # prints libraries() of this process as JSON
"""
from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path

OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

# /proc/cpuinfo flags of the vector extensions a kernel may use, in the order they are named
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl",
             "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx512ifma", "avx512vbmi", "amx_tile", "amx_bf16")


def vector_isa(flags) -> str:
    """The widest vector instruction set among /proc/cpuinfo `flags`."""
    flags = set(flags)
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2")):
        if flag in flags:
            return name
    return "none recognised"


def cpu() -> dict:
    """The CPU as /proc/cpuinfo and sysfs describe it (Linux; fields stay empty elsewhere)."""
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())  # the first processor's
    except OSError:
        pass
    flags = info.get("flags", "").split()
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        if (index / "type").read_text().strip() != "Instruction":
            caches.append(f"L{(index / 'level').read_text().strip()} {(index / 'size').read_text().strip()}")
    return {"model": info.get("model name", platform.processor() or "unknown"),
            "family_model": f"{info.get('cpu family', '?')}/{info.get('model', '?')}",
            "mhz": info.get("cpu MHz"), "cores": os.cpu_count(), "caches": caches,
            "vector_isa": vector_isa(flags), "isa_flags": [f for f in ISA_FLAGS if f in flags]}


def cpu_text(c: dict) -> str:
    """One line naming the CPU, its vector ISA and caches, as records carry it (`device`)."""
    caches = f"; caches {', '.join(c['caches'])}" if c["caches"] else ""
    return (f"{c['model']} (family/model {c['family_model']}), {c['cores']} cores, {c['vector_isa']} "
            f"({' '.join(c['isa_flags'])}){caches}")


def measuring_env(base: dict, caches: Path) -> dict:
    """The environment of a measuring process: `base` without the OpenBLAS overrides, with dt's
    and Inductor's caches in `caches` (one per run: the run's first process compiles, the
    others load, and nothing outside the run is read or written)."""
    env = {k: v for k, v in base.items() if k not in OPENBLAS_OVERRIDES}
    env.update(DT_CACHE_DIR=str(caches / "dt"), TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"))
    return env


def libraries() -> dict:
    """This process's libraries: versions, thread counts, each BLAS that threadpoolctl finds
    loaded (NumPy's OpenBLAS with the kernel it runs: `architecture`), PyTorch's BLAS and
    the vector code it dispatches to."""
    import numba
    import numpy
    import threadpoolctl
    import torch
    pools = [{k: p.get(k) for k in ("user_api", "internal_api", "version", "architecture", "num_threads",
                                      "threading_layer", "filepath")} for p in threadpoolctl.threadpool_info()]
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return {"numpy": numpy.__version__, "torch": torch.__version__, "numba": numba.__version__,
            "threadpoolctl": threadpoolctl.__version__, "python": platform.python_version(),
            "numba_threads": numba.get_num_threads(), "torch_threads": torch.get_num_threads(),
            "torch_blas": blas.group(1) if blas else "unknown", "torch_mkldnn": torch.backends.mkldnn.is_available(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "threadpools": pools}


def numpy_blas(libs: dict) -> dict | None:
    """NumPy's BLAS among libraries()' thread pools: the one loaded from numpy's directory."""
    return next((p for p in libs["threadpools"] if p["user_api"] == "blas" and "numpy" in (p["filepath"] or "")),
                None)


if __name__ == "__main__":
    print(json.dumps(libraries()))
