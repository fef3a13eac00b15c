"""The space of schedules of a program, derived from its algorithm (issue 31's first part).

For each Func computed at root (a kernel), the choices that shape its kernel: how each of its
dimensions is blocked over programs (one index a program, a power-of-two block, or the whole
extent), the tile each reduction its kernel computes walks in (a power of two, or the whole
extent; the contiguous dimension may also be walked in tiles by one program), and on a GPU its
warps and pipeline stages. Every other schedule statement (fusion,
compute_with, inlining, program order, launch hints, compile) stays as written. A point is
kept when dt's checker accepts it, its tiles fit at the extents, and dt raises none of the
performance warnings that call a schedule slow (`PRUNED`, docs/performance-warnings.md).

    for candidate in prog.space(sizes={"x": 4096, "y": 4096}, dtype="bf16"):
        print(candidate.name, candidate.text)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from dt.errors import DTError
from dt.ir import algorithm as A

SHAPING = ("block", "tensorize", "num_warps", "num_stages")  # the primitives the space chooses
PRUNED = frozenset({"not-on-matrix-units", "registers", "uncoalesced", "one-lane-tiles", "padded-tile"})
ROWS = (1, 4, 16, 64, 128)  # blocks of a dimension that is not the contiguous one
COLUMNS = (64, 128, 256, 1024, 4096)  # blocks of the contiguous (last) dimension
PRODUCT_TILES = (32, 64)  # tiles of a matrix product's reduced dimension
WALKS = (256, 1024, 4096)  # tiles of another reduction's dimension
WARPS = (4, 8, 16)
STAGES = (1, 3)


@dataclass(frozen=True)
class Candidate:
    name: str  # the choices, e.g. 'mm: x128 y128 k64 w8 s3'
    text: str  # the whole program as DT source


@dataclass
class Space:
    """The kept candidates and what became of the others."""
    candidates: list[Candidate] = field(default_factory=list)
    generated: int = 0
    illegal: int = 0  # refused by the checker, or tiles over the limit at the extents
    removed: int = 0  # legal, but raising a PRUNED warning
    pruned: dict[str, int] = field(default_factory=dict)  # warning code -> candidates raising it

    def __iter__(self):
        return iter(self.candidates)

    def __len__(self):
        return len(self.candidates)

    def summary(self) -> str:
        pruned = ", ".join(f"{n} {code}" for code, n in sorted(self.pruned.items())) or "none"
        return (f"{len(self)} schedules kept of {self.generated} generated: {self.illegal} illegal, {self.removed} "
                f"pruned by performance warnings ({pruned})")


def space(prog, sizes: dict[str, int], dtype: str = "f32", backend: str = "triton", limit: int = 4096) -> Space:
    """The schedules of `prog` at these extents (a Space: the kept Candidates, and counts), at
    most `limit` generated."""
    from dt import backends
    from dt.runtime import loads
    gpu = backends.get(backend).capabilities.machine == "gpu"
    extents = prog._extents({}, sizes, "sizes")
    roots = prog.checked.kernel_roots
    per_root = [_choices(prog.checked, root, extents, gpu) for root in roots]
    base = _without_shaping(prog.ast, roots)
    result = Space()
    for combination in itertools.islice(itertools.product(*per_root), limit):
        result.generated += 1
        name = "; ".join(f"{root}: {' '.join(label for label, _ in choice if label)}"
                         for root, choice in zip(roots, combination))
        text = base + "".join(line for choice in combination for _, line in choice)
        try:
            candidate = loads(text, name=prog.name, file=f"<{name}>")
            candidate.check_extents(extents, dtype if isinstance(dtype, str) else "f32")
            found = {w.code for w in candidate.lint(extents, dtype, backend)} & PRUNED
        except DTError:
            result.illegal += 1
            continue
        for code in found:
            result.pruned[code] = result.pruned.get(code, 0) + 1
        result.removed += bool(found)
        if not found:
            result.candidates.append(Candidate(name, text))
    return result


def _choices(checked, root: str, extents: dict[str, int], gpu: bool) -> list[tuple]:
    """Each way to shape one root Func's kernel: a tuple of (label, DT statement) pairs."""
    dims = checked.funcs[root].dims
    reductions = _reductions(checked, root)
    axes = []
    for i, d in enumerate(dims):
        extent = extents[d]
        if i < len(dims) - 2:  # a batch dimension: a program each
            options = [(f"{d}1", f"{root}.block({d}:1);\n", 1)]
        elif i < len(dims) - 1:
            options = [(f"{d}{b}", f"{root}.block({d}:{b});\n", b) for b in ROWS if b < extent]
            options.append((f"{d}*", "", 0))  # the whole extent in one program
        else:  # the contiguous dimension: blocks of it, or all of it in a program, whole or walked in tiles
            options = [(f"{d}{b}", f"{root}.block({d}:{b});\n", b) for b in COLUMNS if b < extent]
            options += [(f"{d}*/{t}", "", t) for t in WALKS if t < extent] + [(f"{d}*", "", 0)]
        axes.append([(label, block, d, size) for label, block, size in options])
    walks = []
    for r, product in reductions.items():
        extent = extents[r]
        if product:  # a whole reduced extent in a product stages all of it in shared memory: only a short one
            tiles = [t for t in PRODUCT_TILES if t < extent] + ([0] if extent <= max(PRODUCT_TILES) else [])
        else:
            tiles = [t for t in WALKS if t < extent] + [0]
        walks.append([(f"{r}{t or '*'}", r, t) for t in tiles])
    warps = [(f"w{w}", f"{root}.num_warps({w});\n") for w in WARPS] if gpu else [("", "")]
    stages = [(f"s{s}", f"{root}.num_stages({s});\n") for s in STAGES] if gpu and reductions else [("", "")]
    choices = []
    for blocks, tiles, warp, stage in itertools.product(itertools.product(*axes), itertools.product(*walks),
                                                       warps, stages):
        tensorize = [f"{d}:{size}" for _, _, d, size in blocks if size != 1] + \
            [f"{r}:{t}" for _, r, t in tiles]
        lines = [(label, block) for label, block, _, _ in blocks] + [(label, "") for label, _, _ in tiles]
        if tensorize:
            lines.append(("", f"{root}.tensorize({', '.join(tensorize)});\n"))
        choices.append(tuple(x for x in lines + [warp, stage] if x != ("", "")))
    return choices


def _reductions(checked, root: str) -> dict[str, bool]:
    """The reduction dimensions the root's kernel walks (its own and its fused producers'),
    each marked True where it is a matrix product's."""
    funcs = [root] + [p for p in checked.fused if _root_of(checked, p) == root]
    found: dict[str, bool] = {}
    for f in funcs:
        for e in A.walk(checked.funcs[f].expr):
            if isinstance(e, A.Reduce):
                found[e.dim] = found.get(e.dim, False) or e.op == "dot"
    return {d: product for d, product in found.items() if d not in checked.funcs[root].dims}


def _root_of(checked, func: str) -> str:
    while func in checked.fused:
        func = checked.fused[func][0]
    return func


def _without_shaping(program: A.Program, roots) -> str:
    """The program's source without the statements the space chooses for its roots."""
    lines = program.source.splitlines(keepends=True)
    cuts: dict[int, list[tuple[int, int]]] = {}
    for call in program.schedule:
        if call.func in roots and call.primitive in SHAPING and call.loc is not None:
            cuts.setdefault(call.loc.line - 1, []).append((call.loc.col - 1, call.loc.col - 1 + call.loc.length))
    for n, spans in cuts.items():
        line = lines[n]
        for start, end in sorted(spans, reverse=True):
            line = line[:start] + line[end:]
        lines[n] = line if line.strip() else ""
    text = "".join(lines)
    return text if text.endswith("\n") else text + "\n"

