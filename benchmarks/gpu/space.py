"""The schedules `tune.py` tries for each benchmark row: DT schedule text over blockings,
tiles, program orders, warps and stages, written for each kernel's algorithm (the algorithm
part of the kernel's program in cases.py). Only plausible points are generated: tiles of a
few to a few dozen elements per thread, and tiles that fit in registers; then those dt's
performance warnings call slow at the row's shape are dropped (`PRUNED`)."""
from __future__ import annotations

import re

import dt
from cases import EXAMPLES, Case
from dt.ir.check.schedule import PRIMITIVES
from dt.tune.space import PRUNED

SCHEDULE_LINE = re.compile(rf"^\s*\w+\.({'|'.join(PRIMITIVES)})\s*\(")


def algorithm(case: Case, program=None) -> str:
    """The declarations and definitions of the kernel's program (or of `program`, another
    formulation of the same algorithm), without its schedule or comments."""
    lines = [line for line in (program or case.kernel.program).read_text().splitlines()
             if not line.lstrip().startswith("#") and not SCHEDULE_LINE.match(line)]
    return "\n".join(lines).strip() + "\n\n"


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _per_thread(elements: int, warps: int) -> int:
    return elements // (warps * 32)


# Row-wise kernels: the Func computed, and the reductions fused at its row loop (softmax_grad: the
# backward row of benchmarks/gpu/backward.py, its algorithm as dt.grad derives it).
ROWWISE = {"softmax": ("_softmax", ("_sum",)), "softmax_safe": ("_softmax", ("_max", "_sum")),
           "layernorm": ("layernorm", ("mean", "variance")), "rmsnorm": ("rmsnorm", ("ms",)),
           "softmax_grad": ("grad_A", ("d__sum",))}
# Row-wise kernels whose statistics can share one walk over a tiled row (compute_with), offered
# on walks of one width over rows longer than the given width (layernorm's third pass comes
# from L2 up to 16384 wide, where the two-pass statistics measured no faster: docs/studies.md,
# layernorm_onepass), and on every walk whose statistics tiles are wider than its output's.
ONE_PASS = {"layernorm": ("variance.compute_with(mean, y);\n", 16384),
            "softmax_safe": ("_sum.compute_with(_max, y);\n", 0)}
# Element-wise kernels: the Func computed, and helpers inlined into it.
ELEMENTWISE = {"relu": ("relu_out", ()), "add": ("add_out", ()), "swish": ("swish_out", ("tmp",)),
               "dyt": ("dyt", ())}


def _rowwise(case: Case):
    out, fused = ROWWISE[case.kernel.name]
    y = case.extents["y"]
    fuse = "".join(f"{f}.fuse_at({out}, x);\n" for f in fused)
    if _pow2(y) <= 16384:  # a whole row (or several) in one tile
        for rows in (1, 2, 4, 8, 16):
            elements = rows * _pow2(y)
            if elements > 16384:
                break
            for warps in (1, 2, 4, 8, 16):
                if 4 <= _per_thread(elements, warps) <= 64:
                    yield (f"rows{rows}_w{warps}", f"{out}.block(x:{rows});\n{out}.tensorize(x:0, y:0);\n{fuse}"
                           f"{out}.num_warps({warps});\n{out}.compile_to_kernel();\n")
    if y >= 4096:  # a row per program, walked in tiles (later passes re-read it, mostly from L2)
        # rows this long leave few programs per SM: 32 warps and wider tiles keep more loads in flight
        long_rows = y > 16384
        one_pass, one_pass_above = ONE_PASS.get(case.kernel.name, (None, 0))
        widened_passes = ("", one_pass) if one_pass else ("",)  # statistics walks wider than the output's
        one_passes = widened_passes if y > one_pass_above else ("",)  # walks of one width
        for width in (1024, 2048, 4096, 8192, 16384) + ((32768,) if long_rows else ()):
            if width >= y:
                continue
            for warps in (4, 8, 16) + ((32,) if long_rows else ()):
                # 0: no stage count (unpipelined walks); 2 and 4 pipeline every walk (docs/triton.md, "Stages")
                for stages in ((0, 2, 4) if y > 16384 else (0,)):
                    if not 4 <= _per_thread(width, warps) <= 32:
                        continue
                    pipelining = f"{out}.num_stages({stages});\n" if stages else ""
                    name = f"tiled{width}_w{warps}" + (f"_s{stages}" if stages else "")
                    for shared in one_passes:
                        yield (name + ("_onepass" if shared else ""),
                               f"{out}.block(x:1);\n{out}.tensorize(y:{width});\n{fuse}{shared}"
                               f"{out}.num_warps({warps});\n{pipelining}{out}.compile_to_kernel();\n")
        # the statistics walks read one stream, the output walk several (the row again, a weight,
        # a bias): wider statistics tiles keep more of the row in flight in the same registers
        # (docs/studies.md, layernorm_streams), up to the whole row in one tile, whose one-pass
        # statistics won at 4096x8192 (docs/studies.md, statistics walks up to the whole row)
        widths, warp_counts = ((4096, 8192, 16384), (16, 32)) if long_rows else ((1024, 2048, 4096), (4, 8, 16))
        for width, warps in ((w, n) for w in widths for n in warp_counts if w < y):
            for statistics in (2 * width, 4 * width):
                # the statistics walk holds one stream: up to 64 elements a thread, twice the output walk's
                # bound, and at most the whole (padded) row or 32768
                if (statistics > min(32768, _pow2(y)) or not 4 <= _per_thread(width, warps) <= 32
                        or _per_thread(statistics, warps) > 64):
                    continue
                widen = "".join(f"{f}.tensorize(y:{statistics});\n" for f in fused)
                for shared in widened_passes:
                    yield (f"tiled{width}_statistics{statistics}_w{warps}" + ("_onepass" if shared else ""),
                           f"{out}.block(x:1);\n{out}.tensorize(y:{width});\n{fuse}{widen}{shared}"
                           f"{out}.num_warps({warps});\n{out}.compile_to_kernel();\n")


def _elementwise(case: Case):
    out, inlined = ELEMENTWISE[case.kernel.name]
    y = case.extents["y"]
    inline = "".join(f"{f}.inline();\n" for f in inlined)
    widths = [w for w in (512, 1024, 2048, 4096, 8192) if w <= _pow2(y)]
    if _pow2(y) != y and _pow2(y) <= 8192:
        widths.append(0)  # the whole (padded) row: no column blocks
    for width in widths:
        padded = _pow2(y) if width == 0 else width
        for rows in (1, 2, 4, 8):
            elements = rows * padded
            if not 512 <= elements <= 16384:
                continue
            for warps in (4, 8):
                # down to 2 elements a thread: at 4096x8192 the fastest flat kernels (Inductor's among
                # them) load 8 bytes a thread, not 16 (docs/studies.md, flat_elementwise)
                if not 2 <= _per_thread(elements, warps) <= 32:
                    continue
                block = f"x:{rows}" + (f", y:{width}" if width else "")
                # With blocks along y, the default order (block-rows fastest) has consecutive programs
                # rows apart; map(x, y) walks memory in order (up to 5% faster at 128x65536,
                # docs/studies.md, offsets_and_order).
                for order in ("", f"{out}.map(x, y);\n") if width else ("",):
                    yield (f"x{rows}_y{width or 'all'}_w{warps}" + ("_rowmajor" if order else ""),
                           f"{out}.block({block});\n{out}.tensorize(x:0, y:0);\n{order}{inline}"
                           f"{out}.num_warps({warps});\n{out}.compile{'_to_kernel' if inlined else ''}();\n")


MATMUL_CONFIGS = [  # (block x, block y, k tile, warps, stages)
    (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3), (256, 128, 64, 8, 4),
    (128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 128, 64, 4, 5), (128, 128, 128, 8, 3),
    (128, 256, 32, 8, 5), (64, 256, 64, 4, 4), (128, 64, 64, 4, 4),
]
SKINNY_CONFIGS = [(16, n, k, w, s) for n in (32, 64, 128) for k in (128, 256, 512) for w in (4,) for s in (3, 4, 5)
                  if n * k <= 32768]


# Launch hints tried on the largest tiles: persistent programs with TMA (what expert Hopper
# matmuls do; 3-4% over pointer loads in docs/studies.md, matmul_ceiling), and each alone.
HINTS = {"": "", "_persistent_tma": "{out}.persistent();\n{out}.tma();\n", "_tma": "{out}.tma();\n",
         "_persistent": "{out}.persistent();\n"}
HINTED_CONFIGS = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 5), (128, 128, 64, 8, 4)]


def _matmul(case: Case):
    skinny = case.extents["x"] <= 64
    out, fused = ("mm", "") if case.kernel.name == "matmul" else ("out", "mm.fuse_at(out, y);\n")
    for bx, by, bk, warps, stages in (SKINNY_CONFIGS if skinny else MATMUL_CONFIGS):
        for group in ((1,) if skinny else (8, 16)):
            for suffix, hints in HINTS.items():
                if suffix and (skinny or (bx, by, bk, warps, stages) not in HINTED_CONFIGS
                               or (group == 16 and suffix != "_persistent_tma")):
                    continue
                order = f"{out}.map(x:x1/{group}, y, x1);\n" if group > 1 else ""
                yield (f"{bx}x{by}x{bk}_w{warps}_s{stages}_g{group}{suffix}",
                       f"{out}.block(x:{bx}, y:{by});\n{out}.tensorize(x:{bx}, y:{by}, k:{bk});\n{order}{fused}"
                       f"{out}.num_warps({warps});\n{out}.num_stages({stages});\n{hints.format(out=out)}{out}.compile"
                       f"{'_to_kernel' if fused else ''}();\n")


def _two_mm(case: Case):
    inner = case.kernel.name == "2mm_inner"
    for bm in ((32, 64, 128) if inner else (16, 32, 64)):
        for bn in ((64, 128) if inner else (0,)):
            for warps in ((4, 8) if inner else (2, 4)):
                for stages in (1, 2):
                    if inner:
                        schedule = (f"_2mm.block(m:{bm}, n:{bn});\n_2mm.tensorize(m:{bm}, n:{bn}, k:0, l:0);\n"
                                    "mm.fuse_at(_2mm, l);\n")
                    else:
                        schedule = (f"_2mm.block(m:{bm});\n_2mm.tensorize(m:{bm}, n:0, k:0, l:0);\n"
                                    "mm.fuse_at(_2mm, m);\n")
                    if bm * max(bn, 64) // (warps * 32) > 64 or bm * 64 // (warps * 32) < 2:
                        continue
                    yield (f"m{bm}_n{bn or 'all'}_w{warps}_s{stages}",
                           schedule + f"_2mm.num_warps({warps});\n_2mm.num_stages({stages});\n"
                           "_2mm.compile_to_kernel();\n")


def _attention_blocks(stages):
    """(rows per block, key tile, warps, stages) of the attention schedules: a few to 64 score
    elements per thread."""
    for bm in (16, 32, 64, 128):
        for lt in (32, 64, 128):
            for warps in (4, 8):
                for stage in stages:
                    if 2 <= bm * lt // (warps * 32) <= 64:
                        yield bm, lt, warps, stage


def _attention_schedules(prefix: str, stages, fused: str, program=None):
    """The attention algorithm's schedules over `_attention_blocks`: `fused` places its Funcs."""
    for bm, lt, warps, stage in _attention_blocks(stages):
        yield (f"{prefix}m{bm}_l{lt}_w{warps}_s{stage}",
               f"attention.block(m:{bm});\nattention.tensorize(m:{bm}, n:0, k:0, l:{lt});\n{fused}"
               f"attention.num_warps({warps});\nattention.num_stages({stage});\n"
               "attention.compile_to_kernel();\n", program)


def _attention(case: Case):
    yield from _attention_schedules("", (1, 2), "mm.inline();\ne.inline();\ndvsr.fuse_at(attention, m);\n"
                                    "sm.fuse_at(attention, l);\n")
    # One pass over l: normalised after the product, the row sums accumulate beside it.
    yield from _attention_schedules("onepass_", (1, 2, 3), "mm.inline();\ne.fuse_at(num, l);\n"
                                    "num.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\n"
                                    "dvsr.compute_with(num, l);\n", EXAMPLES / "attention_onepass.dt")


def _attention_safe(case: Case):
    """examples/attention_safe.dt's two passes (max and shifted sum, then the product) and
    examples/attention_safe_onepass.dt's one (flash attention)."""
    yield from _attention_schedules("", (1, 2), "mm.inline();\ne.inline();\nmx.fuse_at(attention, m);\n"
                                    "dvsr.fuse_at(attention, m);\ndvsr.compute_with(mx, l);\n"
                                    "sm.fuse_at(attention, l);\n")
    # One pass over l, as flash attention: the max, the row sums and the product share num's loop.
    yield from _attention_schedules("onepass_", (1, 2, 3), "mm.inline();\ne.inline();\nnum.fuse_at(attention, m);\n"
                                    "mx.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\n"
                                    "mx.compute_with(num, l);\ndvsr.compute_with(num, l);\n",
                                    EXAMPLES / "attention_safe_onepass.dt")


GENERATORS = {**{k: _rowwise for k in ROWWISE}, **{k: _elementwise for k in ELEMENTWISE},
              "matmul": _matmul, "mmsigmoid": _matmul, "2mm_outer": _two_mm, "2mm_inner": _two_mm,
              "attention": _attention, "attention_safe": _attention_safe}


# A variant raising one of the warnings no fast schedule raises (dt.tune.space.PRUNED) at its
# row's shape is not compiled or timed. Others stand: the 2mm inner fusion recomputes on purpose.


class _Shaped:
    """An input as dt's lint takes it: a shape."""

    def __init__(self, shape):
        self.shape = shape


def cliffs(case: Case, text: str) -> set[str]:
    """The PRUNED warnings a schedule raises at its row's shape and dtype."""
    inputs = {n: _Shaped(tuple(case.extents[d] for d in dims)) for n, dims in case.kernel.inputs.items()}
    found = dt.loads(text, "variant").lint({d: case.extents[d] for d in case.kernel.dt_sizes}, case.dtype, **inputs)
    return {w.code for w in found} & PRUNED


def variants(case: Case, prune: bool = True) -> list[tuple[str, str]]:
    """(name, DT program text) of every schedule tried for this row; `prune`: but those
    raising a PRUNED warning there."""
    found = [(name, algorithm(case, *program) + schedule)
             for name, schedule, *program in GENERATORS[case.kernel.name](case)]
    return [(name, text) for name, text in found if not (prune and cliffs(case, text))]
