"""A product not on the matrix units. A GPU's matrix units (tensor cores) multiply tiles of at
least 16x16 with 16 along the reduction, one 2-D product per instruction: a contraction the
lowering could not make a `Dot` of (its tile spans a third free dimension, such as a batch block
larger than 1), and a `Dot` with a tile under 16 lanes, become a multiply-and-sum over a tile
of every lane of the product, in float32 on the CUDA cores."""
from __future__ import annotations

from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint.facts import Context, KernelFacts, quantity, statements_with_values

MACHINES = ("gpu",)
CODES = ("not-on-matrix-units",)
MIN_MATRIX_TILE = 16
# H100 SXM, dense: bf16/f16 on the matrix units against float32 on the CUDA cores
MATRIX_SPEEDUP = "about 15x slower than the matrix units (H100: 67 against 989 TFLOP/s)"


def check(kernel: S.Kernel, pipeline: S.Pipeline, context: Context):
    facts = KernelFacts(kernel, pipeline, context)
    for s, value in statements_with_values(kernel.body):
        for node in S.walk_texpr(value):
            if isinstance(node, S.Reduce) and node.op == "sum":
                w = _contraction(node, s, facts)
            elif isinstance(node, S.Dot):
                w = _small_dot(node, s, facts)
            else:
                continue
            if w is not None:
                yield w


def _operands(e: S.TExpr):
    """(a, b) when e is a product of two tiles, under the reduction's mask and any casts."""
    while isinstance(e, (S.Where, S.Cast)):
        e = e.a if isinstance(e, S.Where) else e.x
    if isinstance(e, S.Binary) and e.op == "*":
        return e.a, e.b
    return None


def _contraction(node: S.Reduce, s, facts: KernelFacts):
    operands = _operands(node.x)
    if operands is None:
        return None
    a, b = operands
    dims = node.x.dims
    only_a = [d for d in dims if d in b.unit and d not in a.unit and d != node.axis]
    only_b = [d for d in dims if d in a.unit and d not in b.unit and d != node.axis]
    if not (only_a and only_b) or node.axis in a.unit | b.unit:
        return None  # not a product of two matrices (a row scaled by a vector, a dot of two rows)
    shared = [d for d in dims if d not in a.unit | b.unit and d != node.axis]
    many = [d for d in shared + only_a + only_b if (facts.lanes(d) or 2) > 1]
    lanes = facts.tile_lanes(node.x)
    func = facts.kernel.func
    shape = "x".join(str(facts.lanes(d) or facts.dim_of(d)) for d in dims)
    names = ", ".join(facts.dim_of(d) for d in dims)
    extra = [facts.dim_of(d) for d in shared if d in many]
    if extra:
        why = (f"its tile spans {', '.join(extra)} besides the product's two free dimensions, and a matrix unit "
               f"multiplies 2-D tiles")
        hint = f"block {', '.join(extra)} by 1 ({func}.block({', '.join(f'{d}:1' for d in extra)}, ...)) so that " \
               f"each program's product is 2-D"
    else:
        why = "each side spans more than one free dimension"
        hint = "give each operand one free dimension besides the reduced one (reshape the others into it)"
    cost = (f"a {shape} multiply-and-sum ({quantity(2 * lanes) if lanes else 'every lane'} FLOPs a step) in "
            f"float32 on the CUDA cores, {MATRIX_SPEEDUP}")
    return PerformanceWarning("not-on-matrix-units", f"the product over {facts.dim_of(node.axis)} in kernel "
                              f"'{facts.kernel.name}' ({names}) is not a matrix-unit product: {why}",
                              s.loc, cost=cost, hint=hint, func=func)


def _small_dot(node: S.Dot, s, facts: KernelFacts):
    axes = (node.a.dims[0], node.b.dims[1], node.axis)
    small = [a for a in axes if (facts.lanes(a) or MIN_MATRIX_TILE) < MIN_MATRIX_TILE]
    if not small:
        return None
    func = facts.kernel.func
    shape = "x".join(str(facts.lanes(a)) for a in axes)
    dims = ", ".join(facts.dim_of(a) for a in small)
    loc = facts.context.schedule_loc(func, "tensorize") or s.loc
    return PerformanceWarning(
        "not-on-matrix-units", f"the {shape} product over {facts.dim_of(node.axis)} in kernel "
        f"'{facts.kernel.name}' has a tile under {MIN_MATRIX_TILE} lanes along {dims}: the matrix units take "
        f"{MIN_MATRIX_TILE} or more along each", loc,
        cost=f"a multiply-and-sum in float32 on the CUDA cores, {MATRIX_SPEEDUP}",
        hint=f"tensorize {dims} with {MIN_MATRIX_TILE} lanes or more "
             f"({func}.tensorize({', '.join(f'{facts.dim_of(a)}:{MIN_MATRIX_TILE}' for a in small)}, ...))",
        func=func, notes=(("the product is here", s.loc),) if loc is not s.loc else ())
