"""Index analysis of one kernel for the Triton renderer: which index values are int64, and
each axis's padded tile size and mask.

Triton needs power-of-two tile shapes, so an axis whose size is not one is padded (static
sizes at code-generation time, whole extents at launch time through a `{dim}_TILE`
constexpr) and the padding is masked wherever lanes could be read or written.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from dt.dtypes import FLOAT8
from dt.errors import DTBackendError
from dt.ir import scheduled as S
from dt.ir.lint.facts import next_power_of_2

MIN_DOT = 16  # smallest M, N and K a tl.dot takes on every target
EIGHT_BIT = frozenset(FLOAT8) | {"i8"}  # operands whose tl.dot takes a K of 2 * MIN_DOT at least


def dot_minimum(dot: S.Dot) -> tuple[int, int, int]:
    """The least (M, K, N) tile a tl.dot takes: 8-bit operands (i8, fp8) a K of 32 (their wgmma's).
    One rule for the renderer (tl.dot or not, whole extents padded at launch) and the lint."""
    return MIN_DOT, 2 * MIN_DOT if dot.a.dtype in EIGHT_BIT else MIN_DOT, MIN_DOT


@dataclass(frozen=True)
class AxisLayout:
    axis: S.Axis
    tile: int | str  # padded lanes: a power of two, or the `{dim}_SIZE` whose padded tile is launched
    pad_mask: bool  # lanes >= axis.size must be masked because the axis's limit does not cover them

    @property
    def masked(self) -> bool:
        return self.axis.limit is not None or self.pad_mask


# ---------------------------------------------------------------- bounds of index expressions
#
# A linear form is a dict {name: coefficient, None: constant}. `_upper_forms(e)` lists linear
# forms each >= e for every value of the names, expanding Let definitions and taking either
# side of a min; enough to see that `x_block_end - x_block_start` is at most the block size,
# so that a block padded to a power of two needs no mask beyond the block's own.


_MAX_FORMS = 256  # bounds the work on long Let chains; a bound missed only costs a redundant mask


def _add(f, g, sign=1):
    out = dict(f)
    for k, v in g.items():
        out[k] = out.get(k, 0) + sign * v
        if out[k] == 0 and k is not None:
            del out[k]
    return out


def _forms(e: S.IExpr, lets: dict[str, S.IExpr], upper: bool, depth: int = 0) -> list[dict]:
    """Linear forms bounding e from above (upper) or below, possibly none."""
    if depth > 16:
        return []
    if isinstance(e, S.IConst):
        return [{None: e.value}]
    if isinstance(e, S.IVar):
        forms = [{e.name: 1, None: 0}]
        if e.name in lets:
            forms += _forms(lets[e.name], lets, upper, depth + 1)
        return forms
    a, b = e.a, e.b
    if e.op in ("+", "-"):
        sign = 1 if e.op == "+" else -1
        pairs = product(_forms(a, lets, upper, depth + 1), _forms(b, lets, upper == (sign == 1), depth + 1))
        return [_add(f, g, sign) for f, g in pairs][:_MAX_FORMS]
    if e.op == "*":
        k, x = (a, b) if isinstance(a, S.IConst) else (b, a)
        if isinstance(k, S.IConst) and k.value >= 0:
            return [{n: k.value * v for n, v in f.items()} for f in _forms(x, lets, upper, depth + 1)]
        return []
    if (e.op == "min" and upper) or (e.op == "max" and not upper):
        return (_forms(a, lets, upper, depth + 1) + _forms(b, lets, upper, depth + 1))[:_MAX_FORMS]
    return []


def static_upper_bound(e: S.IExpr, lets: dict[str, S.IExpr]) -> int | None:
    """The smallest constant upper bound of e found, or None."""
    constants = [f.get(None, 0) for f in _forms(e, lets, True) if set(f) <= {None}]
    return min(constants) if constants else None


def provably_le(a: S.IExpr, b: S.IExpr, lets: dict[str, S.IExpr]) -> bool:
    bound = static_upper_bound(S.IBin("-", a, b), lets)
    return bound is not None and bound <= 0


# ---------------------------------------------------------------- the kernel's layout


def _index_exprs(s) -> tuple:
    if isinstance(s, S.Let):
        return (s.value,)
    if isinstance(s, S.Axis):
        return tuple(e for e in (s.start, s.size, s.limit) if e is not None)
    if isinstance(s, S.For):
        return (s.start, s.stop)
    if isinstance(s, (S.Assign, S.Store)):
        return tuple(n.value for n in S.walk_texpr(s.value) if isinstance(n, S.Index))
    return ()


class KernelLayout:
    """Facts about one kernel's index space that the renderer needs."""

    def __init__(self, kernel: S.Kernel):
        self.lets: dict[str, S.IExpr] = {}
        self.int64: set[str] = {"pid"}  # the program id is int64 (as in the talk), and what uses it
        # range() over int64 bounds counts in int64 (a causal walk's bounds from m_block_start), and
        # so does what is computed from its variable (TMA takes int32 coordinates: box_start)
        self.int64_loops: set[str] = set()
        for s in S.walk_statements(kernel.body):
            if isinstance(s, S.Let):
                self.lets[s.name] = s.value
                if S.index_names(s.value) & self.int64:
                    self.int64.add(s.name)
                elif S.index_names(s.value) & self.int64_loops:
                    self.int64_loops.add(s.name)
            elif isinstance(s, S.For) and (S.index_names(s.start) | S.index_names(s.stop)) & (
                    self.int64 | self.int64_loops):
                self.int64_loops.add(s.var)
        index_exprs = [e for s in S.walk_statements(kernel.body) for e in _index_exprs(s)]
        self.uses_pid = any("pid" in S.index_names(e) for e in index_exprs)
        self.axes: dict[str, AxisLayout] = {}
        for s in S.walk_statements(kernel.body):
            if isinstance(s, S.Axis):
                self.axes[s.name] = self._axis_layout(s)

    def is_int64(self, e: S.IExpr) -> bool:
        return bool(S.index_names(e) & self.int64)

    def _axis_layout(self, axis: S.Axis) -> AxisLayout:
        limit = axis.limit
        if isinstance(axis.size, S.IConst):
            tile: int | str = next_power_of_2(axis.size.value)
            padded = tile != axis.size.value
        elif isinstance(axis.size, S.IVar) and axis.size.name.endswith("_SIZE"):
            tile, padded = axis.size.name, True
        else:
            raise DTBackendError(f"the triton backend cannot size the tile of axis '{axis.name}': its size "
                                 f"{axis.size} is neither a constant nor a whole extent", axis.loc)
        pad_mask = padded and not (limit is not None and provably_le(S.IBin("-", limit, axis.start), axis.size,
                                                                      self.lets))
        return AxisLayout(axis, tile, pad_mask)
