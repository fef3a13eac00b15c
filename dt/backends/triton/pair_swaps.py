"""Neighbours in pairs: `where(d % 2 == 0, f(X[.., d + 1]), g(X[.., d - 1]))` from the tile of X
the kernel already loaded, its lanes swapped in pairs.

Interleaved RoPE rotates each pair (x[2i], x[2i + 1]) of a row; DT says it as above, and each
neighbour becomes a load of its own at an address shifted by one element: unaligned, so Triton
issues them as scalar loads, two more a lane, and the kernel ran at 63-72% of a copy's bandwidth
in bf16 on an H200. Where the where's condition is the parity of d's index, each branch reads
the lane's partner in its pair (d + 1 on even lanes, d - 1 on odd ones): a lane of the plain
load `X[.., d]` swapped with its neighbour (`tl.split` of the tile reshaped to pairs, then
`tl.join` the other way round: registers of one thread when d is the tile's last axis). A
hand-written kernel of that form ran at a copy's speed (1.5-1.6x torch.compile in bf16).

The rewrite holds lane for lane on the lanes the where keeps: d's tile starts at an even index
and has an even number of lanes (so a pair never straddles tiles), and the load and the gather
mask the partner alike (the gather's extent along d is the limit the load's lanes stop at). The
gathers it replaces are dropped once nothing else reads them.
"""
from __future__ import annotations

import dataclasses

from dt.ir import scheduled as S
from dt.ir import uses
from dt.ir.index_expr import IBin, IConst, IVar
from dt.ir.naming import fresh_name


def with_pair_swaps(kernel: S.Kernel) -> S.Kernel:
    """`kernel` with every neighbour gather a parity `where` picks between read from its load's
    tile, lanes swapped in pairs (see the module's docstring)."""
    written = {s.tensor for s in S.walk_statements(kernel.body) if isinstance(s, (S.Store, S.Scatter))}
    rewrite = _Rewrite(uses.taken_names(kernel), written)
    body = rewrite.body(kernel.body, _Scope({}, {}, set(), {}, {}, {}))
    if body == kernel.body:
        return kernel
    return dataclasses.replace(kernel, body=_without_unread(body, rewrite.replaced))


class _Rewrite:
    def __init__(self, taken: set[str], written: set[str]):
        self.taken = taken
        self.written = written
        self.replaced: set[str] = set()  # gathers some read of was replaced

    def body(self, body, outer: "_Scope"):
        scope = outer.inner()
        out = []
        for s in body:
            if isinstance(s, S.Axis):
                scope.axes[s.name] = s
            elif isinstance(s, S.Let):
                scope.lets[s.name] = s.value
                if _even(s.value, scope.even):
                    scope.even.add(s.name)
            elif isinstance(s, S.For):
                assigned = {t.name for t in S.walk_statements(s.body) if isinstance(t, S.Assign)}
                inner = scope.inner()
                inner.forget(assigned)  # a tile assigned in the loop holds another value from the second step
                if _even(s.start, scope.even) and s.step % 2 == 0:
                    inner.even.add(s.var)
                s = dataclasses.replace(s, body=self.body(s.body, inner))
                scope.forget(assigned)
            elif isinstance(s, (S.Assign, S.Store)):
                s = dataclasses.replace(s, value=self.texpr(s.value, scope, out))
            out.append(s)
            if isinstance(s, S.Assign):
                scope.forget({s.name})
            if isinstance(s, S.Assign) and isinstance(s.value, S.Load) and s.value.tensor not in self.written:
                v = s.value
                scope.loads.setdefault((v.tensor, v.indices, v.order, v.dtype), s.name)
            elif isinstance(s, S.Assign) and isinstance(s.value, S.Gather):
                scope.gathers[s.name] = s.value
        return tuple(out)

    def texpr(self, e: S.TExpr, scope: "_Scope", out: list) -> S.TExpr:
        kids = S.texpr_children(e)
        if kids:
            e = S.with_children(e, tuple(self.texpr(k, scope, out) for k in kids))
        if not isinstance(e, S.Where):
            return e
        parity = _parity_test(e.cond)
        if parity is None:
            return e
        axis, even_lanes_take_a = parity
        if not _pairs_of(scope.axes.get(axis), scope.even):
            return e
        a = self.branch(e.a, axis, +1 if even_lanes_take_a else -1, scope, out)
        b = self.branch(e.b, axis, -1 if even_lanes_take_a else +1, scope, out)
        return a if a == b and a.dims == e.dims else dataclasses.replace(e, a=a, b=b)

    def branch(self, e: S.TExpr, axis: str, shift: int, scope: "_Scope", out: list) -> S.TExpr:
        """`e` with each Ref to a gather of a neighbour at `shift` along `axis` replaced by the
        pairs of its load's tile (made on first use, before the statement being rewritten)."""
        if isinstance(e, S.Ref) and e.name in scope.gathers and scope.gathers[e.name].tensor not in self.written:
            gather = scope.gathers[e.name]
            indices = _lanes_of(gather, axis, shift, scope)
            if indices is None:
                return e
            key = (gather.tensor, indices, gather.order, gather.dtype)
            load = next((name for k, name in scope.loads.items() if _same_load(k, key, scope.axes)), None)
            if load is None:  # the neighbours only: load the row itself (aligned, vectorised)
                load = fresh_name(gather.tensor, self.taken)
                out.append(S.Assign(load, S.Load(*key, loc=gather.loc), dt_name=gather.tensor, loc=gather.loc))
                scope.loads[key] = load
            if load not in scope.swapped:
                name = fresh_name(f"{load}_pairs", self.taken)
                out.append(S.Assign(name, S.SwapPairs(S.Ref(load, e.ref_dims, e.dtype, e.ref_unit), axis)))
                scope.swapped[load] = name
            self.replaced.add(e.name)
            return dataclasses.replace(e, name=scope.swapped[load])
        kids = S.texpr_children(e)
        return S.with_children(e, tuple(self.branch(k, axis, shift, scope, out) for k in kids)) if kids else e


@dataclasses.dataclass
class _Scope:
    """What a statement list sees: its axes, Let values, names known even, plain loads (key ->
    tile), gathers (tile -> Gather) and pair tiles made (load's tile -> pairs' tile), its
    enclosing lists' too."""
    axes: dict
    lets: dict
    even: set
    loads: dict
    gathers: dict
    swapped: dict

    def inner(self) -> "_Scope":
        return _Scope(dict(self.axes), dict(self.lets), set(self.even), dict(self.loads), dict(self.gathers),
                      dict(self.swapped))

    def forget(self, names: set[str]):
        """Drop what tiles `names` held: they are assigned again."""
        self.loads = {k: t for k, t in self.loads.items() if t not in names}
        self.gathers = {t: g for t, g in self.gathers.items() if t not in names}
        self.swapped = {t: p for t, p in self.swapped.items() if t not in names and p not in names}


def _parity_test(cond: S.TExpr):
    """(axis, whether even lanes take the where's first branch) for `(axis + c) % 2 == k` or
    `!= k`, c an integer (0, or -1 and +1 as dt.grad writes the partners' conditions back: `(d + 1)
    % 2 == 0` holds on odd lanes), k 0 or 1; else None."""
    cond = S.without_layout(cond)
    if not (isinstance(cond, S.Binary) and cond.op in ("==", "!=") and _literal(cond.b) in (0, 1)):
        return None
    mod = S.without_layout(cond.a)
    if not (isinstance(mod, S.Binary) and mod.op == "%" and _literal(mod.b) == 2):
        return None
    lane, offset = S.without_layout(mod.a), 0
    if isinstance(lane, S.Binary) and lane.op in ("+", "-") and isinstance(_literal(lane.b), (int, float)) \
            and float(_literal(lane.b)).is_integer():
        offset = int(_literal(lane.b)) * (1 if lane.op == "+" else -1)
        lane = S.without_layout(lane.a)
    if not isinstance(lane, S.IndexOf):
        return None
    return lane.axis, (offset % 2 == _literal(cond.b)) == (cond.op == "==")


def _literal(e: S.TExpr):
    return e.value if isinstance(e, S.Literal) else None


def _pairs_of(axis: S.Axis | None, even: set[str]) -> bool:
    """Whether the tiles of `axis` hold whole pairs: an even start and an even number of lanes
    (an extent's size: the launcher gives its tile at least 2 lanes, KernelRenderer)."""
    if axis is None or axis.scalar or not _even(axis.start, even):
        return False
    return isinstance(axis.size, IVar) or (isinstance(axis.size, IConst) and axis.size.value % 2 == 0)


def _even(e, even: set[str]) -> bool:
    """Whether integer expression `e` is even for every value of its names (`even`: names known
    even)."""
    if isinstance(e, IConst):
        return e.value % 2 == 0
    if isinstance(e, IVar):
        return e.name in even
    if isinstance(e, IBin) and e.op in ("+", "-", "min", "max"):
        return _even(e.a, even) and _even(e.b, even)
    if isinstance(e, IBin) and e.op == "*":
        return _even(e.a, even) or _even(e.b, even)
    return False


def _lanes_of(g: S.Gather, axis: str, shift: int, c: _Scope) -> tuple[str, ...] | None:
    """The axes of the plain load (one per tensor axis) whose lanes `g` reads shifted by `shift`
    along `axis`: every other subscript that load's own lane (an axis's indices, a scalar axis's
    start), `axis` the last of the order, masked at the same limit; None if `g` is not such a read."""
    if not g.order or g.order[-1] != axis:
        return None
    indices = []
    for sub, extent in zip(g.subscripts, g.extents):
        sub = S.without_layout(sub)
        if isinstance(sub, S.Binary) and sub.op == ("+" if shift > 0 else "-") and isinstance(sub.a, S.IndexOf) \
                and sub.a.axis == axis and _literal(sub.b) == 1:
            if not _masked_alike(c.axes[axis], extent, c):
                return None
            indices.append(axis)
        elif isinstance(sub, S.IndexOf):
            indices.append(sub.axis)
        elif isinstance(sub, S.Index):
            scalar = [a.name for a in c.axes.values() if a.scalar and a.start == sub.value]
            if not scalar:
                return None
            indices.append(scalar[0])
        else:
            return None
    if indices.count(axis) != 1 or not set(g.order) <= set(indices):
        return None
    return tuple(indices)


def _same_load(a: tuple, b: tuple, axes) -> bool:
    """Whether two loads' keys (tensor, indices, order, dtype) read the same lanes."""
    return a[0] == b[0] and a[2:] == b[2:] and len(a[1]) == len(b[1]) and all(
        x == y or (axes[x].scalar and axes[y].scalar and axes[x].start == axes[y].start)
        for x, y in zip(a[1], b[1]))


def _masked_alike(axis: S.Axis, extent, scope: _Scope) -> bool:
    """Whether a lane's partner is valid in `axis` exactly where it lies inside [0, extent) (the
    pairs being whole, the start even): the load masks lanes at the axis's limit (`extent`, or
    a block's end `min(even, extent)`, whose even bound no pair straddles), or, without one, at
    an extent's size from 0 (Triton pads the tile), or masks none (a constant size)."""
    if axis.limit is not None:
        limit = axis.limit
        while isinstance(limit, IVar) and limit.name in scope.lets:
            limit = scope.lets[limit.name]
        if limit == extent:
            return True
        return isinstance(limit, IBin) and limit.op == "min" and any(
            side == extent and _even(other, scope.even) for side, other in ((limit.a, limit.b), (limit.b, limit.a)))
    if isinstance(axis.size, IConst):
        return True
    return axis.start == IConst(0) and axis.size == extent


def _without_unread(body, gathers: set[str]):
    """`body` without those of `gathers` that nothing reads any more."""
    read = {n.name for s in S.walk_statements(body) for v in S.statement_values(s)
            for n in S.walk_texpr(v) if isinstance(n, S.Ref)}

    def keep(statements):
        out = []
        for s in statements:
            if isinstance(s, S.Assign) and s.name in gathers and s.name not in read:
                continue
            out.append(dataclasses.replace(s, body=keep(s.body)) if isinstance(s, S.For) else s)
        return tuple(out)
    return keep(body)
