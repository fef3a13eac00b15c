"""The search over a program's space (dt.tune.space): each candidate compiled (on a GPU, by
worker processes ahead of its timing), checked against the reference on the same inputs, then
timed; the fastest few timed again in alternating rounds. Within a time budget the candidates
are tried in a seeded random order, so that a budget too short for all of them samples the
whole space rather than its first corner.

    result = prog.tune({"x": 4096, "y": 4096}, "bf16", budget=300)
    print(result.table())
    Path("softmax_tuned.dt").write_text(result.best.text)
"""
from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from dt.errors import DTError, PerformanceWarning
from dt.tune.space import Candidate, space

FINALISTS = 3  # the fastest, timed again in rounds
ROUNDS = 3


@dataclass
class Timed:
    candidate: Candidate
    ms: float  # the median of its rounds (of one screening run before the final rounds)
    rounds: list[float] = field(default_factory=list)


@dataclass
class Result:
    timed: list[Timed]  # fastest first
    failed: dict[str, str]  # candidate name -> why (compile error, wrong output)
    untried: int  # candidates the budget left out
    summary: str  # the space's, or where the cached entry is
    device: str
    cached: bool = False  # from the tuning cache (dt.tune.cache), not searched

    @property
    def best(self) -> Candidate:
        if not self.timed:
            raise DTError("no schedule of the space ran correctly", None,
                          "see the result's `failed`, or give a larger budget")
        return self.timed[0].candidate

    def table(self, rows: int = 10) -> str:
        lines = [f"{self.summary}; {len(self.timed)} timed, {len(self.failed)} failed, {self.untried} left untried "
                 f"(budget) on {self.device}; the fastest {FINALISTS} timed again in {ROUNDS} rounds, first"]
        lines += [f"{t.ms:10.4f} ms  {t.candidate.name}" for t in self.timed[:rows]]
        return "\n".join(lines)


def tune(prog, sizes: dict[str, int], dtype: str = "f32", backend: str = "triton", budget: float = 300,
         seed: int = 0, progress=None, cache: bool = True, workers: int | None = None) -> Result:
    """Search the space of `prog` at these extents on `backend` for `budget` seconds; with
    `cache`, first look for this algorithm and shape bucket in the tuning cache, and keep the
    fastest there. `workers` processes compile the candidates ahead of their timing (default:
    all cores but two on a GPU, none on a CPU, whose timing they would disturb)."""
    from dt.testing import random_inputs
    from dt.tune import cache as tuning_cache
    device = _device(backend)
    extents = prog._extents({}, sizes, "sizes")
    entry = tuning_cache.lookup(prog, extents, dtype, backend, device) if cache else None
    if entry is not None:
        return Result([Timed(Candidate(entry["name"], entry["schedule"]), entry["ms"])], {}, 0,
                      f"from the tuning cache ({entry['path']}, tuned at {entry['extents']})", device, cached=True)
    found = space(prog, sizes, dtype, backend)
    candidates = list(found)
    random.Random(seed).shuffle(candidates)
    args = random_inputs(prog, sizes, dtype, seed=seed)
    expected = prog.reference(**args)
    args = _on_device(args, backend)  # once, shared by every candidate
    clock = _clock(backend)
    begin = time.monotonic()
    timed, failed, tried, runs = [], {}, 0, {}
    for candidate in _compiled_first(candidates, prog.name, backend, sizes, dtype, workers):
        if tried and time.monotonic() - begin > budget:  # the first is always tried
            break
        tried += 1
        if progress is not None:
            progress(tried, len(candidates), candidate.name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PerformanceWarning)  # the space was linted already
                run = _runner(prog.name, candidate.text, backend, args)
                wrong = _disagreement(run(), expected, dtype)
            if wrong:
                failed[candidate.name] = f"wrong output: {wrong}"
                continue
            timed.append(Timed(candidate, clock(run)))
            runs[candidate.name] = run
        except (DTError, PerformanceWarning) as e:  # a backend's refusal (a tile too large here), DT_WARNINGS=error
            failed[candidate.name] = e.message
    timed.sort(key=lambda t: t.ms)
    finalists = timed[:FINALISTS]
    for _ in range(ROUNDS if len(finalists) > 1 else 0):
        for t in finalists:
            t.rounds.append(clock(runs[t.candidate.name]))
    for t in finalists:
        t.ms = statistics.median(t.rounds) if t.rounds else t.ms
    timed = sorted(finalists, key=lambda t: t.ms) + timed[len(finalists):]
    if cache and timed:
        tuning_cache.store(prog, extents, dtype, backend, device, timed[0].candidate.text, timed[0].candidate.name,
                           timed[0].ms)
    return Result(timed, failed, len(candidates) - tried, found.summary(), device)


def _compiled_first(candidates: list[Candidate], name: str, backend: str, sizes: dict, dtype: str,
                    workers: int | None):
    """The candidates, each once a worker process has compiled it (its kernels in the backend's
    disk cache, under the same program name, where this process finds them), in the order
    they finish; without workers, in order."""
    if workers is None:
        workers = max((os.cpu_count() or 2) - 2, 1) if backend == "triton" and _cuda() else 0
    caller = getattr(sys.modules.get("__main__"), "__file__", None)
    if caller is not None and not os.path.exists(caller):
        workers = 0  # a spawned worker imports the caller's script again: none to import (python - < script)
    if workers < 1 or len(candidates) < 2:
        yield from candidates
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    done: set[int] = set()
    try:
        pending = {pool.submit(_compile, c.text, name, backend, sizes, dtype): i for i, c in enumerate(candidates)}
        for future in as_completed(pending):
            done.add(pending[future])
            yield candidates[pending[future]]
    except BrokenProcessPool:  # workers that could not start: this process compiles the rest
        yield from (c for i, c in enumerate(candidates) if i not in done)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _compile(text: str, name: str, backend: str, sizes: dict, dtype: str):
    """Worker: run the candidate once on random inputs, so that its compiled kernels are on disk."""
    from dt.runtime import loads
    from dt.testing import random_inputs
    try:
        prog = loads(text, name=name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PerformanceWarning)  # the space was linted already
            prog(backend=backend, **random_inputs(prog, sizes, dtype))
    except (DTError, PerformanceWarning):
        pass  # the timing process reports it


def _on_device(args: dict, backend: str) -> dict:
    """The inputs where the backend runs: on the GPU for triton there, else as they are."""
    if not (backend == "triton" and _cuda()):
        return args
    from dt.runtime import _to_torch
    return {n: _to_torch(a).cuda() if hasattr(a, "shape") else a for n, a in args.items()}


def _runner(name: str, text: str, backend: str, args: dict):
    """A function running the candidate on the inputs (the first call compiles it)."""
    from dt.runtime import loads
    prog = loads(text, name=name)
    return lambda: prog(backend=backend, **args)


def _disagreement(out, expected, dtype: str) -> str:
    """'' where every output agrees with the reference, else how one does not."""
    from dt.testing import compare
    outs, refs = (out, expected) if isinstance(out, dict) else ({"": out}, {"": expected})
    for name, ref in refs.items():
        check = compare(outs[name].cpu() if hasattr(outs[name], "cpu") else outs[name], ref, dtype)
        if not check.ok:
            return f"{name} {check}".strip()
    return ""


def _clock(backend: str):
    """The median time of a call in milliseconds: Triton's do_bench on a GPU (warm-up, the L2
    cache flushed before each run), else wall time over repeated calls."""
    if backend == "triton" and _cuda():
        from triton.testing import do_bench
        return lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median")

    def wall(fn):
        fn()
        runs, begin = [], time.perf_counter()
        while len(runs) < 5 or (time.perf_counter() - begin < 0.2 and len(runs) < 50):
            start = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - start) * 1e3)
        return statistics.median(runs)
    return wall


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _device(backend: str) -> str:
    if backend == "triton" and _cuda():
        import torch
        return torch.cuda.get_device_name()
    import platform
    return f"CPU ({platform.machine()}, {backend})"


def tuned(prog, sizes: dict[str, int], dtype: str = "f32", backend: str = "triton"):
    """The program with the schedule the tuning cache holds for its algorithm at this shape
    bucket, dtype, backend and device, else the program as written; `origin` says which."""
    from dt.runtime import loads
    from dt.tune import cache as tuning_cache
    entry = tuning_cache.lookup(prog, prog._extents({}, sizes, "sizes"), dtype, backend, _device(backend))
    if entry is None:
        prog.origin = "the schedule as written: the tuning cache has none for this shape"
        return prog
    chosen = loads(entry["schedule"], name=prog.name, file=entry["path"])
    chosen.origin = f"the tuned schedule {entry['name']!r} ({entry['path']}, {entry['ms']:.4f} ms at {entry['extents']})"
    return chosen
