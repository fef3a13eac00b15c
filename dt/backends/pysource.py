"""Helpers shared by backends that generate Python source: an indented writer and the
rendering of scheduled-IR index expressions."""
from __future__ import annotations

import linecache
import math
from itertools import count

from dt.ir import scheduled as S

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}
_module_ids = count()


class Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0

    def line(self, text: str = ""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def indent(self):
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, w: Writer):
        self.w = w

    def __enter__(self):
        self.w.depth += 1

    def __exit__(self, *exc):
        self.w.depth -= 1


def index(e: S.IExpr, minimum: str = "min", parent: int = 0) -> str:
    """Python source of an index expression; `minimum` names the min function to call."""
    if isinstance(e, S.IConst):
        return str(e.value)
    if isinstance(e, S.IVar):
        return e.name
    if e.op in ("min", "max"):
        fn = minimum if e.op == "min" else "max"
        return f"{fn}({index(e.a, minimum)}, {index(e.b, minimum)})"
    p = _PRECEDENCE[e.op]
    left = index(e.a, minimum, p)
    right = index(e.b, minimum, p)
    # The right operand needs parentheses unless it is the same associative operator.
    if isinstance(e.b, S.IBin) and e.b.op in _PRECEDENCE and _PRECEDENCE[e.b.op] == p \
            and not (e.b.op == e.op and e.op in ("+", "*")):
        right = f"({right})"
    text = f"{left} {e.op} {right}"
    return f"({text})" if p < parent else text


def py_name(name: str) -> str:
    """A DT name as a Python identifier in generated code, renamed only where it would shadow
    something generated code calls (an input called `range`, a scalar called `np`)."""
    return f"{name}_" if name in S.RESERVED_NAMES else name


def number(value: float, inf: str = "float('inf')") -> str:
    if math.isinf(value):
        return inf if value > 0 else f"-{inf}"
    if math.isnan(value):
        return "float('nan')"
    return repr(float(value))


def load_module(source: str, label: str, namespace: dict | None = None) -> dict:
    """exec generated source under a file name that tracebacks and debuggers can show."""
    filename = f"<dt-generated {label} #{next(_module_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = dict(namespace or {})
    exec(compile(source, filename, "exec"), ns)
    return ns
