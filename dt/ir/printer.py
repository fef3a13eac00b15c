"""The scheduled IR as text: what `prog.ir()` and `dt compile --backend ir` print.

One line per statement, indented by loop; each tile assignment shows its dtype and axes
(`acc: f32[x, y] = ...`), expressions are written as calls named after the IR's nodes and ops.
Meant for people reading what the lowering made of a schedule, and for tests.
"""
from __future__ import annotations

from dt.errors import Loc
from dt.dtypes import is_integer
from dt.ir import scheduled as S
from dt.ir.index_expr import index_source
from dt.ir.ops import OPS
from dt.ir.visitor import Visitor


def ir_text(pipeline: S.Pipeline) -> str:
    return _Printer().pipeline(pipeline)


def _tensors(specs) -> str:
    return ", ".join(f"{t.name}: {t.dtype}[{', '.join(t.dims)}]" for t in specs) or "-"


def _at(loc: Loc | None) -> str:
    return f"  # line {loc.line}" if loc is not None else ""


class _Printer(Visitor):
    def pipeline(self, p: S.Pipeline) -> str:
        lines = [f"pipeline {p.name}: compute {p.compute_dtype}",
                 f"  inputs {_tensors(p.inputs)}",
                 f"  scalars {', '.join(p.scalars) or '-'}",
                 f"  outputs {_tensors(p.outputs)}"]
        if p.temporaries:
            lines.append(f"  temporaries {_tensors(p.temporaries)}")
        for k in p.kernels:
            hints = [f"{name} {value}" for name, value in (("warps", k.num_warps), ("stages", k.num_stages))
                     if value is not None]
            hints += ["tma"] * k.tma + ["stream"] * k.stream + ([f"persistent {k.persistent_programs or 'per SM'}"] if k.persistent else [])
            lines.append("")
            lines.append(f"kernel {k.name} computes {k.func} in {index_source(k.program_count)} programs"
                         + (f" ({', '.join(hints)})" if hints else "") + ":" + _at(k.loc))
            self.lines = lines
            for s in k.body:
                self.statement(s, 1)
        return "\n".join(lines) + "\n"

    def write(self, depth: int, text: str, loc: Loc | None = None):
        self.lines.append("  " * depth + text + _at(loc))

    # ------------------------------------------------------------ statements
    def Let(self, s: S.Let, depth):
        self.write(depth, f"let {s.name} = {index_source(s.value)}")

    def LetValue(self, s: S.LetValue, depth):
        self.write(depth, f"let {s.name} = {self.texpr(s.value)}", s.loc)

    def Axis(self, s: S.Axis, depth):
        limit = f", valid below {index_source(s.limit)}" if s.limit is not None else ""
        self.write(depth, f"axis {s.name} over {s.dim}: from {index_source(s.start)}, "
                          f"{index_source(s.size)} lanes{limit}", s.loc)

    def For(self, s: S.For, depth):
        self.write(depth, f"for {s.var} in range({index_source(s.start)}, {index_source(s.stop)}, {s.step}):"
                          f"  # {s.kind} loop over {s.dim}" + (f", line {s.loc.line}" if s.loc else ""))
        for inner in s.body:
            self.statement(inner, depth + 1)

    def Assign(self, s: S.Assign, depth):
        self.write(depth, f"{s.name}: {_type(s.value)} = {self.texpr(s.value)}", s.loc)

    def Store(self, s: S.Store, depth):
        guard = f" if {' and '.join(f'{index_source(e)} == 0' for e in s.guard)}" if s.guard else ""
        self.write(depth, f"store {s.tensor}[{', '.join(s.indices)}] = {self.texpr(s.value)}{guard}", s.loc)

    def Scatter(self, s: S.Scatter, depth):
        subscripts = ", ".join(self.texpr(e) for e in s.subscripts)
        self.write(depth, f"scatter {s.tensor}[{subscripts}] {'+=' if s.accumulate else '='} {self.texpr(s.value)}",
                   s.loc)

    # ------------------------------------------------------------ tile expressions
    def Literal(self, e: S.Literal):
        return str(int(e.value)) if is_integer(e.dtype) else repr(e.value)

    def Param(self, e: S.Param):
        return e.name

    def Extent(self, e: S.Extent):
        return f"len({e.dim})"

    def IndexOf(self, e: S.IndexOf):
        return f"indices({e.axis})"

    def Index(self, e: S.Index):
        return f"index({index_source(e.value)})"

    def Ref(self, e: S.Ref):
        return e.name

    def Load(self, e: S.Load):
        order = f" as [{', '.join(e.order)}]" if e.order != e.indices else ""
        return f"load({e.tensor}[{', '.join(e.indices)}]{order}, {e.dtype})"

    def Gather(self, e: S.Gather):
        return f"gather({e.tensor}[{', '.join(self.texpr(x) for x in e.subscripts)}], {e.dtype})"

    def Unary(self, e: S.Unary):
        return f"{e.op}({self.texpr(e.x)})"

    def Binary(self, e: S.Binary):
        a, b = self.texpr(e.a), self.texpr(e.b)
        return f"({a} {e.op} {b})" if OPS[e.op].syntax != "function" else f"{e.op}({a}, {b})"

    def Where(self, e: S.Where):
        return f"where({self.texpr(e.cond)}, {self.texpr(e.a)}, {self.texpr(e.b)})"

    def Expand(self, e: S.Expand):
        return f"expand({self.texpr(e.x)}, [{', '.join(e.target)}])"

    def BroadcastTo(self, e: S.BroadcastTo):
        return f"broadcast({self.texpr(e.x)})"

    def Mask(self, e: S.Mask):
        return f"valid({e.axis})"

    def Full(self, e: S.Full):
        return f"full([{', '.join(e.axes)}], {e.value!r}, {e.dtype})"

    def Cast(self, e: S.Cast):
        return f"cast({self.texpr(e.x)}, {e.dtype})"

    def Reduce(self, e: S.Reduce):
        return f"r{e.op}({self.texpr(e.x)}, {e.axis})"

    def Scan(self, e: S.Scan):
        return f"cum{e.op}({self.texpr(e.x)}, {e.axis})"

    def Dot(self, e: S.Dot):
        acc = f", acc={self.texpr(e.acc)}" if e.acc is not None else ""
        return f"dot({self.texpr(e.a)}, {self.texpr(e.b)}, {e.axis}{acc}, {e.acc_dtype})"


def _type(e: S.TExpr) -> str:
    unit = f", unit {', '.join(sorted(e.unit))}" if e.unit else ""
    return f"{e.dtype}[{', '.join(e.dims)}{unit}]"
