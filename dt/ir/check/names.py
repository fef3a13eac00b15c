"""Names and dimensions: each name declared once, each Func defined once with distinct declared
dimensions on its left, every name used as what it was declared, indices and ranks that agree,
and every dimension on a Func's right either on its left or reduced over."""
from __future__ import annotations

from dt.errors import DTDimensionError, DTNameError, DTSyntaxError, Loc
from dt.ir import algorithm as A

# Keyword arguments of a program call: inputs and scalars cannot take these names.
CALL_KEYWORDS = {"backend": "to choose the backend", "sizes": "for extents no input gives",
                 "out": "for arrays to write the outputs into"}


def declared_kinds(program: A.Program) -> dict[str, str]:
    """Each declared name -> its kind ('Func', 'In', 'SIn', 'Var', 'RVar')."""
    decls: dict[str, A.Declaration] = {}
    for d in program.declarations:
        if d.name in decls:
            raise DTNameError(f"'{d.name}' is declared twice", d.loc,
                              "remove one of the declarations or rename one",
                              ((f"first declared here as {decls[d.name].kind}", decls[d.name].loc),))
        if d.kind in ("In", "SIn") and d.name in CALL_KEYWORDS:
            raise DTNameError(f"an input cannot be named '{d.name}': a program call takes {d.name}= "
                              f"{CALL_KEYWORDS[d.name]}", d.loc, f"rename it, e.g. {d.name}_")
        decls[d.name] = d
    return {n: d.kind for n, d in decls.items()}


def definitions(program: A.Program, kinds: dict[str, str], dim_kinds: dict[str, str]) -> dict[str, A.FuncDef]:
    """Each Func's definition, by name: a declared Func, defined once, its left-hand side distinct
    declared dimensions, its expression within A.MAX_DEPTH."""
    defs: dict[str, A.FuncDef] = {}
    for f in program.funcs:
        kind = kinds.get(f.name)
        if kind is None:
            raise DTNameError(f"unknown name '{f.name}'", f.loc, f"declare it first: `Func {f.name};`")
        if kind != "Func":
            raise DTNameError(f"'{f.name}' is declared as {kind}, so it cannot be defined", f.loc,
                              f"only Funcs are defined; declare `Func {f.name};` instead")
        if f.name in defs:
            raise DTNameError(f"Func '{f.name}' is defined twice", f.loc,
                              "each Func has exactly one definition; give the second one another name",
                              (("first definition here", defs[f.name].loc),))
        _check_lhs(f, dim_kinds)
        _check_depth(f)
        defs[f.name] = f
    return defs


def check_expressions(defs: dict[str, A.FuncDef], kinds: dict[str, str], dim_kinds: dict[str, str]) -> dict[str, int]:
    """Check every name and dimension each definition's expression uses; returns each input's rank."""
    input_ranks: dict[str, tuple[int, Loc | None]] = {}
    for f in defs.values():
        def check_step(item, f=f):
            return _check_expr(f, *item, kinds, defs, input_ranks)
        for e in f.exprs:  # an update's written access too: its target, rank and index inputs
            A.recurse(check_step, (e, frozenset()))
        missing = A.free_dims(f.expr) - set(f.dims)
        if missing:
            dim = sorted(missing)[0]
            loc = _dim_use_loc(f.expr, dim) or f.loc
            if dim_kinds.get(dim) == "RVar":
                raise DTDimensionError(f"RVar '{dim}' is used outside a reduction over '{dim}' in '{f.name}'",
                                       loc, f"wrap the expression in a reduction such as rsum(..., {dim}), or add "
                                            f"{dim} to the left-hand side {f.name}[{', '.join(f.dims + (dim,))}]")
            raise DTDimensionError(f"dimension '{dim}' appears on the right of '{f.name}' but not on its left",
                                   loc, f"add it to the left-hand side, {f.name}[{', '.join(f.dims + (dim,))}], "
                                        f"or reduce over it")
    return {k: v[0] for k, v in input_ranks.items()}


def _check_depth(f: A.FuncDef):
    depth, node = A.depth(f.expr)
    if depth > A.MAX_DEPTH:
        raise DTSyntaxError(f"the expression defining '{f.name}' nests {depth} levels deep; dt takes at most "
                            f"{A.MAX_DEPTH} (this is level {A.MAX_DEPTH + 1})", getattr(node, "loc", None) or f.loc,
                            f"compute part of it in a Func of its own (fused into '{f.name}' with fuse_at, it stays "
                            f"in the same kernel)")


def _check_lhs(f: A.FuncDef, dim_kinds):
    seen = set()
    for d in f.dims:
        if d not in dim_kinds:
            raise DTNameError(f"'{d}' on the left of '{f.name}' is not a declared dimension", f.loc,
                              f"declare it with `Var {d};`")
        if d in seen:
            raise DTDimensionError(f"dimension '{d}' appears twice on the left of '{f.name}'", f.loc,
                                   "the left-hand side names distinct dimensions")
        seen.add(d)


def _dim_use_loc(e: A.Expr, dim: str) -> Loc | None:
    for node in A.walk(e):
        if isinstance(node, A.DimRef) and node.dim == dim:
            return node.loc
    return None


def _check_expr(f, e, bound, kinds, defs, input_ranks):
    """Check expression e of f's definition inside reductions over `bound`; yields (child,
    bound) for each subexpression to check (A.recurse)."""
    if isinstance(e, A.Access):
        kind = kinds.get(e.name)
        if kind is None:
            raise DTNameError(f"unknown name '{e.name}'", e.loc,
                              f"declare it, e.g. `In {e.name};` for an input tensor or `Func {e.name};`")
        if kind not in ("In", "Func"):
            raise DTNameError(f"'{e.name}' is declared as {kind} and cannot be indexed", e.loc,
                              "only input tensors (In) and Funcs are indexed")
        for s in e.subscripts:
            if isinstance(s, A.ScalarRef) and s.name not in kinds:
                raise DTNameError(f"unknown name '{s.name}' used as an index of '{e.name}'", s.loc or e.loc,
                                  f"declare it with `Var {s.name};`")
        plain = [s.dim for s in e.subscripts if isinstance(s, A.DimRef)]
        if len(set(plain)) != len(plain):
            raise DTDimensionError(f"'{e.name}' is indexed with a repeated dimension", e.loc,
                                   "each index names a different dimension")
        rank = len(e.subscripts)
        if kind == "Func":
            if e.name not in defs:
                raise DTNameError(f"Func '{e.name}' is used but never defined", e.loc,
                                  f"define it: `{e.name}[...] = ...;`")
            want = len(defs[e.name].dims)
            if rank != want:
                raise DTDimensionError(f"'{e.name}' has {want} dimension(s) "
                                       f"({', '.join(defs[e.name].dims)}) but is indexed with {rank}", e.loc,
                                       f"index it as {e.name}[{', '.join(defs[e.name].dims)}]",
                                       (("defined here", defs[e.name].loc),))
        else:
            first = input_ranks.setdefault(e.name, (rank, e.loc))
            if first[0] != rank:
                raise DTDimensionError(f"input '{e.name}' is indexed with {rank} dimension(s) here "
                                       f"but with {first[0]} elsewhere", e.loc, "every access of an input has its rank",
                                       (("indexed here", first[1]),))
        for s in e.subscripts:
            yield s, bound
        return
    if isinstance(e, A.ScalarRef):
        if kinds.get(e.name) != "SIn":
            raise DTNameError(f"unknown name '{e.name}'" if e.name not in kinds
                              else f"'{e.name}' is declared as {kinds[e.name]} and cannot be used as a value here",
                              e.loc, f"declare a scalar input with `SIn {e.name};`")
        return
    if isinstance(e, (A.Len, A.DimRef)):
        if kinds.get(e.dim) not in ("Var", "RVar"):
            raise DTNameError(f"'{e.dim}' is not a declared dimension", e.loc, f"declare it with `Var {e.dim};`")
        return
    if isinstance(e, A.Scan):
        function = f"cum{e.op}"
        if e.dim not in f.dims or e.dim in bound:
            raise DTDimensionError(f"{function} runs along '{e.dim}', which is not a dimension of '{f.name}'"
                                   + (" here (a reduction over it encloses the scan)" if e.dim in bound else ""),
                                   e.dim_loc or e.loc, f"a scan gives the running result at each index of a "
                                   f"dimension of the left-hand side: {f.name}[{', '.join(f.dims)}] = "
                                   f"{function}(..., {f.dims[-1] if f.dims else 'x'})")
        if bound:
            raise DTDimensionError(f"{function} inside a reduction (over {', '.join(sorted(bound))}) is not supported",
                                   e.loc, "compute the scan in a Func of its own and reduce that")
        yield e.x, bound
        return
    if isinstance(e, A.Reduce):
        kind = kinds.get(e.dim)
        if kind != "RVar":
            raise DTDimensionError(f"reduction over '{e.dim}', which is " +
                                   ("not declared" if kind is None else f"declared as {kind}"), e.dim_loc or e.loc,
                                   f"reductions run over reduction dimensions: declare `RVar {e.dim};`")
        if e.dim in f.dims and e.dim not in bound:
            raise DTDimensionError(f"'{f.name}' reduces over '{e.dim}', which is also on its left-hand side",
                                   e.dim_loc or e.loc, f"a dimension of {f.name} cannot be reduced away")
        if e.slot is not None and e.slot in A.free_dims(e.args[0]):
            raise DTDimensionError(f"rargtopk ranks values that vary along '{e.slot}', its ranks' own dimension",
                                   e.loc, f"rank values of the other dimensions; {e.slot} numbers the ranks 0 to "
                                          f"len({e.slot}) - 1")
        if e.slot is not None and (e.slot not in f.dims or e.slot in bound):
            raise DTDimensionError(f"rargtopk's ranks run along '{e.slot}', which is not a dimension of '{f.name}'"
                                   + (" here (a reduction over it encloses this one)" if e.slot in bound else ""),
                                   e.loc, f"give {f.name} the dimension of the ranks, its extent k: "
                                          f"{f.name}[..., {e.slot}] = rargtopk(..., {e.dim}, {e.slot})")
        for a in e.args:
            yield a, bound | {e.dim}
        return
    for c in A.children(e):
        yield c, bound
