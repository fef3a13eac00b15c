"""The `example` backend: a tree-walking NumPy evaluator of dt's scheduled IR.

It reads nothing of dt but the scheduled IR (dt.ir.scheduled) and the Backend protocol
(dt.backends.base), and it is deliberately plain: each program instance of each kernel walks
the kernel's statements, holding every tile as a NumPy array. docs/backend-guide.md walks
through it.
"""
from __future__ import annotations

import math
from dataclasses import fields

import ml_dtypes
import numpy as np

from dt.backends.base import Capabilities
from dt.ir import scheduled as S

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}

UNARY = {
    "neg": np.negative, "not": np.logical_not, "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2,
    "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v), "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "tanh": np.tanh, "abs": np.abs, "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil,
    "erf": lambda v: np.vectorize(math.erf, otypes=[v.dtype])(v),
}
BINARY = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "and": np.logical_and,
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
}
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


class ExampleBackend:
    name = "example"
    capabilities = Capabilities(dtypes=frozenset(DTYPES), array="numpy", devices=("cpu",))

    def source(self, pipeline: S.Pipeline) -> str:
        """There is no generated code: the IR itself is what runs, so show that."""
        lines = []
        for k in pipeline.kernels:
            hints = [f"num_warps={k.num_warps}"] if k.num_warps else []
            hints += [f"num_stages={k.num_stages}"] if k.num_stages else []
            hints += [f"persistent({k.persistent_programs or ''})"] if k.persistent else []
            hints += ["tma()"] if k.tma else []
            ignored = f"  # launch hints, ignored here: {', '.join(hints)}" if hints else ""
            lines.append(f"kernel {k.name}: for pid in range({show(k.program_count)}){ignored}")
            lines += statements(k.body, 1)
        return "\n".join(lines) + "\n"

    def compile(self, pipeline: S.Pipeline):
        def run(tensors: dict, scalars: dict, sizes: dict) -> dict:
            memory = dict(tensors)
            for t in pipeline.temporaries + pipeline.outputs:  # NaN: an unwritten element shows
                memory[t.name] = np.full([sizes[S.size_name(d)] for d in t.dims], np.nan, DTYPES[t.dtype])
            for kernel in pipeline.kernels:
                for pid in range(S.evaluate_index(kernel.program_count, sizes)):
                    Instance(pipeline, memory, scalars, sizes, pid).execute(kernel.body)
            return {t.name: memory[t.name] for t in pipeline.outputs}
        return run


def statements(body, depth: int) -> list[str]:
    pad, lines = "    " * depth, []
    for s in body:
        if isinstance(s, S.For):
            header = f"for {s.var} in range({show(s.start)}, {show(s.stop)}, {s.step}):"
            lines.append(f"{pad}{header}  # {s.kind} loop over {s.dim}")
            lines += statements(s.body, depth + 1)
        elif isinstance(s, S.Axis):
            limit = "" if s.limit is None else f", valid below {show(s.limit)}"
            lines.append(f"{pad}axis {s.name} ({s.dim}): {show(s.size)} lanes from {show(s.start)}{limit}")
        elif isinstance(s, S.Store):
            lines.append(f"{pad}{s.tensor}[{', '.join(s.indices)}] = {show(s.value)}")
        else:  # Let, Assign
            lines.append(f"{pad}{s.name} = {show(s.value)}")
    return lines


def show(node) -> str:
    """An IR node as Name(field, ...), without source locations; index expressions infix."""
    if isinstance(node, S.IConst):
        return str(node.value)
    if isinstance(node, S.IVar):
        return node.name
    if isinstance(node, S.IBin):
        a, b = show(node.a), show(node.b)
        return f"{node.op}({a}, {b})" if node.op in ("min", "max") else f"({a} {node.op} {b})"
    if isinstance(node, S.TExpr):
        parts = [show(getattr(node, f.name)) for f in fields(node) if f.name != "loc"]
        return f"{type(node).__name__}({', '.join(parts)})"
    return repr(node)


class Instance:
    """One program instance: integer names (sizes, pid, Lets, loop variables), axes and tiles."""

    def __init__(self, pipeline, memory, scalars, sizes, pid):
        self.memory, self.scalars, self.sizes = memory, scalars, sizes
        self.compute = DTYPES[pipeline.compute_dtype]
        self.ints = {**sizes, "pid": pid}
        self.axes: dict[str, tuple[int, int, int]] = {}  # name -> (start, lanes, valid lanes)
        self.tiles: dict[str, np.ndarray] = {}

    def execute(self, body):
        for s in body:
            if isinstance(s, S.Let):
                self.ints[s.name] = S.evaluate_index(s.value, self.ints)
            elif isinstance(s, S.Axis):
                start, lanes = S.evaluate_index(s.start, self.ints), S.evaluate_index(s.size, self.ints)
                limit = start + lanes if s.limit is None else S.evaluate_index(s.limit, self.ints)
                self.axes[s.name] = (start, lanes, max(0, min(lanes, limit - start)))
            elif isinstance(s, S.Assign):
                self.tiles[s.name] = self.value(s.value)
            elif isinstance(s, S.For):
                for i in range(S.evaluate_index(s.start, self.ints), S.evaluate_index(s.stop, self.ints), s.step):
                    self.ints[s.var] = i
                    self.execute(s.body)
            elif isinstance(s, S.Store):
                valid = tuple(slice(0, self.axes[a][2]) for a in s.indices)
                self.memory[s.tensor][self.window(s.indices)] = self.value(s.value)[valid]

    def window(self, axes) -> tuple[slice, ...]:
        """The valid lanes of these axes, as slices of a tensor."""
        return tuple(slice(start, start + valid) for start, _, valid in (self.axes[a] for a in axes))

    def shape(self, axes) -> tuple[int, ...]:
        return tuple(self.axes[a][1] for a in axes)

    def value(self, e: S.TExpr) -> np.ndarray:
        with np.errstate(all="ignore"):  # lanes past an extent may hold inf or nan; they are never stored
            return np.asarray(self._value(e))

    def _value(self, e: S.TExpr):
        v = self.value
        if isinstance(e, S.Literal):
            return self.compute(e.value)
        if isinstance(e, S.Param):
            return self.compute(self.scalars[e.name])
        if isinstance(e, S.Extent):
            return self.compute(self.sizes[S.size_name(e.dim)])
        if isinstance(e, S.IndexOf):
            start, lanes, _ = self.axes[e.axis]
            return np.arange(start, start + lanes).astype(self.compute)
        if isinstance(e, S.Index):
            return self.compute(S.evaluate_index(e.value, self.ints))
        if isinstance(e, S.Mask):
            _, lanes, valid = self.axes[e.axis]
            return np.arange(lanes) < valid
        if isinstance(e, S.Ref):
            return self.tiles[e.name]
        if isinstance(e, S.Load):  # zero outside the valid lanes
            tile = np.zeros(self.shape(e.indices), DTYPES[e.dtype])
            valid = tuple(slice(0, self.axes[a][2]) for a in e.indices)
            tile[valid] = self.memory[e.tensor][self.window(e.indices)]
            return tile.transpose([e.indices.index(a) for a in e.order])
        if isinstance(e, S.Unary):
            return UNARY[e.op](v(e.x))
        if isinstance(e, S.Binary):
            return BINARY[e.op](v(e.a), v(e.b))
        if isinstance(e, S.Where):
            return np.where(v(e.cond), v(e.a), v(e.b))
        if isinstance(e, S.Expand):  # permute into target order, size 1 along missing axes
            x, own = v(e.x), [a for a in e.target if a in e.x.dims]
            x = x.transpose([e.x.dims.index(a) for a in own]) if own else x
            return x.reshape([x.shape[own.index(a)] if a in own else 1 for a in e.target])
        if isinstance(e, S.BroadcastTo):
            return np.broadcast_to(v(e.x), self.shape(e.dims))
        if isinstance(e, S.Full):
            return np.full(self.shape(e.axes), e.value, DTYPES[e.dtype])
        if isinstance(e, S.Cast):
            return v(e.x).astype(DTYPES[e.dtype])
        if isinstance(e, S.Reduce):
            return REDUCE[e.op](v(e.x), axis=e.x.dims.index(e.axis))
        if isinstance(e, S.Dot):
            acc = DTYPES[e.acc_dtype]
            product = v(e.a).astype(acc) @ v(e.b).astype(acc)
            return product if e.acc is None else v(e.acc) + product
        raise NotImplementedError(f"the example backend has no rule for {type(e).__name__}")


def create() -> ExampleBackend:
    return ExampleBackend()
