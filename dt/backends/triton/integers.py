"""Dtypes of tiles in generated Triton: which values Triton sees as Python numbers, which are
never negative, and the dtype each operand of an op must be given so that Triton computes what
DT means.

Triton types a Python number (a literal, or an extent, which is a `tl.constexpr`) weakly: it
takes the dtype of the tensor it meets (`int8_tile + 1` is int8, and raises where the number does
not fit; `bfloat16_tile * 0.5` is bfloat16), and combines signed and unsigned integers as C does
(`uint8 + int8` is uint8). DT promotes as torch does (`i8 + 1` is i32, `u8 + i8` is i16) and
computes a float op of mixed dtypes in f32 (dt.ir.ops.result_dtype): the renderer converts the
operands whose dtype Triton would not promote to the op's dtype itself (`needs_conversion`).
"""
from __future__ import annotations

from dt.dtypes import ITEM_BYTES, is_integer
from dt.ir import scheduled as S
from dt.ir.ops import result_dtype

SIGNED = ("i8", "i16", "i32", "i64")
UNSIGNED = ("u8", "bool")
FLOATS = ("f16", "bf16", "f32", "f64")


def weak(e: S.TExpr) -> bool:
    """Whether e renders as a Python number (literals and extents, and arithmetic of them only)."""
    if isinstance(e, (S.Literal, S.Extent)):
        return True
    return isinstance(e, (S.Unary, S.Binary)) and all(weak(c) for c in S.texpr_children(e))


def operand_dtype(e: S.Binary | S.Where) -> str | None:
    """The dtype e computes in, which its operands must have: its own for arithmetic and where,
    their common one for a comparison; None for logic on booleans."""
    if e.dtype != "bool":
        return e.dtype
    if isinstance(e, S.Binary) and "bool" not in (e.a.dtype, e.b.dtype):
        return result_dtype("+", (e.a.dtype, e.b.dtype))
    return None


def needs_conversion(x: S.TExpr, dtype: str, others: list[S.TExpr]) -> bool:
    """Whether operand x must be converted to `dtype` for Triton to compute in it: not where it
    is a Python number (it takes the dtype of what it meets), has that dtype, or is a narrower
    signed integer or float meeting an operand of that dtype (Triton widens it then)."""
    if weak(x) or x.dtype == dtype:
        return False
    widened = ITEM_BYTES[x.dtype] < ITEM_BYTES[dtype] and any(
        x.dtype in kind and dtype in kind for kind in (SIGNED, FLOATS))
    return not (widened and any(not weak(o) and o.dtype == dtype for o in others))


def positive(e: S.TExpr) -> bool:
    """Whether e is a divisor known to be positive: a positive literal, or an extent (the
    checker admits only positive divisors in subscripts; an empty extent leaves no lane)."""
    return (isinstance(e, S.Literal) and e.value > 0) or isinstance(e, S.Extent)


class Signs:
    """Which tiles of a kernel are never negative: indices, extents, unsigned data and what +, *,
    //, % (by a positive divisor), maximum, minimum and where keep so. A gather subscript known
    not to be negative needs no `>= 0` test (the arithmetic is int32, which stays non-negative
    unless it overflows, which takes a dimension near 2**31 elements, past what int32 indexes)."""

    def __init__(self, kernel: S.Kernel):
        assigns = [s for s in S.walk_statements(kernel.body) if isinstance(s, S.Assign)]
        # A name assigned twice (in a loop) is non-negative only if every value is: start from
        # all of them, and drop what a value may make negative until none changes.
        self.refs: dict[str, bool] = {s.name: True for s in assigns}
        changed = True
        while changed:
            changed = False
            for s in assigns:
                if self.refs[s.name] and not self.nonnegative(s.value):
                    self.refs[s.name], changed = False, True

    def nonnegative(self, e: S.TExpr) -> bool:
        if isinstance(e, (S.IndexOf, S.Extent, S.Index)):
            return True
        if isinstance(e, S.Literal):
            return e.value >= 0
        if isinstance(e, (S.Load, S.Gather)):
            return e.dtype in UNSIGNED
        if isinstance(e, S.Ref):
            return self.refs.get(e.name, False)
        if isinstance(e, (S.Expand, S.BroadcastTo)):
            return self.nonnegative(e.x)
        if isinstance(e, S.Cast):
            if e.dtype in UNSIGNED:
                return True
            return is_integer(e.x.dtype) and e.dtype in SIGNED and self.nonnegative(e.x) and \
                ITEM_BYTES[e.dtype] >= ITEM_BYTES[e.x.dtype]
        if isinstance(e, S.Where):
            return self.nonnegative(e.a) and self.nonnegative(e.b)
        if isinstance(e, S.Binary):
            a, b = self.nonnegative(e.a), self.nonnegative(e.b)
            if e.op in ("+", "*", "minimum"):
                return a and b
            if e.op == "maximum":
                return a or b
            if e.op == "//":
                return a and positive(e.b)
            if e.op == "%":
                return positive(e.b)
        return False


def integer_scalars(pipeline: S.Pipeline) -> frozenset[str]:
    """The scalars the program reads as integers: the launcher passes them as Python ints, and
    the kernels take them as int64."""
    return frozenset(node.name for k in pipeline.kernels for s in S.walk_statements(k.body)
                     if isinstance(s, (S.Assign, S.Store)) for node in S.walk_texpr(s.value)
                     if isinstance(node, S.Param) and is_integer(node.dtype))
