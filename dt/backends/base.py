"""What a backend is: a renderer or executor of the scheduled IR that declares what it supports."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from dt.dtypes import NAMES
from dt.ir.scheduled import Pipeline


class BackendUnavailable(Exception):
    """Raised by a backend factory when its dependencies are missing."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Capabilities:
    dtypes: frozenset[str] = frozenset(NAMES)
    # The DT ops it runs (names of dt.ir.ops.DT_OPS): derive them from the backend's rendering
    # table with dt.backends.render.supported_ops. A program using another is "unsupported".
    ops: frozenset[str] = frozenset()
    array: str = "numpy"  # the arrays its compiled pipelines take and return: 'numpy' or 'torch'
    gathers: bool = False  # whether it renders S.Gather: loads at computed indices (A[x + 1], E[I[t], d])
    scatters: bool = False  # whether it renders S.Scatter: an update's writes (g[I[t], d] += e)
    devices: tuple[str, ...] = ("cpu",)
    notes: dict[str, str] = field(default_factory=dict)
    # whether its compiled pipelines take `outputs` (below) and write into them; if not, a call
    # with out= has the results copied into the caller's arrays
    given_outputs: bool = False
    # what its kernels run on, for performance warnings (dt.ir.lint): 'cpu' or 'gpu'
    machine: str = "cpu"
    # whether it compiles its kernels again for every new shape (extents are constants in them)
    compiles_per_shape: bool = False


# A compiled pipeline: (tensors by name, scalars by name, sizes by `{dim}_SIZE`) -> outputs by name.
# A backend whose Capabilities say given_outputs also takes `outputs`: arrays of its array type,
# by output name (any of them, checked by the runtime: shape, dtype, contiguity, no overlap), to
# write those outputs into instead of allocating them; it returns them.
CompiledPipeline = Callable[..., dict]


class Backend(Protocol):
    name: str
    capabilities: Capabilities

    def compile(self, pipeline: Pipeline) -> CompiledPipeline: ...

    def source(self, pipeline: Pipeline) -> str: ...

    # Optional: `lint_rules`, the backend's own performance-warning rules (dt.ir.lint.Rule by
    # name), and `compiled_facts(pipeline, context)`, what its compiler says of each kernel
    # (registers, spills, shared memory, occupancy) with the warnings those facts give.
