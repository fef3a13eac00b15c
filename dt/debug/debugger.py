"""Stopping in a Python debugger at a DT statement.

A stop calls a small generated function whose arguments are `dbg` (the dt.debug.Frame), `pid`,
the loop variables and every tile in scope under its DT name, so the debugger's locals are the
DT program's state. That function enters the debugger: dt's pdb (pdb plus DT commands) when
the breakpoint hook is Python's default, otherwise whatever `sys.breakpointhook` is (ipdb,
an IDE, PYTHONBREAKPOINT=...), called from that frame exactly as `breakpoint()` would.
"""
from __future__ import annotations

import io
import keyword
import os
import pdb
import sys

import numpy as np

from dt.backends.pysource import load_module, safe_text

_RESERVED = {"dbg", "pid"}
HINT_PDB = ("dt: ds(tep) = to the next tile statement, dn(ext) = to the next DT line, c = to the next breakpoint;\n"
            "    dtiles, dshow NAME = tiles, dwhere = this place; `dbg` is this stop's dt.debug.Frame")
HINT_HOOK = ("dt: `dbg` is this stop's dt.debug.Frame: dbg.tiles, dbg.show(), dbg.where(); dbg.step() or "
             "dbg.next(), then continue")
_hinted = False


def uses_dt_pdb() -> bool:
    return sys.breakpointhook is sys.__breakpointhook__ and not os.environ.get("PYTHONBREAKPOINT")


def enter_debugger(frame):
    """The action of a breakpoint that has none of its own."""
    global _hinted
    bp = frame.breakpoint
    print(f"dt: breakpoint {bp.id} ({bp.spec}), hit {bp.hits}" if bp is not None else "dt: step", file=sys.stdout)
    print(frame.where(), file=sys.stdout)
    if not _hinted:  # once per process
        print(HINT_PDB if uses_dt_pdb() else HINT_HOOK, file=sys.stdout)
        _hinted = True
    fn, names = _stop_function(frame)
    values = {"dbg": frame, "pid": frame.pid, **frame.iters, **frame.tiles}
    fn(**{n: values[n] for n in names})


def _stop_function(frame):
    st = frame.statement_info
    names = ["dbg", "pid"] + list(frame.iters)
    names += [n for n in frame.tiles if n not in names and n not in _RESERVED and not keyword.iskeyword(n)
              and not n.startswith("__")]
    cache = st.stop_functions
    key = tuple(names)
    if key not in cache:
        loc = frame.loc
        text = loc.text.strip() if loc is not None and loc.text else ""
        source = (f"def dt_breakpoint({', '.join(names)}):\n"
                  f"    if __dt_debugger__(dbg): __sys__.breakpointhook()\n"
                  f"    pass  # {safe_text(str(loc))}: {safe_text(text)}\n")
        ns = load_module(source, f"breakpoint at {loc}",
                         {"__name__": "dt_stop", "__dt_debugger__": _gate, "__sys__": sys, "np": np})
        cache[key] = ns["dt_breakpoint"]
    return cache[key], names


def _gate(frame) -> bool:
    """Enter dt's pdb on the caller's frame, or say that the installed hook should be called."""
    if not uses_dt_pdb():
        return True
    DTPdb(frame).set_trace(sys._getframe(1))
    return False


class DTPdb(pdb.Pdb):
    """pdb with commands at the level of the DT program (see `help dstep` and the others)."""

    def __init__(self, frame):
        # Stepping with pdb's own step/next skips dt's machinery and lands in the generated kernel.
        super().__init__(skip=["dt.debug", "dt.debug.*", "dt.backends.numpy", "dt.backends.numpy.*"])
        self.dt_frame = frame

    def do_dstep(self, arg):
        """dstep (ds)
        Run to the next tile statement the DT program executes and stop there."""
        self.dt_frame.step()
        return self.do_continue(arg)

    do_ds = do_dstep

    def do_dnext(self, arg):
        """dnext (dn)
        Run to the next tile statement on another DT line (over the rest of this one) and stop."""
        self.dt_frame.next()
        return self.do_continue(arg)

    do_dn = do_dnext

    def do_dwhere(self, arg):
        """dwhere
        The DT source line of this stop, the program instance, loop indices and tiles."""
        self.message(self.dt_frame.where())

    def do_dtiles(self, arg):
        """dtiles
        Every tile in scope: DT meaning, index ranges (masked lanes counted), dtype, min/max."""
        self.message(self.dt_frame.table())

    def do_dshow(self, arg):
        """dshow [NAME ...]
        Print tiles (all in scope if none named); masked lanes print as --."""
        out = io.StringIO()
        try:
            self.dt_frame.show(*arg.split(), file=out)
        except KeyError as e:
            self.error(e.args[0])
            return
        self.message(out.getvalue().rstrip("\n"))

    def do_dbreak(self, arg):
        """dbreak [SPEC]
        Set a DT breakpoint (e.g. dbreak softmax.dt:10@pid=2), or list them without SPEC."""
        from dt import debug
        from dt.errors import DTError
        if not arg.strip():
            for bp in debug.breakpoints():
                self.message(f"{bp.id}: {bp.spec} ({bp.hits} hit(s))")
            return
        try:
            bp = debug.break_at(arg.strip())
        except DTError as e:
            self.error(e.render())
            return
        self.message(f"dt breakpoint {bp.id}: {bp.spec}")

    def do_dclear(self, arg):
        """dclear [ID]
        Remove the DT breakpoint ID (set from code or dbreak), or all of them."""
        from dt import debug
        try:
            debug.clear(int(arg) if arg.strip() else None)
        except ValueError:
            self.error(f"dclear takes a breakpoint number, got {arg!r}")
