"""Hypothesis strategies: random legal schedules for several algorithms, and random sizes.

A drawn `Case` is DT source (algorithm + schedule) with extents and a dtype. Whatever the
schedule, every backend must compute what the reference computes: a schedule never changes
the meaning of a program.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

BLOCKS = (1, 2, 3, 4, 8, 16, 32)
TILES = (0, 1, 2, 3, 4, 8, 16)


@dataclass(frozen=True)
class Case:
    source: str
    extents: dict
    dtype: str

    def __repr__(self):  # shown by hypothesis on failure
        return f"Case(extents={self.extents}, dtype={self.dtype!r}, source=\n{self.source})"


@st.composite
def _blocked(draw, func: str, dims: list[str], reductions: list[str] = ()) -> str:
    """block / tensorize / map statements for `func`, legal for any extents."""
    lines = []
    blocks = {d: draw(st.sampled_from(BLOCKS)) for d in dims if draw(st.booleans())}
    if blocks:
        lines.append(f"{func}.block({', '.join(f'{d}:{b}' for d, b in blocks.items())});")
    tiles = {}
    for d in dims:
        if draw(st.booleans()):
            limit = blocks.get(d)
            choice = draw(st.sampled_from(TILES))
            tiles[d] = 0 if limit is not None and choice > limit else choice
    for r in reductions:
        if draw(st.booleans()):
            tiles[r] = draw(st.sampled_from(TILES + (32,)))
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
    return "\n".join(lines)


ELEMENTWISE = ("A[x, y] * B[y] + 1.5", "maximum(A[x, y], 0) - B[y]", "sigmoid(A[x, y]) * tanh(B[y])",
               "where(A[x, y] > B[y], A[x, y], 0.5 * B[y])", "exp(-abs(A[x, y])) / (1 + B[y] * B[y])",
               "A[x, y] * y + x")


@st.composite
def elementwise(draw):
    expr = draw(st.sampled_from(ELEMENTWISE))
    schedule = draw(_blocked("f", ["x", "y"]))
    src = f"Func f;\nIn A, B;\nVar x, y;\nf[x, y] = {expr};\n{schedule}\nf.compile();\n"
    return src, {"x": draw(st.integers(1, 40)), "y": draw(st.integers(1, 70))}


@st.composite
def row_reduction(draw):
    op = draw(st.sampled_from(("rsum", "rmax", "rmin")))
    body = draw(st.sampled_from(("A[x, y]", "exp(A[x, y])", "A[x, y] * A[x, y] - 2")))
    where = draw(st.sampled_from(("root", "x", "y", "alone")))
    if where == "alone":
        schedule = draw(_blocked("s", ["x"], ["y"]))
        src = f"Func s;\nIn A;\nVar x;\nRVar y;\ns[x] = {op}({body}, y);\n{schedule}\ns.compile();\n"
    else:
        schedule = draw(_blocked("o", ["x", "y"]))
        fuse = f"s.fuse_at(o, {where});" if where != "root" else ""
        own_tile = f"s.tensorize(y:{draw(st.sampled_from(TILES))});" if draw(st.booleans()) else ""
        src = (f"Func o, s;\nIn A;\nVar x;\nRVar y;\ns[x] = {op}({body}, y);\n"
               f"o[x, y] = A[x, y] - reshape(s[x], x, 1);\n{schedule}\n{fuse}\n{own_tile}\no.compile();\n")
    return src, {"x": draw(st.integers(1, 30)), "y": draw(st.integers(1, 90))}


@st.composite
def matmul(draw):
    epilogue = draw(st.sampled_from(("none", "fused", "root")))
    if epilogue == "none":
        schedule = draw(_blocked("mm", ["x", "y"], ["k"]))
        src = f"Func mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n{schedule}\nmm.compile();\n"
    else:
        schedule = draw(_blocked("out", ["x", "y"], ["k"] if epilogue == "fused" else []))
        level = draw(st.sampled_from(("x", "y")))
        # Fused at x, mm holds whole rows: out must then take y in one tile too.
        fuse = {"x": "mm.fuse_at(out, x);\nout.tensorize(y:0);", "y": "mm.fuse_at(out, y);"}[level] \
            if epilogue == "fused" else ""
        src = (f"Func out, mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n"
               f"out[x, y] = sigmoid(mm[x, y]);\n{schedule}\n{fuse}\nout.compile();\n")
    return src, {"x": draw(st.integers(1, 40)), "y": draw(st.integers(1, 40)), "k": draw(st.integers(1, 50))}


@st.composite
def two_matmuls(draw):
    fusion = draw(st.sampled_from(("outer", "inner", "root")))
    m_block = draw(st.sampled_from(BLOCKS))
    lines = [f"_2mm.block(m:{m_block});"]
    tiles = [f"m:{draw(st.sampled_from((0, 1, 2, m_block)))}", f"n:{draw(st.sampled_from(TILES))}"]
    k_tile = f"k:{draw(st.sampled_from(TILES))}"
    if fusion == "root":  # mm is its own kernel: its reduction tile is scheduled on mm
        lines.append(f"mm.tensorize({k_tile});")
    else:
        tiles.append(k_tile)
    tiles.append("l:0" if fusion == "outer" else f"l:{draw(st.sampled_from(TILES))}")
    lines.append(f"_2mm.tensorize({', '.join(tiles)});")
    if fusion == "outer":
        lines.append("mm.fuse_at(_2mm, m);")
    elif fusion == "inner":
        lines.append("mm.fuse_at(_2mm, l);")
    src = ("Func _2mm, mm;\nIn A, B, C;\nVar m, n;\nRVar k, l;\nmm[m, l] = rdot(A[m, k], B[k, l], k);\n"
           "_2mm[m, n] = rdot(mm[m, l], C[l, n], l);\n" + "\n".join(lines) + "\n_2mm.compile();\n")
    return src, {d: draw(st.integers(1, 24)) for d in "mnkl"}


@st.composite
def batched(draw):
    schedule = draw(_blocked("f", ["b", "x"], ["y"]))
    src = ("Func f;\nIn A, W;\nVar b, x;\nRVar y;\nf[b, x] = rsum(A[b, x, y] * W[y], y) / len(y);\n"
           f"{schedule}\nf.compile();\n")
    return src, {"b": draw(st.integers(1, 5)), "x": draw(st.integers(1, 20)), "y": draw(st.integers(1, 40))}


SUBSCRIPTS = ("x", "x + {c}", "x - {c}", "{k} * x + {c}", "x // {k}", "(x + {c}) % len(x)", "x * x - {c}", "I[x]")


@st.composite
def indexed(draw):
    """Reads at random index expressions (shifts, strides, floor division, remainders, a gather),
    in an element-wise Func, a reduction or through a producer stored or inlined: 0 outside."""
    sub = draw(st.sampled_from(SUBSCRIPTS)).format(c=draw(st.integers(0, 5)), k=draw(st.integers(1, 4)))
    shift = draw(st.integers(0, 3))
    gather = "I" if "I[" in sub else ""
    form = draw(st.sampled_from(("elementwise", "reduction", "producer")))
    if form == "elementwise":
        schedule = draw(_blocked("o", ["x", "z"]))
        body = f"o[x, z] = A[{sub}, z + {shift}] * 2.0 + A[x, z];"
    elif form == "reduction":
        op = draw(st.sampled_from(("rsum", "rmax", "rmin")))
        schedule = draw(_blocked("o", ["x"], ["z"]))
        body = f"o[x] = {op}(A[{sub}, z - {shift}] + A[x, z], z);"
    else:
        schedule = draw(_blocked("o", ["x", "z"])) + ("\nf.inline();" if draw(st.booleans()) else "")
        body = f"f[x, z] = exp(A[x, z]);\no[x, z] = f[{sub}, z] - A[x, z];"
    dims = "Var x;\nRVar z;" if form == "reduction" else "Var x, z;"
    src = (f"Func o, f;\nIn A{', I' if gather else ''};\n{dims}\n{body}\n{schedule}\no.compile();\n")
    return src, {"x": draw(st.integers(1, 30)), "z": draw(st.integers(1, 40))}


@st.composite
def cases(draw, dtypes=("f32", "f16", "bf16")):
    family = draw(st.sampled_from((elementwise, row_reduction, matmul, two_matmuls, batched, indexed)))
    src, extents = draw(family())
    return Case(src, extents, draw(st.sampled_from(dtypes)))
