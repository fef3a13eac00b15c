"""rargtopk(e, r, i): the indices along r of the len(i) largest values of e, largest first (NaN
before every number, equal values by index), -1 in the ranks past r's length.

The loop over r keeps the best k found so far, in no order, in two accumulators over the ranks
axis i: their values (`keys`: NaN read as +inf) and `codes`, an integer per entry that breaks
ties between equal keys and says what the entry is — a NaN at index j is j, a number at index
j is len(r) + j, an unfilled rank 2 len(r) + its rank. Each tile of r is merged in by insertion:
a round takes the tile's best entry (equal keys: the smaller code) and, where it beats the kept
list's worst, puts it in that entry's place; it leaves the tile either way (key -inf, a code
past every code). Only tile entries that beat the worst kept before the tile can enter, and at
most k of them do, so the tile runs that many rounds, at most k: a bound taken from the data
(S.LetValue). The first tile runs k (fewer where it has fewer lanes); on data in no order, the
j-th tile after it about k / j (sorted ascending, every tile runs k). After the loop, k rounds
order the kept list, best first.
The lanes past r's end start removed."""
from __future__ import annotations

import math

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.index_expr import IConst, IVar
from dt.ir.lower.expressions import INDEX, has_invalid_lanes
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
        removed = self._removed(e)

        def tile(base, value):
            return self.assign(f"{e.dim}_{base}", value, "rargtopk", e.loc)
        values = tile("values", self.fit(self.real(e.args[0], func, env), full))
        nan = S.Binary("!=", values, values)
        index = self._expand(S.IndexOf(ax, INDEX), full)
        tile_keys = tile("keys", self.masked(S.Where(nan, S.Literal(math.inf, self.compute), values), ax, -math.inf))
        tile_codes = tile("codes", self._masked_by(S.Where(nan, index, S.Binary("+", index, extent)), ax, removed))
        pool_keys, pool_codes = tile("kept_keys", keys), tile("kept_codes", codes)
        worst_key, worst_code = self._worst(pool_keys, pool_codes, ranks, rows, tile)
        entering = S.Cast(_beats(tile_keys, tile_codes, self._expand(worst_key, full),
                                 self._expand(worst_code, full)), INDEX)
        count = self.fit(S.Reduce("sum", entering, ax), rows)
        for row in rows:  # the tile's rows run together: as many rounds as the most any of them needs
            count = S.Reduce("max", count, row)
        rounds = self.fresh(f"{e.dim}_rounds")
        self.emit(S.LetValue(rounds, tile("entering", S.Binary("minimum", count, S.Extent(e.slot, INDEX))), e.loc))

        def insert_round():
            best_key, best_code = self._best(tile_keys, tile_codes, ax, rows, removed, tile, "tile")
            worst_key, worst_code = self._worst(pool_keys, pool_codes, ranks, rows, tile)
            wins = tile("tile_wins", S.Cast(_beats(best_key, best_code, worst_key, worst_code), INDEX))
            place = S.Binary("and", self._expand(S.Binary("==", wins, S.Literal(1, INDEX)), kept),
                             S.Binary("==", pool_codes, self._expand(worst_code, kept)))
            self.emit(S.Assign(pool_keys.name, S.Where(place, self._expand(best_key, kept), pool_keys),
                               "rargtopk", e.loc))
            self.emit(S.Assign(pool_codes.name, S.Where(place, self._expand(best_code, kept), pool_codes),
                               "rargtopk", e.loc))
            self._remove(tile_keys, tile_codes, best_code, full, removed, e)

        self.loop(self.fresh(f"{e.slot}_round"), IVar(rounds), 1, e.slot, "reduction", e.loc, insert_round)
        self.emit(S.Assign(keys.name, pool_keys, "rargtopk", e.loc))
        return pool_codes

    def rank_order(self, e: A.Reduce, codes: S.Ref):
        """After the loop: the kept codes reassigned best first (k rounds, each moving the best left
        to rank `round`)."""
        ranks = next(a for a in codes.dims if self.axes[a].dim == e.slot)
        kept = codes.dims
        rows = tuple(a for a in kept if a != ranks)
        removed = self._removed(e)

        def tile(base, value):
            return self.assign(f"{e.slot}_{base}", value, "rargtopk", e.loc)
        pool_keys, pool_codes = tile("kept_keys", self.arg_values[id(e)]), tile("kept_codes", codes)
        ordered = tile("ordered_codes", S.Full(0, kept, INDEX))
        round_var = self.fresh(f"{e.slot}_round")

        def order_round():
            _, best_code = self._best(pool_keys, pool_codes, ranks, rows, removed, tile, "kept")
            at_round = self._expand(S.Binary("==", S.IndexOf(ranks, INDEX), S.Index(IVar(round_var), INDEX)), kept)
            self.emit(S.Assign(ordered.name, S.Where(at_round, self._expand(best_code, kept), ordered),
                               "rargtopk", e.loc))
            self._remove(pool_keys, pool_codes, best_code, kept, removed, e)

        self.loop(round_var, IVar(size_name(e.slot)), 1, e.slot, "reduction", e.loc, order_round)
        self.emit(S.Assign(codes.name, ordered, "rargtopk", e.loc))

    def _best(self, keys: S.Ref, codes: S.Ref, axis: str, rows, removed: S.TExpr, tile, base: str):
        """The largest key of a pool along `axis`, and the smallest code among the entries holding
        it. No mask: lanes past the pool's end hold key -inf and a code past every valid one (a
        tile's were removed; the kept list's padding holds an unfilled rank's, k or more)."""
        top = tile(f"{base}_best", self.fit(S.Reduce("max", keys, axis), rows))
        holders = S.Where(S.Binary("==", keys, self._expand(top, keys.dims)), codes, removed)
        return top, tile(f"{base}_best_code", self.fit(S.Reduce("min", holders, axis), rows))

    def _worst(self, keys: S.Ref, codes: S.Ref, ranks: str, rows, tile):
        """The smallest key of the kept list, and the largest code among the entries holding it:
        the entry a better one replaces (padding is never it)."""
        keys_valid = self.masked(keys, ranks, math.inf)
        bottom = tile("kept_worst", self.fit(S.Reduce("min", keys_valid, ranks), rows))
        none = S.Literal(-1, INDEX)
        holders = S.Where(S.Binary("==", keys_valid, self._expand(bottom, keys.dims)), codes, none)
        holders = self._masked_by(holders, ranks, none)
        return bottom, tile("kept_worst_code", self.fit(S.Reduce("max", holders, ranks), rows))

    def _remove(self, keys: S.Ref, codes: S.Ref, code: S.TExpr, dims, removed: S.TExpr, e: A.Reduce):
        """The pool's entry with this code taken out: key -inf, code past every code."""
        taken = S.Binary("==", codes, self._expand(code, dims))
        self.emit(S.Assign(keys.name, S.Where(taken, S.Literal(-math.inf, self.compute), keys), "rargtopk", e.loc))
        self.emit(S.Assign(codes.name, S.Where(taken, removed, codes), "rargtopk", e.loc))

    def _removed(self, e: A.Reduce) -> S.TExpr:
        """The code of a removed entry: past every code."""
        return S.Binary("+", self._twice_extent(e), S.Extent(e.slot, INDEX))

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
        """value with the lanes past `axis`'s end (or padding) replaced by `fill` (an expression)."""
        if not has_invalid_lanes(self.axes[axis]):
            return value
        return S.Where(self._expand(S.Mask(axis), value.dims), value, fill)


def _beats(key: S.TExpr, code: S.TExpr, other_key: S.TExpr, other_code: S.TExpr) -> S.TExpr:
    """Whether an entry ranks before another: a larger key, or an equal key and a smaller code."""
    return S.Where(S.Binary("==", key, other_key), S.Binary("<", code, other_code), S.Binary(">", key, other_key))
