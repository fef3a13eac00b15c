"""The search over a program's space (dt.tune.space): candidates picked by a cost model and
an evolutionary strategy (dt.tune.strategy), each compiled (on a GPU, by worker processes ahead
of its timing), checked against the reference on the same inputs, then timed (dt.tune.evaluate,
or dt.tune.cluster across a Ray cluster) until the budget runs out; the fastest few timed again in
alternating rounds beside the baselines (the schedule as written, and any given).

    result = prog.tune({"x": 4096, "y": 4096}, "bf16", budget=300)
    print(result.table())
    Path("softmax_tuned.dt").write_text(result.best.text)

`progress` hears of every candidate measured (a `Step`); an interrupt (Ctrl-C, or the SIGTERM
that `dt tune` turns into one) stops the search and raises `Interrupted`, whose result holds
what was timed until then.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from dt.errors import DTError
from dt.tune.dtypes import label, resolved
from dt.tune.evaluate import Local, Outcome, device as _device
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


@dataclass(frozen=True)
class Step:
    """One candidate measured, as the search tells `progress`: the `done`th of the space's `total`,
    its outcome (`ms` None: it failed) and the fastest so far (None while none ran correctly)."""
    done: int
    total: int
    outcome: Outcome
    best: Timed | None

    def line(self) -> str:
        """`12/45 0.0523 ms add_out: x1 y256 (best 0.0421 ms: add_out: x1 y64)`"""
        ms = "failed" if self.outcome.ms is None else f"{self.outcome.ms:.4f} ms"
        return f"{self.done}/{self.total} {ms} {self.outcome.candidate.name} ({self.best_so_far()})"

    def best_so_far(self) -> str:
        return f"best {self.best.ms:.4f} ms: {self.best.candidate.name}" if self.best else "none correct yet"


@dataclass
class Result:
    timed: list[Timed]  # fastest first
    failed: dict[str, str]  # candidate name -> why (compile error, wrong output)
    untried: int  # candidates the budget (or an interrupt) left out
    summary: str  # the space's, or where the cached entry is
    device: str
    cached: bool = False  # from the tuning cache (dt.tune.cache), not searched
    baselines: dict[str, float] = field(default_factory=dict)  # name -> ms, timed beside the candidates
    title: str = ""  # program, shape, dtype and backend, e.g. 'softmax_safe x=4096 y=4096 bf16 on triton'
    stopped: bool = False  # cut short by an interrupt: the search's own times, no final rounds, not cached

    @property
    def best(self) -> Candidate:
        if not self.timed:
            raise DTError("no schedule of the space ran correctly", None,
                          "see the result's `failed`, or give a larger budget")
        return self.timed[0].candidate

    def table(self, rows: int = 10) -> str:
        counts = f"{len(self.timed)} timed, {len(self.failed)} failed, {self.untried} left untried"
        lines = [f"{self.summary}; cut short by an interrupt: {counts} on {self.device}; fastest first, as the "
                 f"search timed them (no final rounds)" if self.stopped else
                 f"{self.summary}; {counts} (budget) on {self.device}; the fastest {FINALISTS} timed again in "
                 f"{ROUNDS} rounds (*), first"]
        lines += [f"{t.ms:10.4f} ms {'*' if t.rounds else ' '} {t.candidate.name}" for t in self.timed[:rows]]
        lines += [f"{ms:10.4f} ms  baseline: {name} (the fastest schedule {ms / self.timed[0].ms:.2f}x as fast)"
                  for name, ms in self.baselines.items() if self.timed]
        return "\n".join(lines)


class Interrupted(KeyboardInterrupt):
    """An interrupt that stopped a search (Ctrl-C; SIGTERM under `dt tune`), raised once the
    search's processes are stopped, with what it found: `result`, marked `stopped`."""

    def __init__(self, result: Result):
        super().__init__(f"the search was stopped after {len(result.timed)} schedules were timed")
        self.result = result


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
    1, a float one random); not part of the cache's key, as a schedule is right for any value.
    `progress`: called with a `Step` after each candidate is measured. An interrupt stops the
    search: `Interrupted` is raised with the result so far (uncached)."""
    from dt.testing import given_scalars
    from dt.tune import cache as tuning_cache
    if not prog.ast.source:  # candidates are DT texts, and the cache's key is the algorithm's text
        raise DTError(f"{prog.name} was built with the Python API: tuning rewrites a program's DT text, and it "
                      "has none", None, "write the program in DT (dt.loads / dt.load) to tune it")
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
        timed, failed, tried, stopped = _search(Strategy(found.candidates, seed), evaluator, budget, progress,
                                                len(found))
        finalists = timed[:FINALISTS]
        written = Candidate("as written", prog.ast.source)
        contenders, screened = {}, {}
        if not stopped:
            try:
                contenders, screened = _final_rounds(evaluator, written, finalists, timed, failed, baselines or {})
            except KeyboardInterrupt:  # the search's own times stand, none of the rounds'
                stopped = True
                for t in finalists:
                    t.rounds.clear()
    finally:
        if evaluator is not None:
            evaluator.close()
    for t in contenders.values():
        t.ms = statistics.median(t.rounds) if t.rounds else t.ms
    # the schedule as written competes too: dt tune never returns one slower than what the user wrote
    ranked = finalists + ([contenders[written.name]] if written.name in contenders else [])
    timed = sorted(ranked, key=lambda t: t.ms) + timed[len(finalists):]
    if cache and timed and not stopped:  # a search cut short would stand in for a whole one
        tuning_cache.store(prog, extents, dtype, backend, device, timed[0].candidate.text, timed[0].candidate.name,
                           timed[0].ms)
    measured = {n: t.ms for n, t in contenders.items() if n not in {f.candidate.name for f in finalists}} | screened
    result = Result(timed, failed, len(found) - tried, found.summary(), shown, baselines=measured, title=title,
                    stopped=stopped)
    if stopped:
        raise Interrupted(result)
    return result


def _search(strategy: Strategy, evaluator, budget: float, progress, total: int):
    """(Timed candidates fastest first, failures by name, how many were measured, whether an
    interrupt stopped it), within the budget (the first candidate is always measured), keeping
    the evaluator's pipeline full."""
    begin = time.monotonic()
    timed, failed, tried, in_flight, best, stopped = [], {}, 0, 0, None, False
    try:
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
            if outcome.ms is None:
                failed[outcome.candidate.name] = outcome.error
            else:
                timed.append(Timed(outcome.candidate, outcome.ms))
                best = timed[-1] if best is None or outcome.ms < best.ms else best
            if progress is not None:
                progress(Step(tried, total, outcome, best))
    except KeyboardInterrupt:  # what was measured stands
        stopped = True
    evaluator.abandon()
    return sorted(timed, key=lambda t: t.ms), failed, tried, stopped


def _final_rounds(evaluator, written: Candidate, finalists: list[Timed], timed: list[Timed], failed: dict,
                  baselines: dict) -> tuple[dict, dict]:
    """(The contenders by name: the finalists, the schedule as written and the baselines, timed again
    in alternating rounds; the baselines too slow to time again, with their times). The schedule as
    written that fails or runs past WRITTEN_TIMEOUT is added to `failed`."""
    outcome = evaluator.measure_now(written, WRITTEN_TIMEOUT)
    contenders = {t.candidate.name: t for t in finalists}
    screened = {}
    if outcome.late:
        failed[written.name] = f"not timed: it ran for more than {WRITTEN_TIMEOUT} s, far slower than the schedules found"
    elif outcome.ms is None:
        failed[written.name] = outcome.error
    elif timed and outcome.ms > SLOWER * timed[0].ms:
        screened[written.name] = outcome.ms
    else:
        contenders[written.name] = Timed(written, outcome.ms)
    for name, fn in baselines.items():
        contenders[name] = Timed(Candidate(name, ""), evaluator.time(name, fn))
    for _ in range(ROUNDS if len(contenders) > 1 else 0):
        for t in contenders.values():
            t.rounds.append(evaluator.retime(t.candidate))
    return contenders, screened
