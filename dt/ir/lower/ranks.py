"""rargtopk(e, r, i): the indices along r of the len(i) largest values of e, largest first (NaN
before every number, equal values by index), -1 in the ranks past r's length.

The loop over r keeps the best k found so far, in order, in two accumulators over the ranks
axis i: their values (`keys`: NaN read as +inf) and `codes`, an integer per entry that breaks
ties between equal keys and says what the entry is — a NaN at index j is j, a number at index
j is len(r) + j, an unfilled rank 2 len(r) + its rank. Each tile of r is merged in: k rounds, each
taking the better of the tile's best and the kept list's best (equal keys: the smaller code),
writing it at rank `round` of the new list and removing it from where it came from (key -inf,
code past every code). The lanes past r's end start removed."""
from __future__ import annotations

import math

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.index_expr import IConst, IVar
from dt.ir.lower.expressions import INDEX
from dt.ir.naming import size_name


class RankLowering:
    """The rargtopk part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def rank_accumulators(self, e: A.Reduce, env, axes, name: str) -> S.Ref:
        """The kept keys (in self.arg_values) and codes (returned) before the loop: all unfilled."""
        ranks = env[e.slot]
        axis = self.axes[ranks]
        if not (axis.start == IConst(0) and axis.size == IVar(size_name(e.slot)) and axis.limit is None):
            raise DTScheduleError(f"rargtopk fills all of '{e.slot}' at once (its k ranks), but the schedule walks "
                                  f"'{e.slot}' in blocks or tiles", e.loc,
                                  f"tensorize({e.slot}:0) and no block along '{e.slot}'")
        self.arg_values[id(e)] = self.assign(name.replace("accumulator", "keys"),
                                             S.Full(-math.inf, axes, self.compute), "rargtopk", e.loc)
        unfilled = S.Binary("+", self._expand(S.IndexOf(ranks, INDEX), axes), self._twice_extent(e))
        return self.assign(name.replace("accumulator", "codes"), self.fit(unfilled, axes), "rargtopk", e.loc)

    def rank_update(self, e: A.Reduce, func: str, env, ax: str, codes: S.Ref) -> S.TExpr:
        """The kept codes after merging the current tile of e.dim; the kept keys are updated here."""
        ranks, keys = env[e.slot], self.arg_values[id(e)]
        kept = codes.dims
        rows = tuple(a for a in kept if a != ranks)
        full = self.canonical(rows + (ax,))
        extent = S.Extent(e.dim, INDEX)
        removed = S.Binary("+", self._twice_extent(e), S.Extent(e.slot, INDEX))  # past every code

        def tile(base, value):
            return self.assign(f"{e.dim}_{base}", value, "rargtopk", e.loc)
        values = tile("values", self.fit(self.real(e.args[0], func, env), full))
        nan = S.Binary("!=", values, values)
        index = self._expand(S.IndexOf(ax, INDEX), full)
        tile_keys = tile("keys", self.masked(S.Where(nan, S.Literal(math.inf, self.compute), values), ax, -math.inf))
        tile_codes = tile("codes", self._masked_by(S.Where(nan, index, S.Binary("+", index, extent)), ax, removed))
        pool_keys, pool_codes = tile("kept_keys", keys), tile("kept_codes", codes)
        new_keys = tile("new_keys", S.Full(-math.inf, kept, self.compute))
        new_codes = tile("new_codes", S.Full(0, kept, INDEX))
        round_var = self.fresh(f"{e.slot}_round")

        def best(pool_keys, pool_codes, axis, over, base):
            """The largest key of a pool, and the smallest code among the entries holding it (its
            axis's padding, where a backend pads it, holds neither)."""
            pool_keys = self.masked(pool_keys, axis, -math.inf)
            top = tile(f"{base}_best", self.fit(S.Reduce("max", pool_keys, axis), rows))
            holders = S.Where(S.Binary("==", pool_keys, self._expand(top, over)), pool_codes, removed)
            holders = self._masked_by(holders, axis, removed)
            return top, tile(f"{base}_best_code", self.fit(S.Reduce("min", holders, axis), rows))

        def merge_round():
            tile_best, tile_code = best(tile_keys, tile_codes, ax, full, "tile")
            kept_best, kept_code = best(pool_keys, pool_codes, ranks, kept, "kept")
            from_tile = tile("from_tile", S.Cast(S.Where(S.Binary("==", tile_best, kept_best),
                                                         S.Binary("<", tile_code, kept_code),
                                                         S.Binary(">", tile_best, kept_best)), INDEX))
            wins = S.Binary("==", from_tile, S.Literal(1, INDEX))
            at_round = self._expand(S.Binary("==", S.IndexOf(ranks, INDEX), S.Index(IVar(round_var), INDEX)), kept)
            for target, tile_value, kept_value in ((new_keys, tile_best, kept_best), (new_codes, tile_code, kept_code)):
                chosen = self._expand(S.Where(wins, tile_value, kept_value), kept)
                self.emit(S.Assign(target.name, S.Where(at_round, chosen, target), "rargtopk", e.loc))
            for pool_k, pool_c, code, over, taken_here in (
                    (tile_keys, tile_codes, tile_code, full, wins), (pool_keys, pool_codes, kept_code, kept,
                                                                     S.Unary("not", wins))):
                taken = S.Binary("and", self._expand(taken_here, over),
                                 S.Binary("==", pool_c, self._expand(code, over)))
                self.emit(S.Assign(pool_k.name, S.Where(taken, S.Literal(-math.inf, self.compute), pool_k),
                                   "rargtopk", e.loc))
                self.emit(S.Assign(pool_c.name, S.Where(taken, removed, pool_c), "rargtopk", e.loc))

        self.loop(round_var, IVar(size_name(e.slot)), 1, e.slot, "reduction", e.loc, merge_round)
        self.emit(S.Assign(keys.name, new_keys, "rargtopk", e.loc))
        return new_codes

    def rank_indices(self, e: A.Reduce, codes: S.TExpr) -> S.TExpr:
        """The indices the kept codes stand for: -1 for a rank left unfilled."""
        extent = S.Extent(e.dim, INDEX)
        number = S.Where(S.Binary("<", codes, self._twice_extent(e)), S.Binary("-", codes, extent),
                         S.Literal(-1, INDEX))
        return S.Where(S.Binary("<", codes, extent), codes, number)

    def _twice_extent(self, e: A.Reduce) -> S.TExpr:
        return S.Binary("*", S.Extent(e.dim, INDEX), S.Literal(2, INDEX))

    @staticmethod
    def _expand(value: S.TExpr, dims) -> S.TExpr:
        return value if value.dims == tuple(dims) else S.Expand(value, tuple(dims))

    def _masked_by(self, value: S.TExpr, axis: str, fill: S.TExpr) -> S.TExpr:
        """value with the lanes past `axis`'s end replaced by `fill` (an expression)."""
        ax = self.axes[axis]
        if ax.limit is None and isinstance(ax.size, IConst):
            return value
        return S.Where(self._expand(S.Mask(axis), value.dims), value, fill)
