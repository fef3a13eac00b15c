"""A fused producer computed again and again. `p.fuse_at(c, v)` computes p inside c's loop over
v: in every step of each loop inside that one, and in every program along each blocked
dimension, p is computed again. Where p does not depend on that loop or dimension, every
computation but one is wasted: the bytes p reads and the FLOPs it computes are multiplied by
the number of steps (or programs). The talk's 2mm inner fusion makes that trade on purpose."""
from __future__ import annotations

import math

from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.index_expr import index_names
from dt.ir.lint.facts import KernelFacts

MACHINES = ("gpu", "cpu")
CODES = ("recomputed",)


def check(facts: KernelFacts):
    kernel, context = facts.kernel, facts.context
    producers = {p for p in context.fused}
    if not producers:
        return
    repeats: dict[str, list[tuple[int | None, str]]] = {}
    first: dict[str, S.Assign] = {}

    def note(assigns, count, what):
        for s in assigns:
            stored = isinstance(s.value, (S.Load, S.Gather)) and s.value.tensor == s.dt_name
            if s.dt_name in producers and count != 1 and not stored:  # a read of it stored by another kernel
                first.setdefault(s.dt_name, s)
                if (count, what) not in repeats.setdefault(s.dt_name, []):
                    repeats[s.dt_name].append((count, what))

    # a walk's last, cut tile (a "tail" loop) counts with the loop of its whole tiles
    tails = {(loop.dim, loop.start): loop for loop in facts.loops.values() if loop.kind == "tail"}
    for loop in facts.loops.values():
        if loop.kind == "tail":
            continue
        trips, tail = facts.trips(loop), tails.get((loop.dim, loop.stop))
        if tail is not None:
            trips = None if trips is None or facts.trips(tail) is None else trips + facts.trips(tail)
        note(invariant_assigns(loop.body, {loop.var}), trips, f"step of the loop over {loop.dim}")
    blocked: dict[str, list[S.Axis]] = {}  # dimension -> its axes whose tiles differ from program to program
    for axis in facts.axes.values():
        if facts.per_program(axis):
            blocked.setdefault(axis.dim, []).append(axis)
    for dim, axes in blocked.items():
        seeds = {a.name for a in axes} | {n for a in axes for n in
                                          (index_names(a.start) | index_names(a.limit)) & set(facts.lets)}
        extent = facts.extent(dim)
        count = None if extent is None else -(-extent // facts.block(axes[0]))
        note(invariant_assigns(kernel.body, seeds), count, f"program along {dim}")
    for producer, found in repeats.items():
        yield _warning(producer, found, first[producer], facts)


def _warning(producer: str, found, assign: S.Assign, facts: KernelFacts) -> PerformanceWarning:
    consumer, dim = facts.context.fused[producer]
    counts = [c for c, _ in found]
    total = math.prod(counts) if None not in counts else None
    whats = " and ".join(f"once per {what}" + (f" ({c})" if c is not None else "") for c, what in found)
    times = f"{total:,} times" if total is not None else "many times"
    loc = facts.context.schedule_loc(producer, "fuse_at") or assign.loc
    cost = (f"{total}x" if total is not None else "a multiple of") + \
        f" the bytes '{producer}' reads and the FLOPs it computes"
    return PerformanceWarning(
        "recomputed", f"'{producer}' is computed {times} in kernel '{facts.kernel.name}', where it does not change: "
        f"{whats}", loc, cost=cost,
        hint=f"compute '{producer}' once: in its own kernel ({producer}.compile()), or fused where nothing repeats "
             f"it (at a dimension it has, outside the loops it does not depend on)",
        func=producer, notes=(("it is computed here", assign.loc),) if loc is not assign.loc else ())


def reads(value: S.TExpr) -> set[str]:
    """The axes, tile variables and index names an expression reads."""
    names: set[str] = set()
    for node in S.walk_texpr(value):
        names.update(node.dims)
        if isinstance(node, S.Ref):
            names.add(node.name)
        elif isinstance(node, S.Load):
            names.update(node.indices)
        elif isinstance(node, S.Index):
            names |= index_names(node.value)
        elif isinstance(node, (S.Reduce, S.Dot, S.Scan)):
            names.add(node.axis)
    return names


def invariant_assigns(body, seeds: set[str]) -> list[S.Assign]:
    """The Assigns of `body` (nested loops included) whose value is the same whatever the
    values of `seeds`: reading none of them, nothing computed from them, and no value carried
    from the previous run of `body` (a name assigned in it, read before it is assigned)."""
    variant = set(seeds)
    assigned_in_body = {s.name for s in S.walk_statements(body) if isinstance(s, S.Assign)}
    assigned: set[str] = set()
    found: list[S.Assign] = []

    def visit(statements):
        for s in statements:
            if isinstance(s, S.Let) and index_names(s.value) & variant:
                variant.add(s.name)
            elif isinstance(s, S.Axis) and (index_names(s.start) | index_names(s.size) | index_names(s.limit)) \
                    & variant:
                variant.add(s.name)
            elif isinstance(s, S.For):
                if (index_names(s.start) | index_names(s.stop)) & variant:
                    variant.add(s.var)
                visit(s.body)
            elif isinstance(s, (S.Assign, S.LetValue)):
                used = reads(s.value)
                if used & variant or (used & assigned_in_body) - assigned:
                    variant.add(s.name)
                elif isinstance(s, S.Assign) and s.name not in variant:
                    found.append(s)
                assigned.add(s.name)
    visit(body)
    return [s for s in found if s.name not in variant]
