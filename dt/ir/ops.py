"""The op table: every element-wise operation and reduction of DT, defined once.

An `Op` gives an operation's name, arity, type rule and NumPy meaning. Everything else derives
from this table: the functions the DT grammar and the Python API accept, dt's reference
evaluator, the ops a backend can be asked for (`DT_OPS`), and the conformance suite's
element-wise cases. A backend supports exactly the keys of its own rendering table.

To add an element-wise function: one `Op` here (with its conformance checks), then one entry in
each backend's rendering table.

Each op has two NumPy formulas on purpose: `reference` is what dt's reference evaluator
computes; each `Check.expected` is the conformance suite's own (it tests the evaluator too), and
differs from `reference` wherever NumPy offers a second way to say it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dt.dtypes import INTEGERS, promote_integers

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Check:
    """One conformance case of an op: `out[x, y] = expression` over inputs A (and B), each drawn
    from its domain (a name of the suite's DOMAINS), compared with `expected(A[, B])`.
    `expression` None: the op applied to A[x, y] (and B[x, y])."""
    name: str
    expected: Callable
    domains: tuple[str, ...] = ("normal", "normal")
    expression: str | None = None


@dataclass(frozen=True)
class Op:
    """An element-wise operation.

    name       the IR's name ('exp', '+', '<', 'neg'); a DT function's name where it is one
    arity      the number of operands
    result     the type rule: 'float' (the operands' float type), 'bool' (a comparison or mask),
               or 'branches' (a where: the type of its second and third operands)
    reference  NumPy over float64 arrays: what dt's reference evaluator computes
    syntax     how DT writes it: 'function' (name(x, ...)), 'operator' (x + y, -x), or 'internal'
               (made only by the lowering: the mask logic 'not' and 'and')
    python     the Python API's function for an operator (dt.eq for ==), if it has one
    checks     the op's conformance cases
    integer    whether integer operands give an integer result (x + 1, i // 4); any other op
               computes integers as floats of the compute dtype (exp(i), i / 2)
    """
    name: str
    arity: int
    result: str
    reference: Callable
    syntax: str = "function"
    python: str = ""
    checks: tuple[Check, ...] = ()
    integer: bool = False

    @property
    def dt_function(self) -> bool:
        return self.syntax == "function"

    @property
    def api_name(self) -> str | None:
        """The Python API's function for this op (dt.exp, dt.eq), if it has one."""
        return self.python or (self.name if self.dt_function else None)


def _unary(name, reference, expected, domain="normal", **kw) -> Op:
    return Op(name, 1, "float", reference, checks=(Check(name, expected, (domain,)),), **kw)


def _binary(name, reference, expected, domains=("normal", "normal"), case="", integer=False) -> Op:
    """A function of two operands, or (with the `case` its conformance check is called) an operator."""
    return Op(name, 2, "float", reference, "operator" if case else "function",
              checks=(Check(case or name, expected, domains),), integer=integer)


def _comparison(name, reference, expected, case, python="") -> Op:
    return Op(name, 2, "bool", reference, "operator", python, (Check(case, expected, ("ints", "ints")),))


OPS_LIST: tuple[Op, ...] = (
    # ------------------------------------------------------------ one operand
    Op("neg", 1, "float", np.negative, "operator", checks=(Check("neg", lambda A: -A, ("normal",), "-A[x, y]"),),
       integer=True),
    _unary("exp", np.exp, lambda A: np.exp(A)),
    _unary("exp2", np.exp2, lambda A: 2.0 ** A),
    _unary("log", np.log, lambda A: np.log(A), "positive"),
    _unary("log2", np.log2, lambda A: np.log(A) / np.log(2.0), "positive"),
    _unary("sqrt", np.sqrt, lambda A: np.sqrt(A), "positive"),
    _unary("rsqrt", lambda x: 1.0 / np.sqrt(x), lambda A: A ** -0.5, "positive"),
    _unary("sigmoid", _sigmoid, lambda A: _sigmoid(A), "wide"),
    _unary("tanh", np.tanh, lambda A: np.tanh(A), "wide"),
    _unary("abs", np.abs, lambda A: np.where(A < 0, -A, A), integer=True),
    _unary("erf", _erf, lambda A: _erf(A)),
    _unary("sin", np.sin, lambda A: np.sin(A), "wide"),
    _unary("cos", np.cos, lambda A: np.cos(A), "wide"),
    _unary("floor", np.floor, lambda A: np.floor(A), "wide"),
    _unary("ceil", np.ceil, lambda A: -np.floor(-A), "wide"),
    _unary("softplus", lambda x: np.logaddexp(0.0, x), lambda A: np.maximum(A, 0) + np.log1p(np.exp(-np.abs(A))),
           "wide"),
    # ------------------------------------------------------------ arithmetic
    _binary("+", np.add, lambda A, B: A + B, case="add", integer=True),
    _binary("-", np.subtract, lambda A, B: A - B, case="sub", integer=True),
    _binary("*", np.multiply, lambda A, B: A * B, case="mul", integer=True),
    _binary("/", np.divide, lambda A, B: A / B, ("normal", "nonzero"), case="div"),
    # Floor division and its remainder, as in Python: the quotient rounds toward -inf and the
    # remainder takes the divisor's sign (Triton's and C's own truncate toward zero).
    _binary("//", np.floor_divide, lambda A, B: np.floor(A / B), ("integers", "divisors"), case="floordiv",
            integer=True),
    _binary("%", np.mod, lambda A, B: A - B * np.floor(A / B), ("integers", "divisors"), case="mod", integer=True),
    # ------------------------------------------------------------ functions of two operands
    _binary("maximum", np.maximum, lambda A, B: np.where(A > B, A, B), ("ints", "normal"), integer=True),
    _binary("minimum", np.minimum, lambda A, B: np.where(A < B, A, B), ("ints", "normal"), integer=True),
    _binary("pow", np.power, lambda A, B: np.exp(B * np.log(A)), ("positive", "normal")),
    # ------------------------------------------------------------ comparisons (true is 1 in a float result)
    _comparison("<", np.less, lambda A, B: A < B, "lt"),
    _comparison("<=", np.less_equal, lambda A, B: A <= B, "le"),
    _comparison(">", np.greater, lambda A, B: A > B, "gt"),
    _comparison(">=", np.greater_equal, lambda A, B: A >= B, "ge"),
    _comparison("==", np.equal, lambda A, B: A == B, "eq", python="eq"),
    _comparison("!=", np.not_equal, lambda A, B: A != B, "ne", python="ne"),
    # ------------------------------------------------------------ selection
    Op("where", 3, "branches", lambda c, a, b: np.where(c != 0, a, b), integer=True, checks=(
        Check("where", lambda A, B: np.where(A > B, A, B * 0.5), ("normal", "normal"),
              "where(A[x, y] > B[x, y], A[x, y], B[x, y] * 0.5)"),
        Check("where.number_condition", lambda A, B: np.where(A != 0, B, -B), ("ints", "normal"),
              "where(A[x, y], B[x, y], -B[x, y])"),
        Check("where.boolean_branches", lambda A, B: np.where(A > 0, A < B, A >= B), ("ints", "ints"),
              "where(A[x, y] > 0, A[x, y] < B[x, y], A[x, y] >= B[x, y])"))),
    # ------------------------------------------------------------ mask logic, made by the lowering
    Op("not", 1, "bool", np.logical_not, "internal"),
    Op("and", 2, "bool", np.logical_and, "internal"),
)

OPS: dict[str, Op] = {op.name: op for op in OPS_LIST}


@dataclass(frozen=True)
class Reduction:
    """A reduction over one dimension: `rsum(e, r)` is Reduction 'sum'.

    identity   what masked lanes hold
    combine    the element-wise op that merges two partial results
    reference  NumPy (array, axis=...) for dt's reference evaluator; a product's is an einsum
               over named axes, written there
    index      an arg-reduction: its result is the index (i64) along the dimension of the first
               lane where `combine` reaches its result, NaN counting as past every number (as
               torch.argmax and NumPy's argmax have it)
    """
    name: str
    function: str
    identity: float
    combine: str
    reference: Callable | None = None
    index: bool = False


REDUCTIONS: dict[str, Reduction] = {r.name: r for r in (
    Reduction("sum", "rsum", 0.0, "+", np.sum),
    Reduction("max", "rmax", float("-inf"), "maximum", np.max),
    Reduction("min", "rmin", float("inf"), "minimum", np.min),
    Reduction("dot", "rdot", 0.0, "+"),
    Reduction("argmax", "rargmax", float("-inf"), "maximum", np.argmax, index=True),
    Reduction("argmin", "rargmin", float("inf"), "minimum", np.argmin, index=True),
    # rargtopk(e, r, i): the indices of the len(i) largest, largest first (the reference: reference.py)
    Reduction("argtopk", "rargtopk", float("-inf"), "maximum", index=True),
)}
# Scans: the running form of a reduction, cumsum(e, v) the prefix sums of e along v (a pure
# dimension), each described as a Reduction is: identity, the op combining a running value with
# the next element, NumPy (array, axis=...) for the reference.
SCANS: dict[str, Reduction] = {r.name: r for r in (
    Reduction("sum", "cumsum", -0.0, "+", np.cumsum),  # -0.0 + x is x, for x = -0.0 too
    Reduction("prod", "cumprod", 1.0, "*", np.cumprod),
    Reduction("max", "cummax", float("-inf"), "maximum", np.maximum.accumulate),
    Reduction("min", "cummin", float("inf"), "minimum", np.minimum.accumulate),
)}

# The reductions the scheduled IR's `Reduce` node makes (products are `Dot`s; arg-reductions are
# lowered to these and element-wise ops)
TILE_REDUCTIONS = ("sum", "max", "min")

# The names DT text and the Python API call as functions, by arity.
FUNCTIONS: dict[str, Op] = {op.name: op for op in OPS_LIST if op.dt_function}
# Every op a DT program can ask a backend for (what `Capabilities.ops` lists): element-wise ops
# by name, reductions and scans by their DT function's name.
DT_OPS = frozenset(op.name for op in OPS_LIST if op.syntax != "internal") | frozenset(
    r.function for r in (*REDUCTIONS.values(), *SCANS.values()))


def result_dtype(op: str, operands: tuple[str, ...]) -> str:
    """The dtype of element-wise op `op` applied to values of dtypes `operands` ('bool' for a
    comparison or mask): alike operands keep their dtype; integers alone promote as torch's do;
    floats with others compute in f64 if any is f64, else f32 (as the lowering's arithmetic
    does, which makes the operands of an op not `integer` floats first)."""
    if op not in OPS:
        raise ValueError(f"'{op}' is not an op of dt.ir.ops")
    rule = OPS[op].result
    if rule == "bool":
        return "bool"
    kinds = set(operands[1:] if rule == "branches" else operands)
    if len(kinds) == 1:
        return kinds.pop()
    kinds.discard("bool")  # a comparison used as a number: the lowering casts it
    if len(kinds) == 1:
        return kinds.pop()
    floats = kinds - set(INTEGERS)
    if not floats:
        return promote_integers(kinds)
    if len(floats) == 1:
        return floats.pop()
    return "f64" if "f64" in floats else "f32"
