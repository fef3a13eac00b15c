"""Flash-style gradients (dt.ir.grad.schedule): the products over short dimensions that only other
products read (attention's scores), recomputed in each reader's loop rather than stored, and the
readers that share a kernel and a walk (grad_K with grad_V), as FlashAttention's backward does."""
from __future__ import annotations

from dt.ir import algorithm as A


def flash_products(defs: dict[str, A.FuncDef], outputs, inlined: set[str], updated: set[str], short: set[str]):
    """(recomputed, flash): the products over short dimensions (`short`: a head) that only other
    products read, over one of their dimensions (attention's scores [b, h, m, l], which grad_Q
    reduces over l and grad_K over m; the scores' gradient), to be inlined, so that each product
    recomputes its tiles of them in its loop and nothing of [b, h, s, s] is stored, as
    FlashAttention's backward does; and the outputs reading them, each with the dimensions reduced
    inside it, which take flash tiles. A product is recomputed only where every Func reading it
    (past the element-wise ones, `inlined`) takes flash tiles: another would recompute it an
    element at a time."""
    recomputed = [n for n, f in defs.items() if n not in outputs and n not in inlined and n not in updated and
                  f.update is None and any(isinstance(e, A.Reduce) and e.op == "dot" for e in A.walk(f.expr)) and
                  all(e.dim in short for e in A.walk(f.expr) if isinstance(e, A.Reduce))]
    while True:
        through = inlined | set(recomputed)
        # each with the dimensions reduced inside its own reduction
        flash = {o: [d for a in defs[o].expr.args for d in _reduced_dims(a, defs, through)] for o in outputs
                 if len(defs[o].dims) >= 2 and defs[o].dims[-1] in short and isinstance(defs[o].expr, A.Reduce)
                 and _reads(defs[o].expr, set(recomputed), defs, through)}
        flash = {o: inner for o, inner in flash.items() if set(inner) <= short}
        # the Funcs reading it past those inlined (which pass it on): each is a flash output reading it
        # inside its products
        kept = [n for n in recomputed
                if all(r in flash and _reduced_over(n, defs[r].expr, defs, through - {n}, frozenset())
                       for r in defs if r not in through and _reads(defs[r].expr, {n}, defs, through - {n}))]
        if kept == recomputed:
            return recomputed, flash
        recomputed = kept


def _reduced_over(name: str, e: A.Expr, defs, through: set[str], reducing: frozenset) -> bool:
    """Whether every read of `name` in e (or in the Funcs of `through` e reads at their own
    dimensions) lies inside a product over one of the dimensions it is read at (a max or a sum
    over them would recompute it without the matrix units, one row at a time)."""
    if isinstance(e, A.Access) and e.kind == "func":
        if e.name == name:
            return any(d in reducing for s in e.subscripts for d in A.free_dims(s))
        if e.name in through and _reads(defs[e.name].expr, {name}, defs, through):
            own = defs[e.name].dims
            if [s.dim if isinstance(s, A.DimRef) else None for s in e.subscripts] != list(own):
                return False  # read at other indices: what its reductions reduce is another question
            return _reduced_over(name, defs[e.name].expr, defs, through, reducing)
        return True
    if isinstance(e, (A.Reduce, A.Scan)):
        reducing = reducing | {e.dim} if isinstance(e, A.Reduce) and e.op == "dot" else frozenset()
    return all(_reduced_over(name, k, defs, through, reducing) for k in A.children(e))


def _reads(e: A.Expr, names: set[str], defs, through: set[str]) -> bool:
    """Whether e reads one of `names`, directly or through the Funcs of `through`."""
    for n in A.walk(e):
        if isinstance(n, A.Access) and n.kind == "func":
            if n.name in names or (n.name in through and _reads(defs[n.name].expr, names, defs, through - {n.name})):
                return True
    return False


def _reduced_dims(e: A.Expr, defs, through: set[str]) -> list[str]:
    """The dimensions reduced in e, and in the Funcs of `through` it reads."""
    return [n.dim for n in A.walk(e) if isinstance(n, A.Reduce)] + \
        [d for n in A.walk(e) if isinstance(n, A.Access) and n.kind == "func" and n.name in through
         for d in _reduced_dims(defs[n.name].expr, defs, through - {n.name})]


def flash_siblings(defs: dict[str, A.FuncDef], flash: dict) -> dict[str, str]:
    """Flash-style products reducing over the same dimension, over the same dimensions but their
    last (grad_K[b, h, l, k] and grad_V[b, h, l, n]): each later one -> the first, whose kernel
    computes it too, fused at its innermost loop and sharing its walk (one tile of scores a step)."""
    first: dict[tuple, str] = {}
    siblings = {}
    for name in flash:  # each a reduction over two dimensions or more (_flash)
        f = defs[name]
        key = (f.dims[:-1], f.expr.dim)
        if key in first:
            siblings[name] = first[key]
        else:
            first[key] = name
    return siblings
