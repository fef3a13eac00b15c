"""Scheduled-IR tile expressions (TExprs) as Numba source, one lane at a time: the tables of how
each op is written (`OPS`, `REDUCE`: the backend supports exactly their keys), and
`ExprRenderer`, which renders a TExpr at the lanes `env` names, one method per node class
(dt.backends.render); an op missing from the table is a DTBackendError at compile time.

`env` maps an axis to its lane variable (`x_i`), or to "0" where the axis has one lane; a
value ignores the axes it lacks, so `Expand` and `BroadcastTo` render as their operand. Only
valid lanes are ever computed, so a `Mask` is `True`. A `Reduce` becomes a scalar accumulator
and a loop over its axis, placed in `levels` (the lane-loop nest of the statement being
rendered) at the outermost loop its operand allows; the expression reads the accumulator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from dt.backends.numba_cpu.plan import KernelPlan, Storage, is_mask
from dt.backends.pysource import number
from dt.backends.render import Renderer, supported_ops
from dt.ir import scheduled as S
from dt.ir.ops import REDUCTIONS

HALF = ("f16", "bf16")  # stored as uint16 bits, computed in f32

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
SUPPORTED_OPS = supported_ops(OPS, (*REDUCE, "dot"))
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
        return self.const(e.value)

    def Full(self, e: S.Full, env, levels) -> str:
        return self.const(e.value)

    def Param(self, e: S.Param, env, levels) -> str:
        return self.plan.scalar[e.name]

    def Extent(self, e: S.Extent, env, levels) -> str:
        return f"{self.plan.compute}({self.plan.names.ir(S.size_name(e.dim))})"

    def IndexOf(self, e: S.IndexOf, env, levels) -> str:
        return f"{self.plan.compute}({self.absolute(e.axis, env)})"

    def Index(self, e: S.Index, env, levels) -> str:
        return f"{self.plan.compute}({self.plan.idx(e.value)})"

    def Mask(self, e: S.Mask, env, levels) -> str:
        return "True"  # only valid lanes are ever computed

    def Ref(self, e: S.Ref, env, levels) -> str:
        if e.name in self.plan.inlined:
            return self.texpr(self.plan.inlined[e.name], env, levels)
        return self.at(self.plan.storage[e.name], env)

    def Load(self, e: S.Load, env, levels) -> str:
        """The element in e.dtype (a float16 / bfloat16 value is held exactly in a float32)."""
        p, compute = self.plan.p, self.plan.compute
        stored = p.tensor(e.tensor).dtype
        value = f"{self.plan.tensor[e.tensor]}[{self.subscript(e.indices, env)}]"
        if stored in HALF:
            self.helpers.add(f"_{stored}_to_f32")
            value, stored = f"_{stored}_to_f32({value})", "f32"
        if e.dtype in HALF and e.dtype != p.tensor(e.tensor).dtype:
            self.helpers.add(f"_round_{e.dtype}")
            value = f"_round_{e.dtype}({value if stored == 'f32' else f'f32({value})'})"
            stored = "f32"
        target = compute if e.dtype in HALF else e.dtype
        return value if stored == target else f"{target}({value})"

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
        if e.x.dtype == "bool":
            return f"{self.plan.compute}({x})"
        if e.dtype == self.plan.compute or self.plan.exact_in(e.x, e.dtype):
            return x
        name = f"_round_{e.dtype}"
        self.helpers.add(name)
        return f"{name}({x})"

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
        child.lines.append(self.written(REDUCE[e.op]).format(r, x))
        parent = levels[depth]
        parent.lines.append(f"{r} = {self.const(REDUCTIONS[e.op].identity)}")
        parent.lines.append(child)
        return r
