"""The scheduled IR: the contract between dt's front end and every backend.

A `Pipeline` is a sequence of `Kernel`s. Each kernel is launched over `program_count`
program instances; its body is a list of statements executed by every program instance:
scalar `Let`s (program-id decomposition, block starts; a `LetValue` takes one from the data),
`Axis` definitions (the index range of one tile dimension), sequential `For` loops over tiles,
tile `Assign`ments and masked `Store`s (an update's `Scatter`s). Tile values are expressions over axes (`TExpr`), each
carrying its `dims` (the names of the axes it spans, in order) and its `dtype` ('f32', 'bf16',
..., an integer dtype ('i32', 'i64', ...: index arithmetic, integer data) or 'bool'): leaves hold
theirs, every other node's follows from its operands by the op table's type rules
(dt.ir.ops.result_dtype). Every node carries its DT source location and names.

Sizes are symbolic: `IVar("x_SIZE")` is the extent of dimension x, bound at call time, so one
pipeline serves every shape (dt.ir.index_expr). Nothing here depends on the frontend.

Names are ASCII Python identifiers generated code may use as they are: the launcher, kernels,
parameters and extents (`{dim}_SIZE`) follow one scheme (dt.ir.naming), never a RESERVED_NAME; the
names of Lets, Axes, Assigns and loop variables differ from those (but the launcher's, which no
kernel calls) and from one another within a kernel.

Backends interpret or render these nodes and nothing else. The rules they rely on:
- Element-wise operands already have identical `dims` (or are rank-0 scalars); an operand
  whose `unit` set contains an axis has size 1 along it and broadcasts (NumPy rules).
- A *scalar axis* (`Axis.scalar`: a block of 1) is an offset, not a tile dimension: no tile spans
  it; `Load` and `Store` list it in `indices` (at its start).
- `Load` masks every lane whose index along an axis reaches that axis's `limit` (value 0);
  `Gather` masks every lane whose computed index falls outside its tensor (value 0).
- `Reduce` and `Dot` operands are already masked for the reduced axis, and full-size; a `Scan` is
  an Assign's whole value, its operand full-size (lanes past the limit only reach lanes past it).
- A `Dot` of two i8 operands accumulates in INTEGER_DOT (i32), any other in f32 or f64; its `acc`
  holds that dtype. A `Ref` has its tile's dtype, and a tile assigned again keeps its dtype.
- `Store` writes exactly the valid lanes; its value spans the store's tile axes, in order, full-size.
- An `Axis` with `size` a non-constant (`IVar`) spans a whole extent; backends that need
  power-of-two shapes pad it and mask the padding.
- No statement's expression nests more than dt.ir.nesting.MAX_NESTING levels deep (one more
  where a `Dot` is in the way): the lowering computes deeper ones in parts.
dt.ir.verify checks these rules on every pipeline the lowering makes.

Longer than 500 lines: it is the whole contract, every node a backend renders, in one place.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Union

from dt.errors import Loc
from dt.ir.ops import result_dtype
from dt.ir.index_expr import IBin, IConst, IExpr, IVar, index_names
from dt.ir.naming import RESERVED_NAMES, GlobalNames, size_name
# Reached as S.<name> (`from dt.ir import scheduled as S`) by backends and tests:
from dt.ir.index_expr import evaluate_index, iadd, ifloordiv, imin  # noqa: F401
from dt.ir.naming import fresh_name, function_names, identifier  # noqa: F401


# ---------------------------------------------------------------- tile expressions
@dataclass(frozen=True)
class TExpr:
    """A tile value. Each node class provides `dtype`: a field of a leaf, worked out from the
    operands for every other node (a property: a base-class declaration would become a default
    value of the leaves' dataclass fields)."""

    @property
    def dims(self) -> tuple[str, ...]:
        """The axes it spans, in order: none (a number) unless the node class says otherwise."""
        return ()

    @property
    def unit(self) -> frozenset[str]:
        """Axes along which this value has size 1 (it broadcasts along them)."""
        return frozenset()


@dataclass(frozen=True)
class Literal(TExpr):
    value: float
    dtype: str


@dataclass(frozen=True)
class Param(TExpr):
    """A scalar input (SIn), by its DT name, in the compute dtype."""
    name: str
    dtype: str


@dataclass(frozen=True)
class Extent(TExpr):
    """len(dim) as a number in the compute dtype."""
    dim: str
    dtype: str


@dataclass(frozen=True)
class IndexOf(TExpr):
    """The indices along an axis (its offsets), as numbers in the compute dtype."""
    axis: str
    dtype: str

    @property
    def dims(self):
        return (self.axis,)


@dataclass(frozen=True)
class Index(TExpr):
    """An index value (a loop variable, a tile's start) as a number in the compute dtype."""
    value: IExpr
    dtype: str


@dataclass(frozen=True)
class Ref(TExpr):
    """A tile variable assigned earlier: its dims, dtype and unit axes are the assigned value's."""
    name: str
    ref_dims: tuple[str, ...]
    dtype: str
    ref_unit: frozenset[str] = frozenset()

    @property
    def dims(self):
        return self.ref_dims

    @property
    def unit(self):
        return self.ref_unit


@dataclass(frozen=True)
class Load(TExpr):
    """tensor[indices] over the current tiles of `indices` (one axis per tensor axis), masked,
    converted to `dtype`; the result's axes are ordered as `order`."""
    tensor: str
    indices: tuple[str, ...]
    order: tuple[str, ...]
    dtype: str
    loc: Loc | None = field(default=None, compare=False)

    @property
    def dims(self):
        return self.order


@dataclass(frozen=True)
class Gather(TExpr):
    """tensor[subscripts]: a load at computed indices (`A[x + 1]`, `E[I[t], d]`). One integer
    tile per tensor axis, each over the axes of `order` (size 1 along those it lacks, as an
    `Expand` to `order` makes it) or rank 0; a lane reads 0 where any subscript falls outside
    [0, extent) of its tensor axis (`extents`, one per axis); the values are converted to `dtype`
    and the result spans `order`, full size."""
    tensor: str
    subscripts: tuple[TExpr, ...]
    extents: tuple[IExpr, ...]
    order: tuple[str, ...]
    dtype: str
    loc: Loc | None = field(default=None, compare=False)

    @property
    def dims(self):
        return self.order


class _Composite:
    """A node whose dims, unit and dtype follow from its children's (`_layout`, `_dtype_rule`):
    worked out once, when the node is made, so that asking them of a node of any depth costs one
    lookup."""

    def __post_init__(self):
        dims, unit = self._layout()
        object.__setattr__(self, "_dims", dims)
        object.__setattr__(self, "_unit", unit)
        object.__setattr__(self, "_dtype", self._dtype_rule())

    @property
    def dims(self):
        return self._dims

    @property
    def unit(self):
        return self._unit

    @property
    def dtype(self) -> str:
        return self._dtype

    def _dtype_rule(self) -> str:
        return self.x.dtype


@dataclass(frozen=True)
class Unary(_Composite, TExpr):
    op: str  # an op of one operand of dt.ir.ops
    x: TExpr

    def _layout(self):
        return self.x.dims, self.x.unit

    def _dtype_rule(self):
        return result_dtype(self.op, (self.x.dtype,))


@dataclass(frozen=True)
class Binary(_Composite, TExpr):
    op: str  # an op of two operands of dt.ir.ops
    a: TExpr
    b: TExpr

    def _layout(self):
        if not self.a.dims:
            return self.b.dims, self.b.unit
        if not self.b.dims:
            return self.a.dims, self.a.unit
        return self.a.dims, self.a.unit & self.b.unit

    def _dtype_rule(self):
        return result_dtype(self.op, (self.a.dtype, self.b.dtype))


@dataclass(frozen=True)
class Where(_Composite, TExpr):
    cond: TExpr
    a: TExpr
    b: TExpr

    def _layout(self):
        ranked = [x for x in (self.cond, self.a, self.b) if x.dims]
        if not ranked:
            return (), frozenset()
        return ranked[0].dims, frozenset.intersection(*(x.unit for x in ranked))

    def _dtype_rule(self):
        return result_dtype("where", (self.cond.dtype, self.a.dtype, self.b.dtype))


@dataclass(frozen=True)
class Expand(_Composite, TExpr):
    """`x` with its axes permuted into the order of `target`, and a size-1 axis inserted for
    every axis of `target` it lacks (NumPy x[:, None] style)."""
    x: TExpr
    target: tuple[str, ...]

    def _layout(self):
        return self.target, frozenset(d for d in self.target if d not in self.x.dims) | self.x.unit


@dataclass(frozen=True)
class BroadcastTo(_Composite, TExpr):
    """`x` (already aligned to `dims`) materialised at the full tile size along every axis."""
    x: TExpr

    def _layout(self):
        return self.x.dims, frozenset()


@dataclass(frozen=True)
class SwapPairs(_Composite, TExpr):
    """`x` with the lanes of `axis`, its last axis, exchanged in pairs (lane 2i takes lane
    2i + 1's value and lane 2i + 1 lane 2i's). Made by the Triton backend (pair_swaps.py) in
    place of the loads of a neighbour `X[d + 1]` / `X[d - 1]` that a `where(d % 2 == 0, ...)`
    picks between; no other backend receives it."""
    x: TExpr
    axis: str

    def _layout(self):
        return self.x.dims, self.x.unit


@dataclass(frozen=True)
class Mask(TExpr):
    """True on the valid lanes of `axis`."""
    axis: str

    @property
    def dims(self):
        return (self.axis,)

    @property
    def dtype(self) -> str:
        return "bool"


@dataclass(frozen=True)
class Full(TExpr):
    """A tile over `axes` (full size) filled with `value` (may be ±inf) in `dtype`."""
    value: float
    axes: tuple[str, ...]
    dtype: str

    @property
    def dims(self):
        return self.axes


@dataclass(frozen=True)
class Cast(TExpr):
    x: TExpr
    dtype: str

    @property
    def dims(self):
        return self.x.dims

    @property
    def unit(self):
        return self.x.unit


@dataclass(frozen=True)
class Reduce(_Composite, TExpr):
    op: str  # 'sum' | 'max' | 'min'
    x: TExpr
    axis: str

    def _layout(self):
        return tuple(d for d in self.x.dims if d != self.axis), self.x.unit - {self.axis}


@dataclass(frozen=True)
class Scan(_Composite, TExpr):
    """The running combination of x along `axis` (op 'sum' | 'prod' | 'max' | 'min', as the op
    table's SCANS combine): lane i holds x's lanes 0..i combined, the first lane x's own."""
    op: str
    x: TExpr
    axis: str

    def _layout(self):
        return self.x.dims, self.x.unit


INTEGER_DOT = "i32"  # what a product of two i8 operands accumulates in (the matrix units' int8 mode)


@dataclass(frozen=True)
class Dot(_Composite, TExpr):
    """Matrix product over `axis`: a has dims (i, axis), b has dims (axis, j); result (i, j)
    accumulated in `acc_dtype` (INTEGER_DOT for two i8 operands, else the compute dtype, f32 or
    f64), added to `acc` when given, which holds that dtype (in the lowering, a and b may lead
    with scalar axes: dt.ir.lower.scalar_axes removes them)."""
    a: TExpr
    b: TExpr
    axis: str
    acc: TExpr | None
    acc_dtype: str

    def _layout(self):
        return self.a.dims[:-1] + self.b.dims[-1:], frozenset()

    def _dtype_rule(self):
        return self.acc_dtype


# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class Let:
    name: str
    value: IExpr


@dataclass(frozen=True)
class LetValue:
    """name = the value of a tile holding one integer (a Ref with no dims), as an index the
    statements after it may use: a loop bound that depends on the data (rargtopk's merge runs as
    many rounds as a tile has entries that can enter the kept list)."""
    name: str
    value: "Ref"
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Axis:
    """Brings a tile dimension into scope: lanes i in [0, size) have index start + i and are
    valid while start + i < limit (no limit: all valid). `name` is unique in the kernel."""
    name: str
    dim: str
    start: IExpr
    size: IExpr
    limit: IExpr | None
    loc: Loc | None = field(default=None, compare=False)

    @property
    def scalar(self) -> bool:
        """One lane, always valid: an offset, not a tile dimension (the rules above)."""
        return self.size == IConst(1) and self.limit is None


@dataclass(frozen=True)
class Assign:
    """name = value. `dt_name` is the DT entity this tile holds (a Func, an accumulator, ...)."""
    name: str
    value: TExpr
    dt_name: str = ""
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class For:
    """for var in range(start, stop, step): body. `kind` is 'tile', 'reduction', or 'tail' (a
    reduction's last, cut tile after a loop of its whole ones: one iteration at most)."""
    var: str
    start: IExpr
    stop: IExpr
    step: int
    body: tuple["Stmt", ...]
    dim: str
    kind: str
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Store:
    """tensor[indices] = value over the current tiles of `indices`, valid lanes only; value is
    cast to the tensor's dtype. Only where every index expression of `guard` is 0: an output
    computed again in other programs or loop iterations (along dimensions it does not have) is
    stored by the first of them."""
    tensor: str
    indices: tuple[str, ...]
    value: TExpr
    loc: Loc | None = field(default=None, compare=False)
    guard: tuple[IExpr, ...] = ()


@dataclass(frozen=True)
class Scatter:
    """An update's write, tensor[subscripts] = (or +=, `accumulate`) value: tile variables over the
    same axes, full-size, one integer subscript per tensor axis. Valid lanes write where every
    subscript is in [0, extent); lanes writing one element each add (atomically), or one stores."""
    tensor: str
    subscripts: tuple[Ref, ...]
    extents: tuple[IExpr, ...]
    value: Ref
    accumulate: bool
    loc: Loc | None = field(default=None, compare=False)


Stmt = Union[Let, LetValue, Axis, Assign, For, Store, Scatter]


# ---------------------------------------------------------------- pipeline


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dims: tuple[str, ...]  # the dimension of each axis (inputs: as first indexed)
    dtype: str  # 'f32' | 'f16' | 'bf16' | 'f64'
    role: str  # 'input' | 'output' | 'temporary'


@dataclass(frozen=True)
class Kernel:
    """`program_count` programs, program `pid` running `body`. Launch hints (a backend may ignore
    them: none changes what a program computes): `persistent` launches at most `persistent_programs`
    programs (None: one per multiprocessor), each running the body for pid = its program id, plus
    the number launched, ... below `program_count`; `tma` moves tiles through tensor descriptors;
    `stream` lets the lines of tensors the kernel reads once leave the cache first."""
    name: str  # e.g. 'mm_kernel'
    func: str  # the root Func computed (and stored) by this kernel
    program_count: IExpr
    body: tuple[Stmt, ...]
    num_warps: int | None = None
    num_stages: int | None = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    loc: Loc | None = field(default=None, compare=False)
    persistent: bool = False
    persistent_programs: int | None = None
    tma: bool = False
    stream: bool = False
    grid_indices: tuple[str, ...] = ()  # the Lets holding the program's block index of each blocked dimension
    # the Func whose schedule statements shape this kernel, where not `func` (a split's partials
    # kernel takes the split Func's): what a hint tells the user to reschedule
    scheduled_by: str = ""

    @property
    def schedule_func(self) -> str:
        return self.scheduled_by or self.func


@dataclass(frozen=True)
class Pipeline:
    name: str
    inputs: tuple[TensorSpec, ...]
    scalars: tuple[str, ...]
    sizes: tuple[str, ...]  # every dimension whose extent the kernels use, as `{dim}_SIZE`
    temporaries: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    kernels: tuple[Kernel, ...]
    compute_dtype: str  # arithmetic dtype: 'f32' (or 'f64' for f64 inputs)
    global_names: GlobalNames  # what generated code calls the scalars and tensors (`global_names`)
    file: str = ""
    chunks: tuple[tuple[str, str, int], ...] = ()  # each split's (chunk dim, split dim, chunk size)

    def with_chunks(self, extents: dict[str, int]) -> dict[str, int]:
        """`extents` (by dimension) with each split's chunk dimension's added."""
        return {**extents, **{d: -(-extents[split] // chunk) for d, split, chunk in self.chunks}}

    def tensor(self, name: str) -> TensorSpec:
        for t in self.inputs + self.temporaries + self.outputs:
            if t.name == name:
                return t
        raise KeyError(name)

    def all_names(self) -> set[str]:
        """Every name of the pipeline: reserved, extents, functions, parameters and every kernel's
        own; a name made for new IR must be none of them."""
        names = set(RESERVED_NAMES) | {size_name(d) for d in self.sizes} | {self.name} | self.global_names.all()
        for k in self.kernels:
            names.add(k.name)
            for s in walk_statements(k.body):
                if isinstance(s, For):
                    names.add(s.var)
                elif not isinstance(s, (Store, Scatter)):
                    names.add(s.name)
        return names


def walk_statements(body):
    for s in body:
        yield s
        if isinstance(s, For):
            yield from walk_statements(s.body)


def statement_values(s) -> tuple[TExpr, ...]:
    """The tile expressions a statement reads: an Assign's, LetValue's or Store's value, a Scatter's too."""
    if isinstance(s, (Assign, LetValue, Store)):
        return (s.value,)
    return (*s.subscripts, s.value) if isinstance(s, Scatter) else ()


def without_layout(e: TExpr) -> TExpr:
    """e without the Expand and BroadcastTo that laid it out."""
    while isinstance(e, (Expand, BroadcastTo)):
        e = e.x
    return e


def is_minus_inf(e: TExpr) -> bool:
    """-inf: a literal, or inf negated (`neg(inf)`: how `-inf` in DT source lowers)."""
    sign, x = (-1.0, e.x) if isinstance(e, Unary) and e.op == "neg" else (1.0, e)
    return isinstance(x, Literal) and sign * x.value == float("-inf")


def walk_texpr(e: TExpr):
    """e and every expression inside it, parents before children, left to right (any depth)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(texpr_children(node)))


def texpr_children(e: TExpr) -> tuple[TExpr, ...]:
    if isinstance(e, Gather):
        return e.subscripts
    if isinstance(e, (Unary, Expand, BroadcastTo, Cast, Reduce, Scan, SwapPairs)):
        return (e.x,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Where):
        return (e.cond, e.a, e.b)
    if isinstance(e, Dot):
        return (e.a, e.b) + ((e.acc,) if e.acc is not None else ())
    return ()


def with_children(e: TExpr, kids: tuple[TExpr, ...]) -> TExpr:
    """e with its children (texpr_children's order) replaced by `kids`."""
    if isinstance(e, Gather):
        return replace(e, subscripts=tuple(kids))
    if isinstance(e, (Unary, Expand, BroadcastTo, Cast, Reduce, Scan, SwapPairs)):
        return replace(e, x=kids[0])
    if isinstance(e, Binary):
        return replace(e, a=kids[0], b=kids[1])
    if isinstance(e, Where):
        return replace(e, cond=kids[0], a=kids[1], b=kids[2])
    if isinstance(e, Dot):
        return replace(e, a=kids[0], b=kids[1], acc=kids[2] if e.acc is not None else None)
    return e
