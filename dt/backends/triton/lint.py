"""The triton backend's performance warnings (dt.ir.lint rules), from how it renders the
scheduled IR: tiles padded to powers of two, accesses Triton cannot prove aligned, float32
products in IEEE precision, and `tma()` tiles that move through pointers."""
from __future__ import annotations

import math

from dt.backends.triton.lane_accumulators import with_lane_accumulators
from dt.backends.triton.layout import KernelLayout, next_power_of_2
from dt.backends.pysource import Names
from dt.backends.triton.tma import TMA_MAX_BOX, TMA_MIN_ROW_BYTES, TmaPlan
from dt.dtypes import ITEM_BYTES
from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint import Rule
from dt.ir.lint.facts import computed, Context, KernelFacts, statements_with_values
from dt.ir.lint.matrix_units import MATRIX_SPEEDUP

USEFUL = 0.6  # below this share of useful lanes in a padded tile, warn
VECTOR_BYTES = 16  # the widest access of one thread


def padding(kernel: S.Kernel, pipeline: S.Pipeline, context: Context):
    """Tiles padded to a power of two with few useful lanes: the matrix lanes of a kernel's
    products, or else its most padded tile."""
    facts = KernelFacts(kernel, pipeline, context)
    products, tiles = [], []
    for s, value in statements_with_values(kernel.body):
        for node in S.walk_texpr(value):
            if isinstance(node, S.Dot):
                products.append((_padded(facts, (node.a.dims[0], node.b.dims[1], node.axis)), node, s))
            elif node.dims:
                tiles.append((_padded(facts, tuple(a for a in node.dims if a not in node.unit)), node, s))
    found = [p for p in products if p[0] is not None and p[0][0] < USEFUL]
    if not products:
        found = sorted((t for t in tiles if t[0] is not None and t[0][0] < USEFUL), key=lambda t: t[0][0])[:1]
    reported = set()
    for (share, used, padded, wide), node, s in found:
        if (used, padded) in reported:
            continue
        reported.add((used, padded))
        func = kernel.func
        what = f"the product over {facts.dim_of(node.axis)}" if isinstance(node, S.Dot) else f"a tile of '{computed(s)}'"
        loc = context.schedule_loc(func, "tensorize") or s.loc
        yield PerformanceWarning(
            "padded-tile", f"{what} in kernel '{kernel.name}' is a {'x'.join(map(str, used))} tile, which Triton pads "
            f"to {'x'.join(map(str, padded))}", loc,
            cost=f"{share:.0%} of its lanes do useful work" + (" (matrix-unit lanes)" if isinstance(node, S.Dot) else ""),
            hint=f"tile {', '.join(wide)} with a power of two ({func}.tensorize(...)); a whole extent (tensorize(d:0)) "
                 f"padded this much is better walked in power-of-two tiles", func=func,
            notes=(("the tile is computed here", s.loc),) if loc is not s.loc else ())


def _padded(facts: KernelFacts, axes: tuple[str, ...]):
    """(useful share, lanes used, lanes padded, the dims padded) of a tile over `axes`, or None."""
    used = [_used(facts, a) for a in axes]
    if not axes or None in used:
        return None
    padded = [next_power_of_2(n) for n in used]
    wide = [facts.dim_of(a) for a, n, p in zip(axes, used, padded) if n != p]
    return math.prod(used) / math.prod(padded), tuple(used), tuple(padded), wide


def _used(facts: KernelFacts, axis: str) -> int | None:
    """The lanes of an axis that hold values: the tile, or the extent where that is smaller."""
    lanes, extent = facts.lanes(axis), facts.extent(facts.dim_of(axis))
    return None if lanes is None else min(lanes, extent) if extent is not None else lanes


def alignment(kernel: S.Kernel, pipeline: S.Pipeline, context: Context):
    """Rows whose length in bytes is not a multiple of 16: Triton proves an access's alignment
    from the (constant) strides, and loads or stores each row's lanes a few bytes at a time."""
    facts = KernelFacts(kernel, pipeline, context)
    seen = set()
    for s, value in statements_with_values(kernel.body):
        accesses = [n for n in S.walk_texpr(value) if isinstance(n, S.Load)] + ([s] if isinstance(s, S.Store) else [])
        for node in accesses:
            spec = pipeline.tensor(node.tensor)
            if len(spec.dims) < 2 or node.tensor in seen:
                continue
            row, item = facts.extent(spec.dims[-1]), ITEM_BYTES[spec.dtype]
            if row is None or (facts.lanes(node.indices[-1]) or 1) * item < VECTOR_BYTES:
                continue  # a row tile narrower than one access could not do better
            width = math.gcd(row * item, VECTOR_BYTES)
            if width >= VECTOR_BYTES:
                continue
            seen.add(node.tensor)
            multiple = VECTOR_BYTES // math.gcd(item, VECTOR_BYTES)
            yield PerformanceWarning(
                "unaligned-rows", f"rows of '{node.tensor}' are {row} elements ({row * item} bytes), not a multiple "
                f"of {VECTOR_BYTES} bytes: kernel '{kernel.name}' cannot load or store them {VECTOR_BYTES} bytes at "
                f"a time", node.loc or s.loc,
                cost=f"accesses of {width} bytes instead of {VECTOR_BYTES}: {VECTOR_BYTES // width}x the memory "
                     f"instructions",
                hint=f"pad {spec.dims[-1]} to a multiple of {multiple} elements ({-(-row // multiple) * multiple}), "
                     f"masking the padding in the algorithm", func=kernel.func)


def f32_products(kernel: S.Kernel, pipeline: S.Pipeline, context: Context):
    """float32 products in IEEE precision: Triton multiplies them on the CUDA cores."""
    from dt.backends.triton import F32_DOT_ENV, f32_dot_precision
    if f32_dot_precision() != "ieee":
        return
    for s, value in statements_with_values(kernel.body):
        dot = next((n for n in S.walk_texpr(value) if isinstance(n, S.Dot) and "f32" in (n.a.dtype, n.b.dtype)), None)
        if dot is not None:
            facts = KernelFacts(kernel, pipeline, context)
            yield PerformanceWarning(
                "not-on-matrix-units", f"the float32 product over {facts.dim_of(dot.axis)} in kernel '{kernel.name}' "
                f"runs in IEEE precision ({F32_DOT_ENV}=ieee, the default), which the matrix units do not have",
                s.loc, cost=f"float32 multiply-adds on the CUDA cores, {MATRIX_SPEEDUP}",
                hint=f"store the operands as bf16 or f16, or set {F32_DOT_ENV}=tf32 (10-bit mantissas) or tf32x3 "
                     f"(about float32's accuracy, three products)", func=kernel.func)
            return


def tma_fallback(kernel: S.Kernel, pipeline: S.Pipeline, context: Context):
    """`tma()` tiles that move through pointers: those that are not boxes of their tensor, and
    every tile where the call's extents make the tensors unfit for TMA."""
    if not kernel.tma:
        return
    func = kernel.func
    loc = context.schedule_loc(func, "tma") or kernel.loc
    plan = TmaPlan(with_lane_accumulators(kernel), pipeline, KernelLayout(kernel), Names())
    moved = set(plan.box_descriptor)
    facts = KernelFacts(kernel, pipeline, context)
    for s, value in statements_with_values(kernel.body):
        accesses = [n for n in S.walk_texpr(value) if isinstance(n, (S.Load, S.Gather))]
        for node in accesses + ([s] if isinstance(s, S.Store) else []):
            if node not in moved:
                yield PerformanceWarning(
                    "tma-fallback", f"{func}.tma(): the tile of '{node.tensor}' in kernel '{kernel.name}' moves "
                    f"through pointers", node.loc or s.loc,
                    cost="a load or store of one thread's lanes at a time, where TMA would copy the box "
                         "asynchronously",
                    hint=f"TMA moves a tile that is a box of its tensor: indexed by its dimensions in order, each "
                         f"tiled with a power of two of at most {TMA_MAX_BOX} dividing the block, or the whole of an "
                         f"unblocked extent, and {TMA_MIN_ROW_BYTES} bytes or more along the last",
                    func=func, notes=((f"{func}.tma() is here", loc),))
    for spec in (pipeline.tensor(t) for t in dict.fromkeys(kernel.reads + kernel.writes)):
        extents = [facts.extent(d) for d in spec.dims]
        if None in extents or len(extents) < 2:
            continue
        row = extents[-1] * ITEM_BYTES[spec.dtype]
        if row % TMA_MIN_ROW_BYTES:
            yield PerformanceWarning(
                "tma-fallback", f"{func}.tma(): rows of '{spec.name}' are {row} bytes, not a multiple of "
                f"{TMA_MIN_ROW_BYTES}, so at these extents kernel '{kernel.name}' moves every tile through pointers",
                loc, cost="no TMA at all at this shape",
                hint=f"pad {spec.dims[-1]} to a multiple of {TMA_MIN_ROW_BYTES // ITEM_BYTES[spec.dtype]} elements, "
                     f"or remove {func}.tma()", func=func)
            return


def _rule(check, *codes) -> Rule:
    return Rule(check, frozenset({"gpu"}), codes)


RULES = {"padding": _rule(padding, "padded-tile"), "alignment": _rule(alignment, "unaligned-rows"),
         "f32_products": _rule(f32_products, "not-on-matrix-units"), "tma": _rule(tma_fallback, "tma-fallback")}
