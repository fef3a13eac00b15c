"""The scheduled IR's verifier: checks the rules scheduled.py's docstring promises backends.

A pipeline that breaks one is a compiler bug, never a user's: `verify` raises
IRVerificationError naming the kernel, the statement and the rule, so a bad lowering fails where
it happens instead of as wrong numbers in some backend. The lowering runs it on every pipeline.
"""
from __future__ import annotations

from dt.ir import scheduled as S
from dt.ir.nesting import MAX_NESTING, nesting
from dt.dtypes import ALL as DTYPES
from dt.dtypes import is_integer
from dt.ir.ops import OPS, SCANS, TILE_REDUCTIONS


class IRVerificationError(AssertionError):
    """A scheduled-IR invariant does not hold: a bug in dt's lowering."""


def verify(pipeline: S.Pipeline) -> S.Pipeline:
    """`pipeline`, after checking every invariant; raises IRVerificationError at the first broken one."""
    tensors = {t.name for t in pipeline.inputs + pipeline.temporaries + pipeline.outputs}
    for t in pipeline.inputs + pipeline.temporaries + pipeline.outputs:
        if len(set(t.dims)) != len(t.dims):
            raise IRVerificationError(f"tensor {t.name} repeats a dimension: {t.dims}")
    sizes = {S.size_name(d) for d in pipeline.sizes}
    for kernel in pipeline.kernels:
        _KernelVerifier(pipeline, kernel, tensors, sizes).run()
    return pipeline


class _KernelVerifier:
    def __init__(self, pipeline: S.Pipeline, kernel: S.Kernel, tensors: set[str], sizes: set[str]):
        self.pipeline, self.kernel, self.tensors, self.sizes = pipeline, kernel, tensors, sizes
        # the launcher's name is free for tiles (no kernel calls it); kernels' and parameters' are not
        self.global_names = pipeline.global_names.all() | {k.name for k in pipeline.kernels}
        self.declared: set[str] = set()  # every name this kernel binds, to catch a second binding

    def fail(self, what: str, stmt=None):
        where = f" in {type(stmt).__name__} {getattr(stmt, 'name', getattr(stmt, 'var', ''))}" if stmt else ""
        raise IRVerificationError(f"kernel {self.kernel.name}{where}: {what}")

    def run(self):
        self.index(self.kernel.program_count, {"pid"} | self.sizes, None)
        self.body(self.kernel.body, index_names={"pid"} | self.sizes, axes={}, tiles={})

    def bind(self, name: str, stmt):
        if not name.isidentifier() or not name.isascii() or name in S.RESERVED_NAMES:
            self.fail(f"'{name}' is not a name generated code may bind", stmt)
        if name in self.declared or name in self.global_names or name in self.sizes:
            self.fail(f"'{name}' is bound twice", stmt)
        self.declared.add(name)

    def body(self, stmts, index_names: set[str], axes: dict[str, S.Axis], tiles: dict[str, S.TExpr]):
        index_names, axes, tiles = set(index_names), dict(axes), dict(tiles)  # scopes end with their loop
        for s in stmts:
            if isinstance(s, S.Let):
                self.index(s.value, index_names, s)
                self.bind(s.name, s)
                index_names.add(s.name)
            elif isinstance(s, S.LetValue):
                self.value(s.value, index_names, axes, tiles, s)
                if not isinstance(s.value, S.Ref) or s.value.dims or not is_integer(s.value.dtype):
                    self.fail(f"binds a {s.value.dtype} value over {s.value.dims}: a LetValue takes a tile "
                              f"holding one integer", s)
                self.bind(s.name, s)
                index_names.add(s.name)
            elif isinstance(s, S.Axis):
                for e in (s.start, s.size, s.limit):
                    self.index(e, index_names, s)
                self.bind(s.name, s)
                axes[s.name] = s
            elif isinstance(s, S.For):
                self.index(s.start, index_names, s)
                self.index(s.stop, index_names, s)
                if s.step < 1:
                    self.fail(f"step {s.step} is not positive", s)
                if s.kind not in ("tile", "reduction", "tail"):
                    self.fail(f"unknown loop kind '{s.kind}'", s)
                self.bind(s.var, s)
                self.body(s.body, index_names | {s.var}, axes, tiles)
            elif isinstance(s, S.Assign):
                self.value(s.value, index_names, axes, tiles, s)
                if any(isinstance(n, S.Scan) for n in S.walk_texpr(s.value) if n is not s.value):
                    self.fail("a scan inside an expression: a Scan is an Assign's whole value", s)
                self.number(s.value, s)
                if s.name in tiles:
                    if tiles[s.name].dims != s.value.dims:
                        self.fail(f"reassigned over {s.value.dims}, first assigned over {tiles[s.name].dims}", s)
                    if tiles[s.name].dtype != s.value.dtype:
                        self.fail(f"reassigned in {s.value.dtype}, first assigned in {tiles[s.name].dtype}", s)
                else:
                    self.bind(s.name, s)
                tiles[s.name] = s.value
            elif isinstance(s, S.Store):
                if s.tensor not in self.tensors:
                    self.fail(f"stores to unknown tensor '{s.tensor}'", s)
                self.value(s.value, index_names, axes, tiles, s)
                self.number(s.value, s)
                if any(isinstance(n, S.Scan) for n in S.walk_texpr(s.value)):
                    self.fail("a scan in a store: a Scan is an Assign's whole value", s)
                self.axes_in_scope(s.indices, axes, s)
                for e in s.guard:
                    self.index(e, index_names, s)
                if s.value.dims != tiled(s.indices, axes) or s.value.unit:
                    self.fail(f"stores a value over {s.value.dims} (unit {sorted(s.value.unit)}) to "
                              f"{s.tensor}[{', '.join(s.indices)}]: it must be full-size over the store's axes", s)
            elif isinstance(s, S.Scatter):
                if s.tensor not in self.tensors or len(s.subscripts) != len(s.extents):
                    self.fail(f"scatters into unknown tensor '{s.tensor}' or with a subscript per axis missing", s)
                for e in (s.value, *s.subscripts):
                    self.value(e, index_names, axes, tiles, s)
                    if e.unit or e.dims != s.value.dims:
                        self.fail(f"scatters {s.value.dims} with a subscript over {e.dims}: all full-size over the "
                                  f"same axes", s)
                if any(not is_integer(e.dtype) for e in s.subscripts):
                    self.fail("scatters at subscripts that are not integers", s)
                for e in s.extents:
                    self.index(e, index_names, s)
            else:
                self.fail(f"unknown statement {type(s).__name__}")

    def number(self, e: S.TExpr, stmt):
        # a bool tensor loaded as it is, a value cast to bool (a bool Func), or a tile holding one
        loaded_bool = e.dtype == "bool" and isinstance(e, (S.Load, S.Gather, S.Cast, S.Ref))
        if e.dtype not in DTYPES or (e.dtype == "bool" and not loaded_bool):
            self.fail(f"holds {e.dtype} values: tiles and stores hold numbers (comparisons are cast)", stmt)

    def index(self, e: S.IExpr | None, names: set[str], stmt):
        unknown = S.index_names(e) - names
        if unknown:
            self.fail(f"index expression reads {', '.join(sorted(unknown))}, bound nowhere before it", stmt)

    def axes_in_scope(self, names, axes, stmt):
        missing = [a for a in names if a not in axes]
        if missing:
            self.fail(f"uses axis {', '.join(missing)} outside its scope", stmt)

    def value(self, e: S.TExpr, index_names, axes, tiles, stmt):
        nodes = list(S.walk_texpr(e))
        limit = MAX_NESTING + (1 if any(isinstance(n, S.Dot) for n in nodes) else 0)
        depth = nesting(e)
        if depth > limit:
            self.fail(f"expression nests {depth} levels deep (at most {limit})", stmt)
        for node in reversed(nodes):  # operands before the nodes that use them
            self.axes_in_scope(node.dims, axes, stmt)
            if tiled(node.dims, axes) != node.dims:
                self.fail(f"{type(node).__name__} spans a scalar axis: {node.dims}", stmt)
            if not node.unit <= set(node.dims):
                self.fail(f"{type(node).__name__} is unit along {sorted(node.unit)}, not all its axes", stmt)
            self.node(node, index_names, tiles, axes, stmt)

    def node(self, e: S.TExpr, index_names, tiles, axes, stmt):
        if isinstance(e, S.Ref):
            if e.name not in tiles:
                self.fail(f"reads tile '{e.name}' before any assignment to it", stmt)
            if tiles[e.name].dims != e.dims:
                self.fail(f"reads '{e.name}' over {e.dims}, assigned over {tiles[e.name].dims}", stmt)
            if tiles[e.name].dtype != e.dtype:
                self.fail(f"reads '{e.name}' as {e.dtype}, assigned in {tiles[e.name].dtype}", stmt)
        elif isinstance(e, S.Load):
            if e.tensor not in self.tensors:
                self.fail(f"loads unknown tensor '{e.tensor}'", stmt)
            self.axes_in_scope(e.indices, axes, stmt)
            if sorted(e.order) != sorted(tiled(e.indices, axes)):
                self.fail(f"load order {e.order} is not a permutation of the tile axes of {e.indices}", stmt)
        elif isinstance(e, S.Gather):
            if e.tensor not in self.tensors:
                self.fail(f"gathers from unknown tensor '{e.tensor}'", stmt)
            elif len(e.subscripts) != len(self.pipeline.tensor(e.tensor).dims) or len(e.extents) != len(e.subscripts):
                self.fail(f"gathers from {e.tensor} with {len(e.subscripts)} subscripts and {len(e.extents)} "
                          f"extents; it has {len(self.pipeline.tensor(e.tensor).dims)} axes", stmt)
            for sub in e.subscripts:
                if not is_integer(sub.dtype):
                    self.fail(f"a subscript of {e.tensor} is {sub.dtype}, not an integer", stmt)
                if sub.dims and sub.dims != e.order:
                    self.fail(f"a subscript of {e.tensor} spans {sub.dims}, not the gather's axes {e.order}", stmt)
            for extent in e.extents:
                self.index(extent, self.sizes, stmt)
        elif isinstance(e, S.Index):
            self.index(e.value, index_names, stmt)
        elif isinstance(e, S.Param):
            if e.name not in self.pipeline.scalars:
                self.fail(f"reads unknown scalar '{e.name}'", stmt)
        elif isinstance(e, (S.Unary, S.Binary)):
            op = OPS.get(e.op)
            if op is None or op.arity != len(S.texpr_children(e)):
                self.fail(f"'{e.op}' is not an op of {len(S.texpr_children(e))} operand(s) (dt.ir.ops)", stmt)
            self.same_dims(S.texpr_children(e), e, stmt)
        elif isinstance(e, S.Where):
            self.same_dims((e.cond, e.a, e.b), e, stmt)
        elif isinstance(e, S.Expand):
            if not set(e.x.dims) <= set(e.target):
                self.fail(f"expands {e.x.dims} to {e.target}, which lacks some of them", stmt)
        elif isinstance(e, S.Reduce):
            if e.op not in TILE_REDUCTIONS:
                self.fail(f"'{e.op}' is not a reduction of one operand", stmt)
            if e.axis not in e.x.dims or e.axis in e.x.unit:
                self.fail(f"reduces over '{e.axis}', not a full-size axis of its operand {e.x.dims}", stmt)
        elif isinstance(e, S.Scan):
            if e.op not in SCANS:
                self.fail(f"'{e.op}' is not a scan", stmt)
            if e.axis not in e.x.dims or e.axis in e.x.unit:
                self.fail(f"scans along '{e.axis}', not a full-size axis of its operand {e.x.dims}", stmt)
        elif isinstance(e, S.Dot):
            if len(e.a.dims) != 2 or len(e.b.dims) != 2 or e.a.dims[1] != e.axis or e.b.dims[0] != e.axis:
                self.fail(f"product of {e.a.dims} and {e.b.dims} over '{e.axis}': operands must be "
                          f"(i, {e.axis}) and ({e.axis}, j)", stmt)
            if e.acc is not None and e.acc.dims != e.dims:
                self.fail(f"accumulator over {e.acc.dims}, product over {e.dims}", stmt)
            wanted = (S.INTEGER_DOT,) if e.a.dtype == e.b.dtype == "i8" else ("f32", "f64")  # the compute dtypes
            if e.acc_dtype not in wanted:
                self.fail(f"a product of {e.a.dtype} and {e.b.dtype} accumulates in {e.acc_dtype}: two i8 operands "
                          f"accumulate in {S.INTEGER_DOT}, any others in f32 or f64", stmt)
            if e.acc is not None and e.acc.dtype != e.acc_dtype:
                self.fail(f"a product in {e.acc_dtype} adds to an accumulator of {e.acc.dtype}", stmt)

    def same_dims(self, operands, e, stmt):
        ranked = {x.dims for x in operands if x.dims}
        if len(ranked) > 1:
            self.fail(f"operands of {type(e).__name__} over different axes: {sorted(ranked)}", stmt)


def tiled(names, axes: dict[str, S.Axis]) -> tuple[str, ...]:
    """The axes among `names` that are tile dimensions (not scalar axes)."""
    return tuple(a for a in names if a not in axes or not axes[a].scalar)
