"""Hypothesis strategies: random legal schedules for several algorithms, and random sizes.

A drawn `Case` is DT source (algorithm + schedule) with extents and a dtype. Whatever the
schedule, every backend must compute what the reference computes: a schedule never changes
the meaning of a program.

Each family draws its blocks, tiles and extents from a `Space`: DEFAULT, the general one
(test_random_schedules), or CORNERS, Triton's corner cases (test_triton_properties: tiles that
Triton pads, splits, persistent launches), where `corner_cases` also draws the families that
stress them (bounded and arg-reductions, online softmax, attention, variances, top-k, scans, ...).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from hypothesis import strategies as st

BLOCKS = (1, 2, 3, 4, 8, 16, 32)
TILES = (0, 1, 2, 3, 4, 8, 16)


@dataclass(frozen=True)
class Space:
    """What the families below draw blocks, tiles, extents, split chunks and launch counts from."""
    blocks: tuple = BLOCKS
    tiles: tuple = TILES
    reduction_tiles: tuple = TILES + (32,)
    extents: tuple | None = None  # None: any extent from 1 to the family's bound
    chunks: tuple = ()  # sizes for split(r:chunk) where a family can split; () never splits
    persistent: tuple = ()  # program counts for a kernel's persistent(n) launch; () never persistent

    def extent(self, high: int):
        return st.integers(1, high) if self.extents is None else st.sampled_from([e for e in self.extents if e <= high])


DEFAULT = Space()


@dataclass(frozen=True)
class Case:
    source: str
    extents: dict
    dtype: str
    specials: bool = False  # float inputs drawn with ties, NaN and +-inf (dt.conformance's "specials")

    def __repr__(self):  # shown by hypothesis on failure
        specials = ", specials=True" if self.specials else ""
        return f"Case(extents={self.extents}, dtype={self.dtype!r}{specials}, source=\n{self.source})"


@st.composite
def _blocked(draw, func: str, dims: list[str], reductions: list[str] = (), space: Space = DEFAULT) -> str:
    """block / tensorize / map statements for `func`, legal for any extents."""
    lines = []
    blocks = {d: draw(st.sampled_from(space.blocks)) for d in dims if draw(st.booleans())}
    if blocks:
        lines.append(f"{func}.block({', '.join(f'{d}:{b}' for d, b in blocks.items())});")
    tiles = {}
    for d in dims:
        if draw(st.booleans()):
            limit = blocks.get(d)
            choice = draw(st.sampled_from(space.tiles))
            tiles[d] = 0 if limit is not None and choice > limit else choice
    for r in reductions:
        if draw(st.booleans()):
            tiles[r] = draw(st.sampled_from(space.reduction_tiles))
    if tiles:
        lines.append(f"{func}.tensorize({', '.join(f'{d}:{t}' for d, t in tiles.items())});")
    if len(blocks) >= 1 and draw(st.booleans()):
        order = draw(st.permutations(list(blocks)))
        entries = list(order)
        if draw(st.booleans()):
            d = draw(st.sampled_from(order))
            group = draw(st.sampled_from((2, 3, 5)))
            entries[entries.index(d)] = f"{d}:{d}1/{group}"
            entries.insert(draw(st.integers(entries.index(f'{d}:{d}1/{group}') + 1, len(entries))), f"{d}1")
        lines.append(f"{func}.map({', '.join(entries)});")
    lines.append(draw(_persistent(func, space)).rstrip())
    return "\n".join(line for line in lines if line)


ELEMENTWISE = ("A[x, y] * B[y] + 1.5", "maximum(A[x, y], 0) - B[y]", "sigmoid(A[x, y]) * tanh(B[y])",
               "where(A[x, y] > B[y], A[x, y], 0.5 * B[y])", "exp(-abs(A[x, y])) / (1 + B[y] * B[y])",
               "A[x, y] * y + x")


@st.composite
def _persistent(draw, func: str, space: Space) -> str:
    """`func.persistent(n);` and a new line half the time where the space has launch counts: each
    of n programs computes a block, then the block n further, and so on."""
    if space.persistent and draw(st.booleans()):
        return f"{func}.persistent({draw(st.sampled_from(space.persistent))});\n"
    return ""


@st.composite
def _split(draw, func: str, r: str, space: Space) -> str:
    """`func.split(r:chunk);` and a new line half the time where the space splits, else nothing."""
    if space.chunks and draw(st.booleans()):
        return f"{func}.split({r}:{draw(st.sampled_from(space.chunks))});\n"
    return ""


@st.composite
def elementwise(draw, space: Space = DEFAULT):
    expr = draw(st.sampled_from(ELEMENTWISE))
    schedule = draw(_blocked("f", ["x", "y"], space=space))
    src = f"Func f;\nIn A, B;\nVar x, y;\nf[x, y] = {expr};\n{schedule}\nf.compile();\n"
    return src, {"x": draw(space.extent(40)), "y": draw(space.extent(70))}


@st.composite
def row_reduction(draw, space: Space = DEFAULT):
    op = draw(st.sampled_from(("rsum", "rmax", "rmin")))
    body = draw(st.sampled_from(("A[x, y]", "exp(A[x, y])", "A[x, y] * A[x, y] - 2")))
    where = draw(st.sampled_from(("root", "x", "y", "alone")))
    if where == "alone":
        schedule = draw(_blocked("s", ["x"], ["y"], space=space))
        split = draw(_split("s", "y", space))
        src = f"Func s;\nIn A;\nVar x;\nRVar y;\ns[x] = {op}({body}, y);\n{schedule}\n{split}s.compile();\n"
    else:
        schedule = draw(_blocked("o", ["x", "y"], space=space))
        fuse = f"s.fuse_at(o, {where});" if where != "root" else ""
        own_tile = f"s.tensorize(y:{draw(st.sampled_from(space.tiles))});" if draw(st.booleans()) else ""
        split = draw(_split("s", "y", space)) if where != "y" else ""
        src = (f"Func o, s;\nIn A;\nVar x;\nRVar y;\ns[x] = {op}({body}, y);\n"
               f"o[x, y] = A[x, y] - reshape(s[x], x, 1);\n{schedule}\n{fuse}\n{own_tile}\n{split}o.compile();\n")
    return src, {"x": draw(space.extent(30)), "y": draw(space.extent(90))}


@st.composite
def matmul(draw, space: Space = DEFAULT):
    epilogue = draw(st.sampled_from(("none", "fused", "root")))
    if epilogue == "none":
        schedule = draw(_blocked("mm", ["x", "y"], ["k"], space=space))
        split = draw(_split("mm", "k", space))
        src = (f"Func mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n{schedule}\n"
               f"{split}mm.compile();\n")
    else:
        schedule = draw(_blocked("out", ["x", "y"], ["k"] if epilogue == "fused" else [], space=space))
        level = draw(st.sampled_from(("x", "y")))
        # Fused at x, mm holds whole rows: out must then take y in one tile too.
        fuse = {"x": "mm.fuse_at(out, x);\nout.tensorize(y:0);", "y": "mm.fuse_at(out, y);"}[level] \
            if epilogue == "fused" else ""
        src = (f"Func out, mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n"
               f"out[x, y] = sigmoid(mm[x, y]);\n{schedule}\n{fuse}\nout.compile();\n")
    return src, {"x": draw(space.extent(40)), "y": draw(space.extent(40)), "k": draw(space.extent(50))}


@st.composite
def two_matmuls(draw, space: Space = DEFAULT):
    fusion = draw(st.sampled_from(("outer", "inner", "root")))
    m_block = draw(st.sampled_from(space.blocks))
    lines = [f"_2mm.block(m:{m_block});"]
    tiles = [f"m:{draw(st.sampled_from((0, 1, min(2, m_block), m_block)))}", f"n:{draw(st.sampled_from(space.tiles))}"]
    k_tile = f"k:{draw(st.sampled_from(space.tiles))}"
    if fusion == "root":  # mm is its own kernel: its reduction tile is scheduled on mm
        lines.append(f"mm.tensorize({k_tile});")
    else:
        tiles.append(k_tile)
    tiles.append("l:0" if fusion == "outer" else f"l:{draw(st.sampled_from(space.tiles))}")
    lines.append(f"_2mm.tensorize({', '.join(tiles)});")
    if fusion == "outer":
        lines.append("mm.fuse_at(_2mm, m);")
    elif fusion == "inner":
        lines.append("mm.fuse_at(_2mm, l);")
    src = ("Func _2mm, mm;\nIn A, B, C;\nVar m, n;\nRVar k, l;\nmm[m, l] = rdot(A[m, k], B[k, l], k);\n"
           "_2mm[m, n] = rdot(mm[m, l], C[l, n], l);\n" + "\n".join(lines) + "\n_2mm.compile();\n")
    return src, {d: draw(space.extent(24)) for d in "mnkl"}


@st.composite
def batched(draw, space: Space = DEFAULT):
    schedule = draw(_blocked("f", ["b", "x"], ["y"], space=space))
    split = draw(_split("f", "y", space))
    src = ("Func f;\nIn A, W;\nVar b, x;\nRVar y;\nf[b, x] = rsum(A[b, x, y] * W[y], y) / len(y);\n"
           f"{schedule}\n{split}f.compile();\n")
    return src, {"b": draw(space.extent(5)), "x": draw(space.extent(20)), "y": draw(space.extent(40))}


SUBSCRIPTS = ("x", "x + {c}", "x - {c}", "{k} * x + {c}", "x // {k}", "(x + {c}) % len(x)", "x * x - {c}", "I[x]")


@st.composite
def indexed(draw, space: Space = DEFAULT):
    """Reads at random index expressions (shifts, strides, floor division, remainders, a gather),
    in an element-wise Func, a reduction or through a producer stored or inlined: 0 outside."""
    sub = draw(st.sampled_from(SUBSCRIPTS)).format(c=draw(st.integers(0, 5)), k=draw(st.integers(1, 4)))
    shift = draw(st.integers(0, 3))
    gather = "I" if "I[" in sub else ""
    form = draw(st.sampled_from(("elementwise", "reduction", "producer")))
    if form == "elementwise":
        schedule = draw(_blocked("o", ["x", "z"], space=space))
        body = f"o[x, z] = A[{sub}, z + {shift}] * 2.0 + A[x, z];"
    elif form == "reduction":
        op = draw(st.sampled_from(("rsum", "rmax", "rmin")))
        schedule = draw(_blocked("o", ["x"], ["z"], space=space))
        split = draw(_split("o", "z", space))
        schedule += f"\n{split.rstrip()}" if split else ""
        body = f"o[x] = {op}(A[{sub}, z - {shift}] + A[x, z], z);"
    else:
        schedule = draw(_blocked("o", ["x", "z"], space=space)) + ("\nf.inline();" if draw(st.booleans()) else "")
        body = f"f[x, z] = exp(A[x, z]);\no[x, z] = f[{sub}, z] - A[x, z];"
    dims = "Var x;\nRVar z;" if form == "reduction" else "Var x, z;"
    src = (f"Func o, f;\nIn A{', I' if gather else ''};\n{dims}\n{body}\n{schedule}\no.compile();\n")
    return src, {"x": draw(space.extent(30)), "z": draw(space.extent(40))}


@st.composite
def cases(draw, dtypes=("f32", "f16", "bf16")):
    family = draw(st.sampled_from((elementwise, row_reduction, matmul, two_matmuls, batched, indexed)))
    src, extents = draw(family())
    return Case(src, extents, draw(st.sampled_from(dtypes)))


# Triton's corner cases (tests/test_triton_properties.py). Triton pads each tile to a power of two
# and masks the padding lanes out; three wrong results hid there at once (sums over 6-lane tiles
# added padding, a split walk with a lower bound walked every chunk from the bound, top-k over
# 3-lane tiles ranked a padding lane). CORNERS draws the tiles that need padding (3, 5, 6, 12, 24),
# tiles past the extent, blocks that do not divide it, small split chunks and small odd extents;
# the families below put them under the constructs that keep state across tiles.
NPOT_TILES = (3, 5, 6, 12, 24)
CORNERS = Space(blocks=(1, 2, 3, 4, 5, 6, 7, 8, 12), tiles=(0, 1, 2, 4, 8) + NPOT_TILES,
                reduction_tiles=(0, 1, 2, 4, 8) + NPOT_TILES,
                extents=(1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17, 24, 25), chunks=(1, 2, 3, 4, 5, 6, 8, 12),
                persistent=(1, 2, 3))
IDENTITIES = {"rsum": "0.0", "rmax": "-inf", "rmin": "inf", "rargmax": "-inf", "rargmin": "inf"}


@st.composite
def _bound(draw, r: str, v: str) -> str:
    """A condition between the reduced `r` and the pure `v` that may bound the walk over `r`: an
    upper bound (causal) or a lower one (where(l >= m, ...)); some leave rows masked throughout."""
    c = draw(st.integers(0, 3))
    upper = (f"{r} <= {v}", f"{r} < {v} + {c}", f"{r} <= {v} - {c}", f"{v} >= {r}")
    lower = (f"{r} >= {v}", f"{r} > {v} - {c}", f"{r} >= {v} + {c}", f"{v} <= {r} + {c}")
    return draw(st.sampled_from(draw(st.sampled_from((upper, lower)))))


@st.composite
def _tile(draw, space: Space, block: int | None = None, reduction: bool = False) -> int:
    """A tile for a dimension blocked by `block` (0, the whole block, where the drawn one is larger)."""
    tile = draw(st.sampled_from(space.reduction_tiles if reduction else space.tiles))
    return 0 if block is not None and tile > block else tile


@st.composite
def _row_blocks(draw, func: str, row: str, reduction: str, space: Space, pure: str | None = None,
                whole: bool = False, reduction_tile: int | None = None) -> str:
    """block / tensorize of a kernel over rows `row` walking `reduction` in tiles of `reduction_tile`
    (drawn if None), and the pure `pure` (in one tile where `whole`)."""
    block = draw(st.sampled_from(space.blocks)) if draw(st.booleans()) else None
    tiles = [f"{row}:{draw(_tile(space, block))}"]
    if pure:
        tiles.append(f"{pure}:{0 if whole else draw(_tile(space))}")
    tiles.append(f"{reduction}:{draw(_tile(space, reduction=True)) if reduction_tile is None else reduction_tile}")
    return ((f"{func}.block({row}:{block});\n" if block else "") + f"{func}.tensorize({', '.join(tiles)});\n"
            + draw(_persistent(func, space)))


@st.composite
def bounded_reductions(draw, space: Space = CORNERS):
    """rsum, rmax, rmin, rargmax or rargmin over l of values masked by a bound on l against the row
    m (filled with the identity, so the walk may skip tiles, or with 0.5, so it walks them all);
    alone, fused into an element-wise consumer, or an arg-reduction sharing its loop with its max;
    split into chunks or not."""
    op = draw(st.sampled_from(tuple(IDENTITIES)))
    value = draw(st.sampled_from(("A[m, l]", "exp(A[m, l])", "A[m, l] * B[l] - 1.0", "-A[m, l]")))
    if draw(st.booleans()):
        fill = IDENTITIES[op] if draw(st.booleans()) else "0.5"
        value = f"where({draw(_bound('l', 'm'))}, {value}, {fill})"
    ins = "A, B" if "B[" in value else "A"
    form = draw(st.sampled_from(("alone", "fused", "with_max")))
    if form == "alone":
        schedule = draw(_blocked("s", ["m"], ["l"], space=space)) + "\n" + draw(_split("s", "l", space))
        src = f"Func s;\nIn {ins};\nVar m;\nRVar l;\ns[m] = {op}({value}, l);\n{schedule}s.compile();\n"
    elif form == "fused":
        schedule = draw(_row_blocks("o", "m", "l", space))
        own = f"s.tensorize(l:{draw(_tile(space, reduction=True))});\n" if draw(st.booleans()) else ""
        split = draw(_split("s", "l", space))
        src = (f"Func o, s;\nIn {ins};\nVar m;\nRVar l;\ns[m] = {op}({value}, l);\n"
               f"o[m, l] = A[m, l] - reshape(s[m], m, 1);\n{schedule}s.fuse_at(o, m);\n{own}{split}o.compile();\n")
    else:  # the arg-reduction and the max (min) it finds
        arg, best = (op, {"rargmax": "rmax", "rargmin": "rmin"}[op]) if op.startswith("rarg") else ("rargmax", "rmax")
        schedule = draw(_row_blocks("r", "m", "l", space))
        shared = "am.compute_with(mx, l);\n" if draw(st.booleans()) else ""
        split = draw(_split("am", "l", space))
        src = (f"Func r, am, mx;\nIn {ins};\nVar m;\nRVar l;\nmx[m] = {best}({value}, l);\nam[m] = {arg}({value}, l);\n"
               f"r[m] = mx[m] + am[m];\n{schedule}mx.fuse_at(r, m);\nam.fuse_at(r, m);\n{shared}{split}"
               f"mx.compile();\nam.compile();\nr.{'compile' if split else 'compile_to_kernel'}();\n")
    return src, {"m": draw(space.extent(17)), "l": draw(space.extent(25))}


@st.composite
def split_walks(draw, space: Space = CORNERS):
    """Reductions split into chunks, each chunk's walk most often bounded by a condition on l
    against the row m (before, inside or past the chunk; rows masked throughout), chunks and tiles
    that divide each other or not: a reduction alone, a log-sum-exp (the online softmax's max and
    sum, split together) and a product (split-K)."""
    bound = draw(_bound("l", "m")) if draw(st.integers(0, 3)) else None
    # chunks of whole tiles two times in three (each chunk's walk then has no per-lane test of the chunk)
    tile = draw(st.sampled_from([t for t in space.reduction_tiles if t]))
    chunk = tile * draw(st.integers(1, 3)) if draw(st.integers(0, 2)) else draw(st.sampled_from(space.chunks))
    split = f"split(l:{chunk});\n"
    form = draw(st.sampled_from(("reduction", "log_sum_exp", "product")))
    if form == "reduction":
        op = draw(st.sampled_from(tuple(IDENTITIES)))
        value = "A[m, l]" if bound is None else f"where({bound}, A[m, l], {IDENTITIES[op]})"
        src = (f"Func s;\nIn A;\nVar m;\nRVar l;\ns[m] = {op}({value}, l);\n"
               f"{draw(_row_blocks('s', 'm', 'l', space, reduction_tile=tile))}s.{split}s.compile();\n")
    elif form == "log_sum_exp":
        value = "A[m, l]" if bound is None else f"where({bound}, A[m, l], -inf)"
        src = (f"Func o, mx, s;\nIn A;\nVar m;\nRVar l;\nmx[m] = rmax({value}, l);\n"
               f"s[m] = rsum(exp({value} - mx[m]), l);\no[m] = log(s[m]) + mx[m];\n"
               f"{draw(_row_blocks('o', 'm', 'l', space, reduction_tile=tile))}mx.fuse_at(o, m);\ns.fuse_at(o, m);\n"
               f"{draw(st.sampled_from(('s.compute_with(mx, l)', 'mx.compute_with(s, l)')))};\n"
               f"{draw(st.sampled_from(('s', 'mx')))}.{split}o.compile();\n")
    else:
        value = "A[m, l]" if bound is None else f"where({bound}, A[m, l], 0.0)"
        src = (f"Func o;\nIn A, B;\nVar m, n;\nRVar l;\no[m, n] = rdot({value}, B[l, n], l);\n"
               f"{draw(_row_blocks('o', 'm', 'l', space, pure='n', reduction_tile=tile))}o.{split}o.compile();\n")
    extents = {"m": draw(space.extent(17)), "l": draw(space.extent(25))}
    return src, extents | ({"n": draw(space.extent(5))} if form == "product" else {})


@st.composite
def online_softmax(draw, space: Space = CORNERS):
    """A softmax over rows x shifted by the row max: the max and the sum in one online walk
    (compute_with, either owning the loop), in two, or at root; of scores masked by a bound
    (-inf: tiles skipped, rows masked throughout); split into chunks or not."""
    value = "A[x, y]"
    if draw(st.booleans()):
        value = f"where({draw(_bound('y', 'x'))}, A[x, y], -inf)"
    form = draw(st.sampled_from(("sum_with_max", "max_with_sum", "two_loops", "root")))
    lines = [draw(_row_blocks("o", "x", "y", space))]
    if form != "root":
        lines.append("mx.fuse_at(o, x);\ns.fuse_at(o, x);\n")
    if form == "sum_with_max":
        lines.append("s.compute_with(mx, y);\n" + draw(_split(draw(st.sampled_from(("s", "mx"))), "y", space)))
    elif form == "max_with_sum":
        lines.append("mx.compute_with(s, y);\n" + draw(_split("s", "y", space)))
    else:
        for f in ("mx", "s"):
            if draw(st.booleans()):
                lines.append(f"{f}.tensorize(y:{draw(_tile(space, reduction=True))});\n")
    src = (f"Func o, mx, s;\nIn A;\nVar x;\nRVar y;\nmx[x] = rmax({value}, y);\ns[x] = rsum(exp({value} - mx[x]), y);\n"
           f"o[x, y] = exp({value} - mx[x]) / reshape(s[x], x, 1);\n{''.join(lines)}o.compile();\n")
    return src, {"x": draw(space.extent(17)), "y": draw(space.extent(25))}


@st.composite
def attention(draw, space: Space = CORNERS):
    """Attention over small odd shapes: the scores (masked by a bound or not) inlined, the max, the
    sum and the product in one online walk over l (flash attention, split into chunks or not) or
    the max and the sum first and the product after."""
    score = "rdot(Q[m, k], K[l, k], k)"
    if draw(st.booleans()):
        score = f"where({draw(_bound('l', 'm'))}, {score}, -inf)"
    block = draw(st.sampled_from(space.blocks))
    tiles = f"m:{draw(_tile(space, block))}, n:0, k:{draw(st.sampled_from((0,) + NPOT_TILES))}, " \
            f"l:{draw(_tile(space, reduction=True))}"
    if draw(st.booleans()):
        walk = "mx.compute_with(num, l);\ndvsr.compute_with(num, l);\n" + draw(_split("num", "l", space))
    else:
        walk = "dvsr.compute_with(mx, l);\n"
    src = ("Func out, s, mx, e, dvsr, num;\nIn Q, K, V;\nVar m, n;\nRVar k, l;\n"
           f"s[m, l] = {score};\nmx[m] = rmax(s[m, l], l);\ne[m, l] = exp(s[m, l] - mx[m]);\n"
           "dvsr[m] = rsum(e[m, l], l);\nnum[m, n] = rdot(e[m, l], V[l, n], l);\n"
           "out[m, n] = num[m, n] / reshape(dvsr[m], m, 1);\n"
           f"out.block(m:{block});\nout.tensorize({tiles});\n{draw(_persistent('out', space))}"
           "s.inline();\ne.inline();\n"
           f"num.fuse_at(out, m);\nmx.fuse_at(out, m);\ndvsr.fuse_at(out, m);\n{walk}out.compile();\n")
    return src, {"m": draw(space.extent(13)), "l": draw(space.extent(25)), "k": draw(space.extent(6)),
                 "n": draw(space.extent(5))}


@st.composite
def mean_and_variance(draw, space: Space = CORNERS):
    """Layernorm's statistics over padded tiles: the mean and the variance in one walk (Chan's
    update, merging each tile's count and mean) or in two (the mean split or not), and stored as
    outputs too."""
    lines = [draw(_row_blocks("o", "x", "y", space)), "mean.fuse_at(o, x);\nvar.fuse_at(o, x);\n"]
    if draw(st.booleans()):  # (dt cannot split a variance computed with its mean yet)
        lines.append("var.compute_with(mean, y);\n")
    else:
        for f in ("mean", "var"):
            if draw(st.booleans()):
                lines.append(f"{f}.tensorize(y:{draw(_tile(space, reduction=True))});\n")
        lines.append(draw(_split("mean", "y", space)))
    if draw(st.booleans()):
        lines.append("mean.compile();\nvar.compile();\n")
    src = ("Func o, mean, var;\nIn A;\nVar x;\nRVar y;\nmean[x] = rsum(A[x, y], y) / len(y);\n"
           "var[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);\n"
           f"o[x, y] = (A[x, y] - mean[x]) * rsqrt(var[x] + 0.5);\n{''.join(lines)}o.compile();\n")
    return src, {"x": draw(space.extent(17)), "y": draw(space.extent(25))}


@st.composite
def top_k(draw, space: Space = CORNERS):
    """rargtopk over rows of padded tiles, k (len(i)) from 1 to more than a row holds, of values
    masked by a bound or not; alone, or fused into the kernel gathering the values, or before it."""
    value = draw(st.sampled_from(("A[x, y]", "-A[x, y]", f"where({draw(_bound('y', 'x'))}, A[x, y], -inf)")))
    form = draw(st.sampled_from(("alone", "fused", "two_kernels")))
    if form == "alone":
        src = (f"Func ti;\nIn A;\nVar x, i;\nRVar y;\nti[x, i] = rargtopk({value}, y, i);\n"
               f"{draw(_row_blocks('ti', 'x', 'y', space, pure='i', whole=True))}ti.compile();\n")
    else:
        gather = "Func tv, ti;\nIn A;\nVar x, i;\nRVar y;\n" \
                 f"ti[x, i] = rargtopk({value}, y, i);\ntv[x, i] = A[x, ti[x, i]];\n"
        if form == "fused":
            schedule = draw(_row_blocks("tv", "x", "y", space, pure="i", whole=True)) + \
                "ti.fuse_at(tv, x);\nti.compile();\ntv.compile_to_kernel();\n"
        else:
            schedule = f"ti.tensorize(i:0, y:{draw(_tile(space, reduction=True))});\nti.compile();\n" + \
                draw(_blocked("tv", ["x", "i"], space=space)) + "\ntv.compile();\n"
        src = gather + schedule
    return src, {"x": draw(space.extent(13)), "y": draw(space.extent(25)), "i": draw(st.integers(1, 9))}


SCANS = ("cumsum", "cumprod", "cummax", "cummin")


@st.composite
def scans(draw, space: Space = CORNERS):
    """cumsum, cumprod, cummax and cummin walked in padded tiles with a carry between them: along
    rows (in blocks of rows), along columns (the other dimension in one tile), of a shifted read,
    and a running normaliser p / cumsum(p)."""
    op = draw(st.sampled_from(SCANS))
    value = draw(st.sampled_from(("A[x, y]", "A[x, y - 1]", "A[x, (y + 2) % len(y)]")))
    if op == "cumprod":  # factors near 1: 25 of them stay far inside every dtype's range
        value = f"(1.0 + 0.25 * {value})"
    form = draw(st.sampled_from(("rows", "columns", "normalised")))
    if form == "rows":
        src = f"Func out;\nIn A;\nVar x, y;\nout[x, y] = {op}({value}, y);\n"
        schedule = draw(_row_blocks("out", "x", "y", space))
    elif form == "columns":  # out[y, x]: the scan outermost, x in one tile (its block, or whole)
        src = f"Func out;\nIn A;\nVar y, x;\nout[y, x] = {op}({value}, y);\n"
        block = draw(st.sampled_from(space.blocks)) if draw(st.booleans()) else None
        schedule = (f"out.block(x:{block});\nout.tensorize(y:{draw(_tile(space))}, x:{block});\n" if block else
                    f"out.tensorize(y:{draw(_tile(space))}, x:0);\n")
    else:
        src = f"Func out, p;\nIn A;\nVar x, y;\np[x, y] = exp({value});\nout[x, y] = p[x, y] / {op}(p[x, y], y);\n"
        schedule = draw(_row_blocks("out", "x", "y", space)) + ("p.inline();\n" if draw(st.booleans()) else "")
    extents = {"x": draw(space.extent(13)), "y": draw(space.extent(25))}
    if "%" in value:  # A's second axis is bound by no read
        extents["A_axis1"] = draw(space.extent(25))
    return src + schedule + "out.compile();\n", extents


@st.composite
def index_reductions(draw, space: Space = CORNERS):
    """Reductions whose reads are index expressions of the reduced dimension and a pure one: a
    causal convolution (X[c, t - j]), a centred one, a stride (2 * t + j), a floor division, a
    remainder, a shifted read of an inlined producer; split or not."""
    read = draw(st.sampled_from(("X[c, t - j]", "X[c, t + j - (len(j) - 1)]", "X[c, t + j - 1]", "X[c, 2 * t + j]",
                                 "X[c, (t + j) // 2]", "X[c, (t * 3 + j) % len(t)]", "f[c, t - j]")))
    op = draw(st.sampled_from(("rsum", "rmax", "rsum")))
    producer = "f[c, t] = exp(X[c, t]);\n" if "f[" in read else ""
    schedule = draw(_blocked("o", ["c", "t"], ["j"], space=space)) + "\n" + draw(_split("o", "j", space))
    if producer:
        schedule += "f.inline();\n"
    funcs = "o, f" if producer else "o"
    src = (f"Func {funcs};\nIn W, X;\nVar c, t;\nRVar j;\n{producer}o[c, t] = {op}(W[c, j] * {read}, j);\n"
           f"{schedule}o.compile();\n")
    extents = {"c": draw(space.extent(5)), "t": draw(space.extent(25)), "j": draw(space.extent(6))}
    if "2 * t" in read or "//" in read or "%" in read:  # X's time axis is bound by no read
        extents["X_axis1"] = draw(space.extent(25))
    return src, extents


@st.composite
def walk_sums(draw, space: Space = CORNERS):
    """Column sums (maxima, minima) split over the rows x and taken in the walk of the element-wise
    kernel over them (a layernorm backward's dw and db), in blocks and tiles of rows that do not
    divide them, by programs that may walk several blocks (persistent)."""
    block = draw(st.sampled_from(space.blocks))
    tile = draw(_tile(space, block))
    op = draw(st.sampled_from(("rsum", "rmax", "rmin")))
    k_block = draw(st.sampled_from(space.blocks))
    src = ("Func o, cs, cq;\nIn A, W;\nVar k;\nRVar x;\no[x, k] = A[x, k] * W[k];\n"
           f"cs[k] = {op}(A[x, k] * W[k], x);\ncq[k] = rsum(A[x, k] * A[x, k], x);\n"
           f"o.block(x:{block});\no.tensorize(x:{tile}, k:0);\n{draw(_persistent('o', space))}o.compile();\n"
           f"cs.split(x:{block});\ncq.split(x:{block});\ncs.compute_with(o, x);\ncq.compute_with(cs, x);\n"
           f"cs.block(k:{k_block});\ncs.tensorize(k:{draw(_tile(space, k_block))});\ncq.fuse_at(cs, k);\n"
           "cq.compile();\ncs.compile();\n")
    return src, {"x": draw(space.extent(25)), "k": draw(space.extent(13))}


@st.composite
def nested_reductions(draw, space: Space = CORNERS):
    """A reduction of a reduction over padded tiles of both: nested in one expression, or the inner
    one a Func fused at the outer one's loop (computed per tile of it) or at root."""
    inner, outer = draw(st.sampled_from(("rmax", "rsum", "rmin"))), draw(st.sampled_from(("rsum", "rmax")))
    form = draw(st.sampled_from(("nested", "fused", "root")))
    if form == "nested":
        src = f"Func s;\nIn A, B;\nVar x;\nRVar y, z;\ns[x] = {outer}({inner}(A[x, y, z], z) * B[y], y);\n" + \
            draw(_blocked("s", ["x"], ["y", "z"], space=space)) + "\n"
    else:
        src = (f"Func s, p;\nIn A, B;\nVar x;\nRVar y, z;\np[x, y] = {inner}(A[x, y, z], z);\n"
               f"s[x] = {outer}(p[x, y] * B[y], y);\n" + draw(_blocked("s", ["x"], ["y"], space=space)) + "\n")
        if form == "fused":
            src += "p.fuse_at(s, y);\n"
        if draw(st.booleans()):
            src += f"p.tensorize(z:{draw(_tile(space, reduction=True))});\n"
    return src + "s.compile();\n", {"x": draw(space.extent(7)), "y": draw(space.extent(13)),
                                     "z": draw(space.extent(13))}


@st.composite
def updates(draw, space: Space = CORNERS):
    """Updates at computed rows (an embedding's backward: atomic adds on Triton) in padded tiles of
    the tokens and of the row, some indices outside the Func (they write nothing); or a store at a
    shifted row, one writer an element."""
    row = draw(st.sampled_from(("I[t]", "I[t] - 1", "I[t] + 1", "t + 1", "2 * t", "t // 2")))
    adds = "I[" in row or "//" in row or draw(st.booleans())  # a store of repeated rows is undefined
    g_blocks = draw(_blocked("g", ["v", "d"], space=space))
    u_blocks = draw(_blocked("g_update", ["t", "d"], space=space))
    src = (f"Func g;\nIn E, G{', I' if 'I[' in row else ''};\nVar v, d, t;\ng[v, d] = E[v, d] * 0.5;\n"
           f"g[{row}, d] {'+=' if adds else '='} G[t, d] * 2.0;\n{g_blocks}\n{u_blocks}\ng.compile();\n")
    return src, {"v": draw(space.extent(13)), "d": draw(space.extent(13)), "t": draw(space.extent(17))}


CORNER_FAMILIES = (bounded_reductions, split_walks, online_softmax, attention, mean_and_variance, top_k, scans,
                   index_reductions, walk_sums, nested_reductions, updates, row_reduction, indexed, elementwise, matmul,
                   batched, two_matmuls)
# Operations of which ties, NaN and +-inf make NaN or inf throughout (which would hide a lane too
# many): a Case with none of them (max, min, arg-reductions, top-k, cummax, cummin) may have specials.
SUMS = re.compile(r"\b(rsum|rdot|cumsum|cumprod|exp|rsqrt|sigmoid|tanh)\b")


@st.composite
def corner_cases(draw, family, dtypes=("f32", "f32", "f16", "bf16")):
    """A Case of `family` (one of CORNER_FAMILIES) in the CORNERS space; f32 most often, whose
    tolerance sees a single lane too many."""
    source, extents = draw(family(CORNERS))
    specials = not SUMS.search(source) and draw(st.booleans())
    return Case(source, extents, draw(st.sampled_from(dtypes)), specials)
