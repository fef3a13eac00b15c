"""Loop nests: a Func computed over the tiles bound so far and the whole of its other pure
dimensions; at root, each of its blocked dimensions walked over the program's block in tile
loops, and the result stored. The producers fused at a loop are computed just inside it."""
from __future__ import annotations

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.index_expr import IConst, IVar, iadd
from dt.ir.lower.grid import Range
from dt.ir.naming import size_name


class LoopNestLowering:
    """The loop-nest part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def emit_func(self, func: str, env: dict[str, str], ranges: dict[str, Range] | None = None):
        """Compute `func` over the tiles bound in env and the whole of its other dims. At root
        (ranges given) its blocked dims are walked by tile loops and the result stored."""
        fd = self.cp.funcs[func]
        is_root = func == self.root
        result: list = []

        def level(i: int, env: dict[str, str]):
            if i == len(fd.dims):
                value = self.number(fd.expr, func, env)
                axes = tuple(env[d] for d in fd.dims)
                ref = self.assign(func, self.fit(value, axes), func, fd.loc)
                if is_root and fd.update is not None:
                    self.scatter(fd, ref, axes, env)
                elif is_root:
                    self.emit(S.Store(func, axes, ref, fd.loc))
                elif func in self.cp.outputs or func in self.cp.stored_fused:
                    # an output, or a Func later kernels read (stored_fused), fused here: stored once, by the first to compute it
                    self.emit(S.Store(func, axes, ref, fd.loc, self.repeat_guard(fd.dims)))
                    self.writes.append(func)
                result.append((ref.name, axes, ref.dtype))
                return
            d = fd.dims[i]
            if d in env and not is_root:
                scan = next(iter(A.scans_along(fd.expr, d)), None)
                if scan is not None:
                    raise DTScheduleError(f"'{func}' runs cum{scan.op} along '{d}', but it is fused inside a loop "
                                          f"over '{d}' of '{self.cp.fused[func][0]}', so each tile would start the "
                                          f"scan afresh", scan.loc, f"fuse {func} outside the loop over '{d}'")
                self.emit_fused(func, d, env)
                level(i + 1, env)
                return
            # A fused producer spans the program's block of a blocked kernel dimension, else all of it.
            rng = self.block_ranges.get(d) or self.whole(d)
            tile = self.pure_tile(func, d, rng, is_root)
            # split partials summing in this walk over d (dt.ir.lower.walk_sums)
            sums = self.start_walk_sums(func, d, rng, env) if is_root else None
            if tile == 0 or (rng.static_size is not None and tile >= rng.static_size):
                env2 = {**env, d: self.axis(d, rng.start, rng.size, rng.limit, env, fd.loc)}
                self.emit_fused(func, d, env2)
                level(i + 1, env2)
                self.sum_walk_tile(sums, d, env2)
                self.store_walk_sums(sums)
                return
            env = self.scan_carries(func, i, env, lambda inner: self.whole_axis(func, inner, is_root, env))
            var = self.fresh(f"{d}_iter")

            def body():
                limit = rng.end if tile > 1 else None
                env2 = {**env, d: self.axis(d, iadd(rng.start, IVar(var)), tile, limit, env, fd.loc)}
                self.emit_fused(func, d, env2)
                level(i + 1, env2)
                self.sum_walk_tile(sums, d, env2)

            self.loop(var, rng.length, tile, d, "tile", fd.loc, body)
            self.store_walk_sums(sums)

        level(0, env)
        return result[0] if result else None

    def whole_axis(self, func: str, dim: str, is_root: bool, env) -> str | None:
        """The axis of a dimension of func walked in one tile in the program (as `level` makes
        it), or None where it is walked in a loop of tiles."""
        rng = self.block_ranges.get(dim) or self.whole(dim)
        tile = self.pure_tile(func, dim, rng, is_root)
        if tile == 0 or (rng.static_size is not None and tile >= rng.static_size):
            return self.axis(dim, rng.start, rng.size, rng.limit, env, self.cp.funcs[func].loc)
        return None

    def whole(self, dim: str) -> Range:
        size = IVar(size_name(dim))
        return Range(IConst(0), size, size, size, None, None)

    def pure_tile(self, func, dim, rng: Range, is_root: bool) -> int:
        s = self.cp.schedules[func]
        if not is_root:
            own = s.tensorize.get(dim)
            if own:
                raise DTScheduleError(
                    f"'{func}' is fused into '{self.cp.fused[func][0]}' and computed there over the whole of "
                    f"'{dim}' at once, so its tile over '{dim}' must be 0 (whole), not {own}",
                    s.dim_locs.get(("tensorize", dim)),
                    f"use {func}.tensorize({dim}:0), or fuse {func} at a loop over '{dim}' so that it is "
                    f"computed tile by tile")
            return 0
        tile = self.tile_of(func, dim)
        if tile is None:
            return 1
        if tile and rng.static_size is not None and tile > rng.static_size:
            raise DTScheduleError(f"tensorize({dim}:{tile}) is larger than the block of {rng.static_size} along "
                                  f"'{dim}'; a tile lies inside one block",
                                  s.dim_locs.get(("tensorize", dim)),
                                  f"use a tile of at most {rng.static_size}, or 0 for the whole block")
        return tile

    def emit_fused(self, consumer: str, dim: str, env: dict[str, str]):
        for producer in self.fused_at.get((consumer, dim), ()):
            produced = self.emit_func(producer, env)
            self.scopes[-1][("func", producer)] = produced
