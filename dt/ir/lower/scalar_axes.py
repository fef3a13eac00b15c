"""Scalar axes: an axis of one lane that is always valid (a block of 1, a tile of 1) is an offset,
not a tile dimension.

The kernel lowering builds every tile over the axes its dimensions have in scope, so a block of
1 along `b` and `h` leaves tiles of shape (1, 1, 128, 64): a product over such tiles has four
dimensions and cannot be a matrix-unit Dot, and every backend pays for the unit axes (Triton
keeps them in its layouts). This pass removes them after the lowering: no tile spans a scalar
axis (S.Axis.scalar); loads, gathers and stores still list it among their `indices` and
address it at its start; the index of a scalar axis is its start; a reduction over one always
valid lane is its operand. A product the lowering made over scalar batch axes (reductions'
dot_update) becomes a 2-D Dot here.
"""
from __future__ import annotations

from dataclasses import replace

from dt.ir import scheduled as S


def squeeze_scalar_axes(kernel: S.Kernel) -> S.Kernel:
    scalar = {s.name: s for s in S.walk_statements(kernel.body) if isinstance(s, S.Axis) and s.scalar}
    if not scalar:
        return kernel
    return replace(kernel, body=_Squeeze(scalar).body(kernel.body))


class _Squeeze:
    def __init__(self, scalar: dict[str, S.Axis]):
        self.scalar = scalar
        self.done: dict[int, S.TExpr] = {}  # by id: expressions share subtrees

    def body(self, stmts) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, S.For):
                s = replace(s, body=self.body(s.body))
            elif isinstance(s, (S.Assign, S.Store)):
                s = replace(s, value=self.texpr(s.value))
            elif isinstance(s, S.Scatter):
                s = replace(s, value=self.texpr(s.value), subscripts=tuple(self.texpr(e) for e in s.subscripts))
            out.append(s)
        return tuple(out)

    def kept(self, axes) -> tuple[str, ...]:
        return tuple(a for a in axes if a not in self.scalar)

    def texpr(self, e: S.TExpr) -> S.TExpr:
        # iterative post-order: expressions may nest deeper than Python's recursion allows
        stack = [(e, False)]
        while stack:
            node, children_done = stack.pop()
            if id(node) in self.done:
                continue
            kids = S.texpr_children(node)
            if children_done or not kids:
                self.done[id(node)] = self.rebuilt(node, tuple(self.done[id(k)] for k in kids))
            else:
                stack.append((node, True))
                stack += ((k, False) for k in kids if id(k) not in self.done)
        return self.done[id(e)]

    def rebuilt(self, e: S.TExpr, kids: tuple[S.TExpr, ...]) -> S.TExpr:
        if isinstance(e, S.IndexOf) and e.axis in self.scalar:
            return S.Index(self.scalar[e.axis].start, e.dtype)
        if isinstance(e, S.Mask) and e.axis in self.scalar:
            raise AssertionError(f"a mask of always-valid axis {e.axis}")
        if isinstance(e, (S.Load, S.Gather)):
            e = replace(e, order=self.kept(e.order))
        elif isinstance(e, S.Full):
            e = replace(e, axes=self.kept(e.axes))
        elif isinstance(e, S.Ref):
            e = replace(e, ref_dims=self.kept(e.ref_dims), ref_unit=frozenset(self.kept(e.ref_unit)))
        e = S.with_children(e, kids) if kids else e
        if isinstance(e, S.Expand):
            target = self.kept(e.target)
            return e.x if target == e.x.dims else replace(e, target=target)
        if isinstance(e, S.BroadcastTo) and not e.x.unit:
            return e.x
        if isinstance(e, (S.Reduce, S.Scan)) and e.axis in self.scalar:
            return e.x  # one lane, always valid
        return _numbers_unexpanded(e)


def _numbers_unexpanded(e: S.TExpr) -> S.TExpr:
    """e with its operands that are numbers expanded to tiles (an index that was a scalar axis's
    lanes) left as numbers where that changes nothing: a gather's subscripts, and an element-wise
    operand next to one that spans the result's axes (it broadcasts)."""
    if not isinstance(e, (S.Gather, S.Binary, S.Where)):
        return e
    kids = S.texpr_children(e)
    bare = tuple(k.x if isinstance(k, S.Expand) and not k.x.dims else k for k in kids)
    if bare == kids:
        return e
    simpler = S.with_children(e, bare)
    return simpler if isinstance(e, S.Gather) or (simpler.dims, simpler.unit) == (e.dims, e.unit) else e
