"""Loads that do not change over a product's reduction loop, made once before it.

Flash attention's loop over keys reads the block's queries `Q[m, k]` in every step: the scores
are inlined into the loop, so the lowering emits the load (and the whole-extent axis `k` it
spans) inside it. The tile is the same at every step; FlashAttention keeps it in registers for
the whole walk. This pass moves such loads before the loop, with the axes they need: a load is
loop-invariant when none of its axes, nor their bounds, depends on the loop's variable or on
anything the loop assigns, and the kernel stores nothing to its tensor. Only loops whose body
holds a Dot are touched (their invariant operand feeds the matrix units every step); a loop of
element-wise work keeps its loads where they are, so that a tile lives no longer than its use.
"""
from __future__ import annotations

from dataclasses import replace

from dt.ir import scheduled as S


def hoist_invariant_loads(kernel: S.Kernel) -> S.Kernel:
    return replace(kernel, body=_Hoisting(set(kernel.writes)).body(kernel.body))


class _Hoisting:
    def __init__(self, written: set[str]):
        self.written = written

    def body(self, stmts) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, S.For):
                s = replace(s, body=self.body(s.body))
                if s.kind == "reduction" and _has_dot(s.body):
                    hoisted, kept = self.split(s)
                    out += hoisted
                    s = replace(s, body=kept)
            out.append(s)
        return tuple(out)

    def split(self, loop: S.For) -> tuple[list, tuple]:
        varying = {loop.var}  # names whose value may differ from one step to the next
        axes: dict[str, S.Axis] = {}
        hoisted, kept = [], []
        for s in loop.body:
            if isinstance(s, S.Axis):
                axes[s.name] = s
                if (S.index_names(s.start) | S.index_names(s.size) | S.index_names(s.limit)) & varying:
                    varying.add(s.name)
                    kept.append(s)
                else:
                    hoisted.append(s)
            elif isinstance(s, S.Assign) and isinstance(s.value, S.Load) and s.value.tensor not in self.written \
                    and not set(s.value.indices) & varying and s.name not in varying \
                    and not any(isinstance(t, S.Assign) and t.name == s.name and t is not s for t in loop.body):
                hoisted.append(s)
            else:
                kept.append(s)
                varying |= _bound(s)
        # an axis hoisted but used only by statements kept inside stays inside
        used = {a for s in hoisted if isinstance(s, S.Assign) for a in s.value.indices}
        return [s for s in hoisted if not isinstance(s, S.Axis) or s.name in used], \
            tuple(s for s in loop.body if s in kept or (isinstance(s, S.Axis) and s in hoisted and s.name not in used))


def _bound(s) -> set[str]:
    """The names a statement (and any loop in it) binds."""
    if isinstance(s, S.For):
        return {s.var} | {n for t in s.body for n in _bound(t)}
    return set() if isinstance(s, S.Store) else {s.name}


def _has_dot(body) -> bool:
    return any(isinstance(n, S.Dot) for s in S.walk_statements(body) if isinstance(s, (S.Assign, S.Store))
               for n in S.walk_texpr(s.value))
