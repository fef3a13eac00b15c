"""Breakpoints at DT places: a Func, a DT source line (optionally a column: one statement of
the line), with optional conditions on the program id, loop variables and tile positions.

Spec strings (dt.debug.break_at, DT_BREAK, the `dbreak` debugger command):

    softmax.dt:10          a DT source line (the file by name, path suffix or full path)
    softmax.dt:9:27        the statement at that column (here the load of A)
    10                     a line of whatever DT file runs
    _sum                   a Func (its definition line)
    ...@pid=3              only in program instance 3 (also pid=1|5)
    ...@y_iter=512         only when loop variable y_iter is 512
    ...@y=700              only when the current tile of dimension y covers index 700

A breakpoint stops before the first tile statement of each run of statements it matches,
the way a line breakpoint stops once per execution of a line: `_sum` stops when a tile of
_sum starts being computed, once per tile.
"""
from __future__ import annotations

import difflib
import re
import warnings
from itertools import count
from typing import Callable

from dt.debug.errors import DTDebugError, DTDebugWarning
from dt.debug.info import ProgramInfo, Statement, same_file

_ids = count(1)
_LINE = re.compile(r"^(?:(?P<file>.*?):)?(?P<line>\d+)(?::(?P<col>\d+))?$")


class Breakpoint:
    """Where to stop, and what to do there: `action(frame)` when given, else the debugger."""

    def __init__(self, *, func: str | None = None, file: str | None = None, line: int | None = None,
                 col: int | None = None, pid=None, when: dict | Callable | None = None,
                 action: Callable | None = None, spec: str | None = None):
        if func is None and line is None:
            raise DTDebugError("a breakpoint needs a place: a Func or a DT source line",
                               None, 'e.g. dt.debug.break_at("softmax.dt:9") or dt.debug.break_at(func="_sum")')
        self.id = next(_ids)
        self.func, self.file, self.line, self.col = func, file, line, col
        self.pids = _pid_set(pid)
        self.when = when
        self.action = action
        self.hits = 0
        self.spec = spec or self._spec()

    def _spec(self) -> str:
        place = self.func if self.func is not None else \
            f"{self.file + ':' if self.file else ''}{self.line}{':' + str(self.col) if self.col else ''}"
        conds = ""
        if self.pids is not None:
            conds += "@pid=" + "|".join(map(str, sorted(self.pids)))
        if isinstance(self.when, dict):
            conds += "".join(f"@{k}={v}" for k, v in self.when.items())
        elif self.when is not None:
            conds += "@<condition>"
        return place + conds

    def __repr__(self):
        return f"<dt breakpoint {self.id}: {self.spec}, {self.hits} hit(s)>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        from dt.debug import config
        config.remove_breakpoint(self)

    # ------------------------------------------------------------ matching
    def matches(self, st: Statement, info: ProgramInfo) -> bool:
        loc = st.loc
        if loc is None:
            return False
        if self.func is not None:  # its definition line, less what other Funcs defined on that line hold
            place = info.func_lines.get(self.func)
            return place is not None and (loc.file, loc.line) == place and info.func_at(loc) == self.func
        if self.file is not None and not same_file(loc.file, self.file):
            return False
        return loc.line == self.line and (self.col is None or loc.col == self.col)

    def resolve(self, info: ProgramInfo) -> list[int]:
        """The hook numbers where this breakpoint may stop in this program: the first statement
        of every run of matching ones (runs broken by statements it does not match)."""
        keys = set(self.when) if isinstance(self.when, dict) else set()
        matched = [st for st in info.statements if self.matches(st, info)]
        if not matched:
            if self.file is not None and same_file(info.pipeline.file, self.file):
                lines = ", ".join(map(str, info.lines(self.file)))
                raise DTDebugError(f"breakpoint {self.spec}: no tile statement at line {self.line}"
                                   f"{' column ' + str(self.col) if self.col else ''} of {info.pipeline.file}",
                                   None, f"lines with statements: {lines}")
            if self.func is not None:  # a misspelling, or a Func of another program of the script
                self._warn_unknown_func(info)
            return []
        usable = {st.sid for st in matched if keys <= st.condition_keys()}
        if not usable:
            have = sorted(set().union(*(st.condition_keys() for st in matched)))
            raise DTDebugError(f"breakpoint {self.spec}: {', '.join(sorted(keys - set(have))) or 'a condition'} "
                               f"names no loop variable or dimension at {matched[0].loc}", matched[0].loc,
                               f"conditions there may name: {', '.join(have)}")
        return [s for s in sorted(usable)
                if s - 1 not in usable or info.statements[s].first_in_kernel]

    def _warn_unknown_func(self, info: ProgramInfo):
        known = sorted(info.func_lines)
        close = difflib.get_close_matches(self.func, known, n=1)
        guess = f"; did you mean {close[0]}?" if close else ""
        warnings.warn(f"breakpoint {self.spec} names no Func of program '{info.pipeline.name}' (its Funcs: "
                      f"{', '.join(known)}{guess}): it never stops there", DTDebugWarning, stacklevel=2)

    def holds(self, scope: dict, st: Statement) -> bool:
        """Whether the {loop variable / dimension: value} conditions hold (pid and callables are
        the session's to check)."""
        dims = st.dims
        for key, want in self.when.items():
            if key in dims:
                start, _, valid = scope[dims[key].name]
                if not start <= want < start + valid:
                    return False
            elif scope.get(key) != want:
                return False
        return True


def _pid_set(pid) -> frozenset[int] | None:
    if pid is None:
        return None
    if isinstance(pid, int):
        return frozenset((pid,))
    return frozenset(int(p) for p in pid)


def parse_spec(spec: str) -> dict:
    """The fields of a Breakpoint (func, file, line, col, pid, when) from a spec string."""
    place, *conds = spec.strip().split("@")
    place = place.strip()
    pid, when = None, {}
    for cond in conds:
        key, sep, value = (part.strip() for part in cond.partition("="))
        if not sep or not key.isidentifier():
            raise DTDebugError(f"breakpoint {spec!r}: a condition is name=value, got {cond!r}", None,
                               "e.g. softmax.dt:10@pid=3@y=700")
        try:
            if key == "pid":
                pid = [int(v) for v in value.split("|")]
            else:
                when[key] = int(value)
        except ValueError:
            raise DTDebugError(f"breakpoint {spec!r}: {key} takes an integer, got {value!r}", None) from None
    fields = dict(func=None, file=None, line=None, col=None, pid=pid, when=when or None)
    m = _LINE.match(place)
    if m:
        return {**fields, "file": m["file"] or None, "line": int(m["line"]),
                "col": int(m["col"]) if m["col"] else None}
    if place.isidentifier():
        return {**fields, "func": place}
    raise DTDebugError(f"cannot read breakpoint {spec!r}", None,
                       "write FILE:LINE[:COL], LINE or a Func name, then optional @pid=N, @LOOPVAR=N, @DIM=INDEX")


def parse(spec: str, action: Callable | None = None) -> Breakpoint:
    """A Breakpoint from a spec string (see the module docstring)."""
    return Breakpoint(**parse_spec(spec), action=action, spec=spec.strip())


def parse_list(text: str) -> list[Breakpoint]:
    """Several specs separated by ';' or ','."""
    return [parse(part) for part in re.split(r"[;,]", text) if part.strip()]
