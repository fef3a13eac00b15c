"""Reverse-mode rules: for each element-wise op of dt.ir.ops, its operands' adjoints given the
adjoint `g` flowing into its result `y` (JAX's per-primitive rules, on the algorithm IR).

A rule returns one expression per operand, or None where no gradient flows (comparisons, floor,
an integer cast, a where's condition). Ties go where PyTorch sends them: `maximum`/`minimum` split
the gradient evenly between equal operands, `abs` gives 0 at 0.
"""
from __future__ import annotations

import math

from dt.ir import algorithm as A

LN2 = math.log(2.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def num(value: float) -> A.Num:
    return A.Num(float(value))


def _is(e: A.Expr, value: float) -> bool:
    return isinstance(e, A.Num) and e.value == value


def add(a: A.Expr | None, b: A.Expr | None) -> A.Expr | None:
    if a is None or _is(a, 0):
        return b
    if b is None or _is(b, 0):
        return a
    if isinstance(b, A.Unary) and b.op == "neg":
        return A.Binary("-", a, b.x)
    return A.Binary("+", a, b)


def mul(a: A.Expr, b: A.Expr) -> A.Expr:
    if _is(a, 1):
        return b
    if _is(b, 1):
        return a
    if _is(a, -1):
        return neg(b)
    if _is(b, -1):
        return neg(a)
    return A.Binary("*", a, b)


def div(a: A.Expr, b: A.Expr) -> A.Expr:
    return a if _is(b, 1) else A.Binary("/", a, b)


def neg(a: A.Expr) -> A.Expr:
    if isinstance(a, A.Unary) and a.op == "neg":
        return a.x
    if isinstance(a, A.Num):
        return A.Num(-a.value, integer=a.integer)
    return A.Unary("neg", a)


def call(op: str, *args: A.Expr) -> A.Expr:
    return A.elementwise(op, args)


def _sign(x: A.Expr) -> A.Expr:  # 1, -1, or 0 at 0: comparisons are 1.0/0.0 as numbers
    return A.Binary("-", A.Binary(">", x, num(0)), A.Binary("<", x, num(0)))


def _split(a: A.Expr, b: A.Expr, g: A.Expr, wins: str) -> A.Expr:
    """The share of `g` that goes to `a` of maximum(a, b) (wins '>') or minimum (wins '<'):
    all of it where a wins, half where they tie (as PyTorch's maximum/minimum)."""
    return call("where", A.Binary(wins, a, b), g, call("where", A.Binary("==", a, b), mul(g, num(0.5)), num(0)))


# op -> rule(x, y, g): the adjoint of the operand x of y = op(x)
UNARY = {
    "neg": lambda x, y, g: neg(g),
    "exp": lambda x, y, g: mul(g, y),
    "exp2": lambda x, y, g: mul(mul(g, y), num(LN2)),
    "log": lambda x, y, g: div(g, x),
    "log2": lambda x, y, g: div(g, mul(x, num(LN2))),
    "sqrt": lambda x, y, g: div(g, mul(num(2), y)),
    "rsqrt": lambda x, y, g: mul(mul(g, num(-0.5)), mul(y, mul(y, y))),
    "sigmoid": lambda x, y, g: mul(g, mul(y, A.Binary("-", num(1), y))),
    "tanh": lambda x, y, g: mul(g, A.Binary("-", num(1), mul(y, y))),
    "abs": lambda x, y, g: mul(g, _sign(x)),
    "erf": lambda x, y, g: mul(mul(g, num(TWO_OVER_SQRT_PI)), call("exp", neg(mul(x, x)))),
    "sin": lambda x, y, g: mul(g, call("cos", x)),
    "cos": lambda x, y, g: neg(mul(g, call("sin", x))),
    "floor": lambda x, y, g: None,
    "ceil": lambda x, y, g: None,
    "softplus": lambda x, y, g: mul(g, call("sigmoid", x)),
}

# op -> rule(a, b, y, g): the adjoints of the operands a and b of y = op(a, b)
BINARY = {
    "+": lambda a, b, y, g: (g, g),
    "-": lambda a, b, y, g: (g, neg(g)),
    "*": lambda a, b, y, g: (mul(g, b), mul(g, a)),
    "/": lambda a, b, y, g: (div(g, b), neg(div(mul(g, a), mul(b, b)))),
    "maximum": lambda a, b, y, g: (_split(a, b, g, ">"), _split(b, a, g, ">")),
    "minimum": lambda a, b, y, g: (_split(a, b, g, "<"), _split(b, a, g, "<")),
    # as PyTorch at a base of 0: no gradient to the base where the exponent is 0, none to the
    # exponent where the base is 0 and the exponent not negative (not the NaN of 0 * log(0))
    "pow": lambda a, b, y, g: (call("where", A.Binary("==", b, num(0)), num(0),
                                    mul(mul(g, b), call("pow", a, A.Binary("-", b, num(1))))),
                               call("where", A.Binary("*", A.Binary("==", a, num(0)), A.Binary(">=", b, num(0))),
                                    num(0), mul(mul(g, y), call("log", a)))),
    "//": lambda a, b, y, g: (None, None),
    "%": lambda a, b, y, g: (g, neg(mul(g, call("floor", div(a, b))))),
    **{op: (lambda a, b, y, g: (None, None)) for op in ("<", "<=", ">", ">=", "==", "!=")},
}
