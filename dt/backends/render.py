"""The renderer base every backend's code generator subclasses: node dispatch (dt.ir.visitor)
plus the op table a backend renders element-wise ops with.

`OPS` is a backend's rendering table: op name (a key of dt.ir.ops.OPS) -> how the backend writes
it (a format string over the operands' text, or whatever its Unary/Binary/Where methods take).
The ops a backend supports are exactly its table's keys (`supported_ops`, its Capabilities.ops);
a node or op it lacks is a DTBackendError at compile time, at the DT statement that uses it.
"""
from __future__ import annotations

from typing import Mapping

from dt.errors import DTBackendError
from dt.ir.ops import DT_OPS, REDUCTIONS, SCANS
from dt.ir.visitor import Visitor


def supported_ops(ops: Mapping[str, object], reductions=tuple(REDUCTIONS), scans=()) -> frozenset[str]:
    """The DT op names (dt.ir.ops.DT_OPS) a backend with rendering table `ops` and the given
    reductions and scans (S.Scan ops) supports: what its Capabilities.ops lists."""
    functions = {REDUCTIONS[r].function for r in reductions} | {SCANS[s].function for s in scans}
    if {"max", "min"} <= set(reductions) and "where" in ops:  # what the lowering makes arg-reductions of
        functions |= {r.function for r in REDUCTIONS.values() if r.index}
    return frozenset(ops) & DT_OPS | frozenset(functions)


class Renderer(Visitor):
    backend = ""  # the backend's name, for errors
    OPS: Mapping[str, object] = {}

    def missing(self, node):
        raise DTBackendError(f"the {self.backend} backend cannot render {type(node).__name__} nodes", self.loc)

    def op(self, name: str):
        """How this backend renders op `name` (its OPS entry)."""
        try:
            return self.OPS[name]
        except KeyError:
            raise DTBackendError(f"the {self.backend} backend does not support the op '{name}'", self.loc,
                                 "run the program on a backend that has it (`dt conformance --backend NAME` "
                                 "reports the ops a backend lacks as unsupported), or write it with other ops") \
                from None

    def call(self, name: str, *operands: str) -> str:
        """Op `name` applied to the operands' text, by its rendering-table format string."""
        return self.op(name).format(*operands)
