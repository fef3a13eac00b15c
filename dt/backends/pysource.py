"""Helpers shared by backends that generate Python source: an indented writer, the names of one
scope of generated code, text made safe to quote in it, and number literals. (Index expressions
are written by dt.ir.index_expr.index_source.)"""
from __future__ import annotations

import contextlib
import keyword
import linecache
import math
from itertools import count

from dt.ir import scheduled as S

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


class Names:
    """The names of one scope of generated code (a module, a function), each distinct. Seed it
    with the names the scope must leave alone (the backend's own globals, helpers, builtins it
    calls), then map every IR name it holds with `ir` before deriving names with `fresh`: an IR
    name keeps its spelling wherever that is free (the IR's names are distinct already), and a
    name the backend derives (`x_offsets`, `A_ptr`) takes the first free suffix `_2`, `_3`, ...
    when it would equal one of them."""

    def __init__(self, taken=()):
        self.taken = set(taken) | set(keyword.kwlist)
        self.mapping: dict[str, str] = {}

    def ir(self, name: str) -> str:
        """The scope's name for IR name `name` (the same one each time)."""
        if name not in self.mapping:
            self.mapping[name] = self.fresh(name)
        return self.mapping[name]

    def fresh(self, base: str) -> str:
        """A new name, `base` made an ASCII identifier (`S.identifier`) where free."""
        return S.fresh_name(S.identifier(base), self.taken)


def guarded(w: Writer, store: S.Store, index) -> contextlib.AbstractContextManager:
    """Where the lines of `store` go: under `if (g0 == 0) & (g1 == 0) ...:` for a guarded store
    (S.Store.guard; `&` rather than `and`, which Triton's JIT does not chain), else where they are.
    `index` writes an index expression."""
    if not store.guard:
        return contextlib.nullcontext()
    tests = [f"{index(e)} == 0" for e in store.guard]
    w.line(f"if {tests[0] if len(tests) == 1 else ' & '.join(f'({t})' for t in tests)}:")
    return w.indent()


def safe_text(text: str) -> str:
    """`text` (a file name, a DT source line, a label) as it may appear in a docstring or a comment
    of generated code: backslashes and quotes escaped, and every character that is not printable
    (a newline, a NUL, a line separator, a lone surrogate) written as its escape, so that the text
    can neither end the string or comment nor make the source invalid. Ordinary paths, non-ASCII
    letters included, read as they are, but for doubled backslashes."""
    return "".join(c.encode("unicode_escape").decode("ascii") if not c.isprintable()
                   else "\\" + c if c in '\\"' else c for c in text)


def loop_bounds(start: str, stop: str, step: int) -> str:
    """The arguments of a `range` over [start, stop) by `step`, a step of 1 left out."""
    return f"{start}, {stop}, {step}" if step != 1 else f"{start}, {stop}"


def number(value: float, inf: str = "float('inf')", nan: str = "float('nan')") -> str:
    """A float literal of generated code; `inf` and `nan`: how the backend spells those."""
    if math.isinf(value):
        return inf if value > 0 else f"-{inf}"
    if math.isnan(value):
        return nan
    return repr(float(value))


def load_module(source: str, label: str, namespace: dict | None = None) -> dict:
    """exec generated source under a file name that tracebacks and debuggers can show."""
    filename = f"<dt-generated {safe_text(label)} #{next(_module_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = dict(namespace or {})
    exec(compile(source, filename, "exec"), ns)
    return ns
