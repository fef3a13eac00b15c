"""The `interp` backend: executes the scheduled IR with NumPy, one program instance at a time.

A run consults the `Instrumentation` installed with `instrument_with` (dt.debug installs one
when it is imported): while it reports a debugging state (breakpoints, traces, sanitizers, a
shuffled order), the run goes through its instrumented variant of the program instead of the
plain one. The interpreter itself imports nothing of the debugger."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dt.backends.base import Capabilities
from dt.backends.numpy.codegen import SUPPORTED_OPS, launcher_args, render
from dt.backends.pysource import load_module
from dt.dtypes import NUMPY
from dt.ir.scheduled import Pipeline


@dataclass(frozen=True)
class Instrumentation:
    """How to run a pipeline instrumented. `state()`: the debugging state in force now, None
    when there is nothing to debug (the plain code runs). `build(pipeline)`: the instrumented
    variant, made on a compiled pipeline's first instrumented run and kept; its
    `run(state, launcher_arguments, sizes)` runs it and returns the outputs by name."""
    state: Callable[[], object | None]
    build: Callable[[Pipeline], object]


_instrumentation: Instrumentation | None = None


def instrument_with(instrumentation: Instrumentation | None):
    """Install the instrumentation every later run consults (None: runs are always plain)."""
    global _instrumentation
    _instrumentation = instrumentation


class NumpyInterpreter:
    name = "interp"

    def __init__(self):
        self.capabilities = Capabilities(dtypes=frozenset(NUMPY), ops=SUPPORTED_OPS, array="numpy", gathers=True, scatters=True,
                                         given_outputs=True)

    def source(self, pipeline: Pipeline) -> str:
        return render(pipeline)

    def compile(self, pipeline: Pipeline):
        namespace = load_module(self.source(pipeline), f"interp {pipeline.name}")
        launcher = namespace[pipeline.name]
        instrumented = []  # built on the first instrumented run

        def run(tensors: dict, scalars: dict, sizes: dict, outputs: dict | None = None) -> dict:
            instrumentation = _instrumentation
            state = instrumentation.state() if instrumentation is not None else None
            args = {**launcher_args(pipeline, tensors, scalars, sizes), "outputs": outputs}
            if state is None:
                return launcher(**args)
            if not instrumented:
                instrumented.append(instrumentation.build(pipeline))
            return instrumented[0].run(state, args, sizes)

        return run


def create() -> NumpyInterpreter:
    return NumpyInterpreter()
