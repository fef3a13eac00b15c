"""Choosing a program's schedule at a call (`prog(..., schedule="tuned")`, `DT_SCHEDULE=tuned`):
the schedule the tuning cache holds for the program's algorithm at the call's shape bucket, else
at the nearest bucket tuned, else the schedule as written, with a note saying which."""
from __future__ import annotations

from dt.tune import cache as tuning_cache
from dt.tune import evaluate
from dt.tune.dtypes import label, resolved

CHOICES = ("written", "tuned")  # what a call's schedule= may say


def tuned(prog, sizes: dict[str, int], dtype: str | dict[str, str] = "f32", backend: str = "triton"):
    """The program with the schedule the tuning cache holds for its algorithm at this shape
    (its bucket, else the nearest tuned), dtype, backend and device, else the program as
    written; `origin` says which."""
    chosen, chosen.origin = choose(prog, prog._extents({}, sizes, "sizes"), dtype, backend)
    return chosen


def choose(prog, extents: dict[str, int], dtype: str | dict[str, str], backend: str):
    """(The program to run, a sentence saying which schedule it has and why); `dtype`: the
    inputs' (one name, or one per input: dt.tune.dtypes)."""
    from dt.runtime import loads
    dtype = resolved(prog, dtype)
    device = evaluate.device(backend)
    entry = tuning_cache.nearest(prog, extents, dtype, backend, device)
    if entry is None:
        return prog, (f"the schedule as written: the tuning cache ({tuning_cache.directory()}) has no "
                      f"{label(dtype)} schedule of this algorithm on {device}; `dt tune` finds one")
    shape = ", ".join(f"{d}={n}" for d, n in entry["extents"].items())
    where = "this shape's bucket" if tuning_cache.bucket(entry["extents"]) == tuning_cache.bucket(extents) \
        else "the nearest shape tuned"
    chosen = loads(entry["schedule"], name=prog.name, file=entry["path"])
    return chosen, (f"the tuned schedule {entry['name']!r} of {where} ({shape}: {entry['ms']:.4f} ms), "
                    f"from {entry['path']}")
