"""The `example` backend: a tree-walking NumPy evaluator of dt's scheduled IR.

It reads nothing of dt but the scheduled IR (dt.ir.scheduled, with its op table dt.ir.ops and
printer dt.ir.printer) and the backend protocol (dt.backends.base, dt.backends.render), and it
is deliberately plain: each program instance of each kernel walks the kernel's statements,
holding every tile as a NumPy array. docs/backend-guide.md walks through it.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from dt.backends.base import Capabilities
from dt.backends.render import Renderer, supported_ops
from dt.ir import scheduled as S
from dt.ir.printer import ir_text

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64, "bool": np.bool_,
          "i8": np.int8, "u8": np.uint8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
          "f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}

# How this backend computes each op of dt.ir.ops: the keys are the ops it supports.
OPS = {
    "neg": np.negative, "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda v: 1 / np.sqrt(v), "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "abs": np.abs,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "softplus": lambda v: np.logaddexp(0.0, v),
    "erf": lambda v: np.vectorize(math.erf, otypes=[v.dtype])(v),
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "pow": np.power,
    "//": np.floor_divide, "%": np.mod,  # Python's floor division and remainder, as DT's
    "maximum": np.maximum, "minimum": np.minimum,
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
    "where": np.where, "not": np.logical_not, "and": np.logical_and,
}
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}
SCAN = {"sum": np.cumsum, "prod": np.cumprod, "max": np.maximum.accumulate, "min": np.minimum.accumulate}


class ExampleBackend:
    name = "example"
    capabilities = Capabilities(dtypes=frozenset(DTYPES), ops=supported_ops(OPS, (*REDUCE, "dot"), SCAN), array="numpy",
                                devices=("cpu",), gathers=True, scatters=True,
                                given_outputs=True)

    def source(self, pipeline: S.Pipeline) -> str:
        """There is no generated code: the IR itself is what runs, so show that."""
        return ir_text(pipeline)

    def compile(self, pipeline: S.Pipeline):
        def run(tensors: dict, scalars: dict, sizes: dict, outputs: dict | None = None) -> dict:
            memory = {**tensors, **(outputs or {})}
            for t in pipeline.temporaries + pipeline.outputs:  # NaN (or the least integer): an unwritten element shows
                if t.name in memory:
                    continue
                kind = np.dtype(DTYPES[t.dtype]).kind
                unwritten = np.nan if kind in "fV" else 0 if kind == "b" else np.iinfo(DTYPES[t.dtype]).min
                memory[t.name] = np.full([sizes[S.size_name(d)] for d in t.dims], unwritten, DTYPES[t.dtype])
            for kernel in pipeline.kernels:
                for pid in range(S.evaluate_index(kernel.program_count, sizes)):
                    Instance(pipeline, memory, scalars, sizes, pid).execute(kernel.body)
            return {t.name: memory[t.name] for t in pipeline.outputs}
        return run


class Instance(Renderer):
    """One program instance: integer names (sizes, pid, Lets, loop variables), axes and tiles.
    A method per IR node (dt.backends.render): statements run, expressions give NumPy values."""
    backend = "example"
    OPS = OPS

    def __init__(self, pipeline, memory, scalars, sizes, pid):
        self.memory, self.scalars, self.sizes = memory, scalars, sizes
        self.compute = DTYPES[pipeline.compute_dtype]
        self.ints = {**sizes, "pid": pid}
        self.axes: dict[str, tuple[int, int, int]] = {}  # name -> (start, lanes, valid lanes)
        self.tiles: dict[str, np.ndarray] = {}

    def execute(self, body):
        for s in body:
            self.statement(s)

    def window(self, axes) -> tuple[slice, ...]:
        """The valid lanes of these axes, as slices of a tensor."""
        return tuple(slice(start, start + valid) for start, _, valid in (self.axes[a] for a in axes))

    def shape(self, axes) -> tuple[int, ...]:
        return tuple(self.axes[a][1] for a in axes)

    def value(self, e: S.TExpr) -> np.ndarray:
        with np.errstate(all="ignore"):  # lanes past an extent may hold inf or nan; they are never stored
            return np.asarray(self.texpr(e))

    # ------------------------------------------------------------ statements
    def Let(self, s: S.Let):
        self.ints[s.name] = S.evaluate_index(s.value, self.ints)

    def LetValue(self, s: S.LetValue):
        self.ints[s.name] = int(self.value(s.value))

    def Axis(self, s: S.Axis):
        start, lanes = S.evaluate_index(s.start, self.ints), S.evaluate_index(s.size, self.ints)
        limit = start + lanes if s.limit is None else S.evaluate_index(s.limit, self.ints)
        self.axes[s.name] = (start, lanes, max(0, min(lanes, limit - start)))

    def Assign(self, s: S.Assign):
        self.tiles[s.name] = self.value(s.value)

    def For(self, s: S.For):
        for i in range(S.evaluate_index(s.start, self.ints), S.evaluate_index(s.stop, self.ints), s.step):
            self.ints[s.var] = i
            self.execute(s.body)

    def Store(self, s: S.Store):
        if any(S.evaluate_index(g, self.ints) != 0 for g in s.guard):
            return
        valid = tuple(slice(0, self.axes[a][2]) for a in s.indices)
        value = self.value(s.value).reshape(self.shape(s.indices))  # size 1 along scalar axes
        self.memory[s.tensor][self.window(s.indices)] = value[valid]

    def Scatter(self, s: S.Scatter):
        """An update's write, lane by lane in row-major order: valid lanes whose subscripts are all
        inside the tensor add their value there (or store it)."""
        tensor = self.memory[s.tensor]
        shape = self.shape(s.value.dims)
        valid = np.ones(shape, dtype=bool)
        for i, a in enumerate(s.value.dims):
            valid &= (np.arange(shape[i]) < self.axes[a][2]).reshape([-1 if j == i else 1 for j in range(len(shape))])
        index = [np.broadcast_to(self.value(e), shape).astype(np.int64) for e in s.subscripts]
        for i, n in zip(index, tensor.shape):
            valid &= (i >= 0) & (i < n)
        value = np.broadcast_to(self.value(s.value), shape)
        for lane in np.ndindex(*shape):
            if not valid[lane]:
                continue
            at = tuple(int(i[lane]) for i in index)
            tensor[at] = (tensor[at] + value[lane] if s.accumulate else value[lane]).astype(tensor.dtype)

    # ------------------------------------------------------------ tile expressions
    def Literal(self, e: S.Literal):
        return DTYPES[e.dtype](e.value)

    def Param(self, e: S.Param):
        return DTYPES[e.dtype](self.scalars[e.name])

    def Extent(self, e: S.Extent):
        return DTYPES[e.dtype](self.sizes[S.size_name(e.dim)])

    def IndexOf(self, e: S.IndexOf):
        start, lanes, _ = self.axes[e.axis]
        return np.arange(start, start + lanes).astype(DTYPES[e.dtype])

    def Index(self, e: S.Index):
        return DTYPES[e.dtype](S.evaluate_index(e.value, self.ints))

    def Mask(self, e: S.Mask):
        _, lanes, valid = self.axes[e.axis]
        return np.arange(lanes) < valid

    def Ref(self, e: S.Ref):
        return self.tiles[e.name]

    def Load(self, e: S.Load):  # zero outside the valid lanes
        tile = np.zeros(self.shape(e.indices), DTYPES[e.dtype])
        valid = tuple(slice(0, self.axes[a][2]) for a in e.indices)
        tile[valid] = self.memory[e.tensor][self.window(e.indices)]
        tiled = [a for a in e.indices if a in e.order]  # scalar axes are no tile axes
        return tile.reshape(self.shape(tiled)).transpose([tiled.index(a) for a in e.order])

    def Gather(self, e: S.Gather):  # zero wherever an index falls outside the tensor
        tensor, shape = self.memory[e.tensor], self.shape(e.order)
        index = [np.broadcast_to(self.value(x).astype(np.int64), shape) for x in e.subscripts]
        inside = np.ones(shape, bool)
        for i, n in zip(index, tensor.shape):
            inside &= (i >= 0) & (i < n)
        tile = np.zeros(shape, DTYPES[e.dtype])
        tile[inside] = tensor[tuple(i[inside] for i in index)]
        return tile

    def Unary(self, e: S.Unary):
        return self.op(e.op)(self.value(e.x))

    def Binary(self, e: S.Binary):
        return self.op(e.op)(self.value(e.a), self.value(e.b))

    def Where(self, e: S.Where):
        return self.op("where")(self.value(e.cond), self.value(e.a), self.value(e.b))

    def Expand(self, e: S.Expand):  # permute into target order, size 1 along missing axes
        x, own = self.value(e.x), [a for a in e.target if a in e.x.dims]
        x = x.transpose([e.x.dims.index(a) for a in own]) if own else x
        return x.reshape([x.shape[own.index(a)] if a in own else 1 for a in e.target])

    def BroadcastTo(self, e: S.BroadcastTo):
        return np.broadcast_to(self.value(e.x), self.shape(e.dims))

    def Full(self, e: S.Full):
        return np.full(self.shape(e.axes), e.value, DTYPES[e.dtype])

    def Cast(self, e: S.Cast):
        return self.value(e.x).astype(DTYPES[e.dtype])

    def Reduce(self, e: S.Reduce):
        return REDUCE[e.op](self.value(e.x), axis=e.x.dims.index(e.axis))

    def Scan(self, e: S.Scan):
        return SCAN[e.op](self.value(e.x), axis=e.x.dims.index(e.axis))

    def Dot(self, e: S.Dot):
        acc = DTYPES[e.acc_dtype]
        product = self.value(e.a).astype(acc) @ self.value(e.b).astype(acc)
        return product if e.acc is None else self.value(e.acc) + product


def create() -> ExampleBackend:
    return ExampleBackend()
