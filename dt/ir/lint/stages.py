"""`num_stages` where nothing can be pipelined. num_stages loads the tiles of later steps of a
loop while the current one computes; a kernel without a loop that loads tiles (one tile per
program, or loops over tiles already on chip) gains nothing from it."""
from __future__ import annotations

from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint.facts import KernelFacts

MACHINES = ("gpu",)
CODES = ("nothing-to-pipeline",)


def check(facts: KernelFacts):
    kernel, context = facts.kernel, facts.context
    if (kernel.num_stages or 0) < 2:
        return
    for s in S.walk_statements(kernel.body):
        if isinstance(s, S.For) and _loads(s.body):
            return
    func = kernel.schedule_func
    yield PerformanceWarning(
        "nothing-to-pipeline", f"{func}.num_stages({kernel.num_stages}) asks kernel '{kernel.name}' to pipeline its "
        f"loops, and no loop of it loads a tile", context.schedule_loc(func, "num_stages") or kernel.loc,
        cost="nothing gained: the hint has no loads to start early",
        hint=f"remove {func}.num_stages({kernel.num_stages}), or walk a dimension in a loop of tiles "
             f"({func}.tensorize with a tile smaller than the block) so that there is one to pipeline", func=func)


def _loads(body) -> bool:
    return any(isinstance(node, (S.Load, S.Gather)) for s in body if isinstance(s, (S.Assign, S.Store))
               for node in S.walk_texpr(s.value))
