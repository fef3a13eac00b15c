"""Index expressions: the integer arithmetic of the scheduled IR (extents, program ids, block starts,
loop bounds), built through helpers (`iadd`, `imul`, ...) that fold constants and identities such
as x + 0 and x * 1 as they build."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class IConst:
    value: int


@dataclass(frozen=True)
class IVar:
    """A named integer: an extent `x_SIZE`, `pid`, a Let-bound name or a loop variable."""
    name: str


@dataclass(frozen=True)
class IBin:
    op: str  # '+', '-', '*', '//', '%', 'min', 'max'
    a: "IExpr"
    b: "IExpr"


IExpr = Union[IConst, IVar, IBin]


def iconst(v) -> IExpr:
    return v if isinstance(v, (IConst, IVar, IBin)) else IConst(int(v))


def iadd(a, b) -> IExpr:
    a, b = iconst(a), iconst(b)
    if a == IConst(0):
        return b
    if b == IConst(0):
        return a
    if isinstance(a, IConst) and isinstance(b, IConst):
        return IConst(a.value + b.value)
    return IBin("+", a, b)


def isub(a, b) -> IExpr:
    a, b = iconst(a), iconst(b)
    if b == IConst(0):
        return a
    if a == b:
        return IConst(0)
    if isinstance(a, IConst) and isinstance(b, IConst):
        return IConst(a.value - b.value)
    return IBin("-", a, b)


def imul(a, b) -> IExpr:
    a, b = iconst(a), iconst(b)
    if a == IConst(1):
        return b
    if b == IConst(1):
        return a
    if IConst(0) in (a, b):
        return IConst(0)
    if isinstance(a, IConst) and isinstance(b, IConst):
        return IConst(a.value * b.value)
    return IBin("*", a, b)


def ifloordiv(a, b) -> IExpr:
    a, b = iconst(a), iconst(b)
    if b == IConst(1):
        return a
    if isinstance(a, IConst) and isinstance(b, IConst):
        return IConst(a.value // b.value)
    return IBin("//", a, b)


def imin(a, b) -> IExpr:
    a, b = iconst(a), iconst(b)
    if isinstance(a, IConst) and isinstance(b, IConst):
        return IConst(min(a.value, b.value))
    return IBin("min", a, b)


def imax(a, b) -> IExpr:
    a, b = iconst(a), iconst(b)
    if isinstance(a, IConst) and isinstance(b, IConst):
        return IConst(max(a.value, b.value))
    return IBin("max", a, b)


def icdiv(a, b) -> IExpr:
    return ifloordiv(iadd(a, isub(b, 1)), b)


def evaluate_index(e: IExpr, env: dict[str, int]) -> int:
    """Evaluate an index expression with Python integers (a reference for backends)."""
    if isinstance(e, IConst):
        return e.value
    if isinstance(e, IVar):
        return env[e.name]
    a, b = evaluate_index(e.a, env), evaluate_index(e.b, env)
    return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0, "%": a % b if b else 0,
            "min": min(a, b), "max": max(a, b)}[e.op]


def index_names(e: IExpr | None) -> set[str]:
    if isinstance(e, IVar):
        return {e.name}
    if isinstance(e, IBin):
        return index_names(e.a) | index_names(e.b)
    return set()


def renamed(e: IExpr, rename) -> IExpr:
    """`e` with each variable's name replaced by `rename(name)`."""
    if isinstance(e, IVar):
        return IVar(rename(e.name))
    if isinstance(e, IBin):
        return IBin(e.op, renamed(e.a, rename), renamed(e.b, rename))
    return e


_INDEX_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}


def index_source(e: IExpr, minimum: str = "min", parent: int = 0) -> str:
    """Python source of an index expression (what every backend and the IR printer write);
    `minimum` names the min function to call."""
    if isinstance(e, IConst):
        return str(e.value)
    if isinstance(e, IVar):
        return e.name
    if e.op in ("min", "max"):
        fn = minimum if e.op == "min" else "max"
        return f"{fn}({index_source(e.a, minimum)}, {index_source(e.b, minimum)})"
    p = _INDEX_PRECEDENCE[e.op]
    left = index_source(e.a, minimum, p)
    right = index_source(e.b, minimum, p)
    # The right operand needs parentheses unless it is the same associative operator.
    if isinstance(e.b, IBin) and e.b.op in _INDEX_PRECEDENCE and _INDEX_PRECEDENCE[e.b.op] == p \
            and not (e.b.op == e.op and e.op in ("+", "*")):
        right = f"({right})"
    text = f"{left} {e.op} {right}"
    return f"({text})" if p < parent else text
