"""Split reductions (`f.split(l:1024)`, Halide's rfactor, flash decoding's split of the keys): f's
reduction over `l` runs in chunks of 1024 indices, each chunk in programs of its own, and a
second reduction combines the chunks' results.

The pass rewrites the checked algorithm (inlined Funcs already substituted) before the kernel
structure is worked out. A new pure dimension, `l_chunk`, of extent ceil(len(l) / 1024), indexes
the chunks. For each reduction over `l` of f, a partial Func (`f_chunks`) reduces over `l` only
where `l_chunk * 1024 <= l < l_chunk * 1024 + 1024`; the loop walks just those tiles
(dt.ir.lower.skipping). In f the reduction becomes one over `l_chunk` of the partials: a sum
of sums, a max of maxima. A Func computed with f over `l` (compute_with) is split with it: a
sum or product of exponentials shifted by a max of the loop (the online softmax, attention's
output) is combined with each chunk rescaled to the row's max, exp(chunk max - max), as flash
decoding does. The partials are kept in the compute dtype (f32 for f16 and bf16 data).

Schedules: the partials form one kernel, with the blocks, tiles, warps and stages of the kernel
the split Funcs were computed in and one chunk per program (block `l_chunk:1`); several partials
share one loop over each chunk (compute_with), inside a Func that stores the first of them. The
split Funcs keep their places and combine the chunks in tiles of 16 (`l_chunk:16`).

A split Func computed with another Func over a dimension that one walks as a pure dimension
(`dw.split(x:128); dw.compute_with(dx, x)`, dx[x, k] blocked `x:128`) has no partials kernel:
its partials sum in that Func's walk over its block of x, each program storing its chunk after
the walk (a layernorm backward's weight gradients summed in dx's kernel, as Liger's are).
"""
from __future__ import annotations

import copy
import heapq
import math

from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir.check.compute_with import nested_reductions, top_reductions
from dt.ir.check.program import FuncSchedule, MapEntry
from dt.ir.check.statistics import max_reduction, shifted_exp, shifted_exp_operand
from dt.ir.check.uses import dependency_path, depends, updates_of, uses
from dt.ir.naming import fresh_name

CHUNK_TILE = 16  # the split Funcs combine their chunks 16 at a time (a loop past 16 chunks)
_FILL = {"sum": 0.0, "dot": 0.0, "max": -math.inf, "min": math.inf, "argmax": -math.inf, "argmin": math.inf}


def split_reductions(funcs: dict[str, A.FuncDef], schedules: dict[str, FuncSchedule], dim_kinds: dict[str, str],
                     taken: set[str]):
    """(funcs, schedules, dim_kinds, chunk_dims, partials) with every split applied; unchanged
    when nothing is split. `taken`: the names declared, which new ones avoid."""
    groups = _groups(funcs, schedules)
    if not groups:
        return funcs, schedules, dim_kinds, {}, ()
    funcs, schedules, dim_kinds = dict(funcs), dict(schedules), dict(dim_kinds)
    taken = set(taken) | set(funcs)
    chunk_dims: dict[str, tuple[str, int]] = {}
    partials: list[str] = []
    for members, dim, chunk in groups:
        chunk_dim = fresh_name(f"{dim}_chunk", taken)
        chunk_dims[chunk_dim] = (dim, chunk)
        dim_kinds[chunk_dim] = "Var"
        partials += _split_group(members, dim, chunk, chunk_dim, funcs, schedules, taken)
    return funcs, schedules, dim_kinds, chunk_dims, tuple(partials)


def _groups(funcs, schedules) -> list[tuple[list[str], str, int]]:
    """Each split Func with the Funcs computed with it over the split dimension (in topological
    order), the dimension and the chunk size."""
    groups, seen = [], set()
    for name in funcs:
        s = schedules[name]
        if s.split is None or name in seen:
            continue
        dim, chunk = s.split
        members = _loop_members(name, dim, funcs, schedules)
        for m in members:
            other = schedules[m].split
            if other is not None and other != (dim, chunk):
                raise DTScheduleError(f"'{m}' shares its loop over '{dim}' with '{name}' (compute_with), so both are "
                                      f"split alike, but '{m}' is split {_text(other)} and '{name}' {_text(s.split)}",
                                      schedules[m].locs.get("split"), "split them alike, or only one of them "
                                      "(the Funcs sharing its loop follow it)", (("split here", s.locs.get("split")),))
        seen.update(members)
        groups.append((members, dim, chunk))
    for name, s in schedules.items():
        if s.split is not None and name not in funcs:
            raise DTScheduleError(f"'{name}' is split, but it is inlined (or not used by an output): it has no loop "
                                  f"of its own to split", s.locs.get("split"),
                                  f"compute {name} (remove its inline()), or split the Func it is inlined into")
    return groups


def _text(split) -> str:
    return f"({split[0]}:{split[1]})"


def _loop_members(name, dim, funcs, schedules) -> list[str]:
    """name and every Func linked to it by compute_with over dim, in topological order."""
    linked = {name}
    grew = True
    while grew:
        grew = False
        for f in funcs:
            with_ = schedules[f].compute_with
            if with_ and with_[1] == dim and not _walk_host(f, funcs, schedules) and (f in linked) != (with_[0] in linked):
                linked |= {f, with_[0]}
                grew = True
    return [f for f in funcs if f in linked]


def _walk_host(f, funcs, schedules) -> str | None:
    """The Func f is computed with over a dimension that Func walks as a pure one (its partials
    sum in that walk), else None."""
    with_ = schedules[f].compute_with
    if with_ and with_[0] in funcs and with_[1] in funcs[with_[0]].dims:
        return with_[0]
    return None


def _split_group(members, dim, chunk, chunk_dim, funcs, schedules, taken) -> list[str]:
    """Rewrite one group in place (funcs and schedules); returns the partial Funcs it adds."""
    first = members[0]
    loc = next((schedules[m].locs.get("split") for m in members if schedules[m].split), None)
    reductions = {m: reductions_to_split(m, dim, funcs, loc) for m in members}
    owner = next((m for m in members if not (schedules[m].compute_with and schedules[m].compute_with[1] == dim
                                              and schedules[m].compute_with[0] in members)), None)
    if owner is None:
        raise DTScheduleError(f"{', '.join(repr(m) for m in members)} are each computed with another over '{dim}': "
                              f"compute_with makes a cycle", loc, "remove one of their compute_with")
    root = _kernel_root(first, schedules)
    if schedules[root].compiled == "compile_to_kernel":
        raise DTScheduleError(f"'{root}' is compiled to one kernel, but splitting '{first}''s reduction over "
                              f"'{dim}' adds a kernel for its chunks", loc,
                              f"use {root}.compile(): the chunks are one kernel, {root} another")
    for m in members:
        if schedules[m].fuse_at and _kernel_root(m, schedules) != root:
            raise DTScheduleError(f"'{m}' and '{first}' are split together but are computed in different kernels",
                                  loc, "fuse the Funcs that share a loop into the same kernel")
    prefix = _common_prefix([funcs[m].dims for m in members]) if len(members) > 1 or \
        len(reductions[owner]) > 1 else funcs[owner].dims[:-1]
    # the chunks go before the last dimension every partial has: a partial stored [k, chunk] would
    # store each program's one chunk strided (a weight's gradient and its bias's, over [k])
    shared = prefix[-1:] if prefix and prefix == funcs[owner].dims else ()
    prefix = prefix[:len(prefix) - len(shared)]
    start = A.Binary("*", A.DimRef(chunk_dim, loc), A.Num(float(chunk), loc, integer=True), loc)
    in_chunk = (A.Binary(">=", A.DimRef(dim, loc), start, loc),
                A.Binary("<", A.DimRef(dim, loc), A.Binary("+", start, A.Num(float(chunk), loc, integer=True), loc),
                         loc))

    names: dict[int, tuple[str, tuple[str, ...]]] = {}  # id(reduction) -> (partial Func, its dims)
    for m in members:
        rest = funcs[m].dims[len(prefix):] if funcs[m].dims[:len(prefix)] == prefix else None
        if rest is None:
            raise DTScheduleError(f"'{m}' is split with '{first}' but its dimensions "
                                  f"({', '.join(funcs[m].dims)}) do not start with the ones they share "
                                  f"({', '.join(prefix)})", loc, "write the shared dimensions first in each Func")
        for i, r in enumerate(reductions[m]):
            name = fresh_name(f"{m}_chunks" + (str(i) if len(reductions[m]) > 1 else ""), taken)
            names[id(r)] = (name, prefix + (chunk_dim,) + rest)
    shift_of = {id(r): _shift(r, m, members, dim, funcs, loc) for m in members for r in reductions[m]}

    def chunk_read(r: A.Reduce) -> A.Access:
        name, dims = names[id(r)]
        return A.Access(name, "func", tuple(A.DimRef(d, r.loc) for d in dims), r.loc)

    new_defs: dict[str, A.FuncDef] = {}
    for m in members:
        for r in reductions[m]:
            name, dims = names[id(r)]
            body = _masked(r, in_chunk, shift_of[id(r)], chunk_read, reductions)
            new_defs[name] = A.FuncDef(name, dims, body, funcs[m].loc)
    best: dict[str, A.FuncDef] = {}  # an arg-reduction's best chunk, computed in the split Func's kernel
    reader: dict[str, str] = {}  # each best chunk -> the arg-reduction's Func, which reads it
    for m in members:
        combined = {id(r): _arg_combined(r, m, names[id(r)], in_chunk, dim, chunk_dim, funcs, best, taken)
                    if r.op in ("argmax", "argmin") else
                    _combined(r, chunk_dim, chunk_read(r), shift_of[id(r)], reductions, chunk_read)
                    for r in reductions[m]}
        funcs[m] = A.FuncDef(m, funcs[m].dims, _replace(funcs[m].expr, combined), funcs[m].loc)
        reader.update({name: m for name in best if name not in reader})
    for name, f in best.items():  # in the kernel of the arg-reduction reading it
        schedules[name] = FuncSchedule(fuse_at=(reader[name], f.dims[-1]), locs={"fuse_at": loc})

    partials = list(new_defs)
    everything = list(partials)
    host = _walk_host_of(owner, members, dim, funcs, schedules, loc)
    if host is not None:
        member_of = {names[id(r)][0]: m for m in members for r in reductions[m]}
        shifted = next((m for m in members for r in reductions[m] if shift_of[id(r)] is not None), None)
        _check_walk(host, owner, members, dim, chunk, chunk_dim, new_defs, member_of, shifted, funcs, schedules, loc)
        for name in partials:
            schedules[name] = FuncSchedule(fuse_at=(host, dim), walked_in=(host, dim), taken_from=member_of[name],
                                           locs={"fuse_at": loc})
    else:
        kernel = _partial_schedule(root, chunk_dim, new_defs, schedules)
        if shared:  # programs still walk the chunk's columns first, the chunks last
            kernel.map = tuple(MapEntry(d, d, "whole") for d in (chunk_dim, *reversed(prefix + shared)))
        owner_partial = names[id(reductions[owner][0])][0]
        if len(new_defs) == 1:
            schedules[owner_partial] = kernel
        else:  # a root that stores the owner's chunks, the others fused into it and sharing the owner's loop
            store = fresh_name(f"{owner_partial}_stored", taken)
            dims = names[id(reductions[owner][0])][1]
            new_defs[store] = A.FuncDef(store, dims, A.Access(owner_partial, "func", tuple(A.DimRef(d) for d in dims)),
                                        funcs[owner].loc)
            schedules[store] = kernel
            for name in partials:
                schedules[name] = FuncSchedule(fuse_at=(store, shared[0] if shared else chunk_dim),
                                               compute_with=None if name == owner_partial else (owner_partial, dim),
                                               locs={"fuse_at": loc, "compute_with": loc})
            for m in members:  # the combination reads the stored copy of the owner's chunks
                funcs[m] = A.FuncDef(m, funcs[m].dims, _renamed(funcs[m].expr, owner_partial, store), funcs[m].loc)
            everything.append(store)
    for m in members:
        s = schedules[m] = copy.deepcopy(schedules[m])
        s.split = None
        if s.compute_with and s.compute_with[1] == dim:
            s.compute_with = None
    _retile(root, chunk_dim, funcs, schedules)
    # before the kernel that reads them: the first member's, or its root's where it is fused into an
    # earlier Func's kernel (db fused into dw's, split apart from dw: db's chunks before dw's kernel)
    position = min(list(funcs).index(m) for m in (first, root) if m in funcs)
    items = list(funcs.items())
    funcs.clear()
    funcs.update(items[:position] + list(new_defs.items()) + list(best.items()) + items[position:])
    if host is not None:
        _host_first(funcs, host, partials, loc)
    return everything + list(best)


def _walk_host_of(owner, members, dim, funcs, schedules, loc) -> str | None:
    """The Func whose walk over dim sums the group's chunks (owner is computed with it over a
    dimension it walks as a pure one), else None; an error where owner is computed with a Func
    that is not computed, or walked over another dimension than the split one."""
    with_ = schedules[owner].compute_with
    if with_ is None or with_[0] in members:
        return None
    with_loc = schedules[owner].locs.get("compute_with") or loc
    if with_[0] not in funcs and with_[1] == dim:
        raise DTScheduleError(f"'{owner}' is computed with '{with_[0]}', which is not computed (it is inlined or "
                              f"unused): no walk of it sums '{owner}''s chunks", with_loc,
                              f"compute {with_[0]} at root, or remove {owner}.compute_with({with_[0]}, {dim})")
    host = _walk_host(owner, funcs, schedules)
    if host is not None and with_[1] != dim:
        raise DTScheduleError(f"'{owner}' is split over '{dim}' but computed with '{host}' over '{with_[1]}': its "
                              f"chunks sum in a walk over the dimension they split", with_loc,
                              f"split {owner} over '{with_[1]}', or compute it with a Func walking '{dim}'")
    return host


def _check_walk(host, owner, members, dim, chunk, chunk_dim, partials, member_of, shifted, funcs, schedules, loc):
    """The partials of members sum in host's walk over its pure dimension dim: one chunk per
    program of host (its block along dim is the chunk), over host's other dimensions."""
    s = schedules[host]
    with_loc = schedules[owner].locs.get("compute_with") or loc
    for m in members:
        other = _walk_host(m, funcs, schedules)
        if other is not None and other != host:
            raise DTScheduleError(f"'{m}' and '{owner}' are split together, but '{m}' is computed with '{other}' "
                                  f"and '{owner}' with '{host}'", schedules[m].locs.get("compute_with"),
                                  f"compute both with {host}, or one with the other")
    if s.fuse_at is not None:
        raise DTScheduleError(f"'{owner}''s chunks sum in '{host}''s walk over '{dim}', but '{host}' is fused into "
                              f"'{s.fuse_at[0]}': only a Func computed at root walks its block", with_loc,
                              f"compute {host} at root, or compute {owner} with the Func whose kernel {host} is in")
    if s.block.get(dim) != chunk:
        raise DTScheduleError(f"'{owner}''s chunks of {chunk} along '{dim}' sum in '{host}''s walk over '{dim}', "
                              f"so each of '{host}''s programs must walk one chunk, but its block along '{dim}' is "
                              f"{s.block.get(dim, 'the whole extent')}", s.dim_locs.get(("block", dim)) or with_loc,
                              f"use {host}.block({dim}:{chunk}), or split {owner} in chunks of {host}'s block")
    own = set(funcs[host].dims) - {dim}
    for name, f in partials.items():
        if set(f.dims) - {chunk_dim} != own:
            m = member_of[name]
            raise DTScheduleError(f"'{m}' sums in '{host}''s walk over '{dim}', so it must have the other "
                                  f"dimensions of '{host}' ({', '.join(sorted(own)) or 'none'}), but it has "
                                  f"{', '.join(funcs[m].dims) or 'none'}", with_loc,
                                  f"compute {m} with a Func over its own dimensions and '{dim}'")
    for f in partials.values():
        if f.expr.op not in ("sum", "dot", "max", "min"):
            raise DTScheduleError(f"r{f.expr.op} cannot sum in '{host}''s walk: only rsum, rdot, rmax and rmin "
                                  f"accumulate there", f.expr.loc, f"remove {owner}.compute_with({host}, {dim})")
        read = next((u for u in uses(f.expr) if u.name == host), None)
        if read is not None:  # the kernel would load back, in the same step, the tile it has just stored
            m = member_of[f.name]
            raise DTScheduleError(f"'{m}' reads '{host}', and its chunks sum in '{host}''s walk over '{dim}'",
                                  read.loc, f"write {m} from what {host} reads (its expression), or remove "
                                  f"{owner}.compute_with({host}, {dim}) to sum the chunks in a kernel of their own")
    if shifted is not None:
        raise DTScheduleError(f"'{shifted}' reads a max of its own loop (an online softmax): it cannot sum in "
                              f"'{host}''s walk over '{dim}'", with_loc, f"remove {owner}.compute_with({host}, {dim})")


def _host_first(funcs, host, partials, loc):
    """funcs reordered (in place) so that each partial follows the host whose walk sums it, and
    whatever reads a partial follows them both; otherwise in the order they had (a topological
    order taking the earliest Func ready each time: kernels keep their order where they can)."""
    updates = updates_of(funcs)
    names = list(funcs)
    index = {n: i for i, n in enumerate(names)}
    needs = {n: set(depends(funcs, n, updates)) & set(funcs) | ({host} if n in partials else set()) for n in funcs}
    readers: dict[str, list[str]] = {n: [] for n in funcs}
    for n, deps in needs.items():
        for d in deps:
            readers[d].append(n)
    waiting = {n: len(deps) for n, deps in needs.items()}
    ready = [index[n] for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = names[heapq.heappop(ready)]
        order.append(n)
        for r in readers[n]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, index[r])
    if len(order) != len(funcs):
        raise DTScheduleError(f"'{host}' reads what its own walk sums ({', '.join(n for n in funcs if n not in order)})",
                              loc, "sum the chunks in the walk of a Func that does not read them")
    items = dict(funcs)
    funcs.clear()
    funcs.update((n, items[n]) for n in order)


def reductions_to_split(m, dim, funcs, loc) -> list[A.Reduce]:
    """m's reductions over dim that a split divides; a DTScheduleError where it cannot."""
    found = top_reductions(funcs[m].expr, dim)
    if not found:
        raise DTScheduleError(f"'{m}' is split over '{dim}' but has no reduction over '{dim}'", loc,
                              f"split an RVar that '{m}' reduces over")
    nested = nested_reductions(funcs[m].expr, dim)
    if nested:
        raise DTScheduleError(f"'{m}' reduces over '{dim}' inside its reduction over '{nested[0].dim}': only a "
                              f"reduction at the top of a Func splits", nested[0].loc,
                              "compute the inner reduction in a Func of its own and split that one")
    for r in found:
        if r.op not in _FILL:
            raise DTScheduleError(f"r{r.op} cannot be split yet: only rsum, rdot, rmax, rmin, rargmax and rargmin "
                                  f"combine their chunks", r.loc, f"remove the split of '{m}'")
        if r.op in ("argmax", "argmin"):
            if not funcs[m].dims:
                raise DTScheduleError(f"'{m}' has no dimensions: its r{r.op}'s chunks have no loop to be combined in",
                                      loc, f"remove the split of '{m}'")
            fused = next((u for u in uses(r.args[0]) if any(dim in A.free_dims(s) for s in u.subscripts)), None)
            if fused is not None:
                raise DTScheduleError(f"r{r.op} over '{dim}' reads the Func '{fused.name}' along '{dim}': its chunks "
                                      f"are compared again at their indices, which reads inputs only", fused.loc,
                                      f"inline {fused.name}, or remove the split of '{m}'")
    return found


def _shift(r, m, members, dim, funcs, loc) -> str | None:
    """The member r reads, when r is a sum or product of exponentials shifted by that member, a
    max of the loop; None when r reads no member. Any other read of a member cannot be split."""
    read = [u.name for u in uses(r) if u.name in members]
    if not read:
        through = dependency_path(funcs, r, set(members))
        if through:
            raise DTScheduleError(f"'{m}' reads '{through[-1]}' through '{through[0]}' inside its reduction over "
                                  f"'{dim}', and both are split", r.loc,
                                  f"inline {through[0]} so that the split sees how {m} uses {through[-1]}")
        return None
    shifted = shifted_exp(r)
    by = shifted[1].name if shifted else None
    if by is not None and read == [by] and max_reduction(funcs[by].expr, dim) is not None:
        return by
    raise DTScheduleError(f"'{m}' reads '{read[0]}' inside its reduction over '{dim}', and both are split: only a "
                          f"sum or product of exponentials shifted by a max of the loop, exp(e - {read[0]}[...]), "
                          f"combines its chunks", r.loc, "remove the split, or write the reduction in that form")


def _masked(r: A.Reduce, in_chunk, shift, chunk_read, reductions) -> A.Expr:
    """r over one chunk: its operand (the first of a product) filled with r's identity outside
    the chunk. A reduction shifted by a max is shifted by that chunk's max instead, and masks
    the value in its exponent as the max masks it (exp(-inf - max) = 0), so that the pair stays
    the online softmax that compute_with accumulates in one loop."""
    args = list(r.args)
    k = 0
    if shift is not None:
        k = shifted_exp_operand(r)
        masked = _within(args[k].x.a, in_chunk, -math.inf, r.loc)
        args[k] = A.Unary("exp", A.Binary("-", masked, chunk_read(reductions[shift][0]), args[k].x.loc),
                          args[k].loc)
        return A.Reduce(r.op, tuple(args), r.dim, r.loc, r.dim_loc, r.dim_decl, r.slot)
    args[k] = _within(args[k], in_chunk, _FILL[r.op], r.loc)
    return A.Reduce(r.op, tuple(args), r.dim, r.loc, r.dim_loc, r.dim_decl, r.slot)


def _within(e: A.Expr, in_chunk, fill: float, loc) -> A.Expr:
    for cond in reversed(in_chunk):
        e = A.Where(cond, e, A.Num(fill, loc), loc)
    return e


def _combined(r: A.Reduce, chunk_dim, chunks: A.Access, shift, reductions, chunk_read) -> A.Expr:
    """The reduction over the chunks that replaces r: a max of maxima, a sum of sums, each
    rescaled from its chunk's max to the row's when r is shifted by a max."""
    if r.op in ("max", "min"):
        return A.Reduce(r.op, (chunks,), chunk_dim, r.loc, r.dim_loc)
    if shift is None:
        return A.Reduce("sum", (chunks,), chunk_dim, r.loc, r.dim_loc)
    row_max = next(u for u in uses(r) if u.name == shift)
    chunk_max = chunk_read(reductions[shift][0])
    rescale = A.Unary("exp", A.Binary("-", chunk_max, row_max, r.loc), r.loc)
    # a chunk that is -inf throughout adds nothing (its own sum, exp(-inf - -inf), is NaN)
    empty = A.Binary("==", chunk_max, A.Unary("neg", A.Num(math.inf, r.loc), r.loc), r.loc)
    return A.Reduce("dot", (rescale, A.Where(empty, A.Num(0.0, r.loc), chunks, r.loc)), chunk_dim, r.loc, r.dim_loc)


def _arg_combined(r: A.Reduce, m: str, partial, in_chunk, dim: str, chunk_dim: str, funcs, best: dict,
                  taken) -> A.Expr:
    """The index r gives, from its chunks' indices: each chunk's value read again at its index
    (and r's identity where that index is outside the chunk: a chunk whose values all lose the
    tie to a masked lane), the best chunk by r again (ties to the first, as within a chunk), its
    index read there."""
    name, dims = partial
    index = A.Access(name, "func", tuple(A.DimRef(d, r.loc) for d in dims), r.loc)

    def at_index(e: A.Expr) -> A.Expr:
        return _replace(e, {id(n): index for n in A.walk(e) if isinstance(n, A.DimRef) and n.dim == dim})
    value = _within(at_index(r.args[0]), tuple(at_index(c) for c in in_chunk), _FILL[r.op], r.loc)
    own = funcs[m].dims
    chosen = fresh_name(f"{m}_best_chunk", taken)
    best[chosen] = A.FuncDef(chosen, own, A.Reduce(r.op, (value,), chunk_dim, r.loc, r.dim_loc), funcs[m].loc)
    read = A.Access(chosen, "func", tuple(A.DimRef(d, r.loc) for d in own), r.loc)
    return A.Access(name, "func", tuple(read if d == chunk_dim else A.DimRef(d, r.loc) for d in dims), r.loc)


def _replace(e: A.Expr, by: dict[int, A.Expr]) -> A.Expr:
    def step(node):
        if id(node) in by:
            return by[id(node)]
        kids = []
        for c in A.children(node):
            kids.append((yield c))
        return A.rebuild(node, tuple(kids)) if kids else node
    return A.recurse(step, e)


def _renamed(e: A.Expr, old: str, new: str) -> A.Expr:
    return _replace(e, {id(u): A.Access(new, "func", u.subscripts, u.loc) for u in uses(e) if u.name == old})


def _common_prefix(dim_lists) -> tuple[str, ...]:
    prefix = []
    for dims in zip(*dim_lists):
        if len(set(dims)) != 1:
            break
        prefix.append(dims[0])
    return tuple(prefix)


def _kernel_root(f, schedules) -> str:
    while schedules[f].fuse_at:
        f = schedules[f].fuse_at[0]
    return f


def _partial_schedule(root, chunk_dim, partials, schedules) -> FuncSchedule:
    """The partials' kernel: the blocks, tiles, warps and stages of the kernel the split Funcs
    were in, one chunk per program."""
    s = schedules[root]
    dims = _walked_dims(partials.values())
    return FuncSchedule(block={**{d: n for d, n in s.block.items() if d in dims}, chunk_dim: 1},
                        tensorize={d: n for d, n in s.tensorize.items() if d in dims},
                        num_warps=s.num_warps, num_stages=s.num_stages, tma=s.tma, stream=s.stream, taken_from=s.taken_from or root,
                        locs={"block": s.locs.get("block") or s.locs.get("split")},
                        dim_locs={k: v for k, v in s.dim_locs.items() if k[1] in dims})


def _retile(root, chunk_dim, funcs, schedules):
    """The split Funcs' kernel combines the chunks CHUNK_TILE at a time; it keeps the tiles of the
    dimensions its Funcs still loop over (the split one, those reduced inside it, where any are left)."""
    s = schedules[root] = copy.deepcopy(schedules[root])
    dims = _walked_dims(funcs[f] for f in funcs if _kernel_root(f, schedules) == root)
    s.tensorize = {d: n for d, n in s.tensorize.items() if d in dims}
    s.tensorize[chunk_dim] = CHUNK_TILE


def _walked_dims(defs) -> set[str]:
    """The dimensions a kernel computing `defs` loops over: their own and those they reduce over."""
    defs = list(defs)
    return {d for f in defs for d in f.dims} | {e.dim for f in defs for e in A.walk(f.expr) if isinstance(e, A.Reduce)}
