"""Skipped tiles: a reduction loop walks only the tiles that an index condition leaves a lane of.

Causal attention masks each score above the diagonal: `where(l <= m, score, -inf)`. A tile of l
all of whose lanes fail the condition for every m of the block contributes nothing to the
reductions over l (a max of -inf, a sum of exp(-inf - max) = 0, a product by 0), so the loop
over l stops at the last tile some lane of the block needs, as FlashAttention's causal kernels
do; a lower bound (a sliding window, `l > m - 256`) starts it at the first such tile.

The analysis is of the algorithm, not a schedule primitive: a bound applies only where every
reduction of the loop provably receives its identity on the lanes the condition masks
(`masked_value`), so skipping never changes a result; lanes of the tiles walked are masked as
before. The condition compares the reduced dimension with a pure dimension of the block plus an
integer constant (`l <= m`, `l < m + 1`, `l >= m - 255`). A factor other than the masked one is
taken as finite: exp(-inf) * V is 0 whatever V holds, as FlashAttention assumes too; so is a
causal row's max, computed in another kernel, and a max read from an input (a statistic the forward
saved, as FlashAttention's backward takes its saved logsumexp: `_finite_max`).
"""
from __future__ import annotations

import math

from dt.ir import algorithm as A
from dt.ir.check.uses import read_through

NEG_INF, ZERO = "-inf", "0"  # what a value is on every masked lane
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
# What a reduction's skipped lanes must hold. rargmax: -inf loses to every value but -inf and NaN,
# and a walk of -inf alone keeps the accumulator's first index, 0, as the first (masked) -inf would
_IDENTITY = {"max": NEG_INF, "sum": ZERO, "argmax": NEG_INF}


def index_bound(cond: A.Expr, dim: str, pure) -> tuple[str, str, int, int] | None:
    """`cond` as `dim <= scale * other + c` ('upper', other, c, scale) or `dim >= scale * other + c`
    ('lower', other, c, scale), with `other` one of the dimensions `pure` and scale a positive
    integer (a chunk of a split: `l < l_chunk * 1024 + 1024`); None for any other condition."""
    if not (isinstance(cond, A.Binary) and cond.op in _MIRROR):
        return None
    (da, sa, ca), (db, sb, cb), op = _affine(cond.a), _affine(cond.b), cond.op
    if db == dim and da != dim:
        (da, sa, ca), (db, sb, cb), op = (db, sb, cb), (da, sa, ca), _MIRROR[op]
    if da != dim or sa != 1 or db not in pure or ca is None or cb is None or sb < 1:
        return None
    c = cb - ca  # dim op scale * db + c
    return {"<=": ("upper", db, c, sb), "<": ("upper", db, c - 1, sb), ">=": ("lower", db, c, sb),
            ">": ("lower", db, c + 1, sb)}[op]


def _affine(e: A.Expr) -> tuple[str | None, int, int | None]:
    """e as scale * (a dimension or None) + an integer; (None, 0, None) when it is not that."""
    if isinstance(e, A.DimRef):
        return e.dim, 1, 0
    if isinstance(e, A.Num) and e.integer:
        return None, 0, int(e.value)
    if isinstance(e, A.Binary) and e.op == "*":
        (da, sa, ca), (db, sb, cb) = _affine(e.a), _affine(e.b)
        if da is not None and db is None and ca == 0 and cb is not None:  # not x * len(v): no constant
            return da, sa * cb, 0
        if db is not None and da is None and cb == 0 and ca is not None:
            return db, sb * ca, 0
    if isinstance(e, A.Binary) and e.op in ("+", "-"):
        (da, sa, ca), (db, sb, cb) = _affine(e.a), _affine(e.b)
        if ca is None or cb is None or (db is not None and (e.op == "-" or da is not None)):
            return None, 0, None
        return (da or db), (sa if da is not None else sb), ca + cb if e.op == "+" else ca - cb
    return None, 0, None


def conditions(exprs, funcs: dict[str, A.FuncDef], dim: str, pure) -> list[A.Expr]:
    """The index conditions on `dim` of the wheres in `exprs` (and in the Funcs they read)."""
    found, seen = [], set()
    stack = list(exprs)
    while stack:
        e = stack.pop()
        for node in A.walk(e):
            if isinstance(node, A.Where) and index_bound(node.cond, dim, pure) is not None \
                    and not any(A.same(node.cond, c) for c in found):
                found.append(node.cond)
            elif _own_dims(node, funcs) and node.name not in seen:
                seen.add(node.name)
                stack.append(funcs[node.name].expr)
    return found


def _own_dims(e: A.Expr, funcs) -> bool:
    """A Func read at its own dimensions (f[m, l] for f[m, l] = ...): its definition's names mean
    what they mean here (f[l, m] or f[m, l - 20] would not)."""
    return isinstance(e, A.Access) and e.kind == "func" and e.name in funcs and e.dims == funcs[e.name].dims


def vanishes(r: A.Reduce, cond: A.Expr, funcs: dict[str, A.FuncDef], shifts=frozenset()) -> bool:
    """Whether reduction r receives its identity on every lane where `cond` is false; `shifts`:
    the Funcs that are running maxima of the loop (the online softmax: a row masked throughout
    gets NaN whether or not its tiles are walked)."""
    if r.op == "dot":
        return any(masked_value(x, cond, funcs, r.dim, shifts) == ZERO for x in r.args)
    return r.op in _IDENTITY and masked_value(r.args[0], cond, funcs, r.dim, shifts) == _IDENTITY[r.op]


def masked_value(e: A.Expr, cond: A.Expr, funcs, dim: str, shifts=frozenset()) -> str | None:
    """What e is on a lane where `cond` is false: NEG_INF, ZERO, or None (not known)."""
    if _constant(e) is not None:
        return _constant(e)
    if isinstance(e, A.Where):
        if A.same(e.cond, cond):
            return masked_value(e.b, cond, funcs, dim, shifts)
        a, b = masked_value(e.a, cond, funcs, dim, shifts), masked_value(e.b, cond, funcs, dim, shifts)
        return a if a == b else None
    if _own_dims(e, funcs) and dim in A.free_dims(e):
        return masked_value(funcs[e.name].expr, cond, funcs, dim, shifts)  # a Func computed in the loop's tile
    if isinstance(e, A.Unary) and e.op == "exp":
        return ZERO if masked_value(e.x, cond, funcs, dim, shifts) == NEG_INF else None
    if isinstance(e, A.Binary):
        a = masked_value(e.a, cond, funcs, dim, shifts)
        if e.op == "*" and ZERO in (a, masked_value(e.b, cond, funcs, dim, shifts)):
            return ZERO
        # -inf shifted by the loop's running max (-inf only on a row masked throughout, which gets NaN
        # either way), or scaled by a positive constant
        if a == NEG_INF and e.op == "-" and isinstance(e.b, A.Access) and (e.b.name in shifts or
                                                                         _finite_max(e.b, funcs)):
            return NEG_INF
        if a == NEG_INF and e.op in ("*", "/") and _positive(e.b):
            return NEG_INF
    return None


def _finite_max(e: A.Access, funcs) -> bool:
    """Whether e reads a max, computed anywhere, of rows that are never masked throughout: an
    rmax over r of `where(r <= m + c, x, -inf)` with c >= 0 (m a dimension: lane 0 of r always
    counts) and x free of -inf, as a causal softmax's max. With finite inputs it is finite, so
    exp(-inf - max) is 0 (a gradient's recomputed max, read by its own kernel). An input is
    taken as finite, as every other factor is (a max the forward saved)."""
    if e.kind == "input":
        return True
    f = funcs.get(e.name) if e.kind == "func" else None
    if f is None or not (isinstance(f.expr, A.Reduce) and f.expr.op == "max"):
        return False
    r, body = f.expr.dim, f.expr.args[0]
    while _own_dims(body, funcs):
        body = funcs[body.name].expr
    if not isinstance(body, A.Where) or _constant(body.b) != NEG_INF or _may_be_neg_inf(body.a, funcs):
        return False
    bound = index_bound(body.cond, r, set(f.dims))
    return bound is not None and bound[0] == "upper" and bound[2] >= 0


def _may_be_neg_inf(e: A.Expr, funcs) -> bool:
    """Whether e, or a Func it reads (at any depth), has a -inf constant: a lane of a row the
    where keeps could then be -inf, and the row's max too."""
    return any(_constant(n) == NEG_INF for x in read_through(funcs, [e]) for n in A.walk(x))


def _constant(e: A.Expr) -> str | None:
    if isinstance(e, A.Num):
        return NEG_INF if e.value == -math.inf else ZERO if e.value == 0 else None
    if isinstance(e, A.Unary) and e.op == "neg" and isinstance(e.x, A.Num) and e.x.value == math.inf:
        return NEG_INF
    return None


def _positive(e: A.Expr) -> bool:
    if isinstance(e, A.Num):
        return e.value > 0
    if isinstance(e, A.Len):
        return True
    return isinstance(e, A.Unary) and e.op == "sqrt" and _positive(e.x)
