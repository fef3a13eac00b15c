"""Scales taken out of products: `rdot(a[m, n] / s[m], b[l, n], n)` is `rdot(a, b, n) / s[m]`.

A factor of an operand that does not vary along the reduced dimension (a row's normaliser, a
weight's per-channel scale, a constant) multiplies every term of the sum alike, so it applies
once to the result instead of to every element of the operand's tile: the operand then loads
straight into the matrix units in its stored dtype (no float32 division and conversion per tile,
no rounding of the scaled value to that dtype), as attention's backward does with its
`grad_attention / dvsr` and an int8 weight's dequantisation does with its scale. A divisor
applies as its reciprocal, `rdot(a, b, n) * (1 / s[m])`: one division a row, not one a lane
(on a GPU a division takes the special-function unit the exponentials of attention's backward
wait for: 5-10% of its time on an H200). A factor that
does vary along the reduced dimension moves from a tensor read to the other operand, where that
one is computed anyway (`_onto_computed`). A factor computed inside the product's own loop (a
Func fused there) stays, and an exponential shifted by a max accumulated in the same loop
(compute_with) takes no factor: the online rescaling needs it as written. Applied to the lowering's
copy of the algorithm only: the reference computes what the program says. A product whose
operands are int8 data only once a factor is out (`rdot(Xq[m, k] * S[m], Wq[n, k], k)`) stays a
float product, its first operand converted to f32 (exact): an integer one would wrap in i32.
"""
from __future__ import annotations

import dataclasses

from dt.ir import algorithm as A
from dt.ir.check.statistics import shifted_exponential
from dt.ir.check.program import CheckedProgram


def factor_product_scales(cp: CheckedProgram, integer_dot) -> CheckedProgram:
    """cp with its products' scales taken out; `integer_dot`: whether a product multiplies as integers."""
    fused = {name: dim for name, (_, dim) in cp.fused.items()}  # a Func fused at a loop over dim
    # maxima accumulated online (compute_with): an exponential they shift keeps its form
    online: dict[str, frozenset[str]] = {}  # the reduced dim -> the Funcs sharing a loop over it
    for (owner, dim), members in cp.computed_with.items():
        online[dim] = online.get(dim, frozenset()) | {owner, *members}
    funcs = {n: dataclasses.replace(f, expr=_factored(f.expr, fused, online, integer_dot))
             for n, f in cp.funcs.items()}
    return dataclasses.replace(cp, funcs=funcs)


def _factored(e: A.Expr, fused: dict[str, str], online: dict[str, frozenset[str]], integer_dot) -> A.Expr:
    """e with each product's scales outside it; subtrees with none are kept, shared as they were."""
    def step(e):
        kids = () if isinstance(e, A.Access) else A.children(e)
        new = []
        for k in kids:
            new.append((yield k))
        if any(n is not k for n, k in zip(new, kids)):
            e = A.rebuild(e, tuple(new))
        return _factor(e, fused, online, integer_dot) if isinstance(e, A.Reduce) and e.op == "dot" else e
    return A.recurse(step, e)


def _factor(e: A.Reduce, fused: dict[str, str], online: dict[str, frozenset[str]], integer_dot) -> A.Expr:
    cores, scales = [], []
    for x in e.args:
        core, found = A.constant_factors(x, e.dim)
        if any(_reads(f, {n for n, d in fused.items() if d == e.dim}) for _, f in found):
            # computed inside the product's own loop: it stays there
            core, found = x, []
        cores.append(core)
        scales += found
    cores = _onto_computed(cores, online.get(e.dim, frozenset()))
    if not scales and all(c is x for c, x in zip(cores, e.args)):
        return e
    if integer_dot(A.Reduce(e.op, tuple(cores), e.dim)) and not integer_dot(e):
        cores[0] = A.Cast(cores[0], "f32")  # int8 data a factor made a float product stays one
    out: A.Expr = A.Reduce(e.op, tuple(cores), e.dim, e.loc, e.dim_loc, e.dim_decl, e.slot)
    for op, s in scales:
        # a divisor as its reciprocal: one division a row (or none: a constant), not one a lane. In
        # float32, 1 / s is 0 past |s| = 2**126 and inf for a subnormal s, where a / s may be finite:
        # a normaliser (a row sum, a scale) is neither
        out = A.Binary("*", out, A.Binary("/", A.Num(1.0), s)) if op == "/" else A.Binary(op, out, s)
    return out


def _onto_computed(operands: list[A.Expr], online: frozenset[str]) -> list[A.Expr]:
    """A factor of a tensor read (`grad_attention[m, n] / dvsr[m]`, varying along the reduced m)
    moved onto the other operand where that one is computed anyway and spans the factor's
    dimensions (`exp(s[m, l] - mx[m]) / dvsr[m]`): the read then loads straight into the product."""
    a, b = operands
    for i, (x, other) in enumerate(((a, b), (b, a))):
        if not (isinstance(x, A.Binary) and x.op in ("*", "/") and isinstance(x.a, A.Access)):
            continue
        online_exp = shifted_exponential(other) and _reads(other.x.b, online)
        if isinstance(other, A.Access) or online_exp or not A.free_dims(x.b) <= A.free_dims(other):
            continue  # (an online softmax's exp(e - mx) keeps its form: compute_with rescales it)
        # as a product, `other * (1 / s)`: a masked lane's 0 then still zeroes the term (skipping)
        factor = x.b if x.op == "*" else A.Binary("/", A.Num(1.0), x.b)
        moved = A.Binary("*", other, factor)
        return [x.a, moved] if i == 0 else [moved, x.a]
    return operands


def _reads(e: A.Expr, funcs) -> bool:
    return any(isinstance(n, A.Access) and n.kind == "func" and n.name in funcs for n in A.walk(e))
