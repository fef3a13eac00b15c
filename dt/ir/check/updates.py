"""Updates (`g[I[t], d] += e`, `cache[P[b], h, k] = x[b, h, k]`): each writes into a Func defined
over its own dimensions first, at integer index expressions of its own dimensions, never reading
the Func it writes; it runs in a kernel of its own after that Func's and any update
written before it, and every reader of the Func reads it updated (dt.ir.check.uses)."""
from __future__ import annotations

from dt.errors import DTDimensionError, DTNameError, DTScheduleError
from dt.ir import algorithm as A
from dt.ir.check.program import FuncSchedule
from dt.ir.check.uses import uses

# what an update's kernel or the Func it writes cannot be scheduled to do, and why
_NOT_FOR_UPDATES = {"fuse_at": "it writes into another Func, so it runs in a kernel of its own",
                    "inline": "it writes into another Func, so it runs in a kernel of its own",
                    "compute_with": "it runs in a kernel of its own", "split": "its reductions run whole",
                    "compile": "the Func it updates is the output", "compile_to_kernel": "the Func it updates is the output",
                    "save": "the Func it updates is the output"}
_NOT_FOR_TARGETS = {"fuse_at": "its updates write into it in memory, in kernels of their own",
                    "inline": "its updates write into it in memory, in kernels of their own",
                    "compile_to_kernel": "its updates run in kernels of their own"}


def check_updates(defs: dict[str, A.FuncDef]):
    for f in defs.values():
        if f.update is None:
            continue
        u = f.update
        target = defs.get(u.target)
        if target is None or target.update is not None:
            raise DTNameError(f"'{u.target}' is updated before it is defined over its dimensions", u.loc,
                              f"define it first, e.g. {u.target}[{', '.join('x' + str(i) for i in range(len(u.subscripts)))}]"
                              f" = 0.0; (its extents come from that definition)")
        read = [a for a in uses(f.expr) if a.name == u.target]
        if read:
            raise DTDimensionError(f"the update {u.text} ... reads '{u.target}', the Func it writes", read[0].loc,
                                   "compute what it reads into a Func of its own first; the order in which the "
                                   "elements of an update are written is not defined")
        read = [a for s in u.subscripts for a in uses(s) if a.name == u.target]
        if read:
            raise DTDimensionError(f"the update {u.text} ... indexes '{u.target}' by its own elements", read[0].loc,
                                   "compute the indices into a Func of their own first")


def check_update_schedules(defs: dict[str, A.FuncDef], schedules: dict[str, FuncSchedule]):
    for f in defs.values():
        if f.update is None:
            continue
        for primitive, why in _NOT_FOR_UPDATES.items():
            if primitive in schedules[f.name].locs:
                raise DTScheduleError(f"an update cannot be scheduled with {primitive}: {why}",
                                      schedules[f.name].locs[primitive],
                                      f"remove it (the update {f.update.text} ... is scheduled as "
                                      f"{f.update.target}.update(i))")
        target = schedules[f.update.target]
        for primitive, why in _NOT_FOR_TARGETS.items():
            if primitive in target.locs:
                raise DTScheduleError(f"'{f.update.target}' is updated, so it cannot be scheduled with {primitive}: "
                                      f"{why}", target.locs[primitive],
                                      f"remove it; {f.update.target} is computed in a kernel of its own, then updated")
