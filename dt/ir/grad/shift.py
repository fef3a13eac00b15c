"""Funcs whose gradient is zero because no output changes when they shift: a softmax's max.

`m[x] = rmax(s[x, y], y)` enters a softmax only as the shift of `exp(s - m)`, which every output
divides out again (`e / rsum(e)`, `log(rsum(e)) + m`): the outputs are the same for any value of
`m[x]`, so its adjoint is exactly zero. Derived by the chain rule it is a sum that cancels only
numerically (two more passes over each row, and for an rmax its ties), so `reverse` leaves such
Funcs out, as PyTorch's softmax backward does.

The test follows one Func `m` through the definitions. When each `m[i]` becomes `m[i] + c[i]`
(any c), each expression's value is
- `INVARIANT`: unchanged;
- `Shifted(a, at)`: the value plus a * c[at] (`s - m`: a = -1);
- `Scaled(p, at)`: the value times exp(c[at]) ** p (`exp(s - m)`: p = -1): a sum or product
  over a dimension `at` does not hold keeps it, and a ratio of two such values of one p cancels;
- `ZERO` (the constant 0: invariant and any Scaled) or `INFINITE` (±inf: also any Shifted);
- None: anything else (the test fails).
`at` is the element of m shifted, as subscripts over the expression's own dimensions: values
shifted by different elements of m never combine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dt.dtypes import is_integer
from dt.ir import algorithm as A

INVARIANT, ZERO, INFINITE = "invariant", "zero", "infinite"
FIXED = (INVARIANT, ZERO, INFINITE)  # values that do not move
ANY = "any"  # the power or the shift of a constant that takes every one


@dataclass(frozen=True, eq=False)
class Shifted:
    a: Fraction  # exact: coefficients that cancel must come out 0, not 1e-16
    at: tuple[A.Expr, ...]


@dataclass(frozen=True, eq=False)
class Scaled:
    p: Fraction
    at: tuple[A.Expr, ...]


def shift_invariant(funcs: list[A.FuncDef], outputs, candidates) -> set[str]:
    """The Funcs among `candidates` that none of `outputs` changes with. funcs: the definitions
    the outputs need, producers first, each element-wise or one reduction."""
    if any(f.update is not None for f in funcs):
        return set()
    dims = {f.name: f.dims for f in funcs}
    found = set()
    for m in funcs:
        if m.name not in candidates or m.name in outputs:
            continue
        classes: dict[str, object] = {}
        for f in funcs:
            classes[f.name] = Shifted(Fraction(1), tuple(A.DimRef(d) for d in f.dims)) if f is m else \
                _Classify(m.name, classes, dims).of(f.expr)
        if all(classes.get(o) in (INVARIANT, ZERO) for o in outputs):
            found.add(m.name)
    return found


def _shift(c):
    """(a, at) for a value that is shifted by a (0 when invariant), else None."""
    if c in (INVARIANT, ZERO):
        return Fraction(0), None
    if c == INFINITE:
        return ANY, None
    return (c.a, c.at) if isinstance(c, Shifted) else None


def _scale(c):
    """(p, at) for a value that is scaled by a power p (0 when invariant), else None."""
    if c == INVARIANT:
        return Fraction(0), None
    if c in (ZERO, INFINITE):
        return ANY, None
    return (c.p, c.at) if isinstance(c, Scaled) else None


def _at(x, y):
    """The element both are shifted by (None: neither is); False where they differ."""
    if x is None or y is None:
        return y if x is None else x
    return x if len(x) == len(y) and all(A.same(i, j) for i, j in zip(x, y)) else False


def _shifted(a, at):
    return INFINITE if a == ANY else INVARIANT if a == 0 else Shifted(a, at)


def _scaled(p, at):
    return ZERO if p == ANY else INVARIANT if p == 0 else Scaled(p, at)


def _sum(x, y, sign: int):
    """x + sign * y."""
    sx, sy = _shift(x), _shift(y)
    if sx and sy and (at := _at(sx[1], sy[1])) is not False:
        a = ANY if ANY in (sx[0], sy[0]) else sx[0] + sign * sy[0]
        return _shifted(a, at)
    return _either(x, y)


def _either(x, y):
    """The class of a value that is x or y (a where's branches, maximum): the class both have."""
    for view, make in ((_shift, _shifted), (_scale, _scaled)):
        vx, vy = view(x), view(y)
        if not (vx and vy) or (at := _at(vx[1], vy[1])) is False:
            continue
        if vx[0] == ANY:
            return make(vy[0], at)
        if vy[0] in (ANY, vx[0]):
            return make(vx[0], at)
    return None


def _product(x, y, sign: int):
    """x * y (sign 1) or x / y (sign -1)."""
    if sign < 0 and y in (ZERO, INFINITE):
        return None  # x / inf is 0 whatever x is; x / 0 is not a value
    px, py = _scale(x), _scale(y)
    if px and py and (at := _at(px[1], py[1])) is not False:
        if ZERO in (x, y) and INFINITE not in (x, y):
            return ZERO
        return INFINITE if ANY in (px[0], py[0]) else _scaled(px[0] + sign * py[0], at)
    return None


class _Classify:
    def __init__(self, m: str, classes: dict, dims: dict):
        self.m, self.classes, self.dims = m, classes, dims

    def of(self, e: A.Expr):
        if isinstance(e, A.Num):
            return ZERO if e.value == 0 else INFINITE if math.isinf(e.value) else INVARIANT
        if isinstance(e, (A.ScalarRef, A.DimRef, A.Len)):
            return INVARIANT
        if isinstance(e, A.Access):
            return self.access(e)
        if isinstance(e, A.Stored):
            return self.of(e.x)
        if isinstance(e, A.Unary):
            return self.unary(e.op, self.of(e.x))
        if isinstance(e, A.Binary):
            return self.binary(e, self.of(e.a), self.of(e.b))
        if isinstance(e, A.Where):
            return _either(self.of(e.a), self.of(e.b)) if self.of(e.cond) in FIXED else None
        if isinstance(e, A.Cast):
            x = self.of(e.x)
            return x if not is_integer(e.dtype) or x == INVARIANT else None
        if isinstance(e, (A.Reduce, A.Scan)):
            return self.reduce(e)
        return None

    def access(self, e: A.Access):
        if any(self.of(s) not in FIXED for s in e.subscripts if not isinstance(s, A.DimRef)):
            return None  # a gather through a value that moves
        if e.kind != "func":
            return INVARIANT
        if e.name == self.m:
            return Shifted(Fraction(1), e.subscripts)
        c = self.classes.get(e.name, INVARIANT)
        if not isinstance(c, (Shifted, Scaled)):
            return c
        at = tuple(A.substitute_dims(i, dict(zip(self.dims[e.name], e.subscripts))) for i in c.at)
        return Shifted(c.a, at) if isinstance(c, Shifted) else Scaled(c.p, at)

    def unary(self, op: str, x):
        if x in (INVARIANT, None) or op == "neg" and x in (ZERO, INFINITE):
            return x
        if op == "neg":
            return Shifted(-x.a, x.at) if isinstance(x, Shifted) else x
        if op == "exp" and isinstance(x, Shifted):
            return Scaled(x.a, x.at)
        if op == "log" and isinstance(x, Scaled):
            return Shifted(x.p, x.at)
        if isinstance(x, Scaled) and op in ("abs", "sqrt", "rsqrt"):
            return Scaled(x.p * {"abs": 1, "sqrt": Fraction(1, 2), "rsqrt": Fraction(-1, 2)}[op], x.at)
        return INVARIANT if x in FIXED else None

    def binary(self, e: A.Binary, x, y):
        if x is None or y is None:
            return None
        if e.op in ("+", "-"):
            return _sum(x, y, 1 if e.op == "+" else -1)
        if e.op in ("*", "/"):
            constant = e.b if isinstance(e.b, A.Num) else e.a if isinstance(e.a, A.Num) and e.op == "*" else None
            moved = y if constant is e.a else x
            if isinstance(moved, Shifted) and constant is not None and constant.value != 0 \
                    and math.isfinite(constant.value):  # (s - m) * 0.5
                factor = Fraction(constant.value) if e.op == "*" else 1 / Fraction(constant.value)
                return Shifted(moved.a * factor, moved.at)
            return _product(x, y, 1 if e.op == "*" else -1)
        if e.op == "pow" and isinstance(e.b, A.Num) and math.isfinite(e.b.value) and isinstance(x, Scaled):
            return _scaled(x.p * Fraction(e.b.value), x.at)
        if e.op in ("maximum", "minimum"):
            return _either(x, y)
        if e.op in ("<", "<=", ">", ">=", "==", "!="):  # order kept by a shift and a positive scale
            return INVARIANT if _either(x, y) is not None else None
        return INVARIANT if x == y == INVARIANT else None

    def reduce(self, e):
        body = e.x if isinstance(e, A.Scan) else e.args[0]
        x = self.of(body) if e.op != "dot" else _product(self.of(e.args[0]), self.of(e.args[1]), 1)
        if x is None or isinstance(x, (Shifted, Scaled)) and any(e.dim in A.free_dims(i) for i in x.at):
            return None  # combines elements shifted by different amounts
        if e.op in ("argmax", "argmin", "argtopk"):
            return INVARIANT
        if e.op in ("max", "min"):
            return x
        if e.op in ("sum", "dot"):
            return None if isinstance(x, Shifted) else x
        return x if x == INVARIANT else None
