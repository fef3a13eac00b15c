"""Split partials summed in a root Func's walk over one of its pure dimensions (dt.ir.check.split:
`dw.split(x:128); dw.compute_with(dx, x)`): an accumulator per partial set to its identity before
the program walks its block of x, each tile of x reduced into it after the root's own value there
(its loads shared), and the partial stored after the walk at its chunk, the program's block index.
The accumulators span the partial's other dimensions, each in one tile: bound outside the walk,
or walked whole by the root inside it (a whole row of dx, as Liger's layernorm backward keeps it)."""
from __future__ import annotations

from dataclasses import dataclass

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S


@dataclass
class _WalkSums:
    env: dict  # the partials' axes: their chunk, their other dimensions
    chunk_conditions: list  # the partials' wheres keeping their chunk: true on every lane walked
    sums: list  # (partial, its reduction, its accumulator)


class WalkSums:
    """The walk-sum part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def start_walk_sums(self, func: str, dim: str, rng, env) -> _WalkSums | None:
        partials = self.cp.walk_sums.get((func, dim))
        if not partials:
            return None
        loc = self.cp.schedules[partials[0]].locs.get("fuse_at")
        # each group split apart has a chunk dimension of its own: every one is the program's block
        chunk_dims = {d for p in partials for d in self.cp.funcs[p].dims if d in self.cp.chunk_dims}
        env = {**env, **{d: self.axis(d, rng.block_index, 1, None, env, loc) for d in sorted(chunk_dims)}}
        for d in dict.fromkeys(d for p in partials for d in self.cp.funcs[p].dims):
            if d not in env:
                axis = self.whole_axis(func, d, True, env)
                if axis is None:
                    owner = self.cp.schedules[partials[0]].taken_from
                    raise DTScheduleError(f"'{owner}' sums in '{func}''s walk over '{dim}' over the whole of '{d}' "
                                          f"at once, but '{func}' walks '{d}' in tiles inside that walk", loc,
                                          f"use {func}.tensorize({d}:0), or walk '{d}' outside '{dim}' "
                                          f"(write it first in {func}'s dimensions)")
                env[d] = axis
        conditions = [n.cond for p in partials for n in A.walk(self.cp.funcs[p].expr)
                      if isinstance(n, A.Where) and A.free_dims(n.cond) & chunk_dims]
        sums = [(p, self.cp.funcs[p].expr, self.accumulator(self.cp.funcs[p].expr, env, p)) for p in partials]
        return _WalkSums(env, conditions, sums)

    def sum_walk_tile(self, walk: _WalkSums | None, dim: str, tile_env):
        """Each partial's accumulator after the tile of `dim` in tile_env."""
        if walk is None:
            return
        env = {**walk.env, dim: tile_env[dim]}
        outer, self.known_true = self.known_true, walk.chunk_conditions  # the walk stays in the program's chunk
        for partial, r, acc in walk.sums:
            self.emit(S.Assign(acc.name, self.update(r, partial, env, env[dim], acc), f"r{r.op}", r.loc))
        self.known_true = outer

    def store_walk_sums(self, walk: _WalkSums | None):
        if walk is None:
            return
        for partial, _, acc in walk.sums:
            fd = self.cp.funcs[partial]
            axes = tuple(walk.env[d] for d in fd.dims)
            ref = self.assign(partial, self.fit(acc, axes), partial, fd.loc)
            self.emit(S.Store(partial, axes, ref, fd.loc))
            self.writes.append(partial)
