"""What dt.debug knows about a pipeline before running it: every tile statement (Assign or
Store) with its hook number, DT location, enclosing loops, the axes and tiles in scope, and
what each tile means in DT terms. Built once per pipeline from the scheduled IR alone."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from dt.backends.numpy.codegen import Renderer
from dt.backends.pysource import Writer
from dt.errors import Loc
from dt.ir import scheduled as S
from dt.ir.ops import REDUCTIONS, SCANS

# rsum, rmax, ..., cumsum, ...: what an accumulator's (a scan's carry's) dt_name is
REDUCTION_FUNCTIONS = frozenset(r.function for r in (*REDUCTIONS.values(), *SCANS.values()))


def tile_statements(pipeline: S.Pipeline):
    """(kernel index, statement) for every Assign and Store, in the order their hooks are numbered."""
    return [(k, s) for k, kernel in enumerate(pipeline.kernels) for s in S.walk_statements(kernel.body)
            if isinstance(s, (S.Assign, S.Store))]


def statement_source(pipeline: S.Pipeline, stmt) -> str:
    """The plain (uninstrumented) Python line of one Assign or Store."""
    w = Writer()
    Renderer(pipeline).statement(stmt, w)
    return w.lines[0].strip()


@dataclass(frozen=True)
class TileVar:
    """A tile variable of the generated kernel, as the debugger shows it."""
    name: str  # the Python variable
    dt_name: str  # the Func or input it holds, or the reduction ('rsum', ...) of an accumulator
    role: str  # 'func' | 'load' | 'accumulator' (also a reduction's other running values)
    axes: tuple[str, ...]  # its axis variables, in order
    dims: tuple[str, ...]  # the dimension of each axis
    loc: Loc | None

    @property
    def meaning(self) -> str:
        at = f" ({_short(self.loc)})" if self.loc else ""
        if self.role == "load":
            return f"load of {self.dt_name}{at}"
        if self.role == "accumulator":
            kind = "accumulator" if "accumulator" in self.name else "update value"
            return f"{self.dt_name} {kind}{at}"
        return f"tile of {self.dt_name}{at}"


@dataclass(frozen=True)
class Statement:
    sid: int
    kernel: int  # index into pipeline.kernels
    node: object  # S.Assign | S.Store
    loc: Loc | None
    text: str  # the generated Python line, without hooks
    target: TileVar | None  # what an Assign defines (None for a Store)
    live: tuple[tuple[str, TileVar], ...]  # (display name, tile) in scope before it runs
    loops: tuple[S.For, ...]  # enclosing loops, outermost first
    axes: tuple[S.Axis, ...]  # axes in scope, innermost last
    first_in_kernel: bool
    dims: dict[str, S.Axis]  # the innermost axis in scope for each dimension
    stop_functions: dict = field(default_factory=dict, compare=False, repr=False)  # dt.debug.debugger's cache

    def condition_keys(self) -> set[str]:
        return {"pid"} | {f.var for f in self.loops} | set(self.dims)


class ProgramInfo:
    def __init__(self, pipeline: S.Pipeline):
        self.pipeline = pipeline
        self.inputs = {t.name for t in pipeline.inputs}
        self.kernel_names = [k.name for k in pipeline.kernels]
        self.statements: list[Statement] = []
        order = tile_statements(pipeline)
        for k, kernel in enumerate(pipeline.kernels):
            _Walker(self, k).body(kernel.body, {}, (), ())
        assert [s.node for s in self.statements] == [s for _, s in order], "hook numbering out of step"
        self.funcs = {s.target.dt_name for s in self.statements if s.target and s.target.role == "func"}
        self.func_lines = {}  # Func -> (file, line) of its definition
        self._definitions: dict[tuple[str, int], list[tuple[int, str]]] = {}  # (file, line) -> [(column, Func)]
        for s in self.statements:
            if s.target and s.target.role == "func" and s.loc is not None:
                self.func_lines.setdefault(s.target.dt_name, (s.loc.file, s.loc.line))
                self._definitions.setdefault((s.loc.file, s.loc.line), []).append((s.loc.col, s.target.dt_name))
        for columns in self._definitions.values():
            columns.sort()

    def func_at(self, loc: Loc) -> str | None:
        """The Func whose definition holds `loc`: of those defined on its line (`f[x] = ...; g[x] = ...`),
        the last to start at or before its column; None where none does."""
        owner = None
        for col, func in self._definitions.get((loc.file, loc.line), ()):
            if col > loc.col:
                break
            owner = func
        return owner

    def kernel_of(self, sid: int) -> str:
        return self.kernel_names[self.statements[sid].kernel]

    def lines(self, file: str | None = None) -> list[int]:
        return sorted({s.loc.line for s in self.statements
                       if s.loc is not None and (file is None or same_file(s.loc.file, file))})


class _Walker:
    def __init__(self, info: ProgramInfo, kernel: int):
        self.info = info
        self.kernel = kernel
        self.first = True

    def body(self, stmts, live: dict[str, TileVar], loops: tuple, axes: tuple):
        live = dict(live)  # names first assigned in a loop body are out of scope after it
        for s in stmts:
            if isinstance(s, S.Axis):
                axes = axes + (s,)
            elif isinstance(s, S.For):
                self.body(s.body, live, loops + (s,), axes)
            elif isinstance(s, (S.Assign, S.Store)):
                target = None
                if isinstance(s, S.Assign):
                    dim_of = {a.name: a.dim for a in axes}
                    target = TileVar(s.name, s.dt_name, self.role(s), s.value.dims,
                                     tuple(dim_of[a] for a in s.value.dims), _load_loc(s) or s.loc)
                self.info.statements.append(Statement(
                    len(self.info.statements), self.kernel, s, s.loc, statement_source(self.info.pipeline, s), target,
                    display_names(live.values()), loops, axes, self.first, {a.dim: a for a in axes}))
                self.first = False
                if target is not None:
                    live.pop(s.name, None)  # re-assignment (an accumulator update) moves it last
                    live[s.name] = target

    def role(self, s: S.Assign) -> str:
        if isinstance(s.value, S.Load):
            return "load"
        if s.dt_name in REDUCTION_FUNCTIONS:  # an accumulator, a one-pass update's running max, mean, a carry
            return "accumulator"
        return "func"


def _load_loc(s: S.Assign) -> Loc | None:
    return s.value.loc if isinstance(s.value, S.Load) else None


def display_names(tiles) -> tuple[tuple[str, TileVar], ...]:
    """Tiles under their DT names; accumulators (and a DT name shown twice, all but the latest)
    under their generated variable names."""
    tiles = list(tiles)
    out: list[tuple[str, TileVar]] = []
    taken: set[str] = set()
    for t in reversed(tiles):
        name = t.dt_name if t.role in ("func", "load") and t.dt_name not in taken else t.name
        taken.add(name)
        out.append((name, t))
    return tuple(reversed(out))


def same_file(loc_file: str, wanted: str) -> bool:
    """`wanted` names `loc_file` exactly, by absolute path, or as a trailing part of its path."""
    if loc_file == wanted:
        return True
    a = os.path.normpath(os.path.abspath(loc_file))
    b = os.path.normpath(wanted)
    return a == os.path.abspath(b) or a.endswith(os.sep + b.lstrip(os.sep))


def _short(loc: Loc) -> str:
    return f"{os.path.basename(loc.file)}:{loc.line}:{loc.col}" if loc.col else f"{os.path.basename(loc.file)}:{loc.line}"
