"""Expressions: a DT expression lowered to tile expressions over the tiles bound in the
environment: constants, scalars, extents and indices; loads (one per tensor, tiles and dtype in
a scope) and the tiles of fused producers; element-wise operations on operands aligned by axis;
comparisons as booleans, or as numbers where a number is wanted; and masking."""
from __future__ import annotations

import dataclasses

from dt.dtypes import is_integer
from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.index_expr import IConst, IExpr, IVar
from dt.ir.lower.dtypes import is_bool
from dt.ir.naming import size_name
from dt.ir.ops import OPS

# The dtype of dimensions, lens, integer constants and all integer arithmetic: 64 bits, so that
# no index expression wraps (x * 100000000 would in 32) and every backend agrees with the
# reference; narrower integer data widens to it wherever it is computed with.
INDEX = "i64"


def has_invalid_lanes(axis: S.Axis) -> bool:
    """Whether a tile of `axis` may hold lanes past its end: a limit, a whole extent's tile, or a
    constant size that is not a power of two, which Triton pads (6 lanes to 8: lanes 6 and 7 load
    0, and what is computed from that must not reach a sum, a max or a rank)."""
    if axis.limit is not None or not isinstance(axis.size, IConst):
        return True
    return axis.size.value & (axis.size.value - 1) != 0


class ExpressionLowering:
    """The expression part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def number(self, e: A.Expr, func: str, env) -> S.TExpr:
        """e as a number: comparison results (booleans) become 1.0 / 0.0; integers stay integers."""
        return A.recurse(lambda item: self._lower_step(*item, func, env), (e, True))

    def real(self, e: A.Expr, func: str, env) -> S.TExpr:
        """e as a number in the compute dtype (what reductions accumulate)."""
        return self.as_dtype(self.number(e, func, env), self.compute)

    @staticmethod
    def as_dtype(value: S.TExpr, dtype: str) -> S.TExpr:
        """value converted to dtype: a leaf that holds its own dtype is made in it (a literal, an
        index, an extent, a scalar), anything else cast."""
        if value.dtype == dtype:
            return value
        if isinstance(value, (S.Literal, S.Param, S.Extent, S.IndexOf, S.Index)):
            return dataclasses.replace(value, dtype=dtype)
        return S.Cast(value, dtype)

    def _operands(self, op: str, operands: list[S.TExpr]) -> list[S.TExpr]:
        """The operands of `op` in the dtypes it computes in, as dt.ir.lower.types types them:
        comparisons compare integers as integers (l <= m) and booleans as they are; an op closed
        over integers keeps them (x + 1, i // 4), booleans among them becoming integers; integers
        compute in INDEX (i8 * i8 does not wrap); anything with a float operand, or any other op,
        computes in floats of the compute dtype."""
        values = operands[1:] if op == "where" else operands
        kinds = ["bool" if v.dtype == "bool" else "int" if is_integer(v.dtype) else "float" for v in values]
        as_they_are = OPS[op].result == "bool" or (op == "where" and set(kinds) == {"bool"})
        if "float" in kinds or not (as_they_are or OPS[op].integer and "int" in kinds):
            values = [v if k == "float" else self.as_dtype(v, self.compute) for v, k in zip(values, kinds)]
        elif not as_they_are or "int" in kinds:  # integers compute in INDEX (booleans among them too)
            values = [self.as_dtype(v, INDEX) if k != "bool" or not as_they_are else v for v, k in zip(values, kinds)]
        return [operands[0], *values] if op == "where" else values

    def _lower_step(self, e: A.Expr, as_number: bool, func: str, env):
        """A step of A.recurse lowering e (expressions nest deeper than Python recursion goes):
        yields (operand, as a number) for each operand it needs lowered."""
        if isinstance(e, A.Num):
            value = S.Literal(e.value, INDEX if e.integer else self.compute)
        elif isinstance(e, A.ScalarRef):
            value = S.Param(e.name, self.types.scalar_dtypes.get(e.name, self.compute))
        elif isinstance(e, A.Len):
            value = S.Extent(e.dim, INDEX)
        elif isinstance(e, A.DimRef):
            value = S.IndexOf(env[e.dim], INDEX)
        elif isinstance(e, A.Access):
            if e.dims is None:
                subscripts = []
                for sub in e.subscripts:
                    subscripts.append((yield sub, True))
                value = self.gather(e, subscripts, env)
            else:
                value = self.access(e, func, env, None)
        elif isinstance(e, A.Cast):
            value = S.Cast((yield e.x, True), e.dtype)
        elif isinstance(e, A.Unary):
            value = S.Unary(e.op, *self._operands(e.op, [(yield e.x, True)]))
        elif isinstance(e, A.Binary) and OPS[e.op].syntax == "internal":  # mask logic: 'and' of booleans
            a = yield e.a, False
            value = S.Binary(e.op, *self.align(a, (yield e.b, False)))
        elif isinstance(e, A.Binary):
            a = yield e.a, True
            value = S.Binary(e.op, *self.align(*self._operands(e.op, [a, (yield e.b, True)])))
        elif isinstance(e, A.Where) and any(A.same(e.cond, c) for c in self.known_true):
            value = yield e.a, as_number  # the loop walks only tiles where the condition holds
        elif isinstance(e, A.Where):
            cond = yield e.cond, False
            if cond.dtype != "bool":
                cond = S.Binary("!=", cond, S.Literal(0.0, cond.dtype))
            both_bool = is_bool(e.a) and is_bool(e.b)
            a = yield e.a, not both_bool
            value = S.Where(*self.align(*self._operands("where", [cond, a, (yield e.b, not both_bool)])))
        elif isinstance(e, A.Reduce):
            value = self.reduction(e, func, env)
        elif isinstance(e, A.Scan):
            value = self.scan(e, func, env)
        elif isinstance(e, A.Stored):
            value = self.store_inlined(e, (yield e.x, as_number), env)
        else:
            raise AssertionError(f"cannot lower {e!r}")
        return S.Cast(value, self.compute) if as_number and is_bool(e) else value

    def store_inlined(self, e: A.Stored, value: S.TExpr, env) -> S.TExpr:
        """An inlined output at its plain dimensions (its value there): stored by the first kernel
        computing it, at the first place it does, once (guarded where programs or loop iterations
        repeat it); then the tile it is read from there."""
        if e.name in self.stored_inline:
            return value
        self.stored_inline.add(e.name)
        axes = tuple(env[d] for d in e.dims)
        tile = self.assign(e.name, self.fit(value, axes), e.name, e.loc)
        self.emit(S.Store(e.name, axes, tile, e.loc, self.repeat_guard(e.dims)))
        self.writes.append(e.name)
        return tile if tile.dims == value.dims else value

    def scatter(self, fd: A.FuncDef, value: S.Ref, axes: tuple[str, ...], env):
        """An update's write of its value over `axes` into its target at its subscripts, each an
        integer tile over the same axes."""
        target = fd.update.target
        target_dims = self.cp.funcs[target].dims
        subscripts = tuple(self.assign(f"{target}_{d}_index", self.fit(self.as_dtype(self.number(s, fd.name, env), INDEX),
                                                                       axes), loc=fd.loc)
                           for d, s in zip(target_dims, fd.update.subscripts))
        extents = tuple(IVar(size_name(d)) for d in target_dims)
        self.emit(S.Scatter(target, subscripts, extents, value, fd.update.accumulate, fd.loc))
        self.writes[0] = target

    def gather(self, e: A.Access, subscripts: list[S.TExpr], env, order=None, floats: str | None = None) -> S.TExpr:
        """e read at computed subscripts: a Gather over the axes its subscripts span (in `order`
        when given), 0 outside the tensor; float data in `floats` (default: the compute dtype). A
        fused producer is never read so (the checker refuses it)."""
        order = order or self.canonical(tuple(dict.fromkeys(d for s in subscripts for d in s.dims)))
        subscripts = [self.as_dtype(s, INDEX) for s in subscripts]  # u8 ids compare with a 300-row extent
        aligned = tuple(s if not s.dims else s if s.dims == order else S.Expand(s, order) for s in subscripts)
        if e.kind == "input":
            dims, dtype = self.cp.input_axes[e.name], self.types.input_dtypes[e.name]
        else:
            dims, dtype = self.cp.funcs[e.name].dims, self.types.func_dtypes[e.name]
        if not is_integer(dtype):
            dtype = floats or self.compute
        key = ("gather", e.name, aligned, order, dtype)  # read again at the same subscripts: the same tile
        cached = self.lookup(key)
        if cached is not None:
            return cached
        if e.name not in self.reads:
            self.reads.append(e.name)
        extents = tuple(IVar(size_name(d)) for d in dims)
        ref = self.assign(e.name, S.Gather(e.name, aligned, extents, order, dtype, e.loc), e.name, e.loc)
        self.scopes[-1][key] = ref
        return ref

    def access(self, e: A.Access, func: str, env, order, dtype: str | None = None):
        axes = tuple(env[i] for i in e.dims)
        if e.kind == "func" and e.name in self.cp.fused and self.cp.root_of(e.name) == self.root:
            produced = self.lookup(("func", e.name))
            if produced is None:
                consumer, dim = self.cp.fused[e.name]
                raise DTScheduleError(f"'{e.name}' is used by '{func}' where it has not been computed: it is fused "
                                      f"at '{consumer}''s loop over '{dim}'", e.loc,
                                      f"fuse {e.name} at a loop that encloses this use")
            name, have, dtype = produced
            if have != axes:
                raise self.tile_mismatch(e, func, have, axes)
            return S.Ref(name, have, dtype)
        stored = self.types.input_dtypes.get(e.name) if e.kind == "input" else self.types.func_dtypes[e.name]
        if is_integer(stored):  # integer data loads as it is; a product's operand is converted after
            loaded = self.access(e, func, env, order, stored) if dtype != stored else None
            if loaded is not None:
                return self.as_dtype(loaded, dtype) if dtype else loaded
            dtype = stored
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
    def _size_text(size: IExpr) -> str:
        return str(size.value) if isinstance(size, IConst) else "the whole extent"

    def masked(self, value: S.TExpr, axis: str, fill: float) -> S.TExpr:
        """Lanes of `axis` past its end (or padding, in backends that pad) replaced by fill."""
        if not has_invalid_lanes(self.axes[axis]):
            return value
        mask = S.Mask(axis) if value.dims == (axis,) else S.Expand(S.Mask(axis), value.dims)
        return S.Where(mask, value, S.Literal(fill, value.dtype))
