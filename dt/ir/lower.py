"""Lowering: a checked DT program (algorithm + schedule) → the scheduled IR.

One kernel per Func computed at root. In each kernel:
- the program id is decomposed into block indices following `map` (slowest first), with
  partial groups where the group size does not divide the block count;
- pure dimensions of the root are walked in LHS order by tile loops inside the block;
  reductions are innermost loops with an accumulator each;
- a producer fused at consumer c's loop over v is computed inside that loop, just after the
  loop's tile comes into scope, over the current tiles of the dimensions bound there and the
  whole extent of its other pure dimensions; it is never written to memory.
"""
from __future__ import annotations

import math

from dataclasses import dataclass

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.check import (CheckedProgram, MapEntry, loop_statistic, mean_reduction, reachable, runs_after,
                         shifted_exp_operand, tile_of, top_reductions)
from dt.ir.nesting import split_deep_expressions

IDENTITY = {**S.REDUCE_IDENTITY, "dot": 0.0}
COMBINE = {**S.REDUCE_COMBINE, "dot": "+"}
DTYPES = ("f32", "f16", "bf16", "f64")


def promote(dtypes) -> str:
    """The storage dtype of outputs and temporaries: the inputs' common dtype."""
    kinds = set(dtypes)
    if not kinds:
        return "f32"
    if len(kinds) == 1:
        return kinds.pop()
    return "f64" if "f64" in kinds else "f32"


def compute_dtype_of(storage: str) -> str:
    return "f64" if storage == "f64" else "f32"


def lower(cp: CheckedProgram, input_dtypes: dict[str, str]) -> S.Pipeline:
    storage = promote(input_dtypes[n] for n in cp.inputs if n in input_dtypes)
    compute = compute_dtype_of(storage)
    input_dims = _input_dims(cp)
    inputs = tuple(S.TensorSpec(n, input_dims[n], input_dtypes.get(n, storage), "input")
                   for n in cp.inputs if n in input_dims)
    outputs = tuple(S.TensorSpec(n, cp.funcs[n].dims, storage, "output") for n in cp.outputs)
    temporaries = tuple(S.TensorSpec(n, cp.funcs[n].dims, storage, "temporary")
                        for n in cp.kernel_roots if n not in cp.outputs)
    sizes = tuple(d for d in cp.dim_kinds if d in cp.needed_dims)
    scalars = tuple(s for s in cp.scalars if s in _all_scalars(cp))
    # The names of the module-level code first: the names a kernel makes for itself differ from its
    # parameters' and from the kernels' (not from the launcher's: no kernel calls it, and a Func is
    # often named as its program is).
    launcher, kernel_names = S.function_names(cp.program.name, cp.kernel_roots, sizes)
    global_names = S.global_names(launcher, kernel_names.values(), sizes, scalars,
                                  (t.name for t in inputs + temporaries + outputs))
    taken = set(kernel_names.values()) | global_names.all()
    kernels = tuple(_KernelLowering(cp, root, compute, storage, kernel_names[root], taken).lower()
                    for root in cp.kernel_roots)
    pipeline = S.Pipeline(launcher, inputs, scalars, sizes, temporaries, outputs, kernels, compute, global_names,
                          cp.program.file)
    return split_deep_expressions(pipeline)


def _input_dims(cp: CheckedProgram) -> dict[str, tuple[str, ...]]:
    dims: dict[str, tuple[str, ...]] = {}
    for f in cp.funcs.values():
        for e in A.walk(f.expr):
            if isinstance(e, A.Access) and e.kind == "input":
                dims.setdefault(e.name, e.indices)
    return dims


def _all_scalars(cp: CheckedProgram) -> set[str]:
    return {e.name for f in cp.funcs.values() for e in A.walk(f.expr) if isinstance(e, A.ScalarRef)}


def is_bool(e: A.Expr) -> bool:
    """Whether e is a comparison, or a where choosing between comparisons (at any depth)."""
    branches = [e]
    while branches:
        e = branches.pop()
        if isinstance(e, A.Where):
            branches += (e.a, e.b)
        elif not (isinstance(e, A.Binary) and e.op in A.COMPARISONS):
            return False
    return True


@dataclass(frozen=True)
class _Range:
    """The index range a pure dimension covers in this program instance."""
    start: S.IExpr
    length: S.IExpr  # number of valid indices
    size: S.IExpr  # nominal lanes (block size, or the extent)
    end: S.IExpr  # start + length
    limit: S.IExpr | None  # None: every lane of size is valid
    static_size: int | None


class _KernelLowering:
    def __init__(self, cp: CheckedProgram, root: str, compute: str, storage: str, name: str, taken: set[str]):
        """Lowers the kernel computing `root`, called `name`; its own names avoid `taken`."""
        self.cp = cp
        self.root = root
        self.name = name
        self.compute = compute
        self.storage = storage
        self.dot_dtype = storage if storage in ("f16", "bf16") else compute
        # One namespace for every generated name; scalars, extents and the pipeline's names keep their own.
        self.used: set[str] = set(cp.scalars) | S.RESERVED_NAMES | {S.size_name(d) for d in cp.dim_kinds} | taken
        self.dim_order: list[str] = list(cp.funcs[root].dims)
        self.axes: dict[str, S.Axis] = {}
        self.out: list = []
        self.scopes: list[dict] = [{}]
        self.fused_at: dict[tuple[str, str], list[str]] = {}
        for p in cp.funcs:  # topological: producers before their users
            if p in cp.fused:
                self.fused_at.setdefault(cp.fused[p], []).append(p)
        for key, producers in self.fused_at.items():
            self.fused_at[key] = self.in_loop_order(producers)
        # Reductions accumulated in a sibling's loop (compute_with): the A.Reduce's id -> its result
        self.shared_reductions: dict[int, S.Ref] = {}
        self.walking_funcs = self._walking_funcs()
        self.accumulator_stems = self._accumulator_stems()
        self.reads: list[str] = []
        self.load_dtypes: dict[str, str] = {}  # tile variables holding a Load, and its dtype

    def _walking_funcs(self) -> dict[str, set[str]]:
        """dim -> the Funcs of this kernel that walk it in reduction loops of their own, nested
        in another reduction's loop or not (a Func computed with another reduces in that one's loop)."""
        in_kernel = {self.root}
        for p in reversed(list(self.cp.funcs)):  # consumers before their producers
            if p in self.cp.fused and self.cp.fused[p][0] in in_kernel:
                in_kernel.add(p)
        followers = {(g, dim) for (_, dim), gs in self.cp.computed_with.items() for g in gs}
        walking: dict[str, set[str]] = {}

        for f in in_kernel:
            stack = [(self.cp.funcs[f].expr, False)]  # (expression, inside a sibling's loop)
            while stack:
                e, in_sibling_loop = stack.pop()
                # a follower's reduction, and whatever it nests, runs in its sibling's loops
                if isinstance(e, A.Reduce):
                    in_sibling_loop = in_sibling_loop or (f, e.dim) in followers
                    if not in_sibling_loop:
                        walking.setdefault(e.dim, set()).add(f)
                stack += ((child, in_sibling_loop) for child in A.children(e))
        return walking

    def _accumulator_stems(self) -> dict[str, dict[str, str]]:
        """dim -> Func -> what its accumulators over dim are named after: `_sum` -> `sum`, unless
        another Func named there (walking dim, or computed with a sibling over it) would read the same."""
        named = {dim: set(funcs) for dim, funcs in self.walking_funcs.items()}
        for (_, dim), followers in self.cp.computed_with.items():
            named.setdefault(dim, set()).update(followers)
        stems = {}
        for dim, funcs in named.items():
            short = [f.lstrip("_") or f for f in funcs]
            stems[dim] = {f: s if short.count(s) == 1 else f for f, s in zip(funcs, short)}
        return stems

    def in_loop_order(self, producers: list[str]) -> list[str]:
        """Producers fused at one loop (in topological order), reordered so that a loop shared by
        compute_with runs after whatever its members' reductions read, and each member after
        the loop (check.runs_after; the check rejects the orders that cannot be met)."""
        pool = set(producers)
        needs: dict[str, set[str]] = {}
        for f in producers:
            needs[f] = set()
            for g, _, shared in runs_after(f, self.cp.computed_with, self.cp.funcs):
                # a Func accumulated in g's loop follows g itself; any other g, through what it uses
                needs[f] |= {g} if shared else reachable(self.cp.funcs, {g}, stop=pool) & pool
        order: list[str] = []
        pending = list(producers)
        while pending:
            f = next((f for f in pending if needs[f] <= set(order)), None)
            assert f is not None, f"no order for {pending} (the checker rejects compute_with cycles)"
            pending.remove(f)
            order.append(f)
        return order

    # ------------------------------------------------------------ helpers
    def fresh(self, base: str) -> str:
        return S.fresh_name(base, self.used)

    def emit(self, stmt):
        self.out.append(stmt)

    def let(self, base: str, value: S.IExpr) -> S.IExpr:
        if isinstance(value, (S.IConst, S.IVar)):
            return value
        name = self.fresh(base)
        self.emit(S.Let(name, value))
        return S.IVar(name)

    def assign(self, base: str, value: S.TExpr, dt_name: str = "", loc=None) -> S.Ref:
        name = self.fresh(base)
        self.emit(S.Assign(name, value, dt_name or base, loc))
        return S.Ref(name, value.dims, value.unit)

    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def loop(self, var, stop, step, dim, kind, loc, body_fn):
        saved = self.out
        self.out = []
        self.scopes.append({})
        body_fn()
        body = tuple(self.out)
        self.scopes.pop()
        self.out = saved
        self.emit(S.For(var, S.IConst(0), stop, step, body, dim, kind, loc))

    def axis(self, dim, start, size, limit, env, loc=None) -> str:
        """An axis for `dim` over these lanes; reuses an identical one in scope."""
        size = S.iconst(size)
        current = env.get(dim)
        if current is not None:
            a = self.axes[current]
            if (a.start, a.size, a.limit) == (start, size, limit):
                return current
        same = self.lookup(("axis", dim, start, size, limit))
        if same is not None:
            return same
        if dim not in self.dim_order:
            self.dim_order.append(dim)
        name = self.fresh(dim)
        ax = S.Axis(name, dim, start, size, limit, loc)
        self.axes[name] = ax
        self.scopes[-1][("axis", dim, start, size, limit)] = name
        self.emit(ax)
        return name

    def canonical(self, axes) -> tuple[str, ...]:
        return tuple(sorted(set(axes), key=lambda a: (self.dim_order.index(self.axes[a].dim), a)))

    def align(self, *values: S.TExpr) -> list[S.TExpr]:
        ranked = [v for v in values if v.dims]
        if not ranked:
            return list(values)
        union = self.canonical([d for v in ranked for d in v.dims])
        return [v if not v.dims or v.dims == union else S.Expand(v, union) for v in values]

    def fit(self, value: S.TExpr, axes: tuple[str, ...]) -> S.TExpr:
        """value laid out exactly over `axes`, full size along each."""
        if value.dims != axes:
            value = S.Expand(value, axes)
        if value.unit:
            value = S.BroadcastTo(value)
        return value

    def tile_of(self, func: str, dim: str) -> int | None:
        return tile_of(func, dim, self.cp.schedules, self.cp.fused)

    # ------------------------------------------------------------ kernel
    def lower(self) -> S.Kernel:
        root = self.cp.funcs[self.root]
        sched = self.cp.schedules[self.root]
        program_count, ranges = self.grid(root, sched)
        self.block_ranges = ranges
        self.emit_func(self.root, {}, ranges)
        return S.Kernel(self.name, self.root, program_count, S.prune_lets(tuple(self.out)), sched.num_warps,
                        sched.num_stages, tuple(self.reads), (self.root,), root.loc, persistent=sched.persistent,
                        persistent_programs=sched.persistent_programs, tma=sched.tma)

    def grid(self, root: A.FuncDef, sched) -> tuple[S.IExpr, dict[str, _Range]]:
        counts: dict[str, S.IExpr] = {}
        program_count: S.IExpr = S.IConst(1)  # in terms of extents only: the launcher computes it
        for d in root.dims:
            if d in sched.block:
                count = S.icdiv(S.IVar(S.size_name(d)), sched.block[d])
                counts[d] = self.let(f"{d}_BLOCK_COUNT", count)
                program_count = S.imul(program_count, count)
        entries = list(sched.map or ())
        named = {e.dim for e in entries}
        default = [MapEntry(d, d, "whole") for d in reversed(root.dims) if d not in named]
        entries = [e for e in default + entries if e.dim in counts]
        position = {(e.dim, e.part): i for i, e in enumerate(entries)}
        values: dict[tuple[str, str], S.IExpr] = {}
        group_counts: dict[str, S.IExpr] = {}
        rest: S.IExpr = S.IVar("pid")
        split = {e.dim for e in entries if e.part != "whole"}
        for i, e in enumerate(entries):
            # How many programs share this entry's value: the product, over every dimension,
            # of the parts of its block index that vary faster than this entry.
            below: S.IExpr = S.IConst(1)
            for d in counts:
                parts = ("outer", "inner") if d in split else ("whole",)
                after = [p for p in parts if position[(d, p)] > i]
                if not after:
                    continue
                if len(after) == len(parts):
                    below = S.imul(below, counts[d])
                elif position[(d, "outer")] == i:
                    below = S.imul(below, S.IConst(e.group))  # all groups but the last are full
                else:
                    below = S.imul(below, group_counts[d])
            last = i == len(entries) - 1
            name = {"whole": f"{e.dim}_pid", "outer": f"{e.dim}_group_id", "inner": f"{e.name}_pid"}[e.part]
            value = self._bind(name, rest if last else S.ifloordiv(rest, below))
            values[(e.dim, e.part)] = value
            if e.part == "outer":
                group_counts[e.dim] = self.let(f"{e.dim}_group_size", S.imin(
                    S.IConst(e.group), S.isub(counts[e.dim], S.imul(value, e.group))))
            if not last:
                rest = S.isub(rest, S.imul(value, below))
                if i + 1 < len(entries) - 1:
                    rest = self.let("pid_rest", rest)
        ranges: dict[str, _Range] = {}
        for d in root.dims:
            if d not in counts:
                continue
            block = sched.block[d]
            if (d, "outer") in values:
                pid = self.let(f"{d}_pid", S.iadd(S.imul(values[(d, "outer")], self._group(d, entries)),
                                                  values[(d, "inner")]))
            else:
                pid = values[(d, "whole")]
            start = self.let(f"{d}_block_start", S.imul(pid, block))
            if block == 1:
                ranges[d] = _Range(start, S.IConst(1), S.IConst(1), S.iadd(start, 1), None, 1)
                continue
            end = self.let(f"{d}_block_end", S.imin(S.iadd(start, block), S.IVar(S.size_name(d))))
            ranges[d] = _Range(start, S.isub(end, start), S.IConst(block), end, end, block)
        return program_count, ranges

    def _bind(self, name: str, value: S.IExpr) -> S.IExpr:
        bound = self.fresh(name)
        self.emit(S.Let(bound, value))
        return S.IVar(bound)

    @staticmethod
    def _group(dim, entries) -> int:
        return next(e.group for e in entries if e.dim == dim and e.part == "outer")

    # ------------------------------------------------------------ Funcs
    def emit_func(self, func: str, env: dict[str, str], ranges: dict[str, _Range] | None = None):
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
                if is_root:
                    self.emit(S.Store(func, axes, ref, fd.loc))
                result.append((ref.name, axes))
                return
            d = fd.dims[i]
            if d in env and not is_root:
                self.emit_fused(func, d, env)
                level(i + 1, env)
                return
            # A fused producer spans the program's block of a blocked kernel dimension, else all of it.
            rng = self.block_ranges.get(d) or self.whole(d)
            tile = self.pure_tile(func, d, rng, is_root)
            if tile == 0 or (rng.static_size is not None and tile >= rng.static_size):
                env2 = {**env, d: self.axis(d, rng.start, rng.size, rng.limit, env, fd.loc)}
                self.emit_fused(func, d, env2)
                level(i + 1, env2)
                return
            var = self.fresh(f"{d}_iter")

            def body():
                limit = rng.end if tile > 1 else None
                env2 = {**env, d: self.axis(d, S.iadd(rng.start, S.IVar(var)), tile, limit, env, fd.loc)}
                self.emit_fused(func, d, env2)
                level(i + 1, env2)

            self.loop(var, rng.length, tile, d, "tile", fd.loc, body)

        level(0, env)
        return result[0] if result else None

    def whole(self, dim: str) -> _Range:
        size = S.IVar(S.size_name(dim))
        return _Range(S.IConst(0), size, size, size, None, None)

    def pure_tile(self, func, dim, rng: _Range, is_root: bool) -> int:
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

    # ------------------------------------------------------------ expressions
    def lower_expr(self, e: A.Expr, func: str, env: dict[str, str]) -> S.TExpr:
        """e over the tiles bound in env; a comparison is a boolean."""
        return A.recurse(lambda item: self._lower_step(*item, func, env), (e, False))

    def number(self, e: A.Expr, func: str, env) -> S.TExpr:
        """e as a number: comparison results (booleans) become 1.0 / 0.0."""
        return A.recurse(lambda item: self._lower_step(*item, func, env), (e, True))

    def _lower_step(self, e: A.Expr, as_number: bool, func: str, env):
        """A step of A.recurse lowering e (expressions nest deeper than Python recursion goes):
        yields (operand, as a number) for each operand it needs lowered."""
        if isinstance(e, A.Num):
            value = S.Literal(e.value)
        elif isinstance(e, A.ScalarRef):
            value = S.Param(e.name)
        elif isinstance(e, A.Len):
            value = S.Extent(e.dim)
        elif isinstance(e, A.DimRef):
            value = S.IndexOf(env[e.dim])
        elif isinstance(e, A.Access):
            value = self.access(e, func, env, None)
        elif isinstance(e, A.Unary):
            value = S.Unary(e.op, (yield e.x, True))
        elif isinstance(e, A.Binary):
            a = yield e.a, True
            value = S.Binary(e.op, *self.align(a, (yield e.b, True)))
        elif isinstance(e, A.Where):
            cond = yield e.cond, False
            if not is_bool(e.cond):
                cond = S.Binary("!=", cond, S.Literal(0.0))
            both_bool = is_bool(e.a) and is_bool(e.b)
            a = yield e.a, not both_bool
            value = S.Where(*self.align(cond, a, (yield e.b, not both_bool)))
        elif isinstance(e, A.Reduce):
            value = self.reduction(e, func, env)
        else:
            raise AssertionError(f"cannot lower {e!r}")
        return S.Cast(value, self.compute) if as_number and is_bool(e) else value

    def access(self, e: A.Access, func: str, env, order, dtype: str | None = None):
        axes = tuple(env[i] for i in e.indices)
        if e.kind == "func" and e.name in self.cp.fused:
            produced = self.lookup(("func", e.name))
            if produced is None:
                consumer, dim = self.cp.fused[e.name]
                raise DTScheduleError(f"'{e.name}' is used by '{func}' where it has not been computed: it is fused "
                                      f"at '{consumer}''s loop over '{dim}'", e.loc,
                                      f"fuse {e.name} at a loop that encloses this use")
            name, have = produced
            if have != axes:
                raise self.tile_mismatch(e, func, have, axes)
            return S.Ref(name, have)
        dtype = dtype or self.compute
        key = ("load", e.name, axes, order, dtype)
        cached = self.lookup(key)
        if cached is not None:
            return cached
        if e.name not in self.reads:
            self.reads.append(e.name)
        ref = self.assign(e.name, S.Load(e.name, axes, order or self.canonical(axes), dtype, e.loc),
                          e.name, e.loc)
        self.load_dtypes[ref.name] = dtype
        self.scopes[-1][key] = ref
        return ref

    def tile_mismatch(self, e: A.Access, func: str, have, want) -> DTScheduleError:
        consumer, level = self.cp.fused[e.name]
        for h, w in zip(have, want):
            if h != w:
                dim = self.axes[w].dim
                hs, ws = self.axes[h].size, self.axes[w].size
                return DTScheduleError(
                    f"'{func}' reads '{e.name}' over a tile of '{dim}' of {self._size_text(ws)}, but '{e.name}' is "
                    f"computed at '{consumer}''s loop over '{level}' over a tile of {self._size_text(hs)}", e.loc,
                    f"make the tiles agree (e.g. {consumer}.tensorize({dim}:0)), or fuse {e.name} at the loop over "
                    f"'{dim}' (fuse_at({consumer}, {dim}))")
        raise AssertionError("no mismatch")

    @staticmethod
    def _size_text(size: S.IExpr) -> str:
        return str(size.value) if isinstance(size, S.IConst) else "the whole extent"

    def masked(self, value: S.TExpr, axis: str, fill: float) -> S.TExpr:
        """Lanes of `axis` past its end (or padding, in backends that pad) replaced by fill."""
        ax = self.axes[axis]
        if ax.limit is None and isinstance(ax.size, S.IConst):
            return value
        mask = S.Mask(axis) if value.dims == (axis,) else S.Expand(S.Mask(axis), value.dims)
        return S.Where(mask, value, S.Literal(fill))

    def reduction(self, e: A.Reduce, func: str, env):
        shared = self.shared_reductions.get(id(e))
        if shared is not None:
            return shared
        siblings = self.siblings(e, func)
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
            # a variance around a mean of this loop, or a sum or product shifted by a max of it (check.loop_statistic)
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
                self.emit_fused(f, e.dim, env2)
            ax = env2[e.dim]
            tile_sums = {}
            if m2s:
                seen, tile_count = self.tile_counts(ax, start, tile)
            for mean, m2 in m2s.items():
                # the mean's tile is reduced once: its sum feeds both the mean and the deviations
                r_mean = mean_sums[mean]
                mean_acc = accumulators[id(r_mean)]
                values = self.fit(self.number(r_mean.args[0], mean, env2), self.canonical(mean_acc.dims + (ax,)))
                tile_sums[id(r_mean)] = self.assign(f"{e.dim}_tile_sum", self.fit(
                    S.Reduce("sum", self.masked(values, ax, 0.0), ax), mean_acc.dims), "rsum", r_mean.loc)
                self.merge_deviations(m2, running_means.get(mean), values, tile_sums[id(r_mean)], ax, seen,
                                      tile_count)
            new_maxima = {}
            for maximum, sums in exp_sums.items():
                r_max = self.cp.funcs[maximum].expr  # rmax(e, dim) itself (check.max_reduction)
                max_acc = accumulators[id(r_max)]
                values = self.fit(self.number(r_max.args[0], maximum, env2), self.canonical(max_acc.dims + (ax,)))
                if not isinstance(values, S.Ref):  # computed once, for the max and the exponentials
                    values = self.assign(f"{e.dim}_max_input", values, "rmax", r_max.loc)
                new_maxima[id(r_max)] = self.rescale_exp_sums(maximum, max_acc, sums, values, ax, env2, r_max.loc,
                                                              tile != 0)
            for f, r, r_acc in updates:
                tile_sum, new_max = tile_sums.get(id(r)), new_maxima.get(id(r))
                update = S.Binary("+", r_acc, tile_sum) if tile_sum is not None else new_max if new_max is not None \
                    else self.update(r, f, env2, ax, r_acc)
                self.emit(S.Assign(r_acc.name, update, f"r{r.op}", r.loc))

        if tile == 0:
            body(rng.start, rng.size, rng.limit)
        else:
            var = self.fresh(f"{e.dim}_iter")
            self.loop(var, rng.length, tile, e.dim, "reduction", e.loc,
                      lambda: body(S.IVar(var), tile, rng.end if tile > 1 else None))
        for _, r, r_acc in updates:
            if r is not e:
                self.shared_reductions[id(r)] = r_acc
        for mean, rs in variances.items():
            for r in rs:
                self.shared_reductions[id(r)] = m2s[mean]
        for maximum, sums in exp_sums.items():
            max_acc = accumulators[id(self.cp.funcs[maximum].expr)]
            for _, r, r_acc in sums:
                # a row that is -inf throughout has sum exp(-inf - -inf) = NaN, not the 0 that shifting by 0 left
                all_minus_inf = S.Binary("==", self.fit(max_acc, r_acc.dims), S.Literal(IDENTITY["max"]))
                self.emit(S.Assign(r_acc.name, S.Where(all_minus_inf, S.Literal(math.nan), r_acc), f"r{r.op}", r.loc))
                if r is not e:
                    self.shared_reductions[id(r)] = r_acc
        return acc

    def loop_funcs(self, func: str, dim: str) -> list[str]:
        """func and the Funcs computed with it over dim: those whose reductions share its loop."""
        return [func, *self.cp.computed_with.get((func, dim), ())]

    def tile_counts(self, ax: str, start: S.IExpr, tile: int) -> tuple[S.Ref | None, S.Ref]:
        """How many lanes of the reduction come before the current tile (None when one tile
        covers them all) and how many it holds: every earlier tile is full, the last one holds
        what is left."""
        dim = self.axes[ax].dim
        loc = self.axes[ax].loc
        if tile == 0:
            return None, self.assign(f"{dim}_tile_count", S.Extent(dim), "rsum", loc)
        seen = self.assign(f"{dim}_seen", S.Index(start), "rsum", loc)
        count = S.Binary("minimum", S.Literal(float(tile)), S.Binary("-", S.Extent(dim), seen))
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

    def rescale_exp_sums(self, maximum: str, max_acc: S.Ref, sums, values: S.TExpr, ax: str, env, loc,
                         rescale: bool) -> S.Ref:
        """One step of the online softmax: the running max after the current tile, and each sum
        (or product) of exponentials shifted by the max (`sums`: (Func, reduction, accumulator))
        brought to it: the accumulator so far, scaled by exp(old max - new max), plus the tile's
        exponentials shifted by the new max, summed (or multiplied by the other operand: flash
        attention's output). `rescale` False: one tile covers the reduction, nothing came before.
        Returns the new max, which the caller assigns to `max_acc` after these updates."""
        dim = self.axes[ax].dim
        sum_loc = sums[0][1].loc
        tile_max = self.fit(S.Reduce("max", self.masked(values, ax, IDENTITY["max"]), ax), max_acc.dims)
        new_max = self.assign(f"{dim}_max", S.Binary("maximum", max_acc, tile_max), "rmax", loc)
        # while every lane so far is -inf, so is the max, and x - max would be -inf - -inf = NaN:
        # shifting by 0 instead keeps the sum at 0 (the max's own value is not shifted; a row that
        # stays -inf is given its NaN after the loop)
        shift = self.assign(f"{dim}_shift", S.Where(S.Binary("==", new_max, S.Literal(IDENTITY["max"])),
                                                    S.Literal(0.0), new_max), "rmax", loc)
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

    def accumulator(self, e: A.Reduce, env, func: str | None = None) -> S.Ref:
        """A new accumulator of reduction e, set to its identity over e's free dims: `y_accumulator`,
        or with `func`, `y_sum_accumulator` (Func `_sum`)."""
        axes = self.canonical(env[d] for d in A.free_dims(e))
        stem = self.accumulator_stems.get(e.dim, {}).get(func, func) if func else None
        name = f"{e.dim}_{stem}_accumulator" if func else f"{e.dim}_accumulator"
        return self.assign(name, S.Full(IDENTITY[e.op], axes, self.compute), f"r{e.op}", e.loc)

    def siblings(self, e: A.Reduce, func: str) -> list[tuple[str, A.Reduce]]:
        """The reductions of Funcs computed with `func` over e's dim (compute_with): they are
        updated in e's loop, tile by tile (in func's tiles, which the checker made theirs)."""
        out = []
        for g in self.cp.computed_with.get((func, e.dim), ()):
            out += [(g, r) for r in top_reductions(self.cp.funcs[g].expr, e.dim)
                    if id(r) not in self.shared_reductions]  # else accumulated in an earlier reduction of func
        return out

    def update(self, e: A.Reduce, func: str, env, ax: str, acc: S.TExpr, given=None) -> S.TExpr:
        """The accumulator after one step of reduction e over the current tile `ax`; `given`:
        operands already computed as tiles, by index (the shifted exponentials of a product)."""
        op, identity = e.op, IDENTITY[e.op]
        given = given or {}
        update = self.dot_update(e, func, env, ax, acc, given) if op == "dot" else None
        if update is None:
            if op == "dot":
                a, b = self.align(*(given[k] if k in given else self.number(x, func, env)
                                    for k, x in enumerate(e.args)))
                value = S.Binary("*", a, b)
            else:
                value = self.number(e.args[0], func, env)
            full = self.canonical(acc.dims + (ax,))
            value = self.fit(value, full)
            value = self.masked(value, ax, identity)
            reduced = S.Reduce("sum" if op == "dot" else op, value, ax)
            update = S.Binary(COMBINE[op], acc, self.fit(reduced, acc.dims))
        return update

    def dot_update(self, e: A.Reduce, func, env, ax, acc: S.TExpr, given):
        """acc + a @ b as a hardware-style Dot, when both operands are 2-D tiles (i, k) and (k, j)."""
        free = [set(A.free_dims(x)) - {e.dim} for x in e.args]
        if len(acc.dims) != 2 or any(len(f) != 1 for f in free) or free[0] == free[1] \
                or any(e.dim not in A.free_dims(x) for x in e.args):
            return None
        i_axis, j_axis = acc.dims
        first = 0 if env[next(iter(free[0]))] == i_axis else 1

        def operand(k, layout):
            if k not in given:
                return self.dot_operand(e.args[k], func, env, layout, ax)
            tile = self.fit(given[k], layout)  # already zero past the end of ax
            return S.Cast(tile, self.dot_dtype) if self.dot_dtype != self.compute else tile
        a, b = operand(first, (i_axis, ax)), operand(1 - first, (ax, j_axis))
        if a is None or b is None:
            return None
        return S.Dot(a, b, ax, acc, self.compute)

    def dot_operand(self, e: A.Expr, func, env, layout, ax) -> S.TExpr | None:
        """An operand of a Dot laid out as `layout`, zero past the end of reduction axis `ax`, in
        the dot dtype. Inputs and temporaries load straight in that dtype: no round trip via f32."""
        if isinstance(e, A.Access) and e.name not in self.cp.fused:
            return self.access(e, func, env, layout, self.dot_dtype)
        x = self.number(e, func, env)
        if x.unit:
            return None
        if x.dims != layout:
            x = S.Expand(x, layout)
        if not self._is_load(x):
            x = self.masked(x, ax, 0.0)
        if self.load_dtypes.get(getattr(x, "name", None)) == self.dot_dtype:
            return x
        return S.Cast(x, self.dot_dtype) if self.dot_dtype != self.compute else x

    def _is_load(self, x: S.TExpr) -> bool:
        """Loads fill masked lanes with 0 already (a permuted load too)."""
        if isinstance(x, S.Expand) and not x.unit:
            x = x.x
        return isinstance(x, S.Ref) and x.name in self.load_dtypes
