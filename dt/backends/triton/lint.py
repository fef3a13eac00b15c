"""The triton backend's performance warnings (dt.ir.lint rules), from how it renders the
scheduled IR: products with a tile under tl.dot's least (16 lanes, 32 along the reduction of 8-bit
operands) or in float32 IEEE precision,
product tiles padded to powers of two, accesses Triton cannot prove aligned, `tma()` tiles
that move through pointers, and `stream()` on a kernel that reads nothing once."""
from __future__ import annotations

import math

from dt.backends.pysource import Names
from dt.backends.triton.cache_hints import streamed
from dt.backends.triton.lane_accumulators import with_lane_accumulators
from dt.backends.triton.layout import MIN_DOT, KernelLayout, dot_minimum
from dt.backends.triton.limits import tile_padding
from dt.backends.triton.precision import F32_DOT_ENV, f32_dot_precision
from dt.backends.triton.tma import TMA_MAX_BOX, TMA_MAX_BOX_BYTES, TMA_MIN_ROW_BYTES, TmaPlan
from dt.dtypes import ITEM_BYTES, is_integer
from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint import Rule
from dt.ir.lint.facts import KernelFacts, statements_with_values
from dt.ir.lint.matrix_units import EIGHT_BIT_SPEEDUP, MATRIX_SPEEDUP
from dt.ir.lint.programs import MIN_BYTES

USEFUL = 0.6  # below this share of useful lanes in a padded tile, warn
VECTOR_BYTES = 16  # the widest access of one thread


def _dot_tiles(facts: KernelFacts):
    """(product, statement, its M, N and K axes, the lanes their tiles have, take at least in a
    tl.dot (dot_minimum), hold values and are padded to) of each product, as the renderer lays
    them out (KernelLayout: a whole extent is padded at launch, to that least in a product)."""
    dots = [(node, s) for s, value in statements_with_values(facts.kernel.body)
            for node in S.walk_texpr(value) if isinstance(node, S.Dot)]
    layout = KernelLayout(with_lane_accumulators(facts.kernel)) if dots else None  # laying out costs
    for node, s in dots:
        axes = (node.a.dims[0], node.b.dims[1], node.axis)
        rows, depth, cols = dot_minimum(node)
        least = (rows, cols, depth)
        tiles = [layout.axes[a].tile if a in layout.axes else None for a in axes]
        used = [_used(facts, a) for a in axes]
        padded = [t if isinstance(t, int) else None if u is None else tile_padding(u, fewest)
                  for t, u, fewest in zip(tiles, used, least)]
        yield node, s, axes, tiles, least, used, padded


def small_products(facts: KernelFacts):
    """Products with a fixed tile under tl.dot's least (dot_minimum): Triton multiplies and sums
    them on the CUDA cores (a whole extent in a product is padded to it: it goes to tl.dot)."""
    kernel, context = facts.kernel, facts.context
    for node, s, axes, tiles, least, used, padded in _dot_tiles(facts):
        small = {}  # the lanes tl.dot takes -> the dimensions tiled with fewer
        for a, t, fewest in zip(axes, tiles, least):
            if isinstance(t, int) and t < fewest:
                small.setdefault(fewest, []).append(facts.dim_of(a))
        if not small:
            continue
        under = " and under ".join(f"{n} lanes along {', '.join(dims)}" for n, dims in small.items())
        wanted = " and ".join(f"{', '.join(dims)} with {n}" for n, dims in small.items())
        sizes = ", ".join(f"{d}:{n}" for n, dims in small.items() for d in dims)
        eight_bit = f" ({least[2]} along the reduction of 8-bit operands)" if least[2] != MIN_DOT else ""
        func = kernel.schedule_func
        loc = context.schedule_loc(func, "tensorize") or s.loc
        shape = "x".join(str(t) if isinstance(t, int) else facts.dim_of(a) for a, t in zip(axes, tiles))
        yield PerformanceWarning(
            "not-on-matrix-units", f"the {shape} product over {facts.dim_of(node.axis)} in kernel '{kernel.name}' has "
            f"a tile under {under}: the matrix units take {MIN_DOT} or more along each{eight_bit}", loc,
            cost=f"a multiply-and-sum in {'int32' if is_integer(node.acc_dtype) else 'float32'} on the CUDA cores, "
                 f"{EIGHT_BIT_SPEEDUP if eight_bit else MATRIX_SPEEDUP}",
            hint=f"tensorize {wanted} lanes or more ({func}.tensorize({sizes}, ...))",
            func=func, notes=(("the product is here", s.loc),) if loc is not s.loc else ())


def padding(facts: KernelFacts):
    """Product tiles padded to a power of two with few useful matrix lanes. (An element-wise
    tile's padding lanes are masked: they move no bytes, and were not measured to cost time.)"""
    kernel, context = facts.kernel, facts.context
    reported = set()
    for node, s, axes, tiles, least, used, padded in _dot_tiles(facts):
        if None in used or None in padded or (tuple(used), tuple(padded)) in reported:
            continue
        share = math.prod(used) / math.prod(padded)
        if share >= USEFUL:
            continue
        reported.add((tuple(used), tuple(padded)))
        func = kernel.schedule_func
        wide = [facts.dim_of(a) for a, u, p in zip(axes, used, padded) if u != p]
        loc = context.schedule_loc(func, "tensorize") or s.loc
        yield PerformanceWarning(
            "padded-tile", f"the product over {facts.dim_of(node.axis)} in kernel '{kernel.name}' is a "
            f"{'x'.join(map(str, used))} tile, which Triton pads to {'x'.join(map(str, padded))}", loc,
            cost=f"{share:.0%} of its matrix-unit lanes do useful work",
            hint=f"tile {', '.join(wide)} with powers of two ({func}.tensorize(...)), of at most the extent",
            func=func, notes=(("the product is here", s.loc),) if loc is not s.loc else ())


def _used(facts: KernelFacts, axis: str) -> int | None:
    """The lanes of an axis that hold values: the tile, or the extent where that is smaller."""
    lanes, extent = facts.lanes(axis), facts.extent(facts.dim_of(axis))
    return None if lanes is None else min(lanes, extent) if extent is not None else lanes


def alignment(facts: KernelFacts):
    """Rows whose length in bytes is not a multiple of 16: Triton proves an access's alignment
    from the (constant) strides, and loads or stores each row's lanes a few bytes at a time.
    Reported for tensors of MIN_BYTES or more (below, the launch costs more)."""
    kernel, pipeline = facts.kernel, facts.pipeline
    seen = set()
    for s, value in statements_with_values(kernel.body):
        accesses = [n for n in S.walk_texpr(value) if isinstance(n, S.Load)] + ([s] if isinstance(s, S.Store) else [])
        for node in accesses:
            spec = pipeline.tensor(node.tensor)
            if len(spec.dims) < 2 or node.tensor in seen:
                continue
            row, item = facts.extent(spec.dims[-1]), ITEM_BYTES[spec.dtype]
            if row is None or (facts.lanes(node.indices[-1]) or 1) * item < VECTOR_BYTES or \
                    (facts.tensor_bytes(node.tensor) or 0) < MIN_BYTES:
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
                     f"masking the padding in the algorithm", func=kernel.schedule_func)


def f32_products(facts: KernelFacts):
    """float32 products in IEEE precision: tl.dot multiplies them on the CUDA cores."""
    kernel = facts.kernel
    if f32_dot_precision() != "ieee":
        return
    for node, s, axes, tiles, least, used, padded in _dot_tiles(facts):
        small = any(isinstance(t, int) and t < n for t, n in zip(tiles, least))  # small_products' to report
        if "f32" in (node.a.dtype, node.b.dtype) and not small:
            yield PerformanceWarning(
                "not-on-matrix-units", f"the float32 product over {facts.dim_of(node.axis)} in kernel '{kernel.name}' "
                f"runs in IEEE precision ({F32_DOT_ENV}=ieee, the default), which the matrix units do not have",
                s.loc, cost=f"float32 multiply-adds on the CUDA cores, {MATRIX_SPEEDUP}",
                hint=f"store the operands as bf16 or f16, or set {F32_DOT_ENV}=tf32 (10-bit mantissas) or tf32x3 "
                     f"(about float32's accuracy, three products)", func=kernel.schedule_func)
            return


def tma_fallback(facts: KernelFacts):
    """`tma()` tiles that move through pointers: those that are not boxes of their tensor, and
    every tile where the call's extents make the tensors unfit for TMA."""
    kernel, pipeline, context = facts.kernel, facts.pipeline, facts.context
    if not kernel.tma:
        return
    func = kernel.schedule_func
    loc = context.schedule_loc(func, "tma") or kernel.loc
    plan = TmaPlan(with_lane_accumulators(kernel), pipeline, KernelLayout(kernel), Names())
    moved = set(plan.box_descriptor)
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
                         f"unblocked extent, {TMA_MIN_ROW_BYTES} bytes or more along the last; a load's at most "
                         f"{TMA_MAX_BOX_BYTES // 1024} KiB in all (a buffer of shared memory)",
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


def nothing_to_stream(facts: KernelFacts):
    """`stream()` that changes no load: every tensor the kernels it shapes read (a split's two)
    is read by several passes (released after the last one already), by a loop that does not
    advance over it, by several programs, or through TMA (whose loads take no hint). Said once,
    at the first of those kernels."""
    kernel, context = facts.kernel, facts.context
    func = kernel.schedule_func
    shaped = [k for k in facts.pipeline.kernels if k.stream and k.schedule_func == func]
    if not kernel.stream or kernel.name != shaped[0].name or any(_streamed_by_pointers(k, facts.pipeline) for k in shaped):
        return
    names = " and ".join(f"'{k.name}'" for k in shaped)
    yield PerformanceWarning(
        "nothing-to-stream", f"{func}.stream() asks kernel{'s' * (len(shaped) > 1)} {names} to stream the tensors "
        f"read once, and none is: each is read again by the same program or by several programs, or moves by TMA",
        context.schedule_loc(func, "stream") or kernel.loc,
        cost="nothing gained: the hint changes no load", hint=f"remove {func}.stream()", func=func)


def _streamed_by_pointers(kernel: S.Kernel, pipeline: S.Pipeline) -> list[S.Load]:
    """The loads stream() changes in `kernel` that move through pointers (TMA's take no hint)."""
    loads = streamed(kernel)
    if not kernel.tma or not loads:
        return loads
    boxes = TmaPlan(with_lane_accumulators(kernel), pipeline, KernelLayout(kernel), Names()).box_descriptor
    return [load for load in loads if load not in boxes]


def _rule(check, *codes) -> Rule:
    return Rule(check, frozenset({"gpu"}), codes)


RULES = {"small_products": _rule(small_products, "not-on-matrix-units"), "padding": _rule(padding, "padded-tile"),
         "alignment": _rule(alignment, "unaligned-rows"), "f32_products": _rule(f32_products, "not-on-matrix-units"),
         "tma": _rule(tma_fallback, "tma-fallback"), "stream": _rule(nothing_to_stream, "nothing-to-stream")}
