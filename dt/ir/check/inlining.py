"""Inlining: each inlined Func's definition substituted at its uses, its dimensions replaced by the
use's subscripts; read at computed subscripts, it gives 0 outside its own extents."""
from __future__ import annotations

import dataclasses

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir.check.uses import uses


def inline(defs, order, schedules) -> dict[str, A.FuncDef]:
    """Each definition, in `order`, with the Funcs scheduled inline substituted at their uses; an
    inlined output read at plain dimensions is marked there (A.Stored) to be stored from it."""
    inlined = {n for n in defs if schedules[n].inline}
    stored = {n for n in inlined if schedules[n].compiled}
    funcs: dict[str, A.FuncDef] = {}
    for n in order:  # producers first, so substitutions are already complete
        f = defs[n]
        funcs[n] = dataclasses.replace(f, expr=substitute(f.expr, funcs, inlined, stored))
        if f.update is not None:  # its indices may read Funcs too (tv's gradient: grad_L[r, ti[r, i]] += ...)
            indices = tuple(substitute(s, funcs, inlined, set()) for s in f.update.subscripts)
            funcs[n] = dataclasses.replace(funcs[n], update=dataclasses.replace(f.update, subscripts=indices))
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


def substitute(e: A.Expr, funcs: dict[str, A.FuncDef], inline: set[str], stored=frozenset()) -> A.Expr:
    return A.recurse(lambda node: _substitute_step(node, funcs, inline, stored), e)


def _substitute_step(e: A.Expr, funcs: dict[str, A.FuncDef], inline: set[str], stored):
    if isinstance(e, A.Access) and e.kind == "func" and e.name in inline:
        subscripts = []
        for sub in e.subscripts:  # a gather's own subscripts may read inlined Funcs too
            subscripts.append((yield sub))
        f = funcs[e.name]
        scan = next((n for n in A.walk(f.expr) if isinstance(n, A.Scan)), None)
        if scan is not None:
            raise DTScheduleError(f"cannot inline '{f.name}': cum{scan.op} runs along its own dimension "
                                  f"'{scan.dim}', carrying a running value from tile to tile", e.loc,
                                  f"compute {f.name} at root (remove its inline()), or fuse it at a loop over "
                                  f"another dimension")
        ranked = next((n for n in A.walk(f.expr) if isinstance(n, A.Reduce) and n.slot), None)
        if ranked is not None:
            raise DTScheduleError(f"cannot inline '{f.name}': r{ranked.op} fills its dimension '{ranked.slot}' "
                                  f"with the ranks it finds", e.loc,
                                  f"compute {f.name} at root (remove its inline()), or fuse it")
        used = frozenset().union(*(A.free_dims(sub) for sub in subscripts)) if subscripts else frozenset()
        bound = {n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce)}
        clash = bound & used - set(f.dims)
        if clash:
            raise DTScheduleError(f"cannot inline '{f.name}' here: its reduction dimension "
                                  f"'{sorted(clash)[0]}' is also an index of this use", e.loc,
                                  "rename the reduction dimension in the inlined Func")
        body = _replace_dims(f.expr, dict(zip(f.dims, subscripts)))
        if e.name in stored and tuple(getattr(s, "dim", None) for s in subscripts) == f.dims:
            return A.Stored(e.name, f.dims, body, e.loc)  # read at its own dimensions: every element, once
        return _within_extents(body, f, subscripts, e.loc)
    kids = []
    for c in A.children(e):
        kids.append((yield c))
    return A.rebuild(e, tuple(kids)) if kids else e


def _within_extents(body: A.Expr, f: A.FuncDef, subscripts, loc) -> A.Expr:
    """`body` where every computed subscript lies within f's extent along its axis, else 0: an
    inlined Func read outside itself gives 0, as a stored one does."""
    guard = None
    for dim, sub in zip(f.dims, subscripts):
        if isinstance(sub, A.DimRef):
            continue
        inside = A.Binary("and", A.Binary("<=", A.Num(0.0, loc, integer=True), sub, loc),
                          A.Binary("<", sub, A.Len(dim, loc), loc), loc)
        guard = inside if guard is None else A.Binary("and", guard, inside, loc)
    return body if guard is None else A.Where(guard, body, A.Num(0.0, loc, integer=True), loc)


def _replace_dims(e: A.Expr, subscripts: dict[str, A.Expr]) -> A.Expr:
    """e with each of its free dimensions in `subscripts` replaced by that expression (a
    dimension renamed, or an index expression); a Len of a renamed dimension is renamed too."""
    return A.recurse(lambda item: _replace_step(*item), (e, subscripts))


def _replace_step(e: A.Expr, subscripts: dict[str, A.Expr]):
    if isinstance(e, A.Stored):  # read at other indices once this is inlined: no longer a place to store it
        x = yield e.x, subscripts
        renamed = [subscripts.get(d, A.DimRef(d)) for d in e.dims]
        same = all(isinstance(s, A.DimRef) and s.dim == d for s, d in zip(renamed, e.dims))
        return A.Stored(e.name, e.dims, x, e.loc) if same else x
    if isinstance(e, A.DimRef):
        return subscripts.get(e.dim, e)
    if isinstance(e, A.Len):
        sub = subscripts.get(e.dim)
        return A.Len(sub.dim, e.loc) if isinstance(sub, A.DimRef) else e
    if isinstance(e, A.Reduce):
        inner = {k: v for k, v in subscripts.items() if k != e.dim}
        args = []
        for a in e.args:
            args.append((yield a, inner))
        return A.Reduce(e.op, tuple(args), e.dim, e.loc, e.dim_loc, slot=e.slot)
    kids = []
    for c in A.children(e):
        kids.append((yield c, subscripts))
    return A.rebuild(e, tuple(kids)) if kids else e


def check_inlined_outputs(outputs: dict[str, A.FuncDef], funcs: dict[str, A.FuncDef], schedules):
    """An inlined output is stored where a computed Func reads it at its own dimensions: there must
    be such a read."""
    stored = {n.name for f in funcs.values() for n in A.walk(f.expr) if isinstance(n, A.Stored)}
    for name in outputs:
        if name not in stored:
            raise DTScheduleError(f"'{name}' is inlined and compiled, but no Func computed in a kernel reads it at "
                                  f"its own dimensions, {name}[{', '.join(outputs[name].dims)}], where it could be "
                                  f"stored from", schedules[name].locs.get("inline"),
                                  f"compute {name} at root (remove its inline()), or fuse it")
