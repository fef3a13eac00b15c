"""Scheduled-IR tile expressions (TExprs) as Numba source, one lane at a time: the tables of how
each op is written (`OPS`, `REDUCE`: the backend supports exactly their keys), and
`ExprRenderer`, which renders a TExpr at the lanes `env` names, one method per node class
(dt.backends.render); an op missing from the table is a DTBackendError at compile time.

`env` maps an axis to its lane variable (`x_i`), or to "0" where the axis has one lane; a
value ignores the axes it lacks, so `Expand` and `BroadcastTo` render as their operand. Only
valid lanes are ever computed, so a `Mask` is `True`. A `Reduce` becomes a scalar accumulator
and a loop over its axis, placed in `levels` (the lane-loop nest of the statement being
rendered) at the outermost loop its operand allows; the expression reads the accumulator. A
`Gather`'s subscripts are computed likewise, each at the outermost loop it allows, and its
value is a load where every subscript is inside the tensor and 0 elsewhere.

Values are held in numba's types: floats in the compute dtype (float16 / bfloat16 / 8-bit float
values in a float32), integers as numba computes them (its arithmetic widens them to int64; a
stored tile or tensor keeps its own width), booleans as booleans.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from dt.backends.numba_cpu.plan import KernelPlan, Storage, is_mask
from dt.backends.pysource import number
from dt.backends.render import Renderer, supported_ops
from dt.dtypes import NUMPY, is_integer
from dt.ir import scheduled as S
from dt.ir.ops import REDUCTIONS

# The dtypes numba has no arithmetic for, which the kernels see as their bits (the unsigned
# integer dtype holding them): computed in f32, loads widen them with `_{dtype}_to_f32`, stores
# round with `_f32_to_{dtype}` (helpers.py).
AS_BITS = {"f16": "np.uint16", "bf16": "np.uint16", "f8e4m3": "np.uint8", "f8e5m2": "np.uint8"}
# The function converting a number to each dtype but bool and those of AS_BITS (the module's
# aliases, else NumPy's scalar types).
CONVERT = {"f32": "f32", "f64": "f64", "i64": "i64", "i32": "i32", "i16": "np.int16", "i8": "np.int8",
           "u8": "np.uint8"}
# Significant bits of each integer dtype's values and of each float dtype: an integer dtype with no
# more bits than a float dtype converts to it exactly (int8 to bfloat16: no rounding).
BITS = {"bool": 1, "i8": 7, "u8": 8, "i16": 15, "i32": 31, "i64": 63, "f8e5m2": 3, "f8e4m3": 4, "bf16": 8, "f16": 11,
        "f32": 24, "f64": 53}

# How each op of dt.ir.ops is written, one lane at a time in the compute dtype ({0}, {1}, {2}: the
# operands); a dict holds one text per compute dtype. A call of a helper (`_exp_f32`) puts that
# helper of helpers.py into the module.
OPS = {
    "neg": "(-{0})",
    "not": "(not {0})",
    "abs": "abs({0})",
    # f32: the module's own approximations, which vectorise (helpers.py)
    "exp": {"f32": "_exp_f32({0})", "f64": "math.exp({0})"},
    "tanh": {"f32": "_tanh_f32({0})", "f64": "math.tanh({0})"},
    "sigmoid": {"f32": "_sigmoid_f32({0})", "f64": "_sigmoid_f64({0})"},
    "rsqrt": {"f32": "(f32(1.0) / np.sqrt({0}))", "f64": "(1.0 / np.sqrt({0}))"},
    "erf": {"f32": "f32(math.erf({0}))", "f64": "f64(math.erf({0}))"},
    # NumPy's scalar functions, in the argument's dtype
    "exp2": "np.exp2({0})",
    "log": "np.log({0})",
    "log2": "np.log2({0})",
    "sqrt": "np.sqrt({0})",
    "sin": "np.sin({0})",
    "cos": "np.cos({0})",
    "floor": "np.floor({0})",
    "ceil": "np.ceil({0})",
    "softplus": {"f32": "np.logaddexp(f32(0.0), {0})", "f64": "np.logaddexp(0.0, {0})"},
    "+": "({0} + {1})",
    "-": "({0} - {1})",
    "*": "({0} * {1})",
    "/": "({0} / {1})",
    # numba's own // and % are Python's (floor division, the remainder taking the divisor's sign)
    # for integers and floats alike
    "//": "({0} // {1})",
    "%": "({0} % {1})",
    "<": "({0} < {1})",
    "<=": "({0} <= {1})",
    ">": "({0} > {1})",
    ">=": "({0} >= {1})",
    "==": "({0} == {1})",
    "!=": "({0} != {1})",
    "and": "({0} & {1})",
    "maximum": "_maximum({0}, {1})",  # NaN-propagating, as NumPy's
    "minimum": "_minimum({0}, {1})",
    "pow": "({0} ** {1})",
    "where": "({1} if {0} else {2})",  # (with a Mask for condition: {1}, as only valid lanes are computed)
}
# A reduction's update of its accumulator {0} by one lane's value {1}. rmax / rmin: LLVM
# intrinsics, which vectorise where _maximum would not (helpers.py).
REDUCE = {
    "sum": "{0} += {1}",
    "max": "{0} = _reduce_max({0}, {1})",
    "min": "{0} = _reduce_min({0}, {1})",
}
INTEGER_REDUCE = {"sum": "{0} += {1}", "max": "{0} = max({0}, {1})", "min": "{0} = min({0}, {1})"}
SCAN = ("sum", "prod", "max", "min")  # a running value combined by OPS[SCANS[op].combine] (kernel.py)
SUPPORTED_OPS = supported_ops(OPS, (*REDUCE, "dot"), SCAN)
_HELPER_CALL = re.compile(r"(?<![\w.])(_\w+)\(")


@dataclass
class Level:
    """One loop of a statement's lane-loop nest (axis None: the statement's own level). `lines`
    run once per lane; an item that is a Level is a nested loop (a reduction); `inner` runs
    after the lines."""
    axis: str | None
    lines: list = field(default_factory=list)
    inner: "Level | None" = None


class ExprRenderer(Renderer):
    """Renders the TExprs of one planned kernel, each node by the method named after its class:
    `texpr(e, env, levels)` is the value of e at the lanes in env, in the compute dtype.
    `helpers` collects the helpers they call."""
    backend = "numba"
    OPS = OPS

    def __init__(self, plan: KernelPlan):
        self.plan = plan
        self.helpers: set[str] = set()
        self.start: dict[str, str] = {}  # per axis: its first index, named where its Axis statement is
        self.loc = plan.k.loc  # where in the DT source the statement being rendered is, for errors

    # ---- element addresses
    def at(self, store: Storage, env) -> str:
        """The element of a stored tile at the lanes in env."""
        if not store.dims:
            return store.name
        if store.in_tensor:
            return f"{store.name}[{self.subscript(store.dims, env)}]"
        return f"{store.name}[{', '.join(env.get(d, '0') for d in store.dims)}]"

    def subscript(self, axes, env) -> str:
        """The index of a tensor element at the lanes in env; () for a rank-0 tensor."""
        return ", ".join(self.absolute(a, env) for a in axes) or "()"

    def absolute(self, axis: str, env) -> str:
        lane, start = env.get(axis, "0"), self.start[axis]
        return start if lane == "0" else f"{start} + {lane}"

    def const(self, value: float) -> str:
        text = number(value, "np.inf")
        return text if self.plan.compute == "f64" else f"f32({text})"

    def literal(self, value: float, dtype: str) -> str:
        """A constant of `dtype` as it is held: an integer as an int literal (numba's int64)."""
        if dtype == "bool":
            return str(bool(value))
        return str(int(value)) if is_integer(dtype) else self.const(value)

    def converted(self, x: str, source: str, target: str) -> str:
        """x, a value of dtype `source` as it is held (a float in the compute dtype), as a value
        of `target`: a float becomes an integer through int64, truncating toward zero, then
        wrapping to a narrower integer (as dt.ir.reference casts); an integer becomes a float
        through the compute dtype; a float16 / bfloat16 / 8-bit float result is rounded to it."""
        compute = self.plan.compute
        if source == target:
            return x
        if target == "bool":
            return f"({x} != 0)"
        if is_integer(target):
            if not is_integer(source) and target != "i64":
                x = f"i64({_bare(x)})"
            return f"{CONVERT[target]}({_bare(x)})"
        if is_integer(source):
            exact = BITS[source] <= BITS[target]
            x, source = f"{compute}({_bare(x)})", compute
            if exact:
                return x
        if target == compute or target == "f64":  # (an f32 value is an f64 one)
            return x
        name = f"_round_{target}"
        self.helpers.add(name)
        return f"{name}({x})"

    def op(self, name: str) -> str:
        """How op `name` is written (its OPS entry) in the compute dtype."""
        return self.written(super().op(name))

    def written(self, text: str | dict) -> str:
        """A table's text in the compute dtype; the helpers it calls join the module."""
        if isinstance(text, dict):
            text = text[self.plan.compute]
        self.helpers.update(_HELPER_CALL.findall(text))
        return text

    # ---- one method per node class
    def Literal(self, e: S.Literal, env, levels) -> str:
        return self.literal(e.value, e.dtype)

    def Full(self, e: S.Full, env, levels) -> str:
        return self.literal(e.value, e.dtype)

    def Param(self, e: S.Param, env, levels) -> str:
        return self.plan.scalar[e.name]

    def Extent(self, e: S.Extent, env, levels) -> str:
        size = self.plan.names.ir(S.size_name(e.dim))
        return size if is_integer(e.dtype) else f"{self.plan.compute}({size})"

    def IndexOf(self, e: S.IndexOf, env, levels) -> str:
        # the index is a uint64 (Axis): signed for integer arithmetic, where it may go negative
        return f"{'i64' if is_integer(e.dtype) else self.plan.compute}({self.absolute(e.axis, env)})"

    def Index(self, e: S.Index, env, levels) -> str:
        value = self.plan.idx(e.value)
        if not is_integer(e.dtype):
            return f"{self.plan.compute}({value})"
        return value if value.isidentifier() or value.isdigit() else f"({value})"

    def Mask(self, e: S.Mask, env, levels) -> str:
        return "True"  # only valid lanes are ever computed

    def Ref(self, e: S.Ref, env, levels) -> str:
        if e.name in self.plan.inlined:
            return self.texpr(self.plan.inlined[e.name], env, levels)
        return self.at(self.plan.storage[e.name], env)

    def Load(self, e: S.Load, env, levels) -> str:
        return self.element(e.tensor, self.subscript(e.indices, env), e.dtype)

    def element(self, tensor: str, subscript: str, dtype: str) -> str:
        """Element `subscript` of `tensor` as a value of `dtype` (a float16 / bfloat16 / 8-bit
        float value is held exactly in a float32)."""
        stored = self.plan.p.tensor(tensor).dtype
        value = f"{self.plan.tensor[tensor]}[{subscript}]"
        if stored in AS_BITS:
            self.helpers.add(f"_{stored}_to_f32")
            value = f"_{stored}_to_f32({value})"
            held = "f32"
        else:
            held = stored
        if dtype in AS_BITS and dtype != stored:
            self.helpers.add(f"_round_{dtype}")
            value, held = f"_round_{dtype}({value if held == 'f32' else f'f32({value})'})", "f32"
        target = self.plan.compute if dtype in AS_BITS else dtype
        if held == target:
            return value
        return f"{CONVERT[target]}({value})" if target != "bool" else f"({value} != 0)"

    def Gather(self, e: S.Gather, env, levels) -> str:
        """The element at the subscripts where each is inside its tensor axis, else 0. Each
        subscript becomes a uint64 (a negative one wraps past any extent: one comparison checks
        both ends), computed in the outermost loop it allows (the row of an embedding once per
        row, its check hoisted out of the loop over the columns); a subscript that is an axis's
        own index into a tensor axis of the axis's dimension is inside already. numba computes
        element addresses in 64 bits (intp): no offset overflows."""
        plan = self.plan
        spec = plan.p.tensor(e.tensor)
        subscripts, inside = [], []
        for sub, extent, dim in zip(e.subscripts, e.extents, spec.dims):
            axis = self.axis_index(sub)
            if axis is not None and extent == S.IVar(S.size_name(plan.axes[axis].dim)):
                subscripts.append(self.absolute(axis, env))
                continue
            deps = plan.deps(sub)
            depth = max((n for n, level in enumerate(levels) if level.axis in deps), default=0)
            name = plan.names.fresh(dim if dim.startswith(f"{e.tensor}_") else f"{e.tensor}_{dim}")
            value = self.texpr(sub, env, levels[:depth + 1])
            levels[depth].lines.append(f"{name} = u64({_bare(value)})")
            subscripts.append(name)
            inside.append(f"{name} < u64({plan.idx(extent)})")
        value = self.element(e.tensor, ", ".join(subscripts) or "()", e.dtype)
        if not inside:
            return value
        return f"({value} if {' & '.join(f'({c})' for c in inside) if len(inside) > 1 else inside[0]} " \
               f"else {self.literal(0, e.dtype)})"

    def axis_index(self, e: S.TExpr) -> str | None:
        """The axis whose index e is (relaid out, or a tile inlined), if it is one."""
        while True:
            if isinstance(e, (S.Expand, S.BroadcastTo)):
                e = e.x
            elif isinstance(e, S.Ref) and e.name in self.plan.inlined:
                e = self.plan.inlined[e.name]
            else:
                return e.axis if isinstance(e, S.IndexOf) and is_integer(e.dtype) else None

    def Expand(self, e: S.Expand, env, levels) -> str:
        return self.texpr(e.x, env, levels)

    def BroadcastTo(self, e: S.BroadcastTo, env, levels) -> str:
        return self.texpr(e.x, env, levels)

    def Unary(self, e: S.Unary, env, levels) -> str:
        return self.call(e.op, self.texpr(e.x, env, levels))

    def Binary(self, e: S.Binary, env, levels) -> str:
        return self.call(e.op, self.texpr(e.a, env, levels), self.texpr(e.b, env, levels))

    def Where(self, e: S.Where, env, levels) -> str:
        if is_mask(e.cond):
            return self.texpr(e.a, env, levels)
        return self.call("where", *(self.texpr(x, env, levels) for x in (e.cond, e.a, e.b)))

    def Cast(self, e: S.Cast, env, levels) -> str:
        x = self.texpr(e.x, env, levels)
        if not is_integer(e.x.dtype) and not is_integer(e.dtype) and self.plan.exact_in(e.x, e.dtype):
            return x
        return self.converted(x, e.x.dtype, e.dtype)

    def Reduce(self, e: S.Reduce, env, levels) -> str:
        """A scalar accumulator over the valid lanes of the axis, at the outermost level its
        operand allows; returns its name."""
        plan = self.plan
        deps = plan.deps(e.x) - {e.axis}
        depth = max((n for n, level in enumerate(levels) if level.axis in deps), default=0)
        r = plan.names.fresh(f"{e.op}_{plan.axes[e.axis].dim}")
        looped = not plan.single(e.axis)
        child = Level(e.axis if looped else None)
        env2 = {**env, e.axis: plan.lane[e.axis] if looped else "0"}
        x = self.texpr(e.x, env2, levels[:depth + 1] + [child])
        parent = levels[depth]
        if is_integer(e.x.dtype):  # an index: exact in its own dtype, from the dtype's own bound
            child.lines.append(INTEGER_REDUCE[e.op].format(r, x))
            limits = np.iinfo(NUMPY[e.x.dtype])
            identity = {"sum": 0, "max": limits.min, "min": limits.max}[e.op]
            parent.lines.append(f"{r} = {self.literal(identity, e.x.dtype)}")
        else:
            child.lines.append(self.written(REDUCE[e.op]).format(r, x))
            parent.lines.append(f"{r} = {self.const(REDUCTIONS[e.op].identity)}")
        parent.lines.append(child)
        return r


def _bare(text: str) -> str:
    """text without the parentheses around all of it, if it has them: an argument needs none."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, c in enumerate(text):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0 and i < len(text) - 1:
            return text  # (a) + (b)
    return text[1:-1]
