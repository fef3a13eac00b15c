"""The space of schedules of a program, derived from its algorithm (issue 31's first part).

For each Func computed at root (a kernel), the choices that shape its kernel: how each of its
dimensions is blocked over programs (one index a program, a power-of-two block, or the whole
extent), the tile each reduction its kernel computes walks in (a power of two, or the whole
extent; the contiguous dimension may also be walked in tiles by one program), where it has few
programs its reduction split in chunks across programs (the sums fused beside it split alike),
and on a GPU its warps and pipeline stages, for a product its launch hints, and for a kernel
without one whether it streams what it reads once (`stream()`). A kernel whose walk over its rows
sums split Funcs' chunks (`dw.compute_with(dx, x)`) takes chunks of rows a program, those Funcs
split alike. Every other schedule statement (fusion, compute_with, inlining, compile, a split
written) stays as written; the program as written is timed too. A point is kept when dt's
checker accepts it, its tiles fit, and dt raises no warning that calls a schedule slow (`PRUNED`).

    for candidate in prog.space(sizes={"x": 4096, "y": 4096}, dtype="bf16"):
        print(candidate.name, candidate.text)
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field

from dt.dtypes import ITEM_BYTES
from dt.errors import DTError
from dt.ir import algorithm as A
from dt.ir.check.compute_with import top_reductions
from dt.ir.check.split import reductions_to_split
from dt.tune.dtypes import item_bytes, resolved

SHAPING = ("block", "tensorize", "map", "num_warps", "num_stages", "persistent", "tma", "stream")  # the primitives chosen
FUSION = ("fuse_at", "inline", "compute_with")  # chosen where an alternative exists (_fusion)
# (nothing-to-stream: the same kernel as without stream(), so a duplicate)
PRUNED = frozenset({"not-on-matrix-units", "registers", "uncoalesced", "one-lane-tiles", "padded-tile", "nothing-to-stream"})
ROWS = (1, 2, 4, 8, 16, 32, 64, 128)  # blocks of a dimension that is not the contiguous one
COLUMNS = (64, 128, 256, 1024, 4096)  # blocks of the contiguous (last) dimension
PRODUCT_BLOCKS = (16, 32, 64, 128, 256)  # blocks of a matrix product's output dimensions
PRODUCT_TILES = (32, 64, 128, 256)  # tiles of a matrix product's reduced dimension (the deep ones: few rows)
KEY_TILE = 128  # the deepest for a reduction that is another product's output dimension (attention's keys)
SHARED_MEMORY = 227 * 1024  # what a program may take on Hopper; more is refused at launch
# tiles of another reduction's dimension (long rows: the widest)
WALKS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
WARPS = (1, 2, 4, 8, 16, 32)
PRODUCT_WARPS = (4, 8, 16)  # a warp group (4) at least: Hopper's matrix instructions
STAGES = (1, 3)
PRODUCT_STAGES = (3, 4, 5)  # a product's loads are pipelined by Triton itself: at least 3 deep
CHAINED_STAGES = (2, 3, 4)  # products in a chain (attention): Hopper's Gluon twins' ring, 2 fastest
# split reductions (f.split(r:chunk)) for a kernel of fewer programs than this (four to each of an
# H100's 132 multiprocessors): its reduction walked in chunks of these, each chunk's in programs of its own
SPLIT_BELOW = 528
CHUNKS = (1024, 2048, 4096, 8192, 16384)
# rows a program of a kernel whose walk over them sums split Funcs' chunks (dw.compute_with(dx, x)):
# the chunk is its block, chosen with it, the rows walked one at a time
WALK_CHUNKS = (16, 32, 64, 128, 256)
WALK_STAGES = (1, 3, 4)  # its loads of the next rows in flight (4 stages: up to 1.4x faster than 2 on an H100)


@dataclass(frozen=True)
class Candidate:
    name: str  # the choices, e.g. 'mm: x128 y128 k64 w8 s3'
    text: str  # the whole program as DT source
    choices: tuple[tuple[str, str], ...] = ()  # (slot, value), e.g. ('mm.x', 'x128'): what a search varies


@dataclass
class Space:
    """The kept candidates and what became of the others."""
    candidates: list[Candidate] = field(default_factory=list)
    generated: int = 0
    illegal: int = 0  # refused by the checker, or tiles over the limit at the extents
    removed: int = 0  # legal, but raising a PRUNED warning
    pruned: dict[str, int] = field(default_factory=dict)  # warning code -> candidates raising it
    everywhere: list = field(default_factory=list)  # (code, message) every legal schedule raises: not pruned by

    def __iter__(self):
        return iter(self.candidates)

    def __len__(self):
        return len(self.candidates)

    def summary(self) -> str:
        pruned = ", ".join(f"{n} {code}" for code, n in sorted(self.pruned.items())) or "none"
        return (f"{len(self)} schedules kept of {self.generated} generated: {self.illegal} illegal, {self.removed} "
                f"pruned by performance warnings or shared memory ({pruned})")


def space(prog, sizes: dict[str, int], dtype: str | dict[str, str] = "f32", backend: str = "triton",
          limit: int = 4096) -> Space:
    """The schedules of `prog` at these extents for inputs of `dtype` (one name, or one per input:
    dt.tune.dtypes) (a Space: the kept Candidates, and counts), at most `limit` generated: where
    there are more points, a seeded random sample of them."""
    from dt import backends
    from dt.frontend.parser import parse
    from dt.runtime import Program
    gpu = backends.get(backend).capabilities.machine == "gpu"
    # the program's own dimensions (a split's chunk dimension is derived: each candidate derives its own)
    extents = {d: n for d, n in prog._extents({}, sizes, "sizes").items() if d not in prog.checked.chunk_dims}
    # the kernels the program's own Funcs root (a split's partials kernel takes its Func's schedule)
    roots = tuple(r for r in prog.checked.kernel_roots if r not in prog.checked.partials)
    dtype = resolved(prog, dtype)
    item = item_bytes(dtype)
    # each input's own bytes (int8 data beside float32 scales; every input int8 or fp8)
    input_bytes = {n: ITEM_BYTES.get(d, item) for n, d in dtype.items()} if isinstance(dtype, dict) else \
        {n: ITEM_BYTES.get(dtype, item) for n in prog.inputs}
    walks = _walk_splits(prog.checked)
    shaped = [_choices(prog.checked, root, extents, gpu, item, walks.get(root), input_bytes) for root in roots]
    per_root = [choices for choices, _ in shaped]
    over = sum(n for _, n in shaped)  # ways whose product tiles take more shared memory than a GPU has
    fusion = _fusion(prog)
    parts = list(roots)
    if len(fusion) > 1:  # the fusion statements are chosen too
        per_root.append(fusion)
        parts.append("fusion")
    base = without_shaping(prog.ast, roots, fusion=len(fusion) > 1,
                           splits=tuple(f for _, funcs in walks.values() for f in funcs))
    result = Space(pruned={"shared-memory": over} if over else {})
    legal = []  # (candidate, the PRUNED warnings it raises as (code, message))
    for combination in _points(per_root, limit):
        result.generated += 1
        name = "; ".join(f"{root}: {' '.join(label for _, label, _ in choice if label)}"
                         for root, choice in zip(parts, combination) if root != "fusion" or
                         any(label for _, label, _ in choice))
        text = base + "".join(line for choice in combination for _, _, line in choice)
        slots = tuple((f"{root}.{slot}", label) for root, choice in zip(parts, combination)
                      for slot, label, _ in choice if slot)
        try:
            candidate = Program(parse(text, f"<{name}>", prog.name, parsed=base))
            candidate.check_extents(extents, dtype)
            found = {(w.code, w.message) for w in candidate.lint(extents, dtype, backend) if w.code in PRUNED}
        except DTError:
            result.illegal += 1
            continue
        legal.append((Candidate(name, text, slots), found))
    # a warning every schedule raises is the program's or the dtype's (float32 products in IEEE
    # precision), not a schedule's: it prunes nothing
    result.everywhere = sorted(set.intersection(*(found for _, found in legal))) if legal else []
    for candidate, found in legal:
        codes = {code for code, message in found if (code, message) not in result.everywhere}
        for code in codes:
            result.pruned[code] = result.pruned.get(code, 0) + 1
        result.removed += bool(codes)
        if not codes:
            result.candidates.append(candidate)
    return result


def _points(per_root: list[list], limit: int):
    """Every combination of the roots' choices, or `limit` of them drawn at random (seeded) where
    there are more: a sample of the whole space, not its first corner."""
    total = math.prod(len(c) for c in per_root)
    if total <= limit:
        yield from itertools.product(*per_root)
        return
    rng, drawn = random.Random(0), set()
    while len(drawn) < limit:  # one index per root: no range of `total` (past 2**63 for many kernels)
        drawn.add(tuple(rng.randrange(len(choices)) for choices in per_root))
    for point in sorted(drawn):
        yield tuple(choices[i] for choices, i in zip(per_root, point))


def _shared_bytes(blocks, tiles, launch, loads, extents: dict, item: int, input_bytes: dict | None = None) -> int:
    """What a product kernel's loads take in shared memory: each tile it loads (_staged_loads) in the
    innermost walk of a reduction in tiles is pipelined, in as many buffers as stages where
    it is a matrix-unit product's operand and one fewer otherwise; one read outside that walk
    (attention's query tile) takes one; with TMA the output tile its store stages takes one.
    What Triton 3.9 allocates compiling for sm_90 (tests/test_tune_space.py; the decode step's as the
    H100's Triton 3.6 refused it): a 128x256x64 bf16 matmul in
    4 stages with TMA 262,176 bytes, this says 262,144; attention's 128 x 128 query tile and 64 x 128
    key and value tiles in 3 stages 131,072 (131,072); a decode step's 256 x 128 key tiles and 256 x 32
    value tiles in 4 stages 247,808 (246,016); 2mm's inner product walked inside the outer one's loop
    122,880 (155,648: nested walks are over-counted); 2mm's whole reductions in 128 x 128 blocks, persistent
    with TMA in 5 stages, 237,656 (237,568: every tile pipelined along the persistent loop). A tile
    takes `item` bytes an element, or its input's in `input_bytes` (int8 data: one)."""
    reads, depth = loads
    size = {d: size or extents[d] for d, _, _, size in blocks}
    size.update({r: t or extents[r] for r, _, t in tiles})
    walked = {r for r, _, t in tiles if t and t < extents[r]}
    innermost = {r for r in walked if depth[r] == max(depth[w] for w in walked)}
    stages = next((int(label[1:]) for slot, label, _ in launch if slot == "stages"), 1)
    tma = any(label == "persistent+tma" for _, label, _ in launch)
    tile_loop = tma and not walked  # nothing walked: Triton pipelines the persistent loop over tiles instead
    staged = 0
    for name, dims, sides in reads:
        on_matrix_units = sides is not None and all(math.prod(size.get(d, 1) for d in side) >= 16 for side in sides)
        pipelined = tile_loop or dims & innermost
        buffers = 1 if not pipelined else stages if on_matrix_units else max(stages - 1, 1)
        staged += buffers * math.prod(size.get(d, 1) for d in dims) * (input_bytes or {}).get(name, item)
    x, y = ([size[d] for d, _, _, _ in blocks[-2:]] + [1, 1])[:2]  # a vector's product (one output dimension): by 1
    return staged + (x * y * item if tma else 0)


def _staged_loads(checked, root: str) -> tuple[list[tuple], dict[str, int]]:
    """The tiles root's kernel loads inside its reductions — of inputs, and of Funcs other kernels
    store — each (its dimensions, and where it is an operand of a product: the dimensions of that
    product's two output sides, else None); and how deep each reduction's walk is nested in the
    others (0: outermost), through the Funcs fused into the kernel (2mm's inner product is walked
    inside the outer one's loop)."""
    own = set(_own_funcs(checked, root))
    found, depth, entered = {}, {}, set()

    def loaded(e):
        return isinstance(e, A.Access) and (e.kind == "input" or e.kind == "func" and e.name not in own)

    def visit(e, level):
        if isinstance(e, A.Access) and e.kind == "func" and e.name in own and (e.name, level) not in entered:
            entered.add((e.name, level))
            visit(checked.algorithm[e.name].expr, level)
        if level and loaded(e):  # read inside a walk, by a Func fused there (h[m, k] = X[m, k] * 2.0)
            key = (e.name, frozenset(A.free_dims(e)))
            found[key] = found.get(key)
        if isinstance(e, A.Reduce):
            depth[e.dim] = min(depth.get(e.dim, level), level)  # a sibling's walk read inside its own is one walk
            operands = e.args[:2] if e.op == "dot" else ()
            free = [A.free_dims(a) for a in operands]
            for i, arg in enumerate(e.args):
                for access in filter(loaded, A.walk(arg)):
                    dims = frozenset(A.free_dims(access))
                    operand = i < len(operands) and _uncast(arg) is access
                    sides = (free[0] - free[1], free[1] - free[0]) if operand else None
                    found[(access.name, dims)] = found.get((access.name, dims)) or sides
            level += 1
        for child in A.children(e):
            visit(child, level)

    for f in [root] + sorted(own - {root}):  # the root first: fused Funcs at the depth it reads them
        if f not in {name for name, _ in entered}:  # one nothing in the kernel reads (an output stored there)
            visit(A.Access(f, "func", ()), 0)
    return [(name, dims, sides) for (name, dims), sides in found.items()], depth


def _uncast(e):
    return _uncast(e.x) if isinstance(e, A.Cast) else e


def _choices(checked, root: str, extents: dict[str, int], gpu: bool, item: int = 2,
             walk: tuple[str, tuple[str, ...]] | None = None, input_bytes: dict | None = None) -> tuple[list[tuple], int]:
    """(Each way to shape one root Func's kernel, how many more its shared memory ruled out).
    A way is a tuple of (slot, value, DT statement) triples, a slot being one choice ('x' for
    x's block, 'map', 'warps', ...) and its value a label. `walk`: the dimension whose walk sums
    split Funcs' chunks and those Funcs, split in chunks of its block (_walk_splits)."""
    dims = checked.funcs[root].dims
    reductions = _reductions(checked, root)
    product = any(reductions.values())
    loads = _staged_loads(checked, root) if product and gpu else []
    batch = _batch_dims(checked, root) if product else set()
    keys = _key_dims(checked, root) if product else set()
    # the columns of a product reducing over another's output (attention's head n)
    chained = {d for p in _products(checked, root) if p.dim in keys for d in A.free_dims(p.args[1]) - A.free_dims(p.args[0])}
    axes = []
    for i, d in enumerate(dims):
        extent = extents[d]

        def blocks(sizes):  # blocks of d below its extent: (label, statement, tile size)
            return [(f"{d}{b}", f"{root}.block({d}:{b});\n", b) for b in sizes if b < extent]
        if d in batch:  # in both operands of every product of the kernel (decode's heads): a program each
            options = [(f"{d}1", f"{root}.block({d}:1);\n", 1)]
        elif walk is not None and d == walk[0]:  # chunks of rows walked a row at a time, the splits alike
            options = [(f"{d}{b}/1", f"{root}.block({d}:{b});\n" + "".join(f"{f}.split({d}:{b});\n" for f in walk[1]),
                        1) for b in [b for b in WALK_CHUNKS if b < extent] or [extent]]
        elif i < len(dims) - 2:  # a batch dimension: a program each
            options = [(f"{d}1", f"{root}.block({d}:1);\n", 1)]
        elif d in chained and extent <= max(PRODUCT_BLOCKS) and extent & (extent - 1) == 0:
            # blocks would each compute the first product again (attention's head: 1.5x slower, H200)
            options = [(f"{d}*", "", 0)]
        elif product:  # a matrix product's output tile: 16 to 256 a side (tensor-core shapes)
            options = blocks(PRODUCT_BLOCKS) + ([(f"{d}*", "", 0)] if extent <= max(PRODUCT_BLOCKS) else [])
        elif i < len(dims) - 1 or reductions and len(dims) == 1:  # rows (a reduction's one output dimension too)
            options = blocks(ROWS) + [(f"{d}*", "", 0)]  # or the whole extent in one program
        else:  # the contiguous dimension: blocks of it, or all of it in a program, whole or walked in tiles
            options = blocks(COLUMNS) + [(f"{d}*/{t}", "", t) for t in WALKS if t < extent] + [(f"{d}*", "", 0)]
        axes.append([(d, label, block, size) for label, block, size in options])
    plans = _split_plans(checked, root, reductions)
    walks = []
    for r, in_product in reductions.items():
        extent = extents[r]
        if in_product:  # a whole reduced extent in a product stages all of it in shared memory: only a short one
            tiles = [t for t in PRODUCT_TILES if t < extent] + ([0] if extent <= max(PRODUCT_TILES) else [])
            rows = extents[dims[-2]] if len(dims) >= 2 else 1  # deep tiles for a few rows only (a skinny product)
            # as deep in bytes for 8-bit operands (int8, fp8) as 64 elements of 16-bit ones
            eight_bit = all(isinstance(_uncast(x), A.Access) and (input_bytes or {}).get(_uncast(x).name) == 1
                            for p in _products(checked, root) for x in p.args)
            deepest = max(PRODUCT_TILES) if rows <= 64 else KEY_TILE if r in keys or eight_bit else PRODUCT_TILES[1]
            tiles = [t for t in tiles if t <= deepest]
        else:
            tiles = [t for t in WALKS if t < extent] + [0]
        walks.append([(r, f"{r}{t or '*'}", t) for t in tiles])
    gpu_options = [[("warps", f"w{w}", f"{root}.num_warps({w});\n")
                    for w in (PRODUCT_WARPS if product else WARPS)]] if gpu else []
    if gpu and (reductions or walk):  # a walk summing other Funcs' chunks is pipelined by its stages too
        gpu_options.append([("stages", f"s{s}", f"{root}.num_stages({s});\n")
                            for s in (CHAINED_STAGES if keys else PRODUCT_STAGES if product
                                      else WALK_STAGES if walk else STAGES)])
    if gpu and product:  # launch hints: a win for products only (docs/language.md), both together
        gpu_options.append([("launch", "", ""), ("launch", "persistent+tma", f"{root}.persistent();\n{root}.tma();\n")])
    if gpu and not product:  # what the kernel reads once may stream through L2 (docs/language.md)
        gpu_options.append([("cache", "", ""), ("cache", "stream", f"{root}.stream();\n")])
    choices, over = [], 0
    for blocks, tiles, *launch in itertools.product(itertools.product(*axes), itertools.product(*walks),
                                                    *gpu_options):
        if product and gpu and _shared_bytes(blocks, tiles, launch, loads, extents, item, input_bytes) > SHARED_MEMORY:
            over += 1
            continue
        tensorize = [f"{d}:{size}" for d, _, _, size in blocks if size != 1] + [f"{r}:{t}" for r, _, t in tiles]
        lines = [(d, label, block) for d, label, block, _ in blocks] + [(r, label, "") for r, label, _ in tiles]
        if tensorize:
            lines.append(("", "", f"{root}.tensorize({', '.join(tensorize)});\n"))
        for order in _orders(root, dims, blocks, product):
            for split in _splits(plans, root, blocks, tiles, extents):
                choices.append(tuple(lines + [order] + list(launch) + [split]))
    return choices, over


def _split_plans(checked, root: str, reductions: dict) -> dict[str, list[str]]:
    """Each dimension the root's own reduction may be split over -> the Funcs fused into its
    kernel that reduce over it too, split alike and summing in its walk (compute_with: a weight's
    gradient and its bias's). None where the program splits a reduction itself, or where the root
    or such a Func is computed with another already."""
    if _writes_split(checked.program) or checked.schedules[root].compute_with:
        return {}
    fused = [f for f, (at, _) in checked.fused.items() if at == root]
    plans = {}
    for r, in_product in reductions.items():
        if in_product or not _splittable(checked, root, r):
            continue
        siblings = [f for f in fused if top_reductions(checked.funcs[f].expr, r)]
        if all(_splittable(checked, f, r) and not checked.schedules[f].compute_with for f in siblings):
            plans[r] = siblings
    return plans


def _splits(plans: dict[str, list[str]], root: str, blocks, tiles, extents: dict[str, int]) -> list[tuple]:
    """No split, and where the kernel has few programs, each reduction of `plans` walked in
    chunks (`split`) of a whole number of its tiles, shorter than the extent."""
    none = [("split", "", "")]
    programs = math.prod(1 if size == 0 or "*" in label else -(-extents[d] // size) for d, label, _, size in blocks)
    if not plans or programs >= SPLIT_BELOW:
        return none
    options = list(none)
    for r, _, tile in tiles:
        if r not in plans or not tile:
            continue
        for chunk in (c for c in CHUNKS if c % tile == 0 and c < extents[r]):
            lines = f"{root}.split({r}:{chunk});\n" + "".join(
                f"{f}.split({r}:{chunk});\n{f}.compute_with({root}, {r});\n" for f in plans[r])
            options.append(("split", f"{r}/{chunk}", lines))
    return options


def _walk_splits(checked) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each root whose walk over one of its pure dimensions sums split Funcs' chunks ->
    (that dimension, those Funcs): their chunk is the root's block."""
    return {host: (dim, tuple(dict.fromkeys(checked.schedules[p].taken_from for p in partials)))
            for (host, dim), partials in checked.walk_sums.items()}


def _writes_split(program: A.Program) -> bool:
    return any(call.primitive == "split" for call in program.schedule)


def _splittable(checked, func: str, dim: str) -> bool:
    """Whether a split divides func's reductions over dim (the checker's own rules: top-level
    reductions whose chunks combine, an arg-reduction reading inputs only)."""
    try:
        reductions_to_split(func, dim, checked.algorithm, None)
    except DTError:
        return False
    return True


def _orders(root: str, dims: tuple, blocks, product: bool) -> list[tuple]:
    """The program orders worth trying: the default (the first dimension fastest), row-major over
    the blocked dimensions (the last fastest: attention's query blocks of one head in consecutive
    programs, which share its K and V in L2) and, where the last two are both blocked, for a
    product, groups of 8 block rows (L2 reuse, the talk's mm_kernel)."""
    orders = [("map", "", "")]
    blocked = [d for d, label, _, size in blocks if size != 0 and label != f"{d}*" and "/" not in label]
    if len(blocked) >= 2:
        orders.append(("map", "rowmajor", f"{root}.map({', '.join(blocked)});\n"))
    if product and len(dims) >= 2 and blocked[-2:] == list(dims[-2:]):
        x, y = dims[-2:]
        orders.append(("map", "grouped8", f"{root}.map({x}:{x}1/8, {y}, {x}1);\n"))
    return orders


def _reductions(checked, root: str) -> dict[str, bool]:
    """The reduction dimensions the root's kernel walks (its own and its fused producers'),
    each marked True where it is a matrix product's."""
    funcs = _own_funcs(checked, root)
    found: dict[str, bool] = {}
    for f in funcs:  # as written: a split Func's schedule walks the dimension it splits, in its partials' kernel
        for e in A.walk(checked.algorithm[f].expr):
            if isinstance(e, A.Reduce):
                found[e.dim] = found.get(e.dim, False) or e.op == "dot"
    # a dimension whose chunks are summed in another kernel's walk (dw.compute_with(dx, x)): that one walks it
    elsewhere = {checked.schedules[p].walked_in[1] for p in checked.partials
                 if checked.schedules[p].walked_in and checked.schedules[p].taken_from in funcs}
    return {d: product for d, product in found.items() if d not in checked.funcs[root].dims and d not in elsewhere}


def _batch_dims(checked, root: str) -> set[str]:
    """The root's dimensions that both operands of every product its kernel computes span: a
    batch of products (attention's b and h; decode's h, whose product is a row against a matrix)."""
    shared = [A.free_dims(e.args[0]) & A.free_dims(e.args[1]) for e in _products(checked, root)]
    return set(checked.funcs[root].dims).intersection(*shared) if shared else set()


def _key_dims(checked, root: str) -> set[str]:
    """The reductions of root's kernel that are also an output dimension of another product in it:
    attention's keys `l`, the columns of its scores (`rdot(Q, K, k)`) and the reduction of `rdot(e, V, l)`."""
    products = _products(checked, root)
    return {p.dim for p in products} & {d for q in products for d in A.free_dims(q.args[0]) ^ A.free_dims(q.args[1])}


def _products(checked, root: str) -> list[A.Reduce]:
    """The matrix products (rdot) root's kernel computes."""
    return [e for f in _own_funcs(checked, root) for e in A.walk(checked.algorithm[f].expr)
            if isinstance(e, A.Reduce) and e.op == "dot"]


def _own_funcs(checked, root: str) -> list[str]:
    """The program's own Funcs computed in root's kernel (not a split's partials)."""
    return [f for f in checked.kernel_funcs(root) if f not in checked.partials]


def without_shaping(program: A.Program, roots, fusion: bool = False, splits=()) -> str:
    """The program's source without the statements the space chooses for its roots (and with
    `fusion`, without its fuse_at, inline and compute_with statements; the splits of `splits`)."""
    source = program.source
    spans = [_span(source, call.loc) for call in program.schedule if call.loc is not None and
             (call.func in roots and call.primitive in SHAPING or fusion and call.primitive in FUSION or
              call.func in splits and call.primitive == "split")]
    for start, end in sorted(spans, reverse=True):
        line_start = source.rfind("\n", 0, start) + 1
        line_end = source.find("\n", end)
        line_end = len(source) if line_end < 0 else line_end + 1
        alone = not source[line_start:start].strip() and not source[end:line_end].strip()
        source = source[:line_start] + source[line_end:] if alone else source[:start] + source[end:]
    return source if source.endswith("\n") else source + "\n"


def _span(source: str, loc) -> tuple[int, int]:
    """Where a schedule statement lies in the source: from its start to its semicolon, over
    several lines if it is written over several."""
    start = sum(len(line) for line in source.splitlines(keepends=True)[:loc.line - 1]) + loc.col - 1
    return start, source.index(";", start) + 1


def _fusion(prog) -> list[tuple]:
    """The fusion choices, each a tuple of (slot, value, DT statements) triples: for each
    statement as written and its alternatives — an element-wise producer fused at a loop may
    be inlined instead, a compute_with may be dropped — and for each two reductions fused at the
    same loop over a dimension both walk without one, compute_with added in either direction
    (the checker refuses the one that does not hold); none where a Func would be computed with
    two siblings."""
    checked, statements = prog.checked, []
    # Funcs split together share their walk: dropping their compute_with is not a choice
    split = _writes_split(prog.ast)
    defined = {f.name: f for f in prog.ast.funcs}  # inlined Funcs too (checked.funcs has them substituted)
    for call in prog.ast.schedule:
        if call.primitive not in FUSION or call.loc is None:
            continue
        start, end = _span(prog.ast.source, call.loc)
        written = " ".join(prog.ast.source[start:end].split()) + "\n"
        slot = f"{call.func}.{call.primitive}"
        options = [(slot, "", written)]
        reduces = any(isinstance(e, A.Reduce) for e in A.walk(defined[call.func].expr))
        if call.primitive == "fuse_at" and not reduces:
            options.append((slot, f"{call.func}:inline", f"{call.func}.inline();\n"))
        elif call.primitive == "compute_with" and not split:
            options.append((slot, f"{call.func}:alone", ""))
        statements.append(options)
    paired = {frozenset((c.func, c.args[0])) for c in prog.ast.schedule if c.primitive == "compute_with"}
    # the program's own Funcs (not a split's partials)
    fused = sorted((f, at) for f, at in checked.fused.items() if f in defined and at[0] in defined)
    for i, (a, at) in enumerate(fused):
        for b, at_b in fused[i + 1:]:
            shared = _reduced(checked, a) & _reduced(checked, b)
            if at != at_b or frozenset((a, b)) in paired:
                continue
            for r in sorted(shared):  # either direction: the checker keeps the one that holds
                slot = f"{a}+{b}.{r}"
                statements.append([(slot, "", "")] + [(slot, f"{x}+{y}", f"{x}.compute_with({y}, {r});\n")
                                                      for x, y in ((a, b), (b, a))])
    # a Func shares one loop at most (it is computed with one sibling; several may be computed with it)
    return [tuple(point) for point in itertools.product(*statements) if _one_sibling_each(point)] if statements else []


def _one_sibling_each(point) -> bool:
    subjects = [line.split(".", 1)[0] for _, _, line in point if ".compute_with(" in line]
    return len(subjects) == len(set(subjects))


def _reduced(checked, func: str) -> set:
    return {e.dim for e in A.walk(checked.funcs[func].expr) if isinstance(e, A.Reduce)}


