"""Expressions deeper than generated code can nest, split into tiles of their own.

Every backend renders a tile operation as a call or a parenthesised operation, and Python's
parser takes at most 200 nested parentheses (compiling deep expressions also recurses in
CPython). So the lowering ends with `split_deep_expressions`: in a statement whose expression
nests deeper than MAX_NESTING, each part that reaches MAX_NESTING levels is computed first, into
a tile of its own (an Assign just before the statement, in the same loop), and the statement
reads that tile. No backend then renders an expression deeper than MAX_NESTING (plus a level
for a part that cannot be split off, a Dot), whatever the depth of the DT expression; a
statement within the bound is left as it is.
"""
from __future__ import annotations

from dataclasses import replace

from dt.ir import scheduled as S

MAX_NESTING = 32


def nesting(e: S.TExpr) -> int:
    """How many expressions deep `e` nests (a leaf: 1), at any depth."""
    heights: dict[int, int] = {}
    stack = [(e, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            heights[id(node)] = 1 + max((heights[id(c)] for c in S.texpr_children(node)), default=0)
        elif id(node) not in heights:
            stack.append((node, True))
            stack += ((c, False) for c in S.texpr_children(node))
    return heights[id(e)]


def split_deep_expressions(pipeline: S.Pipeline) -> S.Pipeline:
    taken = pipeline.all_names()
    splitters = [_Splitter(taken, pipeline.compute_dtype) for _ in pipeline.kernels]
    kernels = tuple(replace(k, body=splitter.body(k.body)) for k, splitter in zip(pipeline.kernels, splitters))
    return replace(pipeline, kernels=kernels) if any(splitter.parts for splitter in splitters) else pipeline


class _Splitter:
    """Splits the statements of one kernel; the names of the tiles it makes avoid `taken`."""

    def __init__(self, taken: set[str], compute: str):
        self.taken = taken
        self.compute = compute
        self.parts = 0  # tiles made

    def body(self, stmts: tuple) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, S.For):
                s = replace(s, body=self.body(s.body))
            elif isinstance(s, (S.Assign, S.Store)):
                if nesting(s.value) > MAX_NESTING:
                    target = s.name if isinstance(s, S.Assign) else s.tensor
                    value, parts = self.split(s.value, target, s.loc)
                    out += parts
                    s = replace(s, value=value)
            out.append(s)
        return tuple(out)

    def split(self, e: S.TExpr, target: str, loc) -> tuple[S.TExpr, list[S.Assign]]:
        """e with each part MAX_NESTING deep read from a tile of its own, and the Assigns computing
        those tiles (innermost first). The parts are found bottom-up, without recursion."""
        parts: list[S.Assign] = []
        done: dict[int, tuple[S.TExpr, int]] = {}  # id of a node -> (its rewrite, its depth)
        stack = [e]
        while stack:
            node = stack[-1]
            if id(node) in done:
                stack.pop()
                continue
            children = S.texpr_children(node)
            pending = [c for c in children if id(c) not in done]
            if pending:
                stack += reversed(pending)
                continue
            stack.pop()
            kids = [done[id(c)] for c in children]
            rewritten = node
            if any(new is not old for (new, _), old in zip(kids, children)):
                rewritten = S.with_children(node, tuple(new for new, _ in kids))
            depth = 1 + max((d for _, d in kids), default=0)
            # a boolean part is stored as a number: the Cast around it is one level more
            limit = MAX_NESTING - 1 if rewritten.dtype == "bool" else MAX_NESTING
            if depth >= limit and node is not e and not isinstance(node, S.Dot):
                rewritten, depth = self.bind(rewritten, target, loc, parts)
            done[id(node)] = (rewritten, depth)
        return done[id(e)][0], parts

    def bind(self, value: S.TExpr, target: str, loc, parts: list) -> tuple[S.TExpr, int]:
        """`value` assigned to a new tile: a reference to it, and that reference's depth. A boolean
        is kept as a number (1.0 / 0.0, as the lowering keeps comparisons in tiles) and compared
        with 0 where it is read."""
        name = S.fresh_name(f"{target}_part", self.taken)
        boolean = value.dtype == "bool"
        if boolean:
            value = S.Cast(value, self.compute)
        parts.append(S.Assign(name, value, name, loc))
        self.parts += 1
        ref = S.Ref(name, value.dims, value.dtype, value.unit)
        return (S.Binary("!=", ref, S.Literal(0.0, ref.dtype)), 2) if boolean else (ref, 1)
