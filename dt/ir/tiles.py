"""The elements each tile of a scheduled program holds, against the limit MAX_TILE.

A tile spans, along each of its dimensions, the lanes the kernel gives that dimension (as
dt.ir.lower makes them): a tensorize size; the block, for a tile over the whole block; or the
extent, known only at call time, for a whole-extent tile of an unblocked dimension or of an RVar,
and for a fused producer over a dimension its consumer does not walk. check() refuses the tiles
over the limit whose sizes the schedule fixes; the runtime checks the others against the extents
of each call, before anything is allocated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dt.errors import DTScheduleError, Loc
from dt.ir import algorithm as A

MAX_TILE = 2 ** 20  # elements of one tile: Triton's limit on one tensor, for every backend alike


@dataclass(frozen=True)
class Lanes:
    """How many indices of `dim` a tile spans: `size`, or the extent when size is None."""
    dim: str
    size: int | None
    loc: Loc | None  # the schedule argument that makes it so


@dataclass(frozen=True)
class Tile:
    """The dimensions of one tile value computing `func` (those with more than one lane)."""
    func: str
    lanes: tuple[Lanes, ...]
    loc: Loc | None  # the Func's definition

    def elements(self, extents: dict[str, int]) -> int:
        return math.prod(self.sizes(extents))

    def sizes(self, extents: dict[str, int]) -> list[int]:
        return [extents[lane.dim] if lane.size is None else lane.size for lane in self.lanes]

    def error(self, extents: dict[str, int]) -> DTScheduleError:
        sizes = self.sizes(extents)
        whole = [lane for lane in self.lanes if lane.size is None]
        at = f" at {', '.join(f'{lane.dim}={extents[lane.dim]}' for lane in whole)}" if whole else ""
        if whole:  # the extents make it too large: point at the whole-extent tile of the largest
            worst = max(whole, key=lambda lane: extents[lane.dim])
            hint = (f"walk '{worst.dim}' in tiles of a fixed size (tensorize({worst.dim}:1024), say) rather than "
                    f"over its whole extent")
        else:
            worst = max(self.lanes, key=lambda lane: lane.size)
            hint = (f"use smaller tiles along {', '.join(lane.dim for lane in self.lanes)}: lower the sizes of the "
                    f"tensorize (or block) calls")
        product = f"{' x '.join(map(str, sizes))} = " if len(sizes) > 1 else ""
        dims = ", ".join(lane.dim for lane in self.lanes)
        return DTScheduleError(f"a tile computing '{self.func}' is {product}{math.prod(sizes)} elements ({dims}){at}; "
                               f"a tile holds at most {MAX_TILE} (2**20)", worst.loc or self.loc, hint)


def tile_of(func: str, dim: str, schedules, fused) -> int | None:
    """func's tile over dim: its own tensorize, else that of the Func it is fused into (None:
    not tensorized, one lane at a time; 0: the whole extent)."""
    if dim in schedules[func].tensorize:
        return schedules[func].tensorize[dim]
    if func in fused:
        return tile_of(fused[func][0], dim, schedules, fused)
    return None


def tiles(cp) -> tuple[Tile, ...]:
    """Every distinct tile shape of every kernel of checked program `cp`, raising for one over
    MAX_TILE whatever the extents."""
    found: list[Tile] = []
    fused_at: dict[tuple[str, str], list[str]] = {}
    for producer, where in cp.fused.items():
        if cp.schedules[producer].walked_in is None:  # a split's partial summed in a walk: visited with its root
            fused_at.setdefault(where, []).append(producer)
    loop_owner = {(f, dim): owner for (owner, dim), members in cp.computed_with.items() for f in members}
    for root in cp.kernel_roots:
        _visit(cp, root, root, {}, fused_at, loop_owner, found)
    for tile in found:
        fixed = math.prod(lane.size for lane in tile.lanes if lane.size is not None)
        if fixed > MAX_TILE:
            raise tile.error({lane.dim: 1 for lane in tile.lanes})
    return tuple(dict.fromkeys(found))


def check_extents(tiles_: tuple[Tile, ...], extents: dict[str, int]):
    """Raise for the first tile over MAX_TILE at these extents."""
    for tile in tiles_:
        if any(lane.size is None for lane in tile.lanes) and tile.elements(extents) > MAX_TILE:
            raise tile.error(extents)


def _visit(cp, root, func, env: dict[str, Lanes], fused_at, loop_owner, found: list[Tile]):
    """The tiles of `func` computed in root's kernel inside loops over the dimensions of `env`."""
    fd = cp.funcs[func]
    env = dict(env)
    for d in fd.dims:
        if func == root or d not in env:
            env[d] = _pure_lanes(cp, root, func, d)
        for producer in fused_at.get((func, d), ()):
            _visit(cp, root, producer, env, fused_at, loop_owner, found)
    if func == root:  # partials summed in root's walks: one chunk, over root's tiles of their other dimensions
        for partial in (p for (host, _), partials in cp.walk_sums.items() if host == root for p in partials):
            chunk = {d: Lanes(d, 1, None) for d in cp.funcs[partial].dims if d in cp.chunk_dims}
            _visit(cp, root, partial, {**env, **chunk}, fused_at, loop_owner, found)
    shapes = value_dims(fd)
    reductions = {d: _reduction_lanes(cp, func, d, loop_owner) for dims in shapes for d in dims if d not in fd.dims}
    for r, lanes in reductions.items():
        for producer in fused_at.get((func, r), ()):
            _visit(cp, root, producer, {**env, r: lanes}, fused_at, loop_owner, found)
    for dims in shapes:
        lanes = tuple(env[d] if d in fd.dims else reductions[d] for d in dims)
        lanes = tuple(lane for lane in lanes if lane.size != 1)
        if lanes:
            found.append(Tile(func, lanes, fd.loc))


def value_dims(fd: A.FuncDef) -> list[tuple[str, ...]]:
    """The dimensions of each value computing fd: its result, every subexpression, and the body
    of each reduction over its reduced dimension (a dot's operands are values of their own)."""
    order = list(fd.dims) + [e.dim for e in A.walk(fd.expr) if isinstance(e, A.Reduce)]
    rank = {d: i for i, d in reversed(list(enumerate(order)))}
    dims_of: dict[int, frozenset[str]] = {}

    def step(e):
        dims = frozenset((e.dim,)) if isinstance(e, A.DimRef) else frozenset()
        for c in A.children(e):
            dims |= yield c
        if isinstance(e, A.Reduce):
            if e.op != "dot":  # the reduced body, broadcast over the reduced dim if it lacks it
                dims_of[id(e.args[0])] = dims | {e.dim}
            dims -= {e.dim}
        dims_of[id(e)] = dims
        return dims

    A.recurse(step, fd.expr)
    shapes = {frozenset(fd.dims), *dims_of.values()}
    return [tuple(sorted(s, key=rank.__getitem__)) for s in shapes]


def _pure_lanes(cp, root: str, func: str, d: str) -> Lanes:
    block = cp.schedules[root].block.get(d)
    if func != root:  # a fused producer spans what its consumer's loops do not walk: the block, or all
        if block is not None:
            return Lanes(d, block, cp.schedules[root].dim_locs.get(("block", d)))
        return Lanes(d, None, cp.schedules[func].locs.get("fuse_at"))
    tile = cp.schedules[root].tensorize.get(d)
    loc = cp.schedules[root].dim_locs.get(("tensorize", d))
    if tile is None:
        return Lanes(d, 1, None)
    if block is not None and (tile == 0 or tile >= block):
        return Lanes(d, block, loc)
    return Lanes(d, tile or None, loc)


def _reduction_lanes(cp, func: str, r: str, loop_owner) -> Lanes:
    func = loop_owner.get((func, r), func)  # a reduction computed with a sibling walks the sibling's loop
    tile = tile_of(func, r, cp.schedules, cp.fused)
    if tile is None:
        return Lanes(r, 1, None)
    while r not in cp.schedules[func].tensorize:  # the Func whose tensorize sets it
        func = cp.fused[func][0]
    return Lanes(r, tile or None, cp.schedules[func].dim_locs.get(("tensorize", r)))
