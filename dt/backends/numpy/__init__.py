"""The `interp` backend: executes the scheduled IR with NumPy, one program instance at a time.
While dt.debug has anything to do (breakpoints, traces, sanitizers, a shuffled order), a run
goes through an instrumented variant of the generated code instead of the plain one."""
from __future__ import annotations

from dt.backends.base import Capabilities
from dt.backends.numpy.codegen import launcher_args, render
from dt.backends.numpy.runtime import BFLOAT16
from dt.backends.pysource import load_module
from dt.debug import config as debug_config
from dt.debug.session import Instrumented
from dt.ir.scheduled import Pipeline


class NumpyInterpreter:
    name = "interp"

    def __init__(self):
        dtypes = {"f32", "f16", "f64"} | ({"bf16"} if BFLOAT16 is not None else set())
        self.capabilities = Capabilities(dtypes=frozenset(dtypes), array="numpy")

    def source(self, pipeline: Pipeline) -> str:
        return render(pipeline)

    def compile(self, pipeline: Pipeline):
        namespace = load_module(self.source(pipeline), f"interp {pipeline.name}")
        launcher = namespace[pipeline.name]
        instrumented = []  # built on the first debugged run

        def run(tensors: dict, scalars: dict, sizes: dict) -> dict:
            debugging = debug_config.current()
            if debugging is None:
                return launcher(**launcher_args(pipeline, tensors, scalars, sizes))
            if not instrumented:
                instrumented.append(Instrumented(pipeline))
            return instrumented[0].run(debugging, launcher_args(pipeline, tensors, scalars, sizes), sizes)

        return run


def create() -> NumpyInterpreter:
    return NumpyInterpreter()
