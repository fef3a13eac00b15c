"""What a backend is: a renderer or executor of the scheduled IR that declares what it supports."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from dt.ir import algorithm as A
from dt.ir.scheduled import Pipeline

ALL_OPS = frozenset(("neg",) + A.UNARY_FUNCTIONS + A.BINARY_FUNCTIONS + A.ARITHMETIC + A.COMPARISONS
                    + ("where", "rsum", "rmax", "rmin", "rdot"))


class BackendUnavailable(Exception):
    """Raised by a backend factory when its dependencies are missing."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Capabilities:
    dtypes: frozenset[str] = frozenset(("f32", "f16", "bf16", "f64"))
    ops: frozenset[str] = ALL_OPS
    array: str = "numpy"  # the arrays its compiled pipelines take and return: 'numpy' or 'torch'
    devices: tuple[str, ...] = ("cpu",)
    notes: dict[str, str] = field(default_factory=dict)


# A compiled pipeline: (tensors by name, scalars by name, sizes by `{dim}_SIZE`) -> outputs by name.
CompiledPipeline = Callable[[dict, dict, dict], dict]


class Backend(Protocol):
    name: str
    capabilities: Capabilities

    def compile(self, pipeline: Pipeline) -> CompiledPipeline: ...

    def source(self, pipeline: Pipeline) -> str: ...
