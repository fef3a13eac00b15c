"""Subscripts: each is an integer index expression. Dimensions, integer constants, `len`, scalar
inputs and reads of input tensors (gathers) combine with the ops closed over integers (the op
table's `integer` flag: `+ - * // %`, `maximum`, `minimum`, `abs`, `-x`), `//` and `%` by a
positive divisor; a cast to an integer dtype makes any value an index. Whether a scalar or a
gathered tensor or Func holds integers is known only when the program is called (dt.ir.lower.types)."""
from __future__ import annotations

from dt.dtypes import INTEGERS
from dt.errors import DTTypeError
from dt.ir import algorithm as A
from dt.ir.ops import OPS


def check_subscripts(defs: dict[str, A.FuncDef]):
    for f in defs.values():
        for e in (n for x in f.exprs for n in A.walk(x)):
            if isinstance(e, A.Access):
                for s in e.subscripts:
                    _check_index(s, e)


def _check_index(s: A.Expr, access: A.Access):
    stack = [s]
    while stack:
        e = stack.pop()
        if isinstance(e, (A.DimRef, A.Len, A.ScalarRef)):
            continue
        if isinstance(e, A.Num):
            if not e.integer:
                raise DTTypeError(f"the index {A.expr_text(s)} of '{access.name}' is not an integer: {e.value!r} is "
                                  "a float", e.loc or access.loc, "write an integer constant")
        elif isinstance(e, A.Access):
            continue  # a gather through an input or a Func: integers, checked with the dtypes (dt.ir.lower.types)
        elif isinstance(e, A.Cast):
            if e.dtype not in INTEGERS:
                raise DTTypeError(f"the index {A.expr_text(s)} of '{access.name}' is cast to {e.dtype}, not an integer",
                                  e.loc or access.loc, "cast an index to an integer dtype, e.g. cast(..., i32)")
        elif isinstance(e, A.Binary) and e.op in ("//", "%"):
            _check_divisor(e, s, access)
            stack += [e.a, e.b]
        elif isinstance(e, (A.Unary, A.Binary)) and OPS[e.op].integer:
            stack += A.children(e)
        else:
            what = "'/' divides as floats" if isinstance(e, A.Binary) and e.op == "/" else \
                f"{A.expr_text(e)} is not integer arithmetic"
            raise DTTypeError(f"the index {A.expr_text(s)} of '{access.name}' is not an integer: {what}",
                              e.loc or access.loc, "a subscript is integer arithmetic of dimensions, integer constants, "
                                                   "len(...) and integer inputs: + - * // %")


def _check_divisor(e: A.Binary, s: A.Expr, access: A.Access):
    """`//` and `%` in a subscript divide by a positive integer: a constant, a len, an integer
    scalar, or `+ - * //` of those (`len(d) // 2`); one that is not positive by its form is
    checked when the program is called (call_divisor)."""
    stack = [e.b]
    while stack:
        d = stack.pop()
        if isinstance(d, (A.Len, A.ScalarRef)) or (isinstance(d, A.Num) and d.integer and
                                                   (d.value > 0 or d is not e.b)):
            continue  # not positive by its form: checked at the call
        if isinstance(d, A.Binary) and d.op in ("+", "-", "*", "//"):
            stack += [d.a, d.b]
            continue
        certainly = isinstance(d, A.Num) or (isinstance(d, A.Unary) and d.op == "neg" and isinstance(d.x, A.Num))
        raise DTTypeError(f"'{e.op}' in the index {A.expr_text(s)} of '{access.name}' divides by "
                          f"{A.expr_text(e.b)}, which {'is not' if certainly else 'may not be'} a positive integer",
                          e.loc or access.loc,
                          "divide by a positive integer constant, a len(...), an integer scalar, or + - * // of "
                          "those")


def call_divisor(e: A.Expr) -> bool:
    """Whether e is a subscript's `//` or `%` whose divisor a call must check is positive: one
    not positive by its form (`len(d) // 2` is 0 where len(d) is 1; a scalar may be anything)."""
    return isinstance(e, A.Binary) and e.op in ("//", "%") and not _positive(e.b)


def _positive(d: A.Expr) -> bool:
    if isinstance(d, (A.Len, A.Num)):
        return not isinstance(d, A.Num) or d.value > 0
    return isinstance(d, A.Binary) and d.op in ("+", "*") and _positive(d.a) and _positive(d.b)
