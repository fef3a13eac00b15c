"""Tiles that use little of what memory moves. A GPU reads and writes global memory in 32-byte
sectors; the lanes of a warp that touch consecutive addresses share them. A tile one lane wide
along its tensor's contiguous (last) dimension gives each lane a sector of its own, of which it
uses one element (about 6% of the bytes moved, in bf16). A kernel whose tiles are all one lane
(no `tensorize`: each program computes one element at a time) also leaves all but one thread of
each program idle."""
from __future__ import annotations

from dt.dtypes import ITEM_BYTES
from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint.facts import SECTOR, WARP, KernelFacts, quantity, statements_with_values

MACHINES = ("gpu",)
CODES = ("uncoalesced", "one-lane-tiles")


def check(facts: KernelFacts):
    kernel = facts.kernel
    tiled = [a for a in facts.axes.values() if not a.scalar]
    if not tiled:
        yield from _one_lane(facts)
        return
    seen = set()
    for s, value in statements_with_values(kernel.body):
        accesses = [node for node in S.walk_texpr(value) if isinstance(node, S.Load)]
        if isinstance(s, S.Store):
            accesses.append(s)
        for node in accesses:
            w = _uncoalesced(node, s, facts)
            if w is not None and (node.tensor, w.loc) not in seen:
                seen.add((node.tensor, w.loc))
                yield w


def _uncoalesced(node, s, facts: KernelFacts):
    spec = facts.pipeline.tensor(node.tensor)
    last = node.indices[-1] if node.indices else None
    if last is None or len(node.indices) < 2 or facts.extent(spec.dims[-1]) == 1:
        return None
    if (facts.lanes(last) or 2) > 1:
        return None  # lanes along the contiguous dimension: consecutive addresses
    across = [a for a in node.indices[:-1] if (facts.lanes(a) or WARP) > 1]
    lanes = 1
    for a in across:
        lanes *= facts.lanes(a) or WARP
    if lanes < WARP:
        return None  # a handful of lanes: no warp's worth of sectors to waste
    item = ITEM_BYTES.get(spec.dtype, 4)
    func = facts.kernel.schedule_func
    contiguous = spec.dims[-1]
    others = ", ".join(dict.fromkeys(facts.dim_of(a) for a in across))
    verb = "stores" if isinstance(node, S.Store) else "reads"
    loc = node.loc or s.loc
    return PerformanceWarning(
        "uncoalesced", f"the tile of '{node.tensor}' in kernel '{facts.kernel.name}' spans {others} but is one "
        f"lane wide along {contiguous}, the tensor's contiguous dimension", loc,
        cost=f"each of its {lanes} lanes {verb} {item} bytes of a {SECTOR}-byte sector of its own: about "
             f"{item / SECTOR:.0%} of the bytes moved are used",
        hint=f"tile {contiguous} ({func}.tensorize({contiguous}:64), blocked by as much) and make the tile narrower "
             f"along {others}", func=func)


def _one_lane(facts: KernelFacts):
    kernel = facts.kernel
    total = facts.program_count
    for loop in facts.loops.values():
        trips = facts.trips(loop)
        total = None if total is None or trips is None else total * trips
    if total is not None and total < 2:
        return  # one element in all: a scalar result
    dims = ", ".join(dict.fromkeys(a.dim for a in facts.axes.values()))
    func = kernel.schedule_func
    elements = f"{quantity(total)} elements" if total is not None else "every element"
    loc = facts.context.schedule_loc(func, "compile", "compile_to_kernel", "save") or kernel.loc
    yield PerformanceWarning(
        "one-lane-tiles", f"every tile of kernel '{kernel.name}' is one element: its schedule tensorizes none of "
        f"{dims}", loc,
        cost=f"{elements} computed one at a time, each by one of a program's {facts.warps * WARP} threads",
        hint=f"tensorize and block {func}'s dimensions ({func}.tensorize(...) and {func}.block(...): "
             f"see examples/add.dt)", func=func)
