"""First-call latency of a DT file on the `numba` backend: a fresh process's first call with an
empty cache (dt's code generation, Numba's compilation, a run), then the same in a new process
that finds the first one's cache. Numba's own start-up in a process (its import and one-off
initialisation) is measured apart and excluded from both.

    python benchmarks/cpu/cpu_first_call.py FILE.dt SIZES_JSON   # one process's times, as JSON
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def first_call_times(path: Path, sizes: dict, env: dict) -> dict:
    """Seconds of the first call of `path` at extents `sizes`, with an empty cache and cached,
    and Numba's start-up in the cached process; each in a fresh process with `env`."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(env, DT_CACHE_DIR=cache)
        runs = []
        for _ in range(2):
            child = subprocess.run([sys.executable, __file__, str(path), json.dumps(sizes)], env=env,
                                   capture_output=True, text=True, check=True)
            runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
    return {"empty_cache_s": runs[0]["first_call_s"], "cached_s": runs[1]["first_call_s"],
            "numba_start_s": runs[1]["numba_start_s"]}


def main(argv=None) -> int:
    path, sizes = (argv or sys.argv[1:])[:2]
    t0 = time.perf_counter()
    from numba import njit
    njit(lambda x: x + 1)(1)  # Numba's one-off initialisation in a process
    t1 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    import dt
    from dt.testing import random_inputs
    prog = dt.load(path)
    args = random_inputs(prog, json.loads(sizes), "f32")
    t2 = time.perf_counter()
    prog(backend="numba", **args)
    print(json.dumps({"numba_start_s": t1 - t0, "first_call_s": time.perf_counter() - t2}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
