"""Debugging DT programs on the interpreter, at the level of the DT source.

    import dt
    dt.debug.break_at("softmax.dt:10", pid=3)   # or DT_BREAK=softmax.dt:10@pid=3
    dt.debug.break_at(func="_sum")              # stops in pdb: `dbg`, `pid`, loop indices, tiles
    with dt.debug.trace("_sum") as t:           # tiles with their pid, loop indices, index ranges
        prog(A=a)
    t.tensor("_sum")
    with dt.debug.sanitize():                   # or DT_SANITIZE=1: bounds, uninit, race, nan
        prog(A=a)

Whenever a breakpoint, trace, sanitizer or shuffled order is active, programs run on the
interpreter (unless a backend is named explicitly) in an instrumented variant of its
generated code; otherwise the plain variant runs, at full speed. See docs/debugging.md.
"""
from __future__ import annotations

from typing import Callable

from dt.debug import config, instrument
from dt.debug.breakpoints import Breakpoint, parse_spec
from dt.debug.errors import (DTDebugError, DTDebugWarning, DTNonFiniteError, DTOutOfBoundsError, DTRaceError,
                             DTSanitizerError, DTUninitializedReadError)
from dt.debug.frame import Frame, Tile
from dt.debug.trace import TileRecord, Trace

__all__ = ["break_at", "clear", "breakpoints", "trace", "sanitize", "shuffle", "statements", "instrumented_source",
           "Breakpoint", "Frame", "Tile", "Trace", "TileRecord", "DTDebugError", "DTDebugWarning", "DTSanitizerError",
           "DTOutOfBoundsError", "DTUninitializedReadError", "DTRaceError", "DTNonFiniteError"]

instrument.install()  # the interpreter runs instrumented while a debugging feature is on


def break_at(where: str | int | None = None, *, func: str | None = None, pid=None,
             when: dict | Callable | None = None, action: Callable | None = None) -> Breakpoint:
    """Stop before a DT statement: `where` is "file.dt:LINE[:COL]", a line number or a Func
    name (conditions may follow: "softmax.dt:10@pid=3@y=700"); or `func=`. `pid`: an id or
    ids; `when`: {loop variable: value, dimension: index the tile covers} or a callable
    taking the Frame. `action(frame)` runs instead of the debugger. Usable as a context
    manager that clears it on exit."""
    if where is not None and func is not None:
        raise DTDebugError("give either a place or func=, not both", None)
    if where is None:
        return config.add_breakpoint(Breakpoint(func=func, pid=pid, when=when, action=action))
    place = parse_spec(str(where))
    if callable(when) and place["when"]:
        raise DTDebugError(f"breakpoint {where!r}: give conditions either in the spec or as a callable", None)
    place["when"] = when if callable(when) else {**(place["when"] or {}), **(when or {})} or None
    place["pid"] = pid if pid is not None else place["pid"]
    return config.add_breakpoint(Breakpoint(**place, action=action))


def clear(breakpoint: Breakpoint | int | None = None):
    """Remove one breakpoint (the object or its id), or every one set from code."""
    if breakpoint is None:
        config.clear_breakpoints()
        return
    for bp in list(config.breakpoints()):
        if bp is breakpoint or bp.id == breakpoint:
            config.remove_breakpoint(bp)
            return
    raise DTDebugError(f"no breakpoint {breakpoint!r}", None,
                       f"the breakpoints: {', '.join(str(b.id) for b in config.breakpoints()) or 'none'}")


def breakpoints() -> list[Breakpoint]:
    """Every breakpoint in force: set from code, then from DT_BREAK."""
    return config.breakpoints()


def trace(*names: str, pid=None) -> Trace:
    """Record the tiles of these Funcs or inputs (every Func when none named), optionally of
    chosen program ids; a context manager (or call .start() / .stop())."""
    return Trace(*names, pid=pid)


class _Context:
    def __init__(self, checks: frozenset[str], seed: int | None):
        self.entry = (checks, seed)

    def __enter__(self):
        config.push_context(self.entry)
        return self

    def __exit__(self, *exc):
        config.pop_context(self.entry)


def sanitize(*checks: str, shuffle: int | None = None) -> _Context:
    """A context in which programs run under the sanitizers named (all when none):
    'bounds' (unmasked out-of-bounds loads and stores), 'uninit' (reads of elements never
    written), 'race' (two program instances of a launch writing the same element, or one
    reading what another wrote), 'nan' (the first NaN/Inf on a valid lane). Faults raise a
    DTSanitizerError. `shuffle=seed` also runs program instances in a shuffled order."""
    return _Context(frozenset(config.parse_checks(",".join(checks)) if checks else config.CHECKS), shuffle)


def shuffle(seed: int) -> _Context:
    """A context in which each launch runs its program instances in an order shuffled with `seed`."""
    return _Context(frozenset(), int(seed))


def statements(program, dtype: str = "f32") -> str:
    """Every tile statement of a program (a dt.Program or a scheduled-IR Pipeline) with its
    kernel, DT place and generated line: the places breakpoints can name."""
    from dt.debug.info import ProgramInfo
    info = ProgramInfo(program.pipeline(dtype) if hasattr(program, "pipeline") else program)
    lines = []
    for st in info.statements:
        loops = "".join(f"{f.var} " for f in st.loops)
        lines.append(f"{st.sid:3} {info.kernel_names[st.kernel]:<20} {str(st.loc):<28} {loops:<18}{st.text}".rstrip())
    return "\n".join(lines)


def instrumented_source(program, dtype: str = "f32") -> str:
    """The instrumented interpreter source dt.debug runs for a program (or Pipeline)."""
    return instrument.render(program.pipeline(dtype) if hasattr(program, "pipeline") else program)
