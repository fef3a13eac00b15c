"""fuse_at legality and the kernel structure it makes: each producer fused at a loop its consumer
has, with every use inside that loop; block, map, persistent and tma only on a kernel's root Func,
tensorize only over the kernel's dimensions; compile_to_kernel's pipeline one kernel."""
from __future__ import annotations

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir.check.program import CheckedProgram
from dt.ir.check.uses import reachable


def check_fuse(producer, consumer, dim, funcs, schedules, fused):
    loc = schedules[producer].locs.get("fuse_at")
    if consumer not in funcs:
        raise DTScheduleError(f"'{producer}' is fused into '{consumer}', which is not computed "
                              f"(it is inlined or unused)", loc, "fuse into a Func that is computed")
    loops = _loops_of(funcs, consumer)
    if dim not in loops:
        raise DTScheduleError(f"'{consumer}' has no loop over '{dim}' to fuse '{producer}' at",
                              schedules[producer].dim_locs.get(("fuse_at", dim)) or loc,
                              f"the loops of {consumer} are: {', '.join(loops)}")
    scan = next(iter(A.scans_along(funcs[producer].expr, dim)), None)
    if scan is not None:
        raise DTScheduleError(f"'{producer}' runs cum{scan.op} along '{dim}', so it cannot be fused at a loop over "
                              f"'{dim}': each tile would start the scan afresh", loc,
                              f"fuse it at a loop over another dimension, where it is computed along all of '{dim}'")
    seen = {producer}
    c = consumer
    while c in fused:
        if c in seen:
            raise DTScheduleError(f"fuse_at forms a cycle through '{producer}'", loc)
        seen.add(c)
        c = fused[c][0]
    if c == producer:
        raise DTScheduleError(f"fuse_at forms a cycle through '{producer}'", loc)


def _loops_of(checked_funcs, name) -> tuple[str, ...]:
    f = checked_funcs[name]
    reductions = []
    for e in A.walk(f.expr):
        if isinstance(e, A.Reduce) and e.dim not in reductions:
            reductions.append(e.dim)
    return f.dims + tuple(reductions)


def check_launch_primitives(schedules, fused):
    """persistent, tma and stream say how a kernel runs, so they belong on its root Func: on a
    Func computed inside another kernel they would silently do nothing."""
    for name, s in schedules.items():
        if not (name in fused or s.inline):
            continue
        for prim in ("persistent", "tma", "stream"):
            if getattr(s, prim):
                if s.inline:
                    raise DTScheduleError(f"{prim} applies to the Func a kernel computes, but '{name}' is "
                                          "inlined into its consumers", s.locs.get(prim), f"remove {name}.{prim}()")
                root = name
                while root in fused:
                    root = fused[root][0]
                raise DTScheduleError(f"{prim} applies to the Func a kernel computes, but '{name}' is fused "
                                      f"into '{fused[name][0]}'", s.locs.get(prim),
                                      f"call it on the kernel's root Func: {root}.{prim}()")


def check_fused_uses(cp: CheckedProgram):
    """Every use of a fused producer must lie inside the consumer loop it is computed in. A Func
    computed with a sibling sits inside the sibling's reduction loop."""
    placed = {**cp.fused, **{f: with_ for with_, fs in cp.computed_with.items() for f in fs}}
    for producer, (consumer, dim) in cp.fused.items():
        loc = cp.schedules[producer].locs.get("fuse_at")
        for f in cp.funcs.values():
            for use in cp.reads[f.name]:
                if use.name == producer and cp.root_of(f.name) != cp.root_of(producer):
                    continue  # read from another kernel: a tensor the producer's kernel stored (stored_fused)
                if use.name == producer and use.dims is None:
                    raise DTScheduleError(f"'{producer}' is fused, so it is computed only over the tiles of the loop it "
                                          f"is fused at, but '{f.name}' reads it at computed indices, {use.text}",
                                          use.loc, f"compute {producer} at root (remove its fuse_at), or inline it: "
                                                   f"either reads it anywhere")
                if use.name == producer and use.dims != cp.funcs[producer].dims:
                    own = ", ".join(cp.funcs[producer].dims)
                    raise DTScheduleError(f"'{producer}' is fused, so it must be indexed by its own dimension "
                                          f"names, {producer}[{own}], but '{f.name}' indexes it {use.text}", use.loc,
                                          f"rename the dimensions in the definition of {producer}, or compute it at "
                                          f"root (remove its fuse_at)")
        users = [n for n in cp.funcs if any(u.name == producer for u in cp.reads[n])]
        if not users and producer not in cp.outputs:  # an output is stored from there: nothing need read it
            raise DTScheduleError(f"'{producer}' is fused into '{consumer}' but nothing uses it", loc,
                                  f"compute {producer} at root (remove its fuse_at), or compile it: an output "
                                  f"fused into {consumer}'s kernel is stored from there")
        loops = _loops_of(cp.funcs, consumer)
        level = loops.index(dim)
        if producer in cp.stored_fused:  # stored where it is computed, read from memory elsewhere
            host = cp.root_of(producer)
            for user in users:
                if cp.kernel_roots.index(cp.root_of(user)) < cp.kernel_roots.index(host):
                    raise DTScheduleError(f"'{producer}' is fused into '{consumer}' and stored by {host}'s kernel, "
                                          f"but '{user}' reads it in {cp.root_of(user)}'s kernel, which runs before",
                                          loc, f"compute {producer} at root (remove its fuse_at), or fuse it into "
                                               f"a kernel that runs before {cp.root_of(user)}'s")
            users = [n for n in users if cp.root_of(n) == host]
        for user in users:
            # Walk from the user up to the consumer, finding the consumer loop the use sits in.
            chain = user
            while chain != consumer and chain in placed:
                enter = placed[chain]
                if enter[0] == consumer:
                    break
                chain = enter[0]
            if chain != consumer and (chain not in placed or placed[chain][0] != consumer):
                raise DTScheduleError(f"'{producer}' is fused into '{consumer}', but '{user}' also uses it "
                                      f"and is not computed inside '{consumer}'", loc,
                                      f"remove the fuse_at so that {producer} is computed at root, or fuse {user} into "
                                      f"{consumer} as well")
            if chain == consumer:
                for reductions in _enclosing_reductions(cp.funcs[consumer].expr, producer):
                    if dim in cp.dim_kinds and cp.dim_kinds[dim] == "RVar" and dim not in cp.funcs[consumer].dims \
                            and dim not in reductions:
                        raise DTScheduleError(f"'{producer}' is fused at the reduction loop over '{dim}' of "
                                              f"'{consumer}', but '{consumer}' uses it outside that reduction", loc,
                                              f"fuse it at one of {consumer}'s pure loops "
                                              f"({', '.join(cp.funcs[consumer].dims)})")
            else:
                at = placed[chain][1]
                if loops.index(at) < level:
                    raise DTScheduleError(f"'{producer}' is fused at '{consumer}''s loop over '{dim}', but its "
                                          f"user '{chain}' is computed further out, at the loop over '{at}'", loc,
                                          f"fuse {producer} at the loop over '{at}' or further out")


def _enclosing_reductions(e: A.Expr, target: str) -> list[tuple[str, ...]]:
    """For each use of Func `target` in e, the reduction dims enclosing it (outermost first)."""
    out, stack = [], [(e, ())]
    while stack:
        node, dims = stack.pop()
        if isinstance(node, A.Access):
            if node.kind == "func" and node.name == target:
                out.append(dims)
            continue
        if isinstance(node, A.Reduce):
            dims = dims + (node.dim,)
        stack.extend((c, dims) for c in reversed(A.children(node)))
    return out


def check_func_schedule(cp: CheckedProgram, root: str):
    """Schedules name only dimensions the kernel has; fused Funcs have no block/map of their own;
    a scan runs along all of its dimension in each program."""
    kernel_dims = set(cp.kernel_dims(root))
    for f in cp.kernel_funcs(root):  # a fused Func spans only the program's block of a blocked dimension
        for e in A.walk(cp.funcs[f].expr):
            if isinstance(e, A.Scan) and e.dim in cp.schedules[root].block:
                raise DTScheduleError(f"'{f}' runs cum{e.op} along '{e.dim}', so each program must walk all of "
                                      f"'{e.dim}' (in tiles, carrying the running value), but {root}.block splits it "
                                      f"over programs", cp.schedules[root].dim_locs.get(("block", e.dim)),
                                      f"remove '{e.dim}' from {root}.block(...); tensorize({e.dim}:...) sets the "
                                      f"tiles it is walked in")
    for f in cp.kernel_funcs(root):
        s = cp.schedules[f]
        for dim in s.tensorize:
            if dim not in kernel_dims:
                raise DTScheduleError(f"tensorize names '{dim}', but the kernel of '{root}' has no "
                                      f"dimension '{dim}'", s.dim_locs.get(("tensorize", dim)),
                                      f"its dimensions: {', '.join(cp.kernel_dims(root))}")
        if f != root:
            for prim in ("block", "map"):
                if getattr(s, prim):
                    raise DTScheduleError(f"'{f}' is fused into '{cp.fused[f][0]}', so it has no {prim} of "
                                          f"its own", s.locs.get(prim),
                                          f"schedule the kernel's root Func '{root}' instead")


def check_single_kernel(cp: CheckedProgram, out: str):
    unfused = [n for n in cp.kernel_roots if n != out and n in reachable(cp.funcs, (out,))]
    if unfused:
        loc = cp.schedules[out].locs.get("compile_to_kernel")
        notes = tuple((f"'{n}' is computed at root (its own kernel)", cp.funcs[n].loc) for n in unfused)
        raise DTScheduleError(f"compile_to_kernel({out}) needs one kernel, but "
                              f"{', '.join(repr(n) for n in unfused)} would each be a kernel of their own", loc,
                              "fuse each of them into a Func of this kernel, e.g. "
                              + "; ".join(f"{n}.fuse_at({out}, {cp.funcs[out].dims[0] if cp.funcs[out].dims else 'x'})"
                                          for n in unfused), notes)
