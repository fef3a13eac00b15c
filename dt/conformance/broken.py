"""Deliberately broken backends: `interp` fed a subtly wrong scheduled IR.

Each mutant reproduces a bug a backend author could plausibly write. The suite must catch
every one, with a failure that points at the fault (tests/test_conformance.py checks this):

  unmasked        reduction tiles and dot operands are not masked: lanes past an extent,
                  0 after a load, enter sums as exp(0) = 1 and maxima as 0
  zero_identity   max/min reductions start from 0 instead of -inf/+inf (accumulators and
                  masked lanes): wrong for all-negative rows (rmax) or all-positive (rmin)
  full_groups     the program-id mapping of a grouped map assumes every group is full, so
                  when the group size does not divide the block count, blocks are skipped
  hoisted_fusion  a producer fused at a loop is computed once, for the loop's first
                  iteration, as if its fuse_at had been dropped to the loop's parent
"""
from __future__ import annotations

import math
from dataclasses import fields, replace

from dt.ir import scheduled as S

ACCUMULATOR_LABELS = {"rsum", "rmax", "rmin", "rdot"}  # Assign.dt_name of reduction accumulators


def map_texpr(e: S.TExpr, fn) -> S.TExpr:
    """`fn` applied bottom-up to every node of a tile expression."""
    changes = {f.name: map_texpr(getattr(e, f.name), fn) for f in fields(e) if isinstance(getattr(e, f.name), S.TExpr)}
    return fn(replace(e, **changes) if changes else e)


def map_body(body, fn) -> tuple:
    """`fn(stmt) -> [stmts]` applied to every statement, innermost loops first."""
    out = []
    for s in body:
        if isinstance(s, S.For):
            s = replace(s, body=map_body(s.body, fn))
        out.extend(fn(s))
    return tuple(out)


def map_kernels(pipeline: S.Pipeline, fn) -> S.Pipeline:
    """`fn(kernel, stmt) -> [stmts]` applied to every statement of every kernel."""
    return replace(pipeline, kernels=tuple(replace(k, body=map_body(k.body, lambda s, k=k: fn(k, s)))
                                           for k in pipeline.kernels))


def map_values(pipeline: S.Pipeline, fn) -> S.Pipeline:
    """`fn` applied to every tile-expression node of every Assign and Store."""
    def stmt(kernel, s):
        return [replace(s, value=map_texpr(s.value, fn)) if isinstance(s, (S.Assign, S.Store)) else s]
    return map_kernels(pipeline, stmt)


def _is_mask(e: S.TExpr) -> bool:
    return isinstance(e, S.Mask) or (isinstance(e, S.Expand) and isinstance(e.x, S.Mask))


def unmasked(pipeline: S.Pipeline) -> S.Pipeline:
    return map_values(pipeline, lambda e: e.a if isinstance(e, S.Where) and _is_mask(e.cond) else e)


def zero_identity(pipeline: S.Pipeline) -> S.Pipeline:
    def fn(e):
        if isinstance(e, S.Full) and math.isinf(e.value):
            return replace(e, value=0.0)
        if isinstance(e, S.Where) and _is_mask(e.cond) and isinstance(e.b, S.Literal) and math.isinf(e.b.value):
            return replace(e, b=replace(e.b, value=0.0))
        return e
    return map_values(pipeline, fn)


def full_groups(pipeline: S.Pipeline) -> S.Pipeline:
    # The lowering binds a group's size as min(group, blocks left); keep only the constant.
    def fn(kernel, s):
        if isinstance(s, S.Let) and isinstance(s.value, S.IBin) and s.value.op == "min" \
                and isinstance(s.value.a, S.IConst) and not isinstance(s.value.b, S.IConst):
            return [S.Let(s.name, s.value.a)]
        return [s]
    return map_kernels(pipeline, fn)


def hoisted_fusion(pipeline: S.Pipeline) -> S.Pipeline:
    tensors = {t.name for t in pipeline.inputs + pipeline.temporaries + pipeline.outputs}

    def fn(kernel, s):
        if not isinstance(s, S.For):
            return [s]
        # A fused producer is computed at the top of the loop body, ending with the Assign
        # that holds it (named after its Func): hoist that prefix out, for the first iteration.
        producers = {a.dt_name for a in S.walk_statements(kernel.body) if isinstance(a, S.Assign)} \
            - tensors - ACCUMULATOR_LABELS - {kernel.func}
        ends = [i for i, b in enumerate(s.body) if isinstance(b, S.Assign) and b.dt_name in producers]
        if not ends:
            return [s]
        prefix = s.body[:ends[-1] + 1]
        axes = tuple(b for b in prefix if isinstance(b, S.Axis))
        return [S.Let(s.var, s.start), *prefix, replace(s, body=axes + s.body[ends[-1] + 1:])]
    return map_kernels(pipeline, fn)


MUTATIONS = {"unmasked": unmasked, "zero_identity": zero_identity, "full_groups": full_groups,
             "hoisted_fusion": hoisted_fusion}


class MutantBackend:
    """The interp backend running a mutated copy of every pipeline it is given."""

    def __init__(self, mutation: str):
        from dt import backends
        self.name = f"broken-{mutation}"
        self._mutate = MUTATIONS[mutation]
        self._base = backends.get("interp")
        self.capabilities = self._base.capabilities

    def compile(self, pipeline: S.Pipeline):
        return self._base.compile(self._mutate(pipeline))

    def source(self, pipeline: S.Pipeline) -> str:
        return self._base.source(self._mutate(pipeline))
