"""How dt.debug instruments the interpreter, from outside it.

`InstrumentedRenderer` renders the interpreter's program (dt/backends/numpy/codegen.py) with a
hook (`_dbg`, a dt.debug Session) before every tile statement and after every Assign, numbered
in `info.tile_statements` order, and with loads, stores, allocations and launches routed
through it. Each hook is guarded by a per-statement flag, so statements nobody watches cost one
list lookup. `install()` hands the interpreter the `Instrumentation` it runs with: the
debugging state in force, and `Instrumented`, the variant built from this renderer.
"""
from __future__ import annotations

import itertools

from dt.backends import numpy as interpreter
from dt.backends.numpy.codegen import Renderer
from dt.backends.pysource import Writer, guarded, load_module
from dt.debug import config as debug_config
from dt.debug.info import ProgramInfo
from dt.debug.session import Session
from dt.dtypes import is_integer
from dt.ir import scheduled as S
from dt.ir.index_expr import index_source as index


class InstrumentedRenderer(Renderer):
    def __init__(self, pipeline: S.Pipeline):
        super().__init__(pipeline)
        self.statement_ids = itertools.count()
        self.sid: int | None = None  # the hook number of the statement being rendered; its loads use it

    def docstring_end(self) -> list[str]:
        return ["end runs every program instance. Instrumented for dt.debug: `_dbg` is called before and",
                'after each tile statement whose flag in `_on` / `_post` is set, and runs loads and stores."""']

    def kernel_params(self, kernel: S.Kernel) -> list[str]:
        return super().kernel_params(kernel) + ["_dbg"]

    def kernel_prologue(self, w: Writer):
        w.line("_on, _post = _dbg.enter(pid)")

    def launcher_params(self) -> list[str]:
        return super().launcher_params() + ["_dbg"]

    def allocate(self, name: str, alloc: str) -> str:
        return f'_dbg.allocate("{name}", {alloc})'

    def program_ids(self, kernel: int, count: str) -> str:
        return f"_dbg.launch({kernel}, {count})"

    def Assign(self, s: S.Assign, w: Writer):
        self._stop_hook(w)
        super().Assign(s, w)
        w.line(f"if _post[{self.sid}]: _dbg.post({self.sid}, locals())")

    def Store(self, s: S.Store, w: Writer):
        with guarded(w, s, index):  # a guarded store stops only where it stores
            self._stop_hook(w)
            w.line(f'_dbg.store({self.sid}, "{s.tensor}", {self.store_args(s)})')

    def Load(self, e: S.Load) -> str:
        return f'_dbg.load({self.sid}, "{e.tensor}", {self.load_args(e)})'

    def Gather(self, e: S.Gather) -> str:
        spans = f"({e.order[0]},)" if len(e.order) == 1 else f"({', '.join(e.order)})"
        return f'_dbg.gather({self.sid}, "{e.tensor}", {self.gather_args(e, spans)})'

    def Cast(self, e: S.Cast) -> str:
        if not (is_integer(e.dtype) and e.dtype != "bool" and not is_integer(e.x.dtype) and e.x.dtype != "bool"):
            return super().Cast(e)
        spans = f"({e.dims[0]},)" if len(e.dims) == 1 else f"({', '.join(e.dims)})"
        return f'_dbg.cast({self.sid}, {self.texpr(e.x)}, {spans}, "{e.dtype}", {e.dtype})'

    def _stop_hook(self, w: Writer):
        """Number the tile statement about to be rendered, and call `_dbg.stop` before it."""
        self.sid = next(self.statement_ids)
        w.line(f"if _on[{self.sid}]: _dbg.stop({self.sid}, locals())")


def render(pipeline: S.Pipeline) -> str:
    return InstrumentedRenderer(pipeline).module()


class Instrumented:
    """The instrumented variant of one pipeline, built on first use."""

    def __init__(self, pipeline: S.Pipeline):
        self.info = ProgramInfo(pipeline)
        self.source = render(pipeline)
        self.launcher = load_module(self.source, f"interp {pipeline.name} (dt.debug)")[pipeline.name]

    def run(self, config: debug_config.Config, args: dict, sizes: dict) -> dict:
        session = Session(self.info, config, sizes)
        debug_config.live_sessions.append(session)
        try:
            return self.launcher(**args, _dbg=session)
        finally:
            debug_config.live_sessions.remove(session)


def install():
    """Make the interpreter run instrumented whenever a debugging feature is on."""
    interpreter.instrument_with(interpreter.Instrumentation(state=debug_config.current, build=Instrumented))
