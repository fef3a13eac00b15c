"""A product not on the matrix units. A GPU's matrix units (tensor cores) multiply 2-D tiles,
one product per instruction: a contraction the lowering could not make a `Dot` of (written as
`rsum` of a product rather than `rdot`, or a tile spanning a third free dimension, such as a
batch block larger than 1) is a multiply-and-sum over a tile of every lane of the product, in
float32 on the CUDA cores. (A `Dot` the backend cannot give the matrix units, a tile too small
or float32 operands, is the backend's to report: dt.backends.triton.lint.)"""
from __future__ import annotations

from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint.facts import KernelFacts, quantity, statements_with_values

MACHINES = ("gpu",)
CODES = ("not-on-matrix-units",)
# H100 SXM, dense: bf16/f16 on the matrix units against float32 on the CUDA cores
MATRIX_SPEEDUP = "about 15x slower than the matrix units (H100: 67 against 989 TFLOP/s)"
# 8-bit operands (i8, fp8) run at twice the 16-bit rate on the matrix units
EIGHT_BIT_SPEEDUP = "at least 30x slower than the matrix units (H100: 67 TFLOP/s against 1,979 for 8-bit products)"


def check(facts: KernelFacts):
    kernel = facts.kernel
    for s, value in statements_with_values(kernel.body):
        for node in S.walk_texpr(value):
            if isinstance(node, S.Reduce) and node.op == "sum":
                w = _contraction(node, s, facts)
                if w is not None:
                    yield w


def _factors(e: S.TExpr) -> list[S.TExpr]:
    """The factors of a product (a * b * c), under the reduction's mask and any casts."""
    while isinstance(e, (S.Where, S.Cast)):
        e = e.a if isinstance(e, S.Where) else e.x
    if isinstance(e, S.Binary) and e.op == "*":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _contraction(node: S.Reduce, s, facts: KernelFacts):
    factors = [f for f in _factors(node.x) if f.dims]
    dims = node.x.dims
    spans = [frozenset(d for d in dims if d not in f.unit and d != node.axis) for f in factors]
    # two factors, each spanning a free dimension the other lacks, both along the reduced one
    sides = [(f, span) for f, span in zip(factors, spans) if node.axis not in f.unit and span]
    if len(sides) < 2:
        return None
    (a, span_a), (b, span_b) = sides[0], sides[-1]
    only_a, only_b = span_a - span_b, span_b - span_a
    if not (only_a and only_b):
        return None  # not a product of two matrices (a row scaled by a vector, a dot of two rows)
    shared = [d for d in dims if d in span_a & span_b]
    func = facts.kernel.schedule_func
    lanes = facts.tile_lanes(node.x)
    shape = "x".join(str(facts.lanes(d) or facts.dim_of(d)) for d in dims)
    names = ", ".join(facts.dim_of(d) for d in dims)
    extra = [facts.dim_of(d) for d in shared if (facts.lanes(d) or 2) > 1]
    if extra:
        why = (f"its tile spans {', '.join(extra)} besides the product's two free dimensions, and a matrix unit "
               f"multiplies 2-D tiles")
        hint = f"block {', '.join(extra)} by 1 ({func}.block({', '.join(f'{d}:1' for d in extra)}, ...)) so that " \
               f"each program's product is 2-D"
    elif len(only_a) == 1 and len(only_b) == 1 and len(sides) == 2 == len(factors):
        why = "it is written as rsum of a product, which dt does not turn into a matrix product"
        hint = f"write it as rdot(a, b, {facts.dim_of(node.axis)}): a product over {facts.dim_of(node.axis)} of " \
               f"two operands, each with one free dimension"
    elif len(factors) > 2:
        why = f"it multiplies {len(factors)} tiles, and a matrix product two"
        hint = f"make the factors two operands (multiply the others into one of them, in a Func), then " \
               f"rdot(a, b, {facts.dim_of(node.axis)})"
    else:
        why = "an operand spans more than one free dimension, and a matrix unit multiplies 2-D tiles"
        hint = f"give each operand one free dimension besides {facts.dim_of(node.axis)} (block the others by 1)"
    cost = (f"a {shape} multiply-and-sum ({quantity(2 * lanes) if lanes else 'every lane'} FLOPs a step) in "
            f"float32 on the CUDA cores, {MATRIX_SPEEDUP}")
    return PerformanceWarning("not-on-matrix-units", f"the product over {facts.dim_of(node.axis)} in kernel "
                              f"'{facts.kernel.name}' ({names}) is not a matrix-unit product: {why}",
                              s.loc, cost=cost, hint=hint, func=func)
