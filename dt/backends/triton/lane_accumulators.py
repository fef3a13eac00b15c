"""Lane accumulators for reductions that walk a loop of tiles (arg-reductions too).

The scheduled IR accumulates a tiled reduction tile by tile: each step reduces its tile
(`tl.sum(tile, axis)`) and adds the result to the accumulator. On a GPU a reduction across
the lanes of a tile crosses warps (shared memory and a barrier), once per step. Keeping a
tile-shaped accumulator instead, combined lane by lane every step and reduced once after
the loop, leaves the loop with loads and element-wise arithmetic only: the form expert
Triton kernels take (the layer-norm tutorial's `_mean += a`). Only the rounding changes:
each lane sums its own elements in loop order, then the lanes are reduced as a tree.

Tiles computed from a matrix product (an IR `Dot`, whether rendered as `tl.dot` or, for small
tiles, as a product and a sum) are left as they are: `tl.dot` lays them out for the tensor
cores, where a row's lanes sit in a few threads of one warp (the reduction is a few
shuffles), and a second tile-sized accumulator would take registers the product needs
(flash-style attention's running row sum).
A sum rescaled every step (`acc = acc * r + sum(tile)`, the online softmax's weighted values in a
decode step, r = exp(old max - new max) constant along the reduced axis) keeps its lanes too,
each rescaled: `lanes = lanes * r + tile` (decode attention on an H200: 4-18% faster over 1-4
sequences, a tie to 6% over 32, paged 3-34%; the cross-warp sum of the [d, l] tile had run once a
step). The step's sum may sit in a tile of its own that only the update reads (the online
softmax's `tile_exp_sum`): it is taken into the lanes where the tile has more lanes than the
program has threads (`_wide_tiles`).
An arg-reduction's lanes keep their indices in int32 (an int64 select is two instructions and
two registers a lane: argmax over rows of 32,000-128,256 floats ran 2-8% faster on an H100), so
its kernel asserts that the reduced extent stays below 2**31 (`int32_index_dims`).
"""
from __future__ import annotations

import dataclasses
from collections import Counter

from dt.ir import scheduled as S
from dt.ir import uses
from dt.ir.index_expr import IConst
from dt.ir.ops import REDUCTIONS


def with_lane_accumulators(kernel: S.Kernel) -> S.Kernel:
    """`kernel` with every eligible tile-by-tile reduction accumulated lane by lane."""
    taken = uses.taken_names(kernel)
    from_dot = _dot_results(kernel.body)
    body = _rewrite(kernel.body, taken, from_dot, _read_once(kernel.body), _wide_tiles(kernel))
    if body == kernel.body:
        return kernel
    return dataclasses.replace(kernel, body=body)


def _dot_results(body) -> set[str]:
    """Names of tiles computed from a `Dot`, directly or through other tiles."""
    names: set[str] = set()
    for s in S.walk_statements(body):
        if isinstance(s, S.Assign) and any(isinstance(n, S.Dot) or (isinstance(n, S.Ref) and n.name in names)
                                           for n in S.walk_texpr(s.value)):
            names.add(s.name)
    return names


def _read_once(body) -> set[str]:
    """Tiles assigned once and read by one statement: a step may take in such a tile's reduction."""
    assigned, readers = Counter(), Counter()
    for s in S.walk_statements(body):
        if isinstance(s, S.Assign):
            assigned[s.name] += 1
        for name in {n.name for v in S.statement_values(s) for n in S.walk_texpr(v) if isinstance(n, S.Ref)}:
            readers[name] += 1
    return {name for name, n in assigned.items() if n == 1 and readers[name] == 1}


def _wide_tiles(kernel: S.Kernel):
    """Whether a tile over these axes has more lanes than the program has threads, several a
    thread (an extent's size counts as wide). Taking a reduction into lanes paid there
    (cross-entropy's 4096-key tiles in 16 warps: 12-18% faster on an H200) and not below (paged
    decode's row sums of 64 or 128 keys in 4 warps: 5-7% slower)."""
    sizes = {a.name: a.size.value for a in S.walk_statements(kernel.body)
             if isinstance(a, S.Axis) and isinstance(a.size, IConst)}
    threads = 32 * (kernel.num_warps or 4)

    def wide(dims) -> bool:
        lanes = 1
        for d in dims:
            if d not in sizes:
                return True
            lanes *= sizes[d]
        return lanes > threads
    return wide


def _step(s, loop_axes: set[str], from_dot: set[str], tiles: dict):
    """(reduce, wrapper, scale, taken_in) when `s` is `acc = acc <combine> wrapper(Reduce(op, tile,
    axis))` over one of the loop's own axes, or a sum `acc = acc * scale + wrapper(Reduce(...))`;
    wrapper rebuilds the reduced value's layout, scale is None or the factor without its layout.
    The reduction may sit in a tile of `tiles` (name -> its value: the loop's tiles assigned before
    `s` that only `s` reads, as the online softmax's `tile_exp_sum`); taken_in names it (None: none)."""
    if not (isinstance(s, S.Assign) and isinstance(s.value, S.Binary)):
        return None
    combine, acc, reduced = s.value.op, s.value.a, s.value.b
    scale = None
    if combine == "+" and isinstance(acc, S.Binary) and acc.op == "*":
        acc, scale = acc.a, S.without_layout(acc.b)
        if _refers(scale, s.name):
            return None
    if not (isinstance(acc, S.Ref) and acc.name == s.name):
        return None
    wrappers, taken_in = [], None
    while True:
        while isinstance(reduced, (S.Expand, S.BroadcastTo)):
            wrappers.append(reduced)
            reduced = reduced.x
        if taken_in is not None or not (isinstance(reduced, S.Ref) and reduced.name in tiles):
            break
        taken_in, reduced = reduced.name, tiles[reduced.name]
    if not (isinstance(reduced, S.Reduce) and reduced.axis in loop_axes
            and combine == REDUCTIONS[reduced.op].combine):
        return None
    if any(isinstance(n, S.Dot) or (isinstance(n, S.Ref) and n.name in from_dot) for n in S.walk_texpr(reduced.x)):
        return None

    def wrap(value: S.TExpr) -> S.TExpr:
        for w in reversed(wrappers):
            value = S.Expand(value, w.target) if isinstance(w, S.Expand) else S.BroadcastTo(value)
        return value
    return reduced, wrap, scale, taken_in


def _touches(stmt, name: str) -> bool:
    """Whether `stmt` reads or assigns the tile `name`."""
    if isinstance(stmt, S.For):
        return any(_touches(t, name) for t in stmt.body)
    return (isinstance(stmt, S.Assign) and stmt.name == name) or \
        any(_refers(value, name) for value in S.statement_values(stmt))


def _refers(value: S.TExpr, name: str) -> bool:
    return any(isinstance(n, S.Ref) and n.name == name for n in S.walk_texpr(value))


def _movable(tile: S.TExpr, scale, taken_in: str, between: list) -> bool:
    """Whether a tile's value (`taken_in`'s) computes the same at the step after the statements
    `between`: none writes memory (its loads could read it changed) or assigns a name it reads,
    and the step's factor does not read the tile, whose assignment goes."""
    read = {n.name for n in S.walk_texpr(tile) if isinstance(n, S.Ref)}
    return not (scale is not None and _refers(scale, taken_in)) and not any(
        isinstance(t, (S.For, S.Store, S.Scatter)) or isinstance(t, S.Assign) and t.name in read for t in between)


def _rewrite(body: tuple, taken: set[str], from_dot: set[str], read_once: set[str], wide) -> tuple:
    out = list(body)
    i = 0
    while i < len(out):
        loop = out[i]
        if not isinstance(loop, S.For):
            i += 1
            continue
        loop = S.For(loop.var, loop.start, loop.stop, loop.step, _rewrite(loop.body, taken, from_dot, read_once, wide),
                     loop.dim, loop.kind, loop.loc)
        loop, arg_finals = _arg_lanes(out, i, loop, taken)
        own_axes = {a.name for a in loop.body if isinstance(a, S.Axis) and loop.var in S.index_names(a.start)}
        inits = {s.name: k for k, s in enumerate(out[:i]) if isinstance(s, S.Assign)}
        loop_body, after, dropped = list(loop.body), [], set()
        places = {t.name: j for j, t in enumerate(loop_body) if isinstance(t, S.Assign) and t.name in read_once}
        for k, s in enumerate(loop_body):
            step = _step(s, own_axes, from_dot, {n: loop_body[j].value for n, j in places.items() if j < k})
            if step is None or s.name not in inits:
                continue
            reduce, wrap, scale, taken_in = step
            init = out[inits[s.name]]
            others = out[inits[s.name] + 1:i] + loop_body[:k] + loop_body[k + 1:]
            if not (isinstance(init.value, S.Full) and init.value.value == REDUCTIONS[reduce.op].identity) \
                    or _refers(reduce.x, s.name) or any(_touches(t, s.name) for t in others):
                continue
            if taken_in is not None:
                j = places[taken_in]
                if not (wide(reduce.x.dims) and _movable(reduce.x, scale, taken_in, loop_body[j + 1:k])):
                    continue
                dropped.add(j)
            lanes = S.fresh_name(f"{s.name}_lanes", taken)
            out[inits[s.name]] = S.Assign(lanes, S.Full(init.value.value, reduce.x.dims, init.value.dtype),
                                          init.dt_name, init.loc)
            lanes_ref = S.Ref(lanes, reduce.x.dims, init.value.dtype)
            so_far = lanes_ref if scale is None else \
                S.Binary("*", lanes_ref, S.Expand(scale, reduce.x.dims) if scale.dims else scale)
            loop_body[k] = S.Assign(lanes, S.Binary(s.value.op, so_far, reduce.x), s.dt_name, s.loc)
            after.append(S.Assign(s.name, wrap(S.Reduce(reduce.op, lanes_ref, reduce.axis)), s.dt_name, s.loc))
        loop_body = [t for j, t in enumerate(loop_body) if j not in dropped]
        out[i] = S.For(loop.var, loop.start, loop.stop, loop.step, tuple(loop_body), loop.dim, loop.kind, loop.loc)
        after += arg_finals
        out[i + 1:i + 1] = after
        i += 1 + len(after)
    return tuple(out)


# ------------------------------------------------------------------ arg-reductions
# rargmax / rargmin: the comparison a later tile wins by, the reduction over lanes, NaN's key
ARG_REDUCTIONS = {"rargmax": (">", "max", float("inf")), "rargmin": ("<", "min", float("-inf"))}


def _arg_group(body: list, k: int):
    """(kind, values, the six statements) when body[k] starts the tile-by-tile update of rargmax or
    rargmin (dt.ir.lower.reductions.arg_update): its keys (the values, NaN read as past every
    number), the tile's best, the tile's first index, the new index, the value accumulator's
    update, the index accumulator's."""
    keys = body[k]
    kind = ARG_REDUCTIONS.get(getattr(keys, "dt_name", None))
    if kind is None or not isinstance(keys, S.Assign) or k + 6 > len(body):
        return None
    v = keys.value
    if not (isinstance(v, S.Where) and isinstance(v.cond, S.Binary) and v.cond.op == "!="
            and v.cond.a == v.cond.b == v.b and isinstance(v.a, S.Literal) and v.a.value == kind[2]):
        return None
    group = body[k:k + 6]
    if not all(isinstance(s, S.Assign) and s.dt_name == keys.dt_name for s in group) \
            or not (isinstance(group[5].value, S.Ref) and group[5].value.name == group[3].name):
        return None
    return kind, v.b, group


def _arg_lanes(out: list, i: int, loop: S.For, taken: set[str]) -> tuple[S.For, list]:
    """`loop` (out[i]) with each rargmax / rargmin it updates tile by tile kept lane by lane
    instead — each lane its best value so far and the first index it came from, NaN winning —
    and the statements reducing the lanes once after it: the best lane's index, the smallest
    among equal ones (NaN first). Their initialisations in out[:i] become the lanes'."""
    body, after = list(loop.body), []
    inits = {s.name: n for n, s in enumerate(out[:i]) if isinstance(s, S.Assign)}
    k = 0
    while k < len(body):
        found = _arg_group(body, k)
        if found is None:
            k += 1
            continue
        (strictly, reduce, past), values, group = found
        index_acc, value_acc = group[5].name, group[4].name
        if index_acc not in inits or value_acc not in inits or not all(
                isinstance(out[inits[a]].value, S.Full) for a in (index_acc, value_acc)):
            k += 1  # (a walk's last, cut tile after its whole ones: they start from the lanes' result)
            continue
        first_init = min(inits[index_acc], inits[value_acc])
        others = [t for n, t in enumerate(out[first_init + 1:i], first_init + 1)
                  if n not in (inits[index_acc], inits[value_acc])] + body[:k] + body[k + 6:]
        if any(_touches(t, index_acc) or _touches(t, value_acc) for t in others):
            k += 1
            continue
        keys = group[0]
        dims, dtype, acc_dims = keys.value.dims, keys.value.dtype, group[5].value.dims
        lanes = [a for a in dims if a not in acc_dims]
        if not lanes:  # tiles of one lane (a scalar axis): nothing to keep lane by lane
            k += 1
            continue
        axis = lanes[0]
        best = S.Ref(S.fresh_name(f"{value_acc}_lanes", taken), dims, dtype)
        index = S.Ref(S.fresh_name(f"{index_acc}_lanes", taken), dims, "i32")
        init = out[inits[value_acc]].value
        out[inits[value_acc]] = S.Assign(best.name, S.Full(init.value, dims, dtype), keys.dt_name, keys.loc)
        out[inits[index_acc]] = S.Assign(index.name, S.Full(0, dims, "i32"), keys.dt_name, keys.loc)
        wins = S.Where(S.Binary("!=", values, values), S.Binary("==", best, best), S.Binary(strictly, values, best))
        lane_index = S.IndexOf(axis, "i32") if dims == (axis,) else S.Expand(S.IndexOf(axis, "i32"), dims)
        body[k:k + 6] = [S.Assign(index.name, S.Where(wins, lane_index, index), keys.dt_name, keys.loc),
                         S.Assign(best.name, S.Where(wins, values, best), keys.dt_name, keys.loc)]
        after += _arg_final(best, index, axis, reduce, past, loop.dim, group, taken)
        k += 2
    return dataclasses.replace(loop, body=tuple(body)), after


def _arg_final(best: S.Ref, index: S.Ref, axis: str, reduce: str, past: float, dim: str, group,
               taken: set[str]) -> list:
    """After the loop: over the lanes, the best value (NaN first) and the smallest index holding
    it, assigned to the accumulators as the tile-by-tile statements left them."""
    keys, extent = group[0], S.Extent(dim, "i64")
    stem = group[5].name
    out = []

    def tile(base, value):
        name = S.fresh_name(f"{stem}_{base}", taken)
        out.append(S.Assign(name, value, keys.dt_name, keys.loc))
        return S.Ref(name, value.dims, value.dtype)
    nan = S.Binary("!=", best, best)
    lane_keys = tile("keys", S.Where(nan, S.Literal(past, best.dtype), best))
    top = tile("top", S.Reduce(reduce, lane_keys, axis))
    holds_top = S.Binary("==", lane_keys, S.BroadcastTo(S.Expand(top, best.dims)))
    wide = S.Cast(index, "i64")  # index + extent passes 2**31 from extents of 2**30
    ranked = S.Where(nan, wide, S.Binary("+", wide, extent))
    first = tile("first", S.Reduce("min", S.Where(holds_top, ranked, S.Binary("*", extent, S.Literal(2, "i64"))),
                                   axis))
    found_nan = S.Binary("<", first, extent)
    out.append(S.Assign(group[5].name, S.Where(found_nan, first, S.Binary("-", first, extent)), keys.dt_name,
                        keys.loc))
    out.append(S.Assign(group[4].name, S.Where(found_nan, S.Literal(float("nan"), best.dtype), top), keys.dt_name,
                        keys.loc))
    return out


def int32_index_dims(kernel: S.Kernel) -> tuple[str, ...]:
    """The dimensions whose arg-reductions `with_lane_accumulators` keeps lane by lane, with int32
    indices: their extent must stay below 2**31."""
    dims = []
    for loop in S.walk_statements(kernel.body):
        if isinstance(loop, S.For) and loop.dim not in dims and any(
                isinstance(s, S.Assign) and s.dt_name in ARG_REDUCTIONS and isinstance(s.value, S.Where)
                and s.value.a.dtype == "i32" and isinstance(s.value.a, (S.IndexOf, S.Expand))
                for s in loop.body):
            dims.append(loop.dim)
    return tuple(dims)
