"""The gradient of a read at an index expression (not a shift or a rotation: reverse._shift). Where
it can be solved for its dimensions (`solved_read`), each element gets what reached the indices that
read it, read at the solution; otherwise (`masked`) the sum over the read's dimensions of
where(index == axis, ...), which reads the adjoint once per element of the axis (group norm's
gradient took that form and summed every channel for each one: a factor of the channel count).
The solved forms:

- `X[g * len(cg) + cg]` (a group's member, g and cg read nowhere else in the subscripts): X[c]
  gets what reached g = c // len(cg), cg = c % len(cg), where c < len(g) * len(cg);
- `X[a * i + o]` (a stride a > 1, an offset o without dimensions): X[c] gets what reached
  i = (c - o) // a, where (c - o) % a == 0 and 0 <= (c - o) // a < len(i);
- `X[c // len(r)]` (r a dimension the read does not have: a run of len(r) elements reads one):
  X[g] gets the sum over r of what reached c = g * len(r) + r, where that is < len(c).
Each axis named after a dimension the read does not have (as `masked` requires); an occurrence of
the subscript itself in the adjoint becomes that axis (`X[b, g * len(cg) + cg, p]` reads X[b, c, p]).
"""
from __future__ import annotations

from dataclasses import dataclass

from dt.errors import DTError
from dt.ir import algorithm as A
from dt.ir.grad import rules
from dt.ir.grad.rules import num


@dataclass(frozen=True)
class SolvedRead:
    dims: tuple[str, ...]  # the gradient's dimensions, one per axis read
    solved_dims: frozenset[str]  # the read's dimensions the solution replaces
    adjoint: A.Expr  # what reached the read, at the solution (0 where none is)
    product: tuple[A.Expr, A.Expr] | None  # the adjoint as a product's two factors, where it is one


def _integer(value: int) -> A.Num:
    return A.Num(value, integer=True)


def _all(conditions: list[A.Expr]) -> A.Expr:
    out = conditions[0]
    for c in conditions[1:]:
        out = A.Binary("*", out, c)
    return out


def minus(x: A.Expr, offset: A.Expr) -> A.Expr:
    """x - offset, written x + 2 for an offset of -2 (not x - -2)."""
    if isinstance(offset, A.Unary) and offset.op == "neg" or isinstance(offset, A.Num) and offset.value < 0:
        return A.Binary("+", x, rules.neg(offset))
    return A.Binary("-", x, offset)


def _radix(sub: A.Expr, context) -> tuple[str, str] | None:
    """(g, cg) for `g * len(cg) + cg` (in either order of terms and factors)."""
    terms = A.signed_terms(sub)
    if len(terms) != 2 or any(sign != 1 for sign, _ in terms):
        return None
    for (_, scaled), (_, member) in (terms, terms[::-1]):
        if not (isinstance(member, A.DimRef) and isinstance(scaled, A.Binary) and scaled.op == "*"):
            continue
        for group, size in ((scaled.a, scaled.b), (scaled.b, scaled.a)):
            if isinstance(group, A.DimRef) and isinstance(size, A.Len) and size.dim == member.dim != group.dim \
                    and {group.dim, member.dim} <= set(context):
                return group.dim, member.dim
    return None


def _stride(sub: A.Expr, context) -> tuple[str, A.Expr, A.Expr | None] | None:
    """(i, a, o) for `a * i + o`: a an integer constant above 1, o terms without dimensions or reads."""
    terms = A.signed_terms(sub)
    moving = [(s, t) for s, t in terms if A.free_dims(t)]
    if len(moving) != 1 or moving[0][0] != 1 or not isinstance(moving[0][1], A.Binary) or moving[0][1].op != "*":
        return None
    scaled = moving[0][1]
    for i, a in ((scaled.a, scaled.b), (scaled.b, scaled.a)):
        if isinstance(i, A.DimRef) and i.dim in context and isinstance(a, A.Num) and a.integer and a.value > 1:
            offset = None
            for s, t in terms:
                if t is scaled:
                    continue
                if any(isinstance(n, A.Access) for n in A.walk(t)):
                    return None
                offset = (t if s == 1 else rules.neg(t)) if offset is None else A.Binary("+" if s == 1 else "-", offset, t)
            return i.dim, a, offset
    return None


def solved_read(access: A.Access, context: tuple[str, ...], own: tuple[str, ...], g: A.Expr,
                product: tuple[A.Expr, A.Expr] | None) -> SolvedRead | None:
    """What reached `access` (g over `context`, or the product of two factors) as the gradient of
    the tensor it reads, where each subscript is a bare dimension or one of the forms above; None
    otherwise, and where a reduction or scan in g runs along a dimension the solution replaces or
    introduces (it would capture the substituted one)."""
    dims: list[str] = []
    solved_dims: set[str] = set()
    exact: list[tuple[A.Expr, str]] = []  # a subscript, the axis it becomes
    to: dict[str, A.Expr] = {}  # a dimension of the read -> its value at an element of the axis
    guards: list[A.Expr] = []
    sums: list[str] = []  # dimensions summed over (a run read one element)
    taken = {d for sub in access.subscripts for d in A.free_dims(sub)}
    for sub, axis in zip(access.subscripts, own):
        if isinstance(sub, A.DimRef) and sub.dim in context and sub.dim not in dims and sub.dim not in solved_dims:
            dims.append(sub.dim)
            continue
        if axis in context or axis in dims or axis in taken:
            return None
        x = A.DimRef(axis)
        if radix := _radix(sub, context):
            group, member = radix
            to[group] = A.Binary("//", x, A.Len(member))
            to[member] = A.Binary("%", x, A.Len(member))
            guards.append(A.Binary("<", x, A.Binary("*", A.Len(group), A.Len(member))))
            found = {group, member}
        elif stride := _stride(sub, context):
            i, a, offset = stride
            at = x if offset is None else minus(x, offset)
            to[i] = A.Binary("//", at, a)
            guards += [A.Binary("==", A.Binary("%", at, a), _integer(0))] + \
                ([A.Binary(">=", at, _integer(0))] if offset is not None else []) + \
                [A.Binary("<", A.Binary("//", at, a), A.Len(i))]
            found = {i}
        elif isinstance(sub, A.Binary) and sub.op == "//" and isinstance(sub.a, A.DimRef) and isinstance(sub.b, A.Len) \
                and sub.a.dim in context and sub.b.dim not in context and sub.b.dim not in taken | set(sums) | {axis}:
            run = sub.b.dim
            element = A.Binary("+", A.Binary("*", x, A.Len(run)), A.DimRef(run))
            to[sub.a.dim] = element
            guards.append(A.Binary("<", element, A.Len(sub.a.dim)))
            sums.append(run)
            found = {sub.a.dim}
        else:
            return None
        if found & (solved_dims | set(dims)) or sum(d in found for s in access.subscripts
                                                    for d in A.free_dims(s)) != len(found):
            return None  # a dimension read by two subscripts
        solved_dims |= found
        exact.append((sub, axis))
        dims.append(axis)
    if not exact:
        return None
    moved = set(to) | {axis for _, axis in exact} | set(sums)
    if any(isinstance(n, (A.Reduce, A.Scan)) and n.dim in moved
           for e in (g, *(product or ())) for n in A.walk(e)):
        return None
    guard = _all(guards)
    adjoint = rules.call("where", guard, _at(g, exact, to), num(0))
    for run in sums:
        adjoint = A.Reduce("sum", (adjoint,), run)
    if product is not None and not sums:  # still a product: it reaches the matrix units
        product = (rules.call("where", guard, _at(product[0], exact, to), num(0)), _at(product[1], exact, to))
    return SolvedRead(tuple(dims), frozenset(solved_dims), adjoint, None if sums else product)


def _at(e: A.Expr, exact: list[tuple[A.Expr, str]], to: dict[str, A.Expr]) -> A.Expr:
    """e with each subscript of `exact` replaced by its axis, and each dimension of `to` by its value."""
    for sub, axis in exact:
        if A.same(e, sub):
            return A.DimRef(axis)
    if isinstance(e, A.DimRef) and e.dim in to:
        return to[e.dim]
    kids = A.children(e)
    return A.rebuild(e, tuple(_at(k, exact, to) for k in kids)) if kids else e


def masked(access: A.Access, context, own) -> tuple[A.Expr, list[str]]:
    """(the condition that each computed subscript equals the index of its axis, a dimension
    named after the axis; the dimensions of the read). The adjoint where it holds, 0 elsewhere,
    summed over the other dimensions, is the gradient of a read at any index expression. It
    reads the adjoint once per element of the axis (a scatter-add would not): correct for any
    index without a gather, costly on long axes."""
    dims, equal = [], []
    for sub, axis in zip(access.subscripts, own):
        if isinstance(sub, A.DimRef) and sub.dim in context and sub.dim not in dims:
            dims.append(sub.dim)
            continue
        if axis in context or axis in dims:  # the axis is named after a dimension the read sums over
            raise DTError(f"the gradient through {access.text} is not derived yet: its axis along '{axis}' is read "
                          f"at an index of '{axis}' itself", access.loc,
                          f"read it at '{axis}' plus or minus an offset, rotated ('({axis} + offset) % len({axis})', the "
                          f"offset without '{axis}'), or at an index of other dimensions")
        dims.append(axis)
        equal.append(A.Binary("==", sub, A.DimRef(axis)))
    return (_all(equal) if equal else None), dims
