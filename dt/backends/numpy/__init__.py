"""The `interp` backend: executes the scheduled IR with NumPy, one program instance at a time."""
from __future__ import annotations

from dt.backends.base import Capabilities
from dt.backends.numpy.codegen import render
from dt.backends.numpy.runtime import BFLOAT16
from dt.backends.pysource import load_module
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

        def run(tensors: dict, scalars: dict, sizes: dict) -> dict:
            return launcher(**tensors, **{k: float(v) for k, v in scalars.items()}, **sizes)

        return run


def create() -> NumpyInterpreter:
    return NumpyInterpreter()
