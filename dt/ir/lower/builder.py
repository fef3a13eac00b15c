"""What a kernel's lowering builds the IR with: fresh names, the statements emitted so far,
nested scopes (the loads, axes and fused producers' tiles already in scope), the axes, and the
layout of tile values (canonical axis order, alignment by axis, broadcasting to full size)."""
from __future__ import annotations

from dt.ir import scheduled as S
from dt.ir.index_expr import IConst, IExpr, IVar, iconst, isub
from dt.ir.naming import fresh_name
from dt.ir.tiles import tile_of


class KernelBuilder:
    """The IR-building part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.used)

    def emit(self, stmt):
        if isinstance(stmt, S.Assign) and isinstance(stmt.value, S.Dot):
            self.products.add(stmt.name)
        self.out.append(stmt)

    def let(self, base: str, value: IExpr) -> IExpr:
        if isinstance(value, (IConst, IVar)):
            return value
        name = self.fresh(base)
        self.emit(S.Let(name, value))
        return IVar(name)

    def assign(self, base: str, value: S.TExpr, dt_name: str = "", loc=None) -> S.Ref:
        name = self.fresh(base)
        self.emit(S.Assign(name, value, dt_name or base, loc))
        return S.Ref(name, value.dims, value.dtype, value.unit)

    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def loop(self, var, stop, step, dim, kind, loc, body_fn, start=IConst(0)):
        saved = self.out
        self.out = []
        self.scopes.append({})
        self.open_loops.append((dim, var, start))
        body_fn()
        self.open_loops.pop()
        body = tuple(self.out)
        self.scopes.pop()
        self.out = saved
        self.emit(S.For(var, start, stop, step, body, dim, kind, loc))

    def repeat_guard(self, dims) -> tuple[IExpr, ...]:
        """What is 0 only in the first of the programs and loop iterations that compute a value over
        `dims` again: the block start of each blocked dimension it lacks, and how far each loop
        around it over another dimension has gone (S.Store.guard)."""
        guard = [rng.start for d, rng in self.block_ranges.items() if d not in dims]
        guard += [isub(IVar(var), start) for dim, var, start in self.open_loops if dim not in dims]
        return tuple(guard)

    def axis(self, dim, start, size, limit, env, loc=None) -> str:
        """An axis for `dim` over these lanes; reuses an identical one in scope."""
        size = iconst(size)
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
