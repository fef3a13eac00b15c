"""The search over a program's space (dt.tune.space): candidates picked by a cost model and
an evolutionary strategy (dt.tune.strategy), each compiled (on a GPU, by worker processes ahead
of its timing), checked against the reference on the same inputs, then timed (dt.tune.evaluate,
or dt.tune.cluster across a Ray cluster) until the budget runs out; the fastest few timed again in
alternating rounds beside the baselines (the schedule as written, and any given).

    result = prog.tune({"x": 4096, "y": 4096}, "bf16", budget=300)
    print(result.table())
    Path("softmax_tuned.dt").write_text(result.best.text)
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from dt.errors import DTError
from dt.tune.dtypes import label, resolved
from dt.tune.evaluate import Local, device as _device
from dt.tune.space import Candidate, space
from dt.tune.strategy import Strategy

FINALISTS = 3  # the fastest, timed again in rounds
ROUNDS = 3
WRITTEN_TIMEOUT = 30  # seconds the schedule as written may take to compile, check and time (a default one can crawl)
SLOWER = 10  # as written, this many times the fastest candidate's time: reported, not timed again in rounds


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
    baselines: dict[str, float] = field(default_factory=dict)  # name -> ms, timed beside the candidates
    title: str = ""  # program, shape, dtype and backend, e.g. 'softmax_safe x=4096 y=4096 bf16 on triton'

    @property
    def best(self) -> Candidate:
        if not self.timed:
            raise DTError("no schedule of the space ran correctly", None,
                          "see the result's `failed`, or give a larger budget")
        return self.timed[0].candidate

    def table(self, rows: int = 10) -> str:
        lines = [f"{self.summary}; {len(self.timed)} timed, {len(self.failed)} failed, {self.untried} left untried "
                 f"(budget) on {self.device}; the fastest {FINALISTS} timed again in {ROUNDS} rounds (*), first"]
        lines += [f"{t.ms:10.4f} ms {'*' if t.rounds else ' '} {t.candidate.name}" for t in self.timed[:rows]]
        lines += [f"{ms:10.4f} ms  baseline: {name} (the fastest schedule {ms / self.timed[0].ms:.2f}x as fast)"
                  for name, ms in self.baselines.items() if self.timed]
        return "\n".join(lines)


def tune(prog, sizes: dict[str, int], dtype: str | dict[str, str] = "f32", backend: str = "triton", budget: float = 300,
         seed: int = 0, progress=None, cache: bool = True, workers: int | None = None,
         baselines: dict | None = None, ray: str | bool | None = None, lookup: bool = True,
         scalars: dict | None = None) -> Result:
    """Search the space of `prog` at these extents, for inputs of `dtype` (one name, or one per
    input: dt.tune.dtypes), on `backend` for `budget` seconds; with
    `cache`, first look for this algorithm and shape bucket in the tuning cache, and keep the
    fastest there (`lookup=False`: search anyway, and keep the result). `workers` processes
    compile the candidates ahead of their timing (default: all cores but two, at most 16, on a
    GPU; none on a CPU, whose timing they would disturb). `baselines`:
    name -> function of the inputs by name (on the backend's device), timed beside the
    finalists, as is the schedule as written. `ray`: measure on a Ray cluster (True: start a
    local one; a string: its address; dt.tune.cluster). `scalars`: values of the program's
    scalars to measure with (the group of grouped-query attention: an index scalar left out is
    1, a float one random); not part of the cache's key, as a schedule is right for any value."""
    from dt.testing import given_scalars
    from dt.tune import cache as tuning_cache
    scalars = given_scalars(prog, scalars)
    extents = prog._extents({}, sizes, "sizes")
    dtype = resolved(prog, dtype)
    shape = " ".join(f"{d}={n}" for d, n in extents.items())
    given = "".join(f" {n}={v:g}" for n, v in scalars.items())
    title = f"{prog.name} {shape}{given} {label(dtype)} on {backend}"
    evaluator = None
    if ray:  # the cluster's device, not this machine's, is the cache's key
        from dt.tune.cluster import Cluster
        evaluator = Cluster(prog, sizes, dtype, backend, seed, None if ray is True else ray, scalars)
    try:  # a cluster or processes started for this search are not left running, whatever happens
        device, shown = (evaluator.device_name, evaluator.device) if evaluator else (_device(backend),) * 2
        entry = tuning_cache.lookup(prog, extents, dtype, backend, device) if cache and lookup else None
        if entry is not None:
            return Result([Timed(Candidate(entry["name"], entry["schedule"]), entry["ms"])], {}, 0,
                          f"from the tuning cache ({entry['path']}, tuned at {entry['extents']})", device,
                          cached=True, title=title)
        found = space(prog, sizes, dtype, backend)
        evaluator = evaluator or Local(prog, sizes, dtype, backend, seed, workers, scalars)
        timed, failed, tried = _search(Strategy(found.candidates, seed), evaluator, budget, progress,
                                       len(found))
        finalists = timed[:FINALISTS]
        written = Candidate("as written", prog.ast.source)
        outcome = evaluator.measure_now(written, WRITTEN_TIMEOUT)
        contenders = {t.candidate.name: t for t in finalists}
        screened = {}  # baselines too slow to time again
        if outcome.late:
            failed[written.name] = f"not timed: it ran for more than {WRITTEN_TIMEOUT} s, far slower than the schedules found"
        elif outcome.ms is None:
            failed[written.name] = outcome.error
        elif timed and outcome.ms > SLOWER * timed[0].ms:
            screened[written.name] = outcome.ms
        else:
            contenders[written.name] = Timed(written, outcome.ms)
        for name, fn in (baselines or {}).items():
            contenders[name] = Timed(Candidate(name, ""), evaluator.time(name, fn))
        for _ in range(ROUNDS if len(contenders) > 1 else 0):
            for t in contenders.values():
                t.rounds.append(evaluator.retime(t.candidate))
    finally:
        if evaluator is not None:
            evaluator.close()
    for t in contenders.values():
        t.ms = statistics.median(t.rounds) if t.rounds else t.ms
    # the schedule as written competes too: dt tune never returns one slower than what the user wrote
    ranked = finalists + ([contenders[written.name]] if written.name in contenders else [])
    timed = sorted(ranked, key=lambda t: t.ms) + timed[len(finalists):]
    if cache and timed:
        tuning_cache.store(prog, extents, dtype, backend, device, timed[0].candidate.text, timed[0].candidate.name,
                           timed[0].ms)
    measured = {n: t.ms for n, t in contenders.items() if n not in {f.candidate.name for f in finalists}} | screened
    return Result(timed, failed, len(found) - tried, found.summary(), shown, baselines=measured, title=title)


def _search(strategy: Strategy, evaluator, budget: float, progress, total: int):
    """(Timed candidates fastest first, failures by name, how many were measured), within the
    budget (the first candidate is always measured), keeping the evaluator's pipeline full."""
    begin = time.monotonic()
    timed, failed, tried, in_flight = [], {}, 0, 0
    while True:
        over = tried and time.monotonic() - begin > budget
        while not over and in_flight < evaluator.depth:
            candidate = strategy.next()
            if candidate is None:
                break
            evaluator.submit(candidate)
            in_flight += 1
        if over or not in_flight:
            break
        outcome = evaluator.next()
        in_flight -= 1
        tried += 1
        strategy.tell(outcome.candidate, outcome.ms)
        if progress is not None:
            progress(tried, total, outcome.candidate.name)
        if outcome.ms is None:
            failed[outcome.candidate.name] = outcome.error
        else:
            timed.append(Timed(outcome.candidate, outcome.ms))
    evaluator.abandon()
    return sorted(timed, key=lambda t: t.ms), failed, tried
