"""What the rules need to know about a kernel: its axes and their lanes, its loops' trip counts,
its program count and the bytes its tensors hold, evaluated at the context's extents where
they are known."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from dt.dtypes import ITEM_BYTES
from dt.errors import Loc
from dt.ir import scheduled as S
from dt.ir.naming import size_name

DEFAULT_WARPS = 4  # what a GPU kernel runs with when its schedule names no num_warps (Triton's)
WARP = 32  # lanes a warp runs in step
SECTOR = 32  # bytes a GPU reads from memory at a time


@dataclass(frozen=True)
class Context:
    """What a lint knows beside the pipeline: the call's extents (dim -> extent; empty when
    unknown), the machine ('gpu' or 'cpu'), the GPU's multiprocessors (an H100's 132 unless
    given), where each schedule statement was written ((func, primitive) -> Loc), which Funcs are
    fused where (producer -> (consumer, dim)), and the warnings the program allows (codes)."""

    extents: Mapping[str, int] = field(default_factory=dict)
    machine: str = "gpu"
    multiprocessors: int = 132
    schedule: Mapping[tuple[str, str], Loc | None] = field(default_factory=dict)
    fused: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    allowed: frozenset[str] = frozenset()

    def schedule_loc(self, func: str, *primitives: str) -> Loc | None:
        """Where the first of `primitives` was written for `func` (None: none was)."""
        return next((self.schedule[(func, p)] for p in primitives if self.schedule.get((func, p))), None)


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


class KernelFacts:
    """One kernel's axes, loops and index values at the context's extents (None where unknown)."""

    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, context: Context):
        self.kernel = kernel
        self.pipeline = pipeline
        self.context = context
        self.warps = kernel.num_warps or DEFAULT_WARPS
        self.env: dict[str, int] = {size_name(d): n for d, n in context.extents.items()}
        self.env["pid"] = 0
        self.axes: dict[str, S.Axis] = {}
        self.loops: dict[str, S.For] = {}
        self.lets = {s.name: s.value for s in S.walk_statements(kernel.body) if isinstance(s, S.Let)}

        def visit(body):  # index values as program 0 sees them in its first step of every loop
            for s in body:
                if isinstance(s, S.Let):
                    self._bind(s.name, s.value)
                elif isinstance(s, S.Axis):
                    self.axes[s.name] = s
                elif isinstance(s, S.For):
                    self.loops[s.var] = s
                    self._bind(s.var, s.start)
                    visit(s.body)
        visit(kernel.body)

    def _bind(self, name: str, value: S.IExpr):
        known = self.value(value)
        if known is not None:
            self.env[name] = known

    def value(self, e: S.IExpr | None) -> int | None:
        if e is None:
            return None
        try:
            return S.evaluate_index(e, self.env)
        except KeyError:
            return None

    @property
    def program_count(self) -> int | None:
        return self.value(self.kernel.program_count)

    def lanes(self, axis: str, padded: bool = False) -> int | None:
        """The lanes of an axis's tile (`padded`: to the power of two a GPU tile takes)."""
        n = self.value(self.axes[axis].size)
        return None if n is None else next_power_of_2(n) if padded else n

    def tile_lanes(self, e: S.TExpr, padded: bool = True) -> int | None:
        """The lanes of the tile computing `e` (1 along the axes it broadcasts along)."""
        sizes = [self.lanes(a, padded) for a in e.dims if a not in e.unit]
        return None if None in sizes else math.prod(sizes)

    def trips(self, loop: S.For) -> int | None:
        start, stop = self.value(loop.start), self.value(loop.stop)
        return None if start is None or stop is None else max(-(-(stop - start) // loop.step), 0)

    def extent(self, dim: str) -> int | None:
        return self.context.extents.get(dim)

    def tensor_bytes(self, name: str) -> int | None:
        spec = self.pipeline.tensor(name)
        sizes = [self.extent(d) for d in spec.dims]
        return None if None in sizes else math.prod(sizes) * ITEM_BYTES[spec.dtype]

    def moved_bytes(self, name: str) -> int | None:
        """The bytes the kernel moves of a tensor it reads or writes: all of it where it loads or
        stores tiles of it; where it only gathers from it or updates it at computed indices, at most
        one element for each lane it walks (a split argmax's combination reads one logit a chunk)."""
        whole = self.tensor_bytes(name)
        statements = list(S.walk_statements(self.kernel.body))
        tiled = any(isinstance(s, S.Store) and s.tensor == name for s in statements) or any(
            isinstance(n, S.Load) and n.tensor == name for s in statements for v in S.statement_values(s)
            for n in S.walk_texpr(v))
        lanes = [self.extent(d) for d in {a.dim for a in self.axes.values()}]
        if tiled or whole is None or None in lanes:
            return whole
        return min(whole, math.prod(lanes) * ITEM_BYTES[self.pipeline.tensor(name).dtype])

    def dim_of(self, axis: str) -> str:
        return self.axes[axis].dim

    def block(self, axis: S.Axis) -> int:
        """The lanes of the axis's dimension each program has: the block (its start is the
        dimension's block start, `{d}_pid * block`, plus a tile loop's step), 1 where the
        start is the program's index along it."""
        for name in S.index_names(axis.start) & set(self.lets):
            value = self.lets[name]
            if isinstance(value, S.IBin) and value.op == "*" and isinstance(value.b, S.IConst):
                return value.b.value
        return 1

    def per_program(self, axis: S.Axis) -> bool:
        """Whether programs have different tiles of the axis (it is blocked)."""
        seen, todo = set(), list(S.index_names(axis.start))
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(S.index_names(self.lets[n]) if n in self.lets else ())
        return "pid" in seen


def statements_with_values(body):
    """(statement, its tile expression) for every Assign and Store of `body`, nested loops included."""
    for s in S.walk_statements(body):
        if isinstance(s, (S.Assign, S.Store)):
            yield s, s.value


def computed(s: S.Assign | S.Store) -> str:
    """What a statement computes, by its DT name."""
    return s.tensor if isinstance(s, S.Store) else s.dt_name or s.name


def quantity(n: float) -> str:
    """1234567 -> '1.2 M', for estimates."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:g}"


def megabytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"
