"""Inlining: each inlined Func's definition substituted at its uses, its dimensions renamed to the
use's indices."""
from __future__ import annotations

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir.check.uses import uses


def inline(defs, order, schedules) -> dict[str, A.FuncDef]:
    """Each definition, in `order`, with the Funcs scheduled inline substituted at their uses."""
    inlined = {n for n in defs if schedules[n].inline}
    funcs: dict[str, A.FuncDef] = {}
    for n in order:  # producers first, so substitutions are already complete
        f = defs[n]
        funcs[n] = A.FuncDef(f.name, f.dims, substitute(f.expr, funcs, inlined), f.loc)
    return funcs


def check_inlined_depth(f: A.FuncDef, written: A.FuncDef, schedules):
    """f, with the Funcs it uses inlined, within MAX_DEPTH (each definition is, as written)."""
    depth, _ = A.depth(f.expr)
    if depth <= A.MAX_DEPTH:
        return
    inlined = sorted({u.name for u in uses(written.expr) if schedules[u.name].inline})
    raise DTScheduleError(f"'{f.name}' with {', '.join(repr(n) for n in inlined)} inlined nests {depth} "
                          f"expressions deep; dt takes at most {A.MAX_DEPTH}", schedules[inlined[0]].locs.get("inline"),
                          f"compute {inlined[0]} at root or fuse it into '{f.name}' (fuse_at) instead of inlining it")


def substitute(e: A.Expr, funcs: dict[str, A.FuncDef], inline: set[str]) -> A.Expr:
    return A.recurse(lambda node: _substitute_step(node, funcs, inline), e)


def _substitute_step(e: A.Expr, funcs: dict[str, A.FuncDef], inline: set[str]):
    if isinstance(e, A.Access) and e.kind == "func" and e.name in inline:
        f = funcs[e.name]
        rename = dict(zip(f.dims, e.indices))
        bound = {n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce)}
        clash = bound & set(e.indices) - set(f.dims)
        if clash:
            raise DTScheduleError(f"cannot inline '{f.name}' here: its reduction dimension "
                                  f"'{sorted(clash)[0]}' is also an index of this use", e.loc,
                                  "rename the reduction dimension in the inlined Func")
        return _rename(f.expr, rename)
    kids = []
    for c in A.children(e):
        kids.append((yield c))
    return A.rebuild(e, tuple(kids)) if kids else e


def _rename(e: A.Expr, rename: dict[str, str]) -> A.Expr:
    return A.recurse(lambda item: _rename_step(*item), (e, rename))


def _rename_step(e: A.Expr, rename: dict[str, str]):
    if isinstance(e, A.Access):
        return A.Access(e.name, e.kind, tuple(rename.get(i, i) for i in e.indices), e.loc, e.index_locs)
    if isinstance(e, A.DimRef):
        return A.DimRef(rename.get(e.dim, e.dim), e.loc)
    if isinstance(e, A.Len):
        return A.Len(rename.get(e.dim, e.dim), e.loc)
    if isinstance(e, A.Reduce):
        inner = {k: v for k, v in rename.items() if k != e.dim}
        args = []
        for a in e.args:
            args.append((yield a, inner))
        return A.Reduce(e.op, tuple(args), e.dim, e.loc, e.dim_loc)
    kids = []
    for c in A.children(e):
        kids.append((yield c, rename))
    return A.rebuild(e, tuple(kids)) if kids else e
