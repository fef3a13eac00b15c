"""Online statistics, accumulated tile by tile in a reduction loop that compute_with shares: a
variance beside its mean (Chan et al.'s pairwise update of count, mean and sum of squared
deviations), and sums and products of exponentials beside the max that shifts them, rescaled
whenever the running max grows (the online softmax; flash attention's output)."""
from __future__ import annotations

import math

from dt.ir import scheduled as S
from dt.ir.check.statistics import shifted_exp_operand
from dt.ir.index_expr import IExpr
from dt.ir.ops import REDUCTIONS


def positive_scale(values: S.TExpr, products: set[str]) -> tuple[S.TExpr, tuple[str, S.TExpr]] | None:
    """`values` as (unscaled, (op, constant)) where it is a product's tile (a Dot's accumulator,
    one of `products`) times or divided by a positive constant (attention's scores and
    1/sqrt(len(k))), kept or replaced by -inf (a causal mask): the max of the tile is the max of
    the unscaled tile, scaled (rounding is monotone: the same value, up to the sign of a zero),
    so the constant applies to a row's max instead of to every lane before it (1-3% of flash
    attention's time on an H100). The exponentials see the scaled values unrounded, which a
    fused multiply-add (numba's and Triton's contraction) leaves off from the rounded max by up
    to half an ulp of the scores: harmless for a product's values, but not for data that holds a
    finite mask constant (where(mask, A, -1e30) * c, a fully masked row: -1e30 * c minus its own
    rounding is not 0), which is why loaded tiles keep their form."""
    if isinstance(values, S.Where) and S.is_minus_inf(values.b):
        inner = positive_scale(values.a, products)
        return (S.Where(values.cond, inner[0], values.b), inner[1]) if inner else None
    if isinstance(values, S.Binary) and values.op in ("*", "/") and isinstance(values.a, S.Ref) \
            and values.a.name in products and not values.b.dims and _moderate(values.b):
        return values.a, (values.op, values.b)
    return None


def _moderate(e: S.TExpr) -> bool:
    """A constant surely between 2**-100 and 2**100, so that scaling a float32 max by it neither
    overflows nor underflows where scaling each lane would not."""
    bounds = _bounds(e)
    return bounds is not None and 2.0 ** -100 <= bounds[0] and bounds[1] <= 2.0 ** 100


def _bounds(e: S.TExpr) -> tuple[float, float] | None:
    """Lower and upper bounds of a positive constant expression; None where not known."""
    if isinstance(e, S.Literal):
        return (e.value, e.value) if 0 < e.value < math.inf else None
    if isinstance(e, S.Extent):
        return 1.0, 2.0 ** 63  # extents are at least 1 (the runtime refuses empty dimensions)
    inner = [_bounds(x) for x in S.texpr_children(e)]
    if None in inner:
        return None
    if isinstance(e, S.Unary) and e.op == "sqrt":
        return math.sqrt(inner[0][0]), math.sqrt(inner[0][1])
    if isinstance(e, S.Binary) and e.op == "*":
        return inner[0][0] * inner[1][0], inner[0][1] * inner[1][1]
    if isinstance(e, S.Binary) and e.op == "/":
        return inner[0][0] / inner[1][1], inner[0][1] / inner[1][0]
    return None


class OnlineStatistics:
    """The online statistics of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def tile_counts(self, ax: str, start: IExpr, tile: int) -> tuple[S.Ref | None, S.Ref]:
        """How many lanes of the reduction come before the current tile (None when one tile
        covers them all) and how many it holds: every earlier tile is full, the last one holds
        what is left."""
        dim = self.axes[ax].dim
        loc = self.axes[ax].loc
        if tile == 0:
            return None, self.assign(f"{dim}_tile_count", S.Extent(dim, self.compute), "rsum", loc)
        seen = self.assign(f"{dim}_seen", S.Index(start, self.compute), "rsum", loc)
        left = S.Binary("-", S.Extent(dim, self.compute), seen)
        count = S.Binary("minimum", S.Literal(float(tile), self.compute), left)
        return seen, self.assign(f"{dim}_tile_count", count, "rsum", loc)

    def merge_deviations(self, m2: S.Ref, running_mean: S.Ref | None, values: S.TExpr, tile_sum: S.Ref, ax: str,
                         seen: S.Ref | None, tile_count: S.Ref):
        """One step of Chan et al.'s pairwise update: the current tile's count, mean and sum of
        squared deviations from that mean (of `values`, whose sum is `tile_sum`), merged into
        the running ones (`seen` lanes so far, their mean and M2; none when one tile covers
        the reduction)."""
        dim, loc = self.axes[ax].dim, self.axes[ax].loc
        tile_mean = self.assign(f"{dim}_tile_mean", S.Binary("/", tile_sum, tile_count), "rsum", loc)
        deviation = self.assign(f"{dim}_deviation", self.masked(
            S.Binary("-", values, S.Expand(tile_mean, values.dims)), ax, 0.0), "rsum", loc)
        update = S.Binary("+", m2, self.fit(S.Reduce("sum", S.Binary("*", deviation, deviation), ax), m2.dims))
        if seen is not None:
            delta = self.assign(f"{dim}_delta", S.Binary("-", tile_mean, running_mean), "rsum", loc)
            weight = self.assign(f"{dim}_weight", S.Binary("/", tile_count, S.Binary("+", seen, tile_count)),
                                 "rsum", loc)
            update = S.Binary("+", update, S.Binary("*", S.Binary("*", delta, delta), S.Binary("*", seen, weight)))
            self.emit(S.Assign(running_mean.name, S.Binary("+", running_mean, S.Binary("*", delta, weight)),
                               "rsum", loc))
        self.emit(S.Assign(m2.name, update, "rsum", loc))

    def rescale_exp_sums(self, maximum: str, max_acc: S.Ref, sums, values: S.TExpr, scaled_by, ax: str, env, loc,
                         rescale: bool) -> S.Ref:
        """One step of the online softmax: the running max after the current tile, and each sum
        (or product) of exponentials shifted by the max (`sums`: (Func, reduction, accumulator))
        brought to it: the accumulator so far, scaled by exp(old max - new max), plus the tile's
        exponentials shifted by the new max, summed (or multiplied by the other operand: flash
        attention's output). The max is of `values` scaled by `scaled_by` (positive_scale's op
        and constant; None: as they are). `rescale` False: one tile covers the reduction, nothing
        came before. Returns the new max, which the caller assigns to `max_acc` after these
        updates."""
        dim = self.axes[ax].dim
        sum_loc = sums[0][1].loc
        tile_max = self.fit(S.Reduce("max", self.masked(values, ax, REDUCTIONS["max"].identity), ax), max_acc.dims)
        if scaled_by is not None:
            op, constant = scaled_by
            tile_max, values = S.Binary(op, tile_max, constant), S.Binary(op, values, constant)
        new_max = self.assign(f"{dim}_max", S.Binary("maximum", max_acc, tile_max), "rmax", loc)
        # while every lane so far is -inf, so is the max, and x - max would be -inf - -inf = NaN:
        # shifting by 0 instead keeps the sum at 0 (the max's own value is not shifted; a row that
        # stays -inf is given its NaN after the loop)
        all_minus_inf = S.Binary("==", new_max, S.Literal(REDUCTIONS["max"].identity, new_max.dtype))
        shift = self.assign(f"{dim}_shift", S.Where(all_minus_inf, S.Literal(0.0, new_max.dtype), new_max), "rmax", loc)
        exps = self.masked(S.Unary("exp", S.Binary("-", values, S.Expand(shift, values.dims))), ax, 0.0)
        if any(r.op == "dot" for _, r, _ in sums):  # computed once for the products (and sums)
            exps = self.assign(f"{dim}_exp", exps, "rsum", sum_loc)
        tile_sum = None
        if any(r.op == "sum" for _, r, _ in sums):
            tile_sum = self.assign(f"{dim}_tile_exp_sum", self.fit(S.Reduce("sum", exps, ax), max_acc.dims), "rsum",
                                   sum_loc)
        scale = self.assign(f"{dim}_rescale", S.Unary("exp", S.Binary("-", max_acc, shift)), "rsum",
                            sum_loc) if rescale else None
        for g, r, r_acc in sums:
            # a sum may span dimensions its max does not (s[x, z] shifted by m[x, z] = rmax(A[x, y], y))
            so_far = S.Binary("*", r_acc, self.fit(scale, r_acc.dims)) if rescale else r_acc
            if r.op == "dot":  # the tile's exponentials stand for their operand
                update = self.update(r, g, env, ax, so_far, {shifted_exp_operand(r): exps})
            else:
                term = self.fit(tile_sum, r_acc.dims)
                update = S.Binary("+", so_far, term) if rescale else term
            self.emit(S.Assign(r_acc.name, update, f"r{r.op}", r.loc))
        return new_max
