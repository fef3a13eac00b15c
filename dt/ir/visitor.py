"""Dispatch over scheduled-IR nodes by class: the base of every renderer (the backends' code
generators, dt.backends.render) and of the IR printer.

A subclass defines one method per node it handles, named after the node's class in
dt.ir.scheduled (`Load`, `Binary`, `For`, ...). `texpr(e, *context)` and `statement(s, *context)`
call the method for the node's class with the extra arguments given, and keep `loc`, the DT
location of the statement being handled, for errors.
"""
from __future__ import annotations

from dt.errors import Loc
from dt.ir import scheduled as S


class Visitor:
    loc: Loc | None = None  # the DT location of the statement being handled

    def texpr(self, e: S.TExpr, *context):
        method = getattr(self, type(e).__name__, None)
        if method is None:
            self.missing(e)
        return method(e, *context)

    def statement(self, s, *context):
        method = getattr(self, type(s).__name__, None)
        if method is None:
            self.missing(s)
        loc = getattr(s, "loc", None)
        if loc is not None:
            self.loc = loc
        return method(s, *context)

    def missing(self, node):
        raise TypeError(f"{type(self).__name__} has no method for {type(node).__name__} nodes")
