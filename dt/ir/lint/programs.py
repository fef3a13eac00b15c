"""Too few programs to fill the GPU. Each program runs on one multiprocessor; a kernel of fewer
programs than the GPU has multiprocessors leaves the others idle, however fast each program is.
Reported below three quarters of the multiprocessors, for kernels that move enough data for it
to matter (a few MiB: below that, the launch costs more than the work)."""
from __future__ import annotations

from dt.errors import PerformanceWarning
from dt.ir.lint.facts import KernelFacts, megabytes

MACHINES = ("gpu",)
CODES = ("too-few-programs",)
MIN_BYTES = 4 * 2**20
BUSY = 0.75  # warn when fewer programs than this share of the multiprocessors run


def check(facts: KernelFacts):
    kernel, context = facts.kernel, facts.context
    programs = facts.program_count
    sms = context.multiprocessors
    if programs is None or programs >= BUSY * sms or kernel.persistent:
        return
    sizes = [facts.moved_bytes(t) for t in dict.fromkeys(kernel.reads + kernel.writes)]
    moved = sum(n for n in sizes if n is not None)
    if moved < MIN_BYTES:
        return
    func = kernel.schedule_func
    blocked = {a.dim: facts.block(a) for a in facts.axes.values() if facts.per_program(a)}
    loc = context.schedule_loc(func, "block", "map") or kernel.loc
    wide = [d for d, block in blocked.items() if block > 1]
    if wide:
        hint = f"smaller blocks along {', '.join(wide)} ({func}.block(...)), so that {sms} programs or more run"
    elif blocked:
        hint = (f"each program already has one index of {', '.join(blocked)}: the work a program does is a reduction "
                f"or a whole row; split the reduction over programs (f.split(r:1024), f the Func reducing over r)")
    else:
        hint = f"block {func} along a dimension it has ({func}.block(...)), so that {sms} programs or more run"
    yield PerformanceWarning(
        "too-few-programs",
        f"kernel '{kernel.name}' runs {programs} program{'s' * (programs != 1)} on a GPU of {sms} multiprocessors",
        loc, cost=f"{sms - programs} of {sms} multiprocessors idle ({programs / sms:.0%} of the GPU moves its "
                  f"{megabytes(moved)})", hint=hint, func=func)
