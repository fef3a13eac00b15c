"""Scans: cumsum(e, v) (cumprod, cummax, cummin) along a pure dimension v of a Func. Each tile of
v is scanned on its own (S.Scan) and combined with a carry: the running result at the end of the
tiles before it, kept across the loop over v (made before it, by `scan_carries`) and updated
after each tile with the tile's last valid lane. Along a v walked whole, there is no carry."""
from __future__ import annotations

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.index_expr import iadd, imin, isub
from dt.ir.lower.expressions import INDEX
from dt.ir.ops import SCANS


class ScanLowering:
    """The scan part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def scan_carries(self, func: str, level: int, env, whole_tile) -> dict:
        """Before the tile loop over func's dimension number `level`: a carry for each scan of
        func along it, over the tiles of the scan's other dimensions — those bound outside the
        loop, and those inside it, which must be walked whole (`whole_tile(dim)`: their axis
        if so, else None), since one carry lane serves each of their lanes. A new env with the
        inner axes made here."""
        fd = self.cp.funcs[func]
        dim = fd.dims[level]
        env = dict(env)
        for e in A.scans_along(fd.expr, dim):
            for inner in A.free_dims(e) - set(env) - {dim}:
                axis = whole_tile(inner)
                if axis is None:
                    raise DTScheduleError(
                        f"cum{e.op} along '{dim}' keeps a running value for each lane of '{inner}', but '{inner}' "
                        f"is walked in tiles inside the loop over '{dim}'", e.loc,
                        f"walk '{inner}' in one tile in each program: {func}.tensorize({inner}:0), or a block "
                        f"of it in one tile ({func}.block({inner}:64); {func}.tensorize({inner}:64))")
                env[inner] = axis
            axes = self.canonical(env[d] for d in A.free_dims(e) - {dim})
            self.carries[id(e)] = self.assign(f"{dim}_carry", S.Full(SCANS[e.op].identity, axes, self.compute),
                                              f"cum{e.op}", e.loc)
        return env

    def scan(self, e: A.Scan, func: str, env) -> S.TExpr:
        """cum{op}(e.x, e.dim) over the current tile of e.dim: the tile's own scan, after the carry."""
        if e.dim not in env:
            raise AssertionError(f"scan along {e.dim} outside a tile of it")
        ax = env[e.dim]
        carry = self.carries.get(id(e))
        dims = self.canonical({env[d] for d in A.free_dims(e)})
        values = self.fit(self.real(e.x, func, env), dims)
        scanned = self.assign(f"{e.dim}_cum{e.op}", S.Scan(e.op, values, ax), f"cum{e.op}", e.loc)
        if carry is None:  # the whole of e.dim in this tile
            return scanned
        combine = SCANS[e.op].combine
        result = self.assign(f"{e.dim}_scan", S.Binary(combine, S.Expand(carry, dims) if carry.dims != dims
                                                       else carry, scanned), f"cum{e.op}", e.loc)
        # the carry becomes the tile's last valid lane: a sum of it and -0.0s, exact (NaN, inf, -0.0 too)
        axis = self.axes[ax]
        end = iadd(axis.start, axis.size)
        if axis.limit is not None:
            end = imin(end, axis.limit)
        last = S.Binary("==", S.IndexOf(ax, INDEX), S.Index(isub(end, 1), INDEX))
        last = last if dims == (ax,) else S.Expand(last, dims)
        picked = S.Reduce("sum", S.Where(last, result, S.Literal(-0.0, self.compute)), ax)
        self.emit(S.Assign(carry.name, self.fit(picked, carry.dims), f"cum{e.op}", e.loc))
        return result
