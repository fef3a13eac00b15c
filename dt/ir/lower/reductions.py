"""Reductions: an accumulator per reduction set to its identity, a loop over the reduced dimension
in tiles, and in it each tile's values masked and reduced into the accumulator (a product of 2-D
tiles as a hardware-style Dot). The reductions of Funcs computed with this one (compute_with)
accumulate in the same loop; a variance around a mean of the loop, and sums and products of
exponentials shifted by a max of it, accumulate online (online_statistics)."""
from __future__ import annotations

import math

from dt.dtypes import is_integer
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.check.compute_with import top_reductions
from dt.ir.check.statistics import loop_statistic, mean_reduction
from dt.ir.check.uses import read_through
from dt.ir.index_expr import IBin, IConst, IVar, iadd, ifloordiv, imax, imin, imul, isub
from dt.ir.lower import skipping
from dt.ir.lower.dtypes import float8_dot_dtype
from dt.ir.lower.expressions import INDEX
from dt.ir.lower.online_statistics import positive_scale
from dt.ir.naming import size_name
from dt.ir.ops import REDUCTIONS

LANE = "i32"  # a lane's place in its tile


class ReductionLowering:
    """The reduction part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def reduction(self, e: A.Reduce, func: str, env):
        shared = self.shared_reductions.get(id(e))
        if shared is not None:
            return self.rank_indices(e, shared) if e.slot else shared
        siblings = self.siblings(e, func)
        # the same reduction over the same tiles, already computed in scope (attention's scores,
        # inlined into both grad_K's and grad_V's operands in their shared loop): its result
        key = ("reduce", A.expr_text(e), tuple((d, env.get(d)) for d in sorted(A.free_dims(e))))
        if not siblings and not e.slot:
            known = self.lookup(key)
            if known is not None:
                return known
        acc = self._reduction(e, func, env, siblings)
        if not siblings and not e.slot:
            self.scopes[-1][key] = acc
        return acc

    def _reduction(self, e: A.Reduce, func: str, env, siblings):
        # a loop that accumulates several Funcs' reductions, or one of several Funcs' loops over the
        # same dim, names each accumulator after its Func (`y_mean_accumulator`, `y_variance_accumulator`)
        named = siblings or len(self.walking_funcs.get(e.dim, ())) > 1
        acc = self.accumulator(e, env, func if named else None)
        tile = self.tile_of(func, e.dim)
        tile = 1 if tile is None else tile
        rng = self.whole(e.dim)
        # e's own accumulator, then those of reductions computed with func (compute_with)
        updates = []
        variances: dict[str, list[A.Reduce]] = {}  # a mean of this loop -> the variances around it
        # a max of this loop -> the sums and products of exponentials it shifts: (Func, reduction, accumulator)
        exp_sums: dict[str, list[tuple[str, A.Reduce, S.Ref]]] = {}
        # the Funcs whose producers this loop computes: func's, and those of Funcs accumulated here
        # (func's first loop over the dim accumulates them all; a later one, such as rsum's in
        # rmax(..) + rsum(..), only func's own)
        in_loop = [func, *dict.fromkeys(g for g, _ in siblings)]
        for g, r in [(func, e), *siblings]:
            # a variance around a mean of this loop, or a sum or product shifted by a max of it (loop_statistic)
            kind, statistic = next(((k, m) for m in self.loop_funcs(func, e.dim)
                                    if (k := loop_statistic(r, m, self.cp.funcs[m])) is not None), (None, None))
            r_acc = acc if r is e else None
            if kind == "variance":
                variances.setdefault(statistic, []).append(r)
            elif kind == "exp_sum":
                exp_sums.setdefault(statistic, []).append((g, r, r_acc or self.accumulator(r, env, g)))
            else:
                updates.append((g, r, r_acc or self.accumulator(r, env, g)))
        accumulators = {id(r): r_acc for _, r, r_acc in updates}
        mean_sums = {mean: mean_reduction(self.cp.funcs[mean].expr, e.dim) for mean in variances}
        # one sum of squared deviations per mean (over the mean's axes), however many Funcs read it
        m2s = {mean: self.assign(f"{e.dim}_m2", S.Full(0.0, accumulators[id(mean_sums[mean])].dims, self.compute),
                                 "rsum", rs[0].loc)
               for mean, rs in variances.items()}
        # Chan's update needs the mean of the lanes seen so far. It is carried, not taken from the
        # mean's running sum: an f32 sum of a long row drifts (each add rounds once the sum is
        # large), while the running mean only ever moves by a tile's deviation from it.
        running_means = {mean: self.assign(f"{e.dim}_mean", S.Full(0.0, m2.dims, self.compute), "rsum",
                                           variances[mean][0].loc)
                         for mean, m2 in m2s.items()} if tile != 0 else {}

        def body(start, size, limit):
            env2 = {**env, e.dim: self.axis(e.dim, start, size, limit, env, e.loc)}
            for f in in_loop:
                # producers fused at f's reduction loop over the dim; not those at f's pure loop of
                # that name, which an inlined reduction's dim may shadow (grad_K[.., k] reading scores)
                if e.dim not in self.cp.funcs[f].dims:
                    self.emit_fused(f, e.dim, env2)
            ax = env2[e.dim]
            tile_sums = {}
            if m2s:
                seen, tile_count = self.tile_counts(ax, start, tile)
            for mean, m2 in m2s.items():
                # the mean's tile is reduced once: its sum feeds both the mean and the deviations
                r_mean = mean_sums[mean]
                mean_acc = accumulators[id(r_mean)]
                values = self.fit(self.real(r_mean.args[0], mean, env2), self.canonical(mean_acc.dims + (ax,)))
                tile_sums[id(r_mean)] = self.assign(f"{e.dim}_tile_sum", self.fit(
                    S.Reduce("sum", self.masked(values, ax, 0.0), ax), mean_acc.dims), "rsum", r_mean.loc)
                self.merge_deviations(m2, running_means.get(mean), values, tile_sums[id(r_mean)], ax, seen,
                                      tile_count)
            new_maxima = {}
            for maximum, sums in exp_sums.items():
                r_max = self.cp.funcs[maximum].expr  # rmax(e, dim) itself (statistics.max_reduction)
                max_acc = accumulators[id(r_max)]
                values = self.fit(self.real(r_max.args[0], maximum, env2), self.canonical(max_acc.dims + (ax,)))
                values, scaled_by = positive_scale(values, self.products) or (values, None)
                if not isinstance(values, S.Ref):  # computed once, for the max and the exponentials
                    values = self.assign(f"{e.dim}_max_input", values, "rmax", r_max.loc)
                new_maxima[id(r_max)] = self.rescale_exp_sums(maximum, max_acc, sums, values, scaled_by, ax, env2,
                                                              r_max.loc, tile != 0)
            for f, r, r_acc in updates:
                tile_sum, new_max = tile_sums.get(id(r)), new_maxima.get(id(r))
                update = S.Binary("+", r_acc, tile_sum) if tile_sum is not None else new_max if new_max is not None \
                    else self.update(r, f, env2, ax, r_acc)
                self.emit(S.Assign(r_acc.name, update, f"r{r.op}", r.loc))

        # conditions known outside are not known here: a nested reduction's own dimension may shadow
        # the outer one's name
        outer, self.known_true = self.known_true, []
        if tile == 0:
            body(rng.start, rng.size, rng.limit)
        else:
            reductions = [e, *(r for _, r in siblings)]
            start, split, stop, holds, exact = self.walked(e, reductions[1:], env, tile, exp_sums, in_loop)
            last = "reduction"  # the kind of the walk's last loop
            if isinstance(split, tuple):  # a lower bound: the cut tiles first, then the whole ones, then the last
                split, whole_end = split
                self.walk(e, start, split, tile, exact, rng.end if tile > 1 else None, body)
                self.walk(e, split, whole_end, tile, [holds], None, body)
                start, exact = whole_end, [holds]
            elif split is not None:  # the tiles the condition keeps whole: no where, no mask
                self.walk(e, start, split, tile, [holds], None, body)
                start = split
            elif tile > 1 and not self.stores_in_loop(in_loop, reductions) and not self.has_products(reductions):
                # the tiles inside the extent first, without masks, then the last, cut one; a walk
                # that may be empty (stop below start, a chunk past the extent) ends its whole tiles
                # at its start, so that its last loop is empty too
                if start == IConst(0) and stop == IVar(size_name(e.dim)):
                    whole_end = imul(ifloordiv(stop, tile), tile)
                else:
                    whole_end = self.let(f"{e.dim}_whole_end", iadd(start, imul(ifloordiv(
                        IBin("max", IConst(0), isub(stop, start)), tile), tile)))
                self.walk(e, start, whole_end, tile, exact, None, body)
                start, last = whole_end, "tail"
            self.walk(e, start, stop, tile, exact, rng.end if tile > 1 else None, body, last)
        self.known_true = outer
        for _, r, r_acc in updates:
            if r.slot:
                self.rank_order(r, r_acc)
            if r is not e:
                self.shared_reductions[id(r)] = r_acc
        for mean, rs in variances.items():
            for r in rs:
                self.shared_reductions[id(r)] = m2s[mean]
        for maximum, sums in exp_sums.items():
            max_acc = accumulators[id(self.cp.funcs[maximum].expr)]
            for _, r, r_acc in sums:
                # a row that is -inf throughout has sum exp(-inf - -inf) = NaN, not the 0 that shifting by 0 left
                max_tile = self.fit(max_acc, r_acc.dims)
                minus_inf = S.Literal(REDUCTIONS["max"].identity, max_tile.dtype)
                all_minus_inf = S.Binary("==", max_tile, minus_inf)
                nan = S.Literal(math.nan, r_acc.dtype)
                self.emit(S.Assign(r_acc.name, S.Where(all_minus_inf, nan, r_acc), f"r{r.op}", r.loc))
                if r is not e:
                    self.shared_reductions[id(r)] = r_acc
        return self.rank_indices(e, acc) if e.slot else acc

    def walk(self, e: A.Reduce, start, stop, tile: int, known: list, limit, body, kind="reduction"):
        """One loop over tiles of e.dim from start to stop, where the conditions `known` hold on every
        lane (no where for them) and lanes are valid below `limit` (None: all are); of `kind` "tail"
        where it is the last, cut tile of a walk (it runs once at most)."""
        var = self.fresh(f"{e.dim}_iter")
        self.known_true = known
        self.loop(var, stop, tile, e.dim, kind, e.loc, lambda: body(IVar(var), tile, limit), start)
        self.known_true = []

    def walked(self, e: A.Reduce, siblings: list[A.Reduce], env, tile: int, shifts, funcs):
        """(start, split, stop, condition, exact) of the loop over e.dim accumulating the reductions of
        `funcs`: the whole extent, or only the tiles an index condition on a dimension of the block
        leaves a lane of, where every reduction of the loop gets its identity on the lanes it masks
        (dt.ir.lower.skipping). A causal condition alone (an upper bound) also splits the walk:
        tiles from start to `split` hold it on every lane (and lie inside the extent), so a loop of
        their own drops the where and the masks, as FlashAttention's causal kernels do; None: no
        split. A lower bound alone (`m >= l`: a causal key block's walk over the rows) splits it the
        other way: `split` is then (the first tile holding it on every lane, the end of the whole tiles
        inside the extent), the cut tiles walked first. `exact`: the conditions whose bounds fall on tile boundaries, for one index of the
        dimension compared with (a split's chunk, `l >= l_chunk * 1024`, in tiles of 256): they
        hold on every lane walked, so the loop needs no where for them. An output computed in the
        loop keeps the whole walk, in one loop: every tile of it is stored, once."""
        start, stop = IConst(0), IVar(size_name(e.dim))
        if self.stores_in_loop(funcs, [e, *siblings]):
            return start, None, stop, None, []
        uppers, lowers, exact = [], [], []
        reductions = [e, *siblings]
        # the block's dimensions: Vars, and the Func's own dimensions (a gradient's mx[b, h, m] is
        # over m, which its grad_K reduces over and so declares an RVar)
        own = self.cp.funcs[funcs[0]].dims if funcs and funcs[0] in self.cp.funcs else ()
        pure = {d for d in env if d != e.dim and (self.cp.dim_kinds.get(d) == "Var" or d in own)}
        shifts = frozenset(shifts)
        for cond in skipping.conditions(reductions, self.cp.funcs, e.dim, pure):
            if not all(skipping.vanishes(r, cond, self.cp.funcs, shifts) for r in reductions):
                continue
            side, other, offset, scale = skipping.index_bound(cond, e.dim, pure)
            ax = self.axes[env[other]]
            if ax.size == IConst(1) and scale % tile == 0 and (offset + (side == "upper")) % tile == 0:
                exact.append(cond)
            if side == "upper":  # lanes up to scale * the block's last index + offset
                end = ax.limit if ax.limit is not None else iadd(ax.start, ax.size)
                last = iadd(end, offset) if scale == 1 else iadd(imul(end, scale), offset + 1 - scale)
                stop = imin(stop, last)
                uppers.append((cond, other, offset, scale))
            else:  # from the tile holding scale * the block's first index + offset (the latest of the bounds)
                first = IBin("max", IConst(0), iadd(imul(ax.start, scale) if scale != 1 else ax.start, offset))
                bound = imul(ifloordiv(first, tile), tile)
                start = bound if start == IConst(0) else imax(start, bound)
                lowers.append((cond, ax, offset, scale))
        if len(lowers) == 1 and not uppers and lowers[0][3] == 1:
            cond, ax, offset, _ = lowers[0]
            end = ax.limit if ax.limit is not None else iadd(ax.start, ax.size)
            # tiles from the one at or after the block's last index + offset hold it on every lane
            whole = imul(ifloordiv(iadd(IBin("max", start, iadd(end, offset - 1)), tile - 1), tile), tile)
            split = imin(whole, stop)
            return start, (split, IBin("max", split, imul(ifloordiv(stop, tile), tile))), stop, cond, exact
        if len(uppers) != 1 or lowers or uppers[0][3] != 1:
            return start, None, stop, None, exact
        cond, other, offset, _ = uppers[0]
        ax = self.axes[env[other]]
        self.longest_first.add(other)  # for the grid: its blocks go longest walk first (longest_walks_first)
        # whole tiles at or below the block's first index + offset, inside the walk (and the extent)
        whole = imin(iadd(ax.start, offset + 1), stop)
        split = imul(ifloordiv(IBin("max", IConst(0), whole), tile), tile)
        return start, split, stop, cond, exact

    def has_products(self, reductions) -> bool:
        """Whether a loop accumulating `reductions` computes a matrix product (rdot), in them or in
        the Funcs they read: its tiles stay masked in one loop (a second copy of a pipelined loop of
        tl.dot doubles its compile time, and FlashAttention-style loops gained nothing unmasked)."""
        return any(isinstance(n, A.Reduce) and n.op == "dot"
                   for e in read_through(self.cp.funcs, reductions) for n in A.walk(e))

    def stores_in_loop(self, funcs, reductions) -> bool:
        """Whether the loop accumulating `reductions` (of `funcs`) computes an output (or another
        Func it stores for other kernels) it stores: an inlined one in their operands, or one fused,
        itself or through the Funcs it is fused into, at a reduction loop of one of `funcs`."""
        if any(isinstance(n, A.Stored) for r in reductions for n in A.walk(r)):
            return True
        for placed in (*self.cp.outputs, *self.cp.stored_fused):
            while placed in self.cp.fused:
                placed, dim = self.cp.fused[placed]
                if placed in funcs and dim not in self.cp.funcs[placed].dims:
                    return True
        return False

    def loop_funcs(self, func: str, dim: str) -> list[str]:
        """func and the Funcs computed with it over dim: those whose reductions share its loop."""
        return [func, *self.cp.computed_with.get((func, dim), ())]

    def siblings(self, e: A.Reduce, func: str) -> list[tuple[str, A.Reduce]]:
        """The reductions of Funcs computed with `func` over e's dim (compute_with): they are
        updated in e's loop, tile by tile (in func's tiles, which the checker made theirs)."""
        out = []
        for g in self.cp.computed_with.get((func, e.dim), ()):
            out += [(g, r) for r in top_reductions(self.cp.funcs[g].expr, e.dim)
                    if id(r) not in self.shared_reductions]  # else accumulated in an earlier reduction of func
        return out

    def accumulator(self, e: A.Reduce, env, func: str | None = None) -> S.Ref:
        """A new accumulator of reduction e, set to its identity over e's free dims: `y_accumulator`,
        or with `func`, `y_sum_accumulator` (Func `_sum`)."""
        axes = self.canonical(env[d] for d in A.free_dims(e))
        stem = self.accumulator_stems.get(e.dim, {}).get(func, func) if func else None
        name = f"{e.dim}_{stem}_accumulator" if func else f"{e.dim}_accumulator"
        reduction = REDUCTIONS[e.op]
        if e.slot:  # the k best so far (dt.ir.lower.ranks)
            return self.rank_accumulators(e, env, axes, name)
        if reduction.index:  # the index found so far, and the value there (arg_update)
            self.arg_values[id(e)] = self.assign(name.replace("accumulator", e.op.removeprefix("arg")),
                                                 S.Full(reduction.identity, axes, self.compute), f"r{e.op}", e.loc)
            return self.assign(name, S.Full(0, axes, INDEX), f"r{e.op}", e.loc)
        dtype = S.INTEGER_DOT if self.integer_dot(e) else self.compute
        return self.assign(name, S.Full(reduction.identity, axes, dtype), f"r{e.op}", e.loc)

    def update(self, e: A.Reduce, func: str, env, ax: str, acc: S.TExpr, given=None) -> S.TExpr:
        """The accumulator after one step of reduction e over the current tile `ax`; `given`:
        operands already computed as tiles, by index (the shifted exponentials of a product)."""
        op, identity = e.op, REDUCTIONS[e.op].identity
        if e.slot:
            return self.rank_update(e, func, env, ax, acc)
        if REDUCTIONS[op].index:
            return self.arg_update(e, func, env, ax, acc)
        given = given or {}
        update = self.dot_update(e, func, env, ax, acc, given) if op == "dot" else None
        if update is None:
            integer = self.integer_dot(e)
            if op == "dot":
                # two i8 operands multiply and sum as integers (in INDEX: exact), added in i32
                operands = [self.number(x, func, env) if integer else given[k] if k in given else self.real(x, func, env)
                            for k, x in enumerate(e.args)]
                value = S.Binary("*", *self.align(*self._operands("*", operands) if integer else operands))
            else:
                value = self.real(e.args[0], func, env)
            full = self.canonical(acc.dims + (ax,))
            value = self.fit(value, full)
            value = self.masked(value, ax, identity)
            reduced = self.fit(S.Reduce("sum" if op == "dot" else op, value, ax), acc.dims)
            update = S.Binary(REDUCTIONS[op].combine, acc, S.Cast(reduced, S.INTEGER_DOT) if integer else reduced)
        return update

    def arg_update(self, e: A.Reduce, func: str, env, ax: str, acc: S.Ref) -> S.TExpr:
        """The index accumulator of rargmax / rargmin after one tile; the value accumulator (the
        max or min so far, NaN once a NaN is seen) is updated here. The tile's winner is its first
        NaN, else its first lane equal to its max (min): one reduction finds the max of the values
        with NaN read as +inf (-inf for min), a second the smallest index among the lanes equal to
        it, NaN lanes' indices ranked below the others' (offset by the extent). A later tile wins
        only with a strictly better value, or with NaN over a number: ties keep the first index."""
        reduction = REDUCTIONS[e.op]
        best = self.arg_values[id(e)]
        full = self.canonical(acc.dims + (ax,))
        values = self.masked(self.fit(self.real(e.args[0], func, env), full), ax, reduction.identity)
        if not isinstance(values, S.Ref):
            values = self.assign(f"{e.dim}_values", values, f"r{e.op}", e.loc)
        nan = S.Binary("!=", values, values)
        past_every_number = S.Literal(-reduction.identity, self.compute)
        keys = self.assign(f"{e.dim}_keys", S.Where(nan, past_every_number, values), f"r{e.op}", e.loc)
        tile_reduce = e.op.removeprefix("arg")  # max, min
        extreme = self.assign(f"{e.dim}_tile_{tile_reduce}", S.Reduce(tile_reduce, keys, ax), f"r{e.op}", e.loc)
        # lanes ranked in i32, by their place in the tile (a tile has at most 2**20 lanes): the tile's
        # size past every lane, so a number's lane ranks after every NaN's (and i64 minima over
        # whole rows of 8192 lanes in 4 warps came out wrong on an H100, Triton 3.6)
        axis = self.axes[ax]
        lane = S.Cast(S.Binary("-", S.IndexOf(ax, INDEX), S.Index(axis.start, INDEX)), LANE)
        lane = lane if full == (ax,) else S.Expand(lane, full)
        lanes = S.Index(axis.size, LANE)
        ranked = S.Where(nan, lane, S.Binary("+", lane, lanes))
        none = S.Binary("*", lanes, S.Literal(2, LANE))
        candidates = S.Where(S.Binary("==", keys, self.fit(extreme, full)), ranked, none)
        first = self.assign(f"{e.dim}_tile_first", self.fit(S.Reduce("min", candidates, ax), acc.dims),
                            f"r{e.op}", e.loc)
        tile_nan = S.Binary("<", first, lanes)
        local = S.Where(tile_nan, first, S.Binary("-", first, lanes))
        tile_index = S.Binary("+", S.Index(axis.start, INDEX), S.Cast(local, INDEX))
        strictly = ">" if e.op == "argmax" else "<"
        # a NaN tile wins over a number; a number wins by being strictly better (never over NaN)
        wins = S.Where(tile_nan, S.Binary("==", best, best), S.Binary(strictly, self.fit(extreme, acc.dims), best))
        index = self.assign(f"{e.dim}_index", S.Where(wins, tile_index, acc), f"r{e.op}", e.loc)
        tile_value = S.Where(tile_nan, S.Literal(math.nan, self.compute), self.fit(extreme, acc.dims))
        self.emit(S.Assign(best.name, S.Where(wins, tile_value, best), f"r{e.op}", e.loc))
        return index

    def dot_update(self, e: A.Reduce, func, env, ax, acc: S.TExpr, given):
        """acc + a @ b as a hardware-style Dot, when the operands are tiles (..., i, k) and
        (..., k, j) whose leading axes are the same scalar axes (blocks of 1 along a batch or a
        head: dt.ir.lower.scalar_axes removes them, leaving a 2-D Dot)."""
        # a where the walk makes true on every lane (a split's chunk) is no operand of its own
        e = A.Reduce(e.op, tuple(self.without_known(x) for x in e.args), e.dim, e.loc, e.dim_loc, e.dim_decl, e.slot)
        free = [{env[d] for d in A.free_dims(x)} - {ax} for x in e.args]
        batch = free[0] & free[1]
        own = [f - batch for f in free]
        if any(len(f) != 1 for f in own) or any(e.dim not in A.free_dims(x) for x in e.args) \
                or not all(self.axes[a].scalar for a in batch) \
                or any(self.axes[a].scalar for f in own for a in f) or self.axes[ax].scalar:
            return None
        lead = tuple(a for a in acc.dims if a in batch)
        # scalar axes only the accumulator has (a split's chunk, in its where) are given to the
        # first operand (a size-1 axis): the Dot's layout is the accumulator's until they go
        others = tuple(a for a in acc.dims if a not in batch and a not in own[0] | own[1] and self.axes[a].scalar)
        dims = tuple(a for a in acc.dims if a not in others)
        if dims[:-2] != lead or len(dims) < 2 or acc.dims[-1] != dims[-1]:
            return None
        i_axis, j_axis = dims[-2:]
        first = 0 if i_axis in own[0] else 1
        dtype = self.operand_dtype(e, given)

        def operand(k, layout):
            if k not in given:
                return self.dot_operand(e.args[k], func, env, layout, ax, dtype)
            tile = self.fit(given[k], layout)  # already zero past the end of ax
            return S.Cast(tile, dtype) if dtype != self.compute else tile
        a, b = operand(first, lead + (i_axis, ax)), operand(1 - first, lead + (ax, j_axis))
        if a is None or b is None:
            return None
        if others:
            a = self.fit(a, acc.dims[:-1] + (ax,))
        return S.Dot(a, b, ax, acc, S.INTEGER_DOT if self.integer_dot(e) else self.compute)

    def integer_dot(self, e: A.Reduce) -> bool:
        """Whether product e multiplies i8 operands as integers (dt.ir.lower.types), its operands
        taken as dot_update takes them: without the wheres its walk makes true."""
        return self.types.integer_dot(A.Reduce(e.op, tuple(map(self.without_known, e.args)), e.dim))

    def without_known(self, x: A.Expr) -> A.Expr:
        """x without the wheres around it whose conditions hold on every lane of the walk."""
        while isinstance(x, A.Where) and any(A.same(x.cond, c) for c in self.known_true):
            x = x.a
        return x

    def operand_dtype(self, e: A.Reduce, given) -> str:
        """The dtype product e's operands feed the matrix units in: i8 for two i8 operands, an 8-bit
        float when both are stored in it (dt.ir.lower.dtypes), else the pipeline's dot dtype."""
        if self.integer_dot(e):
            return "i8"
        stored = [self._stored_dtype(x) for k, x in enumerate(e.args) if k not in given]
        return float8_dot_dtype(stored) if len(stored) == 2 and float8_dot_dtype(stored) else self.dot_dtype

    def _stored_dtype(self, e: A.Expr) -> str | None:
        if not (isinstance(e, A.Access) and e.dims is not None) or e.name in self.cp.fused:
            return None
        return self.types.input_dtypes.get(e.name) if e.kind == "input" else self.types.func_dtypes.get(e.name)

    def dot_operand(self, e: A.Expr, func, env, layout, ax, dtype: str) -> S.TExpr | None:
        """An operand of a Dot laid out as `layout`, zero past the end of reduction axis `ax`, in
        `dtype`. Inputs and temporaries load straight in that dtype: no round trip via f32."""
        if isinstance(e, A.Access) and e.dims is not None and e.name not in self.cp.fused:
            return self.access(e, func, env, layout, dtype)
        if isinstance(e, A.Access) and e.kind == "input" and not is_integer(self.types.input_dtypes[e.name]):
            # a float input at computed subscripts (K[b, h // group, l, k]): gathered in the product's
            # dtype and layout, as a load is
            subscripts = [self.number(s, func, env) for s in e.subscripts]
            if {d for s in subscripts for d in s.dims} <= set(layout):
                x = self.gather(e, subscripts, env, layout, dtype)
                # lanes past the reduction's end read 0 already where the reduced dimension itself
                # indexes a tensor axis of that dimension (K[.., l, k]: k past k_SIZE is outside K)
                dim, axes = self.axes[ax].dim, self.cp.input_axes[e.name]
                inside = any(isinstance(s, A.DimRef) and s.dim == dim == axes[i] for i, s in enumerate(e.subscripts))
                return x if inside else self.masked(x, ax, 0.0)
        x = self.number(e, func, env) if is_integer(dtype) else self.real(e, func, env)
        if x.unit:
            return None
        if x.dims != layout:
            x = S.Expand(x, layout)
        if not self._is_load(x):
            x = self.masked(x, ax, 0.0)
        if self.load_dtypes.get(getattr(x, "name", None)) == dtype:
            return x
        return S.Cast(x, dtype) if dtype != self.compute else x

    def _is_load(self, x: S.TExpr) -> bool:
        """Loads fill masked lanes with 0 already (a permuted load too)."""
        if isinstance(x, S.Expand) and not x.unit:
            x = x.x
        return isinstance(x, S.Ref) and x.name in self.load_dtypes
