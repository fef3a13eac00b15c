"""Expressions: a DT expression lowered to tile expressions over the tiles bound in the
environment: constants, scalars, extents and indices; loads (one per tensor, tiles and dtype in
a scope) and the tiles of fused producers; element-wise operations on operands aligned by axis;
comparisons as booleans, or as numbers where a number is wanted; and masking."""
from __future__ import annotations

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.index_expr import IConst, IExpr
from dt.ir.lower.dtypes import is_bool


class ExpressionLowering:
    """The expression part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def number(self, e: A.Expr, func: str, env) -> S.TExpr:
        """e as a number: comparison results (booleans) become 1.0 / 0.0."""
        return A.recurse(lambda item: self._lower_step(*item, func, env), (e, True))

    def _lower_step(self, e: A.Expr, as_number: bool, func: str, env):
        """A step of A.recurse lowering e (expressions nest deeper than Python recursion goes):
        yields (operand, as a number) for each operand it needs lowered."""
        if isinstance(e, A.Num):
            value = S.Literal(e.value, self.compute)
        elif isinstance(e, A.ScalarRef):
            value = S.Param(e.name, self.compute)
        elif isinstance(e, A.Len):
            value = S.Extent(e.dim, self.compute)
        elif isinstance(e, A.DimRef):
            value = S.IndexOf(env[e.dim], self.compute)
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
                cond = S.Binary("!=", cond, S.Literal(0.0, cond.dtype))
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
            name, have, dtype = produced
            if have != axes:
                raise self.tile_mismatch(e, func, have, axes)
            return S.Ref(name, have, dtype)
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
        ax = self.axes[axis]
        if ax.limit is None and isinstance(ax.size, IConst):
            return value
        mask = S.Mask(axis) if value.dims == (axis,) else S.Expand(S.Mask(axis), value.dims)
        return S.Where(mask, value, S.Literal(fill, value.dtype))
