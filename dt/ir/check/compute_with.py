"""compute_with legality: Funcs whose reductions share a sibling's loop over a reduction
dimension. Each chain of compute_with shares the loop of the Func at its end (its owner); what
runs in that loop reads nothing the loop completes only after it, but for the two statistics the
lowering accumulates online (dt.ir.check.statistics), and the loops of a kernel can be put in an
order (`runs_after`)."""
from __future__ import annotations

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir.check.inlining import substitute
from dt.ir.check.statistics import (loop_statistic, max_reduction, mean_value, shifted_exp,
                                    squared_deviation)
from dt.ir.check.uses import dependency_path, post_order, uses
from dt.ir.tiles import tile_of


def shared_loops(funcs, schedules, fused, dim_kinds) -> dict[tuple[str, str], tuple[str, ...]]:
    """(sibling, dim) -> the Funcs whose reductions over dim run in sibling's loop. A chain
    (f.compute_with(g, y); g.compute_with(h, y)) shares the loop of the Func at its end, h."""
    loops: dict[tuple[str, str], tuple[str, ...]] = {}
    for n in funcs:
        if schedules[n].compute_with:
            _check_compute_with(n, *schedules[n].compute_with, funcs, schedules, fused, dim_kinds)
    for n in funcs:
        if schedules[n].compute_with:
            key = (_loop_owner(n, schedules), schedules[n].compute_with[1])
            loops[key] = loops.get(key, ()) + (n,)
    for (owner, dim), members in loops.items():
        for n in members:
            _check_shared_dims(n, owner, funcs, schedules, fused)
            _check_shared_tile(n, owner, dim, schedules, fused)
        _check_shared_loop(owner, dim, members, funcs, schedules)
        _check_other_loops(owner, dim, members, loops, funcs, schedules)
    _check_loop_order(loops, funcs, schedules)
    return loops


def top_reductions(e: A.Expr, dim: str) -> list[A.Reduce]:
    """The reductions over `dim` in e that no other reduction encloses."""
    found, stack = [], [e]
    while stack:
        node = stack.pop()
        if isinstance(node, A.Reduce):
            if node.dim == dim:
                found.append(node)
            continue
        stack.extend(reversed(A.children(node)))
    return found


def nested_reductions(e: A.Expr, dim: str) -> list[A.Reduce]:
    """The reductions over other dims in e that enclose a reduction over `dim`."""
    return [n for n in A.walk(e) if isinstance(n, A.Reduce) and n.dim != dim
            and any(isinstance(r, A.Reduce) and r.dim == dim for r in A.walk(n))]


def _check_compute_with(func, sibling, dim, funcs, schedules, fused, dim_kinds):
    """func.compute_with(sibling, dim): both reduce over `dim`, are fused at the same loop, and
    func's reductions over `dim` can be accumulated beside sibling's, tile by tile."""
    s = schedules[func]
    loc = s.locs.get("compute_with")
    hint = f"e.g. {func}.fuse_at(c, x); {sibling}.fuse_at(c, x); {func}.compute_with({sibling}, {dim})"
    if sibling not in funcs:
        raise DTScheduleError(f"'{func}' is computed with '{sibling}', which is not computed (it is inlined "
                              f"or unused)", loc, "name a Func that is computed")
    if dim_kinds.get(dim) != "RVar":
        raise DTScheduleError(f"compute_with shares a reduction loop, but '{dim}' is not an RVar",
                              s.dim_locs.get(("compute_with", dim)) or loc, "name the RVar both Funcs reduce over")
    if dim in funcs[sibling].dims and top_reductions(funcs[func].expr, dim):
        raise DTScheduleError(f"'{func}' is computed with '{sibling}' over '{dim}', which '{sibling}' walks as a "
                              f"pure dimension: only a split reduction sums in that walk, one chunk per program",
                              loc, f"split {func} in chunks of {sibling}'s block: {func}.split({dim}:N) with "
                              f"{sibling}.block({dim}:N)")
    for name in (func, sibling):
        if not top_reductions(funcs[name].expr, dim):
            raise DTScheduleError(f"'{name}' has no reduction over '{dim}' to share", loc,
                                  f"name the RVar both {func} and {sibling} reduce over")
    nested = nested_reductions(funcs[func].expr, dim)
    if nested:
        raise DTScheduleError(f"'{func}' reduces over '{dim}' inside its reduction over '{nested[0].dim}', "
                              f"so that reduction cannot share '{sibling}''s loop", nested[0].loc,
                              "compute the inner reduction in a Func of its own")
    if _hosts(func, sibling, funcs, fused):
        return
    if func not in fused or fused.get(func) != fused.get(sibling):
        where = lambda n: f"fused at '{fused[n][0]}''s loop over '{fused[n][1]}'" if n in fused else "computed at root"
        places = ("both are computed at root, each in a kernel of its own" if func not in fused and sibling not in fused
                  else f"'{func}' is {where(func)} and '{sibling}' is {where(sibling)}")
        raise DTScheduleError(f"'{func}' is computed with '{sibling}', so both must be fused at the same loop; "
                              f"{places}", loc, hint)


def _hosts(func, sibling, funcs, fused) -> bool:
    """Whether sibling is fused into func's own kernel at func's innermost dimension, where all of
    func's tiles are in scope: there, sibling's loop accumulates func's reductions too (attention's
    grad_V, fused at grad_K's loop over k, walks the rows once for both)."""
    return func not in fused and fused.get(sibling) == (func, funcs[func].dims[-1])


def _loop_owner(func, schedules) -> str:
    """The Func at the end of func's chain of compute_with over one dim: the loop's owner."""
    dim = schedules[func].compute_with[1]
    chain = [func]
    while schedules[chain[-1]].compute_with and schedules[chain[-1]].compute_with[1] == dim:
        sibling = schedules[chain[-1]].compute_with[0]
        if sibling in chain:
            cycle = chain[chain.index(sibling):] + [sibling]
            raise DTScheduleError(f"compute_with forms a cycle: {' -> '.join(cycle)}, so no Func of it "
                                  f"owns the loop over '{dim}' they would share",
                                  schedules[sibling].locs.get("compute_with"),
                                  f"remove the compute_with of the one whose loop the others should share, e.g. "
                                  f"{sibling}.compute_with({schedules[sibling].compute_with[0]}, {dim})")
        chain.append(sibling)
    return chain[-1]


def _check_shared_dims(func, owner, funcs, schedules, fused):
    """A Func accumulated in owner's loop is computed over owner's tiles: its dimensions are
    among owner's (owner is its sibling, or the end of its chain of compute_with), or owner is
    fused into func's own kernel where all of func's tiles are in scope."""
    sibling = schedules[func].compute_with[0]
    extra = [d for d in funcs[func].dims if d not in funcs[owner].dims]
    if extra and not _hosts(func, owner, funcs, fused):
        through = f" (whose loop '{sibling}' shares)" if owner != sibling else ""
        fix = (f"compute {sibling} with {func} instead, if {sibling}'s dimensions are a subset of {func}'s"
               if owner == sibling else f"compute {func} with a Func that has dimension '{extra[0]}', or remove the "
               f"compute_with")
        raise DTScheduleError(f"'{func}' has dimension '{extra[0]}', which '{owner}'{through} does not: it is "
                              f"computed inside {owner}'s loop, over {owner}'s tiles",
                              schedules[func].locs.get("compute_with"), fix)


def _check_shared_tile(func, owner, dim, schedules, fused):
    """A Func accumulated in owner's loop over dim takes owner's tiles: its own tile, if it names
    one, must be the same."""
    own = schedules[func].tensorize.get(dim)
    tile = tile_of(owner, dim, schedules, fused)
    tile = 1 if tile is None else tile
    if own is not None and own != tile:
        s = schedules[func]
        raise DTScheduleError(f"'{func}' is accumulated in '{owner}''s loop over '{dim}', in tiles of "
                              f"{tile}, but its own tile over '{dim}' is {own}",
                              s.dim_locs.get(("tensorize", dim)) or s.locs.get("compute_with"),
                              f"drop {func}'s tensorize of '{dim}', or make it {tile}")


def _check_shared_loop(owner, dim, members, funcs, schedules):
    """What runs in owner's loop over dim (owner's expression, and the members' reductions over
    dim) reads no value computed in that loop, which is complete only after it; the two
    exceptions are a variance around a mean of the loop (Chan's pairwise update) and a sum or
    product of exponentials shifted by a max of the loop (the online softmax, flash attention's
    rescaled accumulators), which the owner's reductions may also be."""
    loop = {owner, *members}
    owned = top_reductions(funcs[owner].expr, dim)
    shifted = [r for r in owned if any(loop_statistic(r, m, funcs[m]) == "exp_sum" for m in members)]
    if shifted and len(owned) > 1:
        raise DTScheduleError(f"'{owner}' has {len(owned)} reductions over '{dim}', one of them shifted by a max "
                              f"computed in its loop; the Func that owns a shared loop may have only that one",
                              owned[1].loc, f"compute the other reductions in Funcs of their own, computed with "
                                            f"'{owner}' over '{dim}'")
    for r in shifted:
        nested = [x for a in r.args for x in A.walk(a) if isinstance(x, A.Reduce) and x.dim == dim]
        if nested:
            raise DTScheduleError(f"'{owner}' reduces over '{dim}' inside its reduction over '{dim}', which "
                                  f"walks the whole of '{dim}' again in every step of the loop", nested[0].loc,
                                  "compute the inner reduction in a Func of its own, computed with the max")
    used = dependency_path(funcs, funcs[owner].expr, members, skip=shifted)
    if used:
        m = used[-1]
        through = _through(used)
        fix = f"remove {m}'s compute_with (then {m} walks '{dim}' in a loop of its own, before {owner})"
        reads_m = [loop_statistic(r, m, funcs[m]) for r in owned]
        if not through and "variance" in reads_m:
            fix = (f"compute the variance with its mean instead: {owner}.compute_with({m}, {dim}) (and remove "
                   f"{m}'s), so that {owner} accumulates its deviations in {m}'s loop")
        elif max_reduction(funcs[m].expr, dim) is not None:
            own = f"{m}[{', '.join(funcs[m].dims)}]"
            hint = next((h for r in owned if (h := _inline_hint(r, used[:-1], m, funcs, schedules))), None)
            fix = hint or (f"write the reduction that reads it as rsum(exp(e - {own}), {dim}) or "
                           f"rdot(exp(e - {own}), v, {dim}), with e written as in {m}'s rmax; or {fix}")
        raise DTScheduleError(f"'{owner}' uses '{m}'{through}, but '{m}' is accumulated in '{owner}''s loop "
                              f"over '{dim}' and is complete only after it", schedules[m].locs.get("compute_with"), fix)
    for f in [owner, *members]:
        notes = () if f == owner else ((f"'{f}' is computed with '{schedules[f].compute_with[0]}' here",
                                        schedules[f].locs.get("compute_with")),)
        for r in (shifted if f == owner else top_reductions(funcs[f].expr, dim)):
            for read in uses(r):
                g = read.name
                if g not in loop:
                    used = dependency_path(funcs, funcs[g].expr, loop)
                    if used:
                        through = "".join(f", which uses '{n}'" for n in used)
                        raise DTScheduleError(f"'{f}' reads '{g}' inside its reduction over '{dim}'{through}, "
                                              f"but '{used[-1]}' is computed in the same loop over '{dim}' "
                                              f"(compute_with) and is complete only after that loop", read.loc,
                                              _inline_hint(r, [g, *used[:-1]], used[-1], funcs, schedules)
                                              or _leave_loop(f, used[-1], owner, loop, dim, funcs), notes)
                    continue
                if loop_statistic(r, g, funcs[g]) is not None:
                    continue  # a variance around a mean of the loop, or an exp-sum shifted by its max
                is_mean = mean_value(funcs[g].expr, dim) is not None
                is_max = max_reduction(funcs[g].expr, dim) is not None
                deviation = squared_deviation(r)
                fix = _leave_loop(f, g, owner, loop, dim, funcs)
                if not is_mean and deviation is not None and deviation[1].name == g:
                    raise DTScheduleError(f"'{f}' reads '{g}' inside its reduction over '{dim}', which "
                                          f"compute_with allows only for a mean, {g} = rsum(e, {dim}) / len({dim}), "
                                          f"and '{g}' is not written so", funcs[g].loc,
                                          f"write {g} as rsum(..., {dim}) / len({dim}), or {fix}")
                shifted_read = shifted_exp(r)
                if not is_max and shifted_read is not None and shifted_read[1].name == g:
                    raise DTScheduleError(f"'{f}' reads '{g}' inside its reduction over '{dim}': compute_with "
                                          f"accepts a sum of exponentials shifted by '{g}' only when '{g}' is a max, "
                                          f"{g} = rmax(e, {dim}), and '{g}' is not written so", funcs[g].loc,
                                          f"if {g} is meant to be the max, write it as rmax(..., {dim}); else {fix}")
                own = f"{g}[{', '.join(funcs[g].dims)}]"
                accepted = (f"; the one such read compute_with accepts is the sum of squared deviations from a "
                            f"mean, rsum((e - {own}) * (e - {own}), {dim}) or rsum(pow(e - {own}, 2), {dim}), where "
                            f"e is written as in {g}'s rsum and {g} is indexed by its own dimensions") if is_mean else \
                    (f"; the one such read compute_with accepts is the sum or product of exponentials shifted by "
                     f"a max, rsum(exp(e - {own}), {dim}) or rdot(exp(e - {own}), v, {dim}), where e is written as "
                     f"in {g}'s rmax, {g} is indexed by its own dimensions and v does not read it") if is_max else ""
                raise DTScheduleError(f"'{f}' reads '{g}' inside its reduction over '{dim}', but '{g}' is "
                                      f"computed in the same loop over '{dim}' (compute_with) and is complete only "
                                      f"after that loop{accepted}", read.loc,
                                      fix + (", or write it in that form" if is_mean or is_max else ""), notes)


def _check_other_loops(owner, dim, members, loops, funcs, schedules):
    """A reduction accumulated in owner's loop over dim reads nothing accumulated in owner's
    loops over other dims: those values are complete only after all of owner's loops."""
    others = {m: d for (o, d), ms in loops.items() if o == owner and d != dim for m in ms}
    for f in members:
        for r in top_reductions(funcs[f].expr, dim):
            used = dependency_path(funcs, r, set(others))
            if used:
                g = used[-1]
                through = _through(used)
                raise DTScheduleError(f"'{f}' reads '{g}'{through} inside its reduction over '{dim}', but "
                                      f"'{g}' is accumulated in '{owner}''s loop over '{others[g]}' (compute_with) "
                                      f"and is complete only after {owner}'s loops",
                                      schedules[g].locs.get("compute_with"),
                                      f"remove {g}'s compute_with (then {g} walks '{others[g]}' in a loop of its "
                                      f"own, before {owner}'s)")


def runs_after(f, loops, funcs) -> list[tuple[str, str, bool]]:
    """(g, why, through a shared loop): the Funcs f's computation must follow. f's loops and the
    reductions accumulated in them read g; or f is accumulated in g's loop (compute_with), so
    its value is computed after that loop."""
    members = {m for (owner, dim), ms in loops.items() if owner == f for m in ms}
    reads = [(funcs[f].expr, f"'{f}' uses")]
    reads += [(r, f"'{m}''s reduction over '{dim}' (in '{f}''s loop) reads") for (owner, dim), ms in loops.items()
              if owner == f for m in ms for r in top_reductions(funcs[m].expr, dim)]
    out = [(u.name, f"{what} '{u.name}'", False) for e, what in reads for u in uses(e)
           if u.name != f and u.name not in members]
    out += [(owner, f"'{f}' is accumulated in '{owner}''s loop over '{dim}'", True)
            for (owner, dim), ms in loops.items() if f in ms]
    return out


def _check_loop_order(loops, funcs, schedules):
    """Each Func's loops run one after another, in the order runs_after gives. compute_with over
    two RVars can make that a cycle (a reads c's result, c is accumulated in b's loop over z,
    and b in a's loop over y); no order of loops computes it."""
    owner_of = {m: (owner, dim) for (owner, dim), members in loops.items() for m in members}
    _, cycle = post_order(funcs, lambda f: ((g, (why, shared)) for g, why, shared in runs_after(f, loops, funcs)
                                            if g in funcs))
    if cycle is not None:
        member = next(f for f, (_, shared) in cycle if shared)
        raise DTScheduleError("these compute_with leave no order to compute the loops in: "
                              + "; ".join(why for _, (why, _) in cycle), schedules[member].locs.get("compute_with"),
                              f"remove {member}'s compute_with (then {member} walks '{owner_of[member][1]}' in a "
                              f"loop of its own)")


def _leave_loop(f, g, owner, loop, dim, funcs) -> str:
    """How to fix f's reduction in owner's loop reading g, of the loop (or through g, a Func of
    it): f leaves the loop; the owner's loop cannot move, so then g leaves it, with the Funcs of
    the loop it uses."""
    if f != owner:
        return f"remove {f}'s compute_with (then {f} walks '{dim}' again, after that loop)"
    leaving = [g] + sorted(n for n in loop - {owner, g} if dependency_path(funcs, funcs[g].expr, {n}))
    return (f"remove the compute_with of {' and '.join(leaving)} (then "
            f"{'they walk' if len(leaving) > 1 else 'it walks'} '{dim}' before {owner})")


def _through(path: list[str]) -> str:
    """' (through 'a', 'b')' for the Funcs before the last of a dependency path."""
    return f" (through {', '.join(repr(n) for n in path[:-1])})" if len(path) > 1 else ""


def _inline_hint(r: A.Reduce, between: list[str], sibling: str, funcs, schedules) -> str | None:
    """How to fix a deviation from a mean `sibling` (or an exponential shifted by a max) written
    through other Funcs: inline them, when r then reads as a sum compute_with accepts."""
    try:
        inlined = substitute(r, funcs, set(between))
    except DTScheduleError:
        return None
    kind = loop_statistic(inlined, sibling, funcs[sibling])
    if kind is None:
        return None
    fused = [n for n in between if schedules[n].fuse_at]
    how = (f"replace {' and '.join(f'{n}.fuse_at(...)' for n in fused)} with "
           f"{' '.join(f'{n}.inline();' for n in between)}" if fused
           else ' '.join(f'{n}.inline();' for n in between))
    form = "the squared deviations from" if kind == "variance" else "the exponentials shifted by"
    return (f"inline {', '.join(between)} ({how}), so that the reduction is written as {form} '{sibling}' that "
            f"compute_with accumulates in its loop")
