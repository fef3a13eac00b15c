"""Validation of a DT program and resolution of its schedule.

`check(program)` returns a `CheckedProgram`: the algorithm with inlined Funcs substituted,
the schedule of each Func resolved, and the kernel structure (which Func is computed where).
Every problem raises a DTError pointing at the DT source.
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from functools import cached_property

from dt.errors import DTDimensionError, DTNameError, DTScheduleError, DTSyntaxError, Loc
from dt.ir import algorithm as A
from dt.ir.tiles import MAX_TILE, Tile, tile_of, tiles

PRIMITIVES = ("block", "tensorize", "map", "num_warps", "num_stages", "persistent", "tma", "fuse_at", "compute_with",
              "inline", "compile", "compile_to_kernel")
# Limits on sizes, so that no schedule and no call can make a backend overflow its index
# arithmetic or allocate without bound. A tile holds at most MAX_TILE elements (dt.ir.tiles);
# block sizes, group sizes, stage and program counts fit in 32 bits; extents are at most
# MAX_EXTENT, so that an index plus a block stays within 64 bits.
MAX_COUNT = 2 ** 31 - 1
MAX_WARPS = 32  # 1024 threads, the most one GPU program (CUDA block) has
MAX_EXTENT = 2 ** 62
# Keyword arguments of a program call: inputs and scalars cannot take these names.
CALL_KEYWORDS = {"backend": "to choose the backend", "sizes": "for extents no input gives"}


@dataclass(frozen=True)
class MapEntry:
    """One entry of f.map(...): a whole block index, or the outer / inner part of a split."""
    name: str  # the name shown in generated code: 'x' or the inner name 'x1'
    dim: str
    part: str  # 'whole' | 'outer' | 'inner'
    group: int = 0  # group size of a split


@dataclass
class FuncSchedule:
    block: dict[str, int] = field(default_factory=dict)
    tensorize: dict[str, int] = field(default_factory=dict)
    map: tuple[MapEntry, ...] | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    persistent: bool = False  # programs walk the blocks (one program per multiprocessor, or persistent_programs)
    persistent_programs: int | None = None
    tma: bool = False  # load and store tiles through tensor descriptors where the hardware has them
    fuse_at: tuple[str, str] | None = None
    compute_with: tuple[str, str] | None = None  # (sibling Func, reduction dim): share its loop
    inline: bool = False
    compiled: str | None = None  # None | 'compile' | 'compile_to_kernel'
    locs: dict[str, Loc | None] = field(default_factory=dict)  # primitive -> where it was written
    dim_locs: dict[tuple[str, str], Loc | None] = field(default_factory=dict)  # (primitive, dim)


@dataclass(frozen=True)
class CheckedProgram:
    program: A.Program
    funcs: dict[str, A.FuncDef]  # computed Funcs (inlined ones substituted away), topological order
    inputs: tuple[str, ...]
    scalars: tuple[str, ...]
    dim_kinds: dict[str, str]  # dim -> 'Var' | 'RVar'
    schedules: dict[str, FuncSchedule]
    outputs: tuple[str, ...]
    kernel_roots: tuple[str, ...]  # Funcs computed at root, in launch order
    fused: dict[str, tuple[str, str]]  # producer -> (consumer, loop dim)
    input_ranks: dict[str, int]
    # (sibling, reduction dim) -> Funcs whose reductions over that dim run in the sibling's loop; the
    # sibling is the end of each chain of compute_with, so it is computed with none over that dim
    computed_with: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    tiles: tuple[Tile, ...] = ()  # every tile shape of every kernel (dt.ir.tiles)

    @cached_property  # computed once: every call of a program checks its extents against it
    def needed_dims(self) -> tuple[str, ...]:
        """The dimensions whose extents running the program needs, in the order it first uses them:
        every Func's own, those it indexes, reduces over, takes the len of or uses as a value."""
        dims: dict[str, None] = {}
        for f in self.funcs.values():
            dims.update(dict.fromkeys(f.dims))
            for e in A.walk(f.expr):
                if isinstance(e, A.Access):
                    dims.update(dict.fromkeys(e.indices))
                elif isinstance(e, (A.Len, A.DimRef, A.Reduce)):
                    dims[e.dim] = None
        return tuple(dims)

    def root_of(self, func: str) -> str:
        while func in self.fused:
            func = self.fused[func][0]
        return func

    def reduction_dims(self, func: str) -> tuple[str, ...]:
        seen: list[str] = []
        for e in A.walk(self.funcs[func].expr):
            if isinstance(e, A.Reduce) and e.dim not in seen:
                seen.append(e.dim)
        return tuple(seen)

    def kernel_dims(self, root: str) -> tuple[str, ...]:
        """Every dimension the kernel of `root` loops over: root's dims first."""
        dims: list[str] = []
        for f in self.kernel_funcs(root):
            for d in self.funcs[f].dims + self.reduction_dims(f):
                if d not in dims:
                    dims.append(d)
        return tuple(dims)

    def kernel_funcs(self, root: str) -> tuple[str, ...]:
        return (root,) + tuple(f for f in self.funcs if f != root and self.root_of(f) == root)


def _err(cls, message, loc, hint=None, notes=()):
    return cls(message, loc, hint, notes)


def check(program: A.Program) -> CheckedProgram:
    decls: dict[str, A.Declaration] = {}
    for d in program.declarations:
        if d.name in decls:
            raise _err(DTNameError, f"'{d.name}' is declared twice", d.loc,
                       "remove one of the declarations or rename one",
                       ((f"first declared here as {decls[d.name].kind}", decls[d.name].loc),))
        if d.kind in ("In", "SIn") and d.name in CALL_KEYWORDS:
            raise _err(DTNameError, f"an input cannot be named '{d.name}': a program call takes {d.name}= "
                       f"{CALL_KEYWORDS[d.name]}", d.loc, f"rename it, e.g. {d.name}_")
        decls[d.name] = d
    kinds = {n: d.kind for n, d in decls.items()}
    dim_kinds = {n: k for n, k in kinds.items() if k in ("Var", "RVar")}

    defs: dict[str, A.FuncDef] = {}
    for f in program.funcs:
        kind = kinds.get(f.name)
        if kind is None:
            raise _err(DTNameError, f"unknown name '{f.name}'", f.loc, f"declare it first: `Func {f.name};`")
        if kind != "Func":
            raise _err(DTNameError, f"'{f.name}' is declared as {kind}, so it cannot be defined", f.loc,
                       f"only Funcs are defined; declare `Func {f.name};` instead")
        if f.name in defs:
            raise _err(DTNameError, f"Func '{f.name}' is defined twice", f.loc,
                       "each Func has exactly one definition; give the second one another name",
                       (("first definition here", defs[f.name].loc),))
        _check_lhs(f, dim_kinds)
        _check_depth(f)
        defs[f.name] = f

    input_ranks: dict[str, tuple[int, Loc | None]] = {}
    for f in defs.values():
        def check_step(item, f=f):
            return _check_expr(f, *item, kinds, defs, input_ranks)
        A.recurse(check_step, (f.expr, frozenset()))
        missing = A.free_dims(f.expr) - set(f.dims)
        if missing:
            dim = sorted(missing)[0]
            loc = _dim_use_loc(f.expr, dim) or f.loc
            if dim_kinds.get(dim) == "RVar":
                raise _err(DTDimensionError, f"RVar '{dim}' is used outside a reduction over '{dim}' in '{f.name}'",
                           loc, f"wrap the expression in a reduction such as rsum(..., {dim}), "
                                f"or add {dim} to the left-hand side {f.name}[{', '.join(f.dims + (dim,))}]")
            raise _err(DTDimensionError, f"dimension '{dim}' appears on the right of '{f.name}' but not on its left",
                       loc, f"add it to the left-hand side, {f.name}[{', '.join(f.dims + (dim,))}], "
                            f"or reduce over it")

    order = _topological_order(defs)
    schedules = _resolve_schedule(program, defs, kinds)
    outputs = tuple(n for n in order if schedules[n].compiled)
    if not outputs:
        used = {u.name for f in defs.values() for u in _uses(f.expr)}
        last = next((defs[n] for n in reversed(order) if n not in used), None)  # an output, likely
        raise _err(DTScheduleError, "no Func is compiled, so the program computes nothing",
                   last.loc if last else _end_of(program),
                   f"call .compile() on each output Func, e.g. `{last.name if last else 'out'}.compile();`")

    funcs = _inline(defs, order, schedules)
    for n in order:
        _check_inlined_depth(funcs[n], defs[n], schedules)
    needed = reachable(funcs, outputs)
    funcs = {n: funcs[n] for n in order if n in needed and not schedules[n].inline}
    fused = {n: schedules[n].fuse_at for n in funcs if schedules[n].fuse_at}
    for n, (consumer, dim) in fused.items():
        _check_fuse(n, consumer, dim, funcs, schedules, fused, dim_kinds)
    kernel_roots = tuple(n for n in funcs if n not in fused)
    _check_launch_primitives(schedules, fused)
    computed_with = _shared_loops(funcs, schedules, fused, dim_kinds)
    checked = CheckedProgram(program, funcs, program.names_of("In"), program.names_of("SIn"), dim_kinds,
                             schedules, outputs, kernel_roots, fused,
                             {k: v[0] for k, v in input_ranks.items()}, computed_with)
    _check_fused_uses(checked)
    for root in kernel_roots:
        _check_func_schedule(checked, root)
    for out in outputs:
        if schedules[out].compiled == "compile_to_kernel":
            _check_single_kernel(checked, out)
    return dataclasses.replace(checked, tiles=tiles(checked))


def _end_of(program: A.Program) -> Loc:
    """Just past the last character of the program's source."""
    lines = program.source.rstrip("\n").split("\n")
    return Loc(program.file, len(lines), len(lines[-1]) + 1, 1, lines[-1])


def _check_depth(f: A.FuncDef):
    depth, node = A.depth(f.expr)
    if depth > A.MAX_DEPTH:
        raise _err(DTSyntaxError, f"the expression defining '{f.name}' nests {depth} levels deep; dt takes at most "
                   f"{A.MAX_DEPTH} (this is level {A.MAX_DEPTH + 1})", getattr(node, "loc", None) or f.loc,
                   f"compute part of it in a Func of its own (fused into '{f.name}' with fuse_at, it stays in the "
                   f"same kernel)")


def _check_inlined_depth(f: A.FuncDef, written: A.FuncDef, schedules):
    """f, with the Funcs it uses inlined, within MAX_DEPTH (each definition is, as written)."""
    depth, _ = A.depth(f.expr)
    if depth <= A.MAX_DEPTH:
        return
    inlined = sorted({u.name for u in _uses(written.expr) if schedules[u.name].inline})
    raise _err(DTScheduleError, f"'{f.name}' with {', '.join(repr(n) for n in inlined)} inlined nests {depth} "
               f"expressions deep; dt takes at most {A.MAX_DEPTH}", schedules[inlined[0]].locs.get("inline"),
               f"compute {inlined[0]} at root or fuse it into '{f.name}' (fuse_at) instead of inlining it")


def _check_lhs(f: A.FuncDef, dim_kinds):
    seen = set()
    for d in f.dims:
        if d not in dim_kinds:
            raise _err(DTNameError, f"'{d}' on the left of '{f.name}' is not a declared dimension", f.loc,
                       f"declare it with `Var {d};`")
        if d in seen:
            raise _err(DTDimensionError, f"dimension '{d}' appears twice on the left of '{f.name}'", f.loc,
                       "the left-hand side names distinct dimensions")
        seen.add(d)


def _dim_use_loc(e: A.Expr, dim: str) -> Loc | None:
    for node in A.walk(e):
        if isinstance(node, A.Access) and dim in node.indices:
            i = node.indices.index(dim)
            return node.index_locs[i] if i < len(node.index_locs) and node.index_locs[i] else node.loc
        if isinstance(node, A.DimRef) and node.dim == dim:
            return node.loc
    return None


def _check_expr(f, e, bound, kinds, defs, input_ranks):
    """Check expression e of f's definition inside reductions over `bound`; yields (child,
    bound) for each subexpression to check (A.recurse)."""
    if isinstance(e, A.Access):
        kind = kinds.get(e.name)
        if kind is None:
            raise _err(DTNameError, f"unknown name '{e.name}'", e.loc,
                       f"declare it, e.g. `In {e.name};` for an input tensor or `Func {e.name};`")
        if kind not in ("In", "Func"):
            raise _err(DTNameError, f"'{e.name}' is declared as {kind} and cannot be indexed", e.loc,
                       "only input tensors (In) and Funcs are indexed")
        for i, d in enumerate(e.indices):
            loc = e.index_locs[i] if i < len(e.index_locs) else e.loc
            if kinds.get(d) not in ("Var", "RVar"):
                what = "unknown name" if d not in kinds else f"'{d}' is declared as {kinds[d]}, not a dimension:"
                raise _err(DTNameError, f"{what} '{d}' used as an index of '{e.name}'" if d not in kinds
                           else f"{what} it cannot index '{e.name}'", loc or e.loc, f"declare it with `Var {d};`")
        if len(set(e.indices)) != len(e.indices):
            raise _err(DTDimensionError, f"'{e.name}' is indexed with a repeated dimension", e.loc,
                       "each index names a different dimension")
        if kind == "Func":
            if e.name not in defs:
                raise _err(DTNameError, f"Func '{e.name}' is used but never defined", e.loc,
                           f"define it: `{e.name}[...] = ...;`")
            want = len(defs[e.name].dims)
            if len(e.indices) != want:
                raise _err(DTDimensionError, f"'{e.name}' has {want} dimension(s) "
                           f"({', '.join(defs[e.name].dims)}) but is indexed with {len(e.indices)}", e.loc,
                           f"index it as {e.name}[{', '.join(defs[e.name].dims)}]",
                           (("defined here", defs[e.name].loc),))
        else:
            rank = input_ranks.setdefault(e.name, (len(e.indices), e.loc))
            if rank[0] != len(e.indices):
                raise _err(DTDimensionError, f"input '{e.name}' is indexed with {len(e.indices)} dimension(s) here "
                           f"but with {rank[0]} elsewhere", e.loc, "every access of an input has its rank",
                           (("indexed here", rank[1]),))
        return
    if isinstance(e, A.ScalarRef):
        if kinds.get(e.name) != "SIn":
            raise _err(DTNameError, f"unknown name '{e.name}'" if e.name not in kinds
                       else f"'{e.name}' is declared as {kinds[e.name]} and cannot be used as a value here",
                       e.loc, f"declare a scalar input with `SIn {e.name};`")
        return
    if isinstance(e, (A.Len, A.DimRef)):
        if kinds.get(e.dim) not in ("Var", "RVar"):
            raise _err(DTNameError, f"'{e.dim}' is not a declared dimension", e.loc, f"declare it with `Var {e.dim};`")
        return
    if isinstance(e, A.Reduce):
        kind = kinds.get(e.dim)
        if kind != "RVar":
            raise _err(DTDimensionError, f"reduction over '{e.dim}', which is " +
                       ("not declared" if kind is None else f"declared as {kind}"), e.dim_loc or e.loc,
                       f"reductions run over reduction dimensions: declare `RVar {e.dim};`")
        if e.dim in f.dims and e.dim not in bound:
            raise _err(DTDimensionError, f"'{f.name}' reduces over '{e.dim}', which is also on its left-hand side",
                       e.dim_loc or e.loc, f"a dimension of {f.name} cannot be reduced away")
        for a in e.args:
            yield a, bound | {e.dim}
        return
    for c in A.children(e):
        yield c, bound


def _uses(e: A.Expr) -> list[A.Access]:
    return [n for n in A.walk(e) if isinstance(n, A.Access) and n.kind == "func"]


def _uses_outside(e: A.Expr, skip: set[int]) -> list[A.Access]:
    """_uses(e), but not inside the subexpressions whose id is in `skip`."""
    uses, stack = [], [e]
    while stack:
        node = stack.pop()
        if id(node) in skip:
            continue
        if isinstance(node, A.Access) and node.kind == "func":
            uses.append(node)
        stack.extend(reversed(A.children(node)))
    return uses


def _post_order(nodes, successors):
    """The nodes in depth-first post-order (each after all it reaches), without recursion:
    programs may chain thousands of Funcs. `successors(n)` yields (m, label) pairs. Returns
    (order, None), or (None, cycle) at the first cycle: [(node, label of its edge onward), ...]."""
    order, state = [], {}
    for root in nodes:
        if root in state:
            continue
        state[root] = "open"
        stack = [[root, iter(successors(root)), None]]  # node, successors left, label of the edge taken
        while stack:
            frame = stack[-1]
            step = next(frame[1], None)
            if step is None:
                stack.pop()
                state[frame[0]] = "done"
                order.append(frame[0])
                continue
            node, frame[2] = step
            if state.get(node) == "open":
                start = next(i for i, f in enumerate(stack) if f[0] == node)
                return None, [(f[0], f[2]) for f in stack[start:]]
            if node not in state:
                state[node] = "open"
                stack.append([node, iter(successors(node)), None])
    return order, None


def _topological_order(defs: dict[str, A.FuncDef]) -> list[str]:
    order, cycle = _post_order(defs, lambda name: ((u.name, None) for u in _uses(defs[name].expr)))
    if cycle is not None:
        names = [name for name, _ in cycle] + [cycle[0][0]]
        raise _err(DTDimensionError, f"Funcs depend on each other in a cycle: {' -> '.join(names)}",
                   defs[cycle[0][0]].loc, "a Func cannot use itself, directly or through others")
    return order


def _resolve_schedule(program, defs, kinds) -> dict[str, FuncSchedule]:
    schedules = {n: FuncSchedule() for n in defs}
    for call in program.schedule:
        if call.func not in kinds:
            raise _err(DTNameError, f"unknown name '{call.func}'", call.loc, f"declare and define `Func {call.func};`")
        if call.func not in defs:
            raise _err(DTScheduleError, f"'{call.func}' is scheduled but is not a defined Func", call.loc,
                       "only defined Funcs have schedules")
        if call.primitive not in PRIMITIVES:
            raise _err(DTScheduleError, f"unknown schedule primitive '{call.primitive}'", call.loc,
                       f"the primitives are: {', '.join(PRIMITIVES)}")
        s = schedules[call.func]
        f = defs[call.func]
        prim = call.primitive
        if prim in ("fuse_at", "compute_with"):
            s.locs.setdefault(prim, call.loc)  # the first one: later ones are errors pointing back to it
        else:
            s.locs[prim] = call.loc

        def arg_loc(i):
            return call.arg_locs[i] if i < len(call.arg_locs) and call.arg_locs[i] else call.loc

        if prim in ("block", "tensorize"):
            if not call.args:
                raise _err(DTScheduleError, f"{prim} needs at least one dim:size argument", call.loc,
                           f"e.g. {call.func}.{prim}({f.dims[0] if f.dims else 'x'}:64)")
            for i, arg in enumerate(call.args):
                if not (isinstance(arg, tuple) and len(arg) == 2):
                    raise _err(DTScheduleError, f"{prim} takes dim:size arguments", arg_loc(i),
                               f"write it as {call.func}.{prim}(x:128)")
                dim, size = arg[0], _integer(arg[1])
                what = "block" if prim == "block" else "tile"
                if size is None:
                    raise _err(DTScheduleError, f"the {what} size for '{dim}' must be an integer, got {arg[1]!r}",
                               arg_loc(i), f"write it as {call.func}.{prim}({dim}:128)")
                if kinds.get(dim) not in ("Var", "RVar"):
                    raise _err(DTNameError, f"'{dim}' is not a declared dimension", arg_loc(i),
                               f"declare it with `Var {dim};`")
                if prim == "block":
                    if dim not in f.dims:
                        raise _err(DTScheduleError, f"block names '{dim}', but '{call.func}' has no dimension "
                                   f"'{dim}' (its dimensions: {', '.join(f.dims) or 'none'})", arg_loc(i),
                                   "block the Func's own left-hand-side dimensions")
                    if size < 1:
                        raise _err(DTScheduleError, f"block size for '{dim}' must be at least 1, got {size}",
                                   arg_loc(i))
                    if size > MAX_COUNT:
                        raise _err(DTScheduleError, f"block size for '{dim}' is {size}; a block spans at most "
                                   f"{MAX_COUNT} (2**31 - 1) indices", arg_loc(i),
                                   f"use a smaller block, or leave '{dim}' out of block() for one block over its "
                                   f"whole extent")
                elif size < 0:
                    raise _err(DTScheduleError, f"tile size for '{dim}' must be 0 (whole) or positive, got {size}",
                               arg_loc(i))
                elif size > MAX_TILE:
                    raise _err(DTScheduleError, f"tile size for '{dim}' is {size}; a tile holds at most {MAX_TILE} "
                               f"(2**20) elements", arg_loc(i), f"tensorize {dim} in tiles of at most {MAX_TILE}")
                getattr(s, prim)[dim] = size
                s.dim_locs[(prim, dim)] = arg_loc(i)
        elif prim == "map":
            s.map = _resolve_map(call, f, arg_loc)
        elif prim in ("num_warps", "num_stages"):
            n = _integer(call.args[0]) if len(call.args) == 1 else None
            if n is None or n < 1:
                raise _err(DTScheduleError, f"{prim} takes one positive integer", call.loc,
                           f"e.g. {call.func}.{prim}(4)")
            if prim == "num_warps" and (n & (n - 1) or n > MAX_WARPS):
                raise _err(DTScheduleError, f"num_warps must be a power of two up to {MAX_WARPS}, got {n}",
                           arg_loc(0), "use 1, 2, 4, 8, 16 or 32")
            if n > MAX_COUNT:
                raise _err(DTScheduleError, f"num_stages is {n}; it takes at most {MAX_COUNT} (2**31 - 1)",
                           arg_loc(0), "pipelines are a few stages deep: try 2 to 4")
            setattr(s, prim, n)
        elif prim == "persistent":
            n = _integer(call.args[0]) if len(call.args) == 1 else None
            if len(call.args) > 1 or (call.args and (n is None or not 1 <= n <= MAX_COUNT)):
                raise _err(DTScheduleError, "persistent takes no argument (one program per multiprocessor) or "
                           f"one integer from 1 to {MAX_COUNT} (the number of programs)", call.loc,
                           f"e.g. {call.func}.persistent() or {call.func}.persistent(132)")
            s.persistent = True
            s.persistent_programs = n
        elif prim == "tma":
            if call.args:
                raise _err(DTScheduleError, "tma takes no arguments", call.loc, f"write {call.func}.tma()")
            s.tma = True
        elif prim == "fuse_at":
            consumer, dim = _func_and_dim(call, defs, kinds, arg_loc, "a consumer Func and one of its loop dimensions",
                                          "consumer, x", "fuse into a Func that uses this one", "fused into")
            if s.fuse_at and s.fuse_at != (consumer, dim):
                raise _err(DTScheduleError, f"'{call.func}' is fused twice", call.loc,
                           "a Func is computed at one place; keep one fuse_at",
                           (("first fuse_at here", s.locs.get("fuse_at")),))
            s.dim_locs.setdefault(("fuse_at", dim), arg_loc(1))
            s.fuse_at = (consumer, dim)
        elif prim == "compute_with":
            sibling, dim = _func_and_dim(call, defs, kinds, arg_loc, "a sibling Func and the reduction dimension "
                                         "they share", "sibling, r", "name a Func that reduces over the same "
                                         "dimension", "computed with")
            if s.compute_with and s.compute_with != (sibling, dim):
                first = s.locs["compute_with"]
                raise _err(DTScheduleError, f"'{call.func}' is already computed with '{s.compute_with[0]}' over "
                           f"'{s.compute_with[1]}'; a Func has one compute_with", call.loc,
                           "keep one compute_with: a Func shares one loop, and its other reductions walk loops of "
                           "their own (for one loop shared by three Funcs, compute two of them with the third)",
                           (("first compute_with here", first),))
            s.dim_locs.setdefault(("compute_with", dim), arg_loc(1))
            s.compute_with = (sibling, dim)
        elif prim == "inline":
            s.inline = True
        else:
            if call.args:
                raise _err(DTScheduleError, f"{prim} takes no arguments", call.loc)
            s.compiled = prim
    for name, s in schedules.items():
        conflicts = [p for p, on in (("fuse_at", s.fuse_at), ("inline", s.inline), ("compile", s.compiled)) if on]
        if len(conflicts) > 1:
            raise _err(DTScheduleError, f"'{name}' cannot be both {' and '.join(conflicts)}",
                       s.locs.get(conflicts[1]) or s.locs.get("compile_to_kernel"),
                       "an output is computed at root; a fused or inlined Func is computed inside its consumer")
    return schedules


def _check_launch_primitives(schedules, fused):
    """persistent and tma say how a kernel runs, so they belong on its root Func: on a Func
    computed inside another kernel they would silently do nothing."""
    for name, s in schedules.items():
        if not (name in fused or s.inline):
            continue
        for prim in ("persistent", "tma"):
            if getattr(s, prim):
                if s.inline:
                    raise _err(DTScheduleError, f"{prim} applies to the Func a kernel computes, but '{name}' is "
                               "inlined into its consumers", s.locs.get(prim), f"remove {name}.{prim}()")
                root = name
                while root in fused:
                    root = fused[root][0]
                raise _err(DTScheduleError, f"{prim} applies to the Func a kernel computes, but '{name}' is fused "
                           f"into '{fused[name][0]}'", s.locs.get(prim), f"call it on the kernel's root Func: "
                           f"{root}.{prim}()")


def _integer(value) -> int | None:
    """A schedule argument as an int: any integer type (Python's, NumPy's: those with __index__),
    not bools (None otherwise). NumPy's bool has no __index__."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _func_and_dim(call, defs, kinds, arg_loc, takes: str, example: str, hint: str, relation: str):
    """The (Func, dimension) arguments of fuse_at or compute_with: another defined Func."""
    if len(call.args) != 2 or not all(isinstance(a, str) for a in call.args):
        raise _err(DTScheduleError, f"{call.primitive} takes {takes}", call.loc,
                   f"e.g. {call.func}.{call.primitive}({example})")
    other, dim = call.args
    if other not in defs:
        raise _err(DTScheduleError if other in kinds else DTNameError, f"'{other}' is not a defined Func",
                   arg_loc(0), hint)
    if other == call.func:
        raise _err(DTScheduleError, f"'{call.func}' cannot be {relation} itself", arg_loc(0))
    return other, dim


def _resolve_map(call, f, arg_loc) -> tuple[MapEntry, ...]:
    entries: list[MapEntry] = []
    splits: dict[str, str] = {}
    named: set[str] = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, tuple) and len(arg) == 3:
            dim, inner, group = arg
            if dim not in f.dims:
                raise _err(DTScheduleError, f"map names '{dim}', but '{call.func}' has no dimension '{dim}'",
                           arg_loc(i), f"its dimensions: {', '.join(f.dims)}")
            group = _integer(group)
            if group is None or not 1 <= group <= MAX_COUNT:
                raise _err(DTScheduleError, f"the group size of '{dim}' must be an integer from 1 to {MAX_COUNT} "
                           f"(2**31 - 1), got {arg[2]!r}", arg_loc(i))
            if inner in named or inner in f.dims or inner in splits.values():
                raise _err(DTScheduleError, f"'{inner}' already names a dimension of this map", arg_loc(i),
                           "the inner part of a split needs a fresh name, e.g. x:x1/8")
            splits[dim] = inner
            entries.append(MapEntry(dim, dim, "outer", group))
            named.add(dim)
        elif isinstance(arg, str):
            owner = next((d for d, n in splits.items() if n == arg), None)
            if owner is not None:
                entries.append(MapEntry(arg, owner, "inner", next(e.group for e in entries if e.dim == owner)))
            elif arg in f.dims:
                entries.append(MapEntry(arg, arg, "whole"))
            else:
                raise _err(DTScheduleError, f"map names '{arg}', which is neither a dimension of '{call.func}' "
                           f"nor the inner part of an earlier split", arg_loc(i),
                           f"its dimensions: {', '.join(f.dims)}; a split is written x:x1/8 and x1 listed after it")
            if arg in named:
                raise _err(DTScheduleError, f"map lists '{arg}' twice", arg_loc(i))
            named.add(arg)
        else:
            raise _err(DTScheduleError, "map takes dimension names and splits like x:x1/8", arg_loc(i))
    for dim, inner in splits.items():
        if inner not in named:
            raise _err(DTScheduleError, f"the split of '{dim}' names an inner part '{inner}' that the map never lists",
                       call.loc, f"list {inner} after {dim}, e.g. map({dim}:{inner}/8, ..., {inner})")
    return tuple(entries)


def _substitute(e: A.Expr, funcs: dict[str, A.FuncDef], inline: set[str]) -> A.Expr:
    return A.recurse(lambda node: _substitute_step(node, funcs, inline), e)


def _substitute_step(e: A.Expr, funcs: dict[str, A.FuncDef], inline: set[str]):
    if isinstance(e, A.Access) and e.kind == "func" and e.name in inline:
        f = funcs[e.name]
        rename = dict(zip(f.dims, e.indices))
        bound = {n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce)}
        clash = bound & set(e.indices) - set(f.dims)
        if clash:
            raise _err(DTScheduleError, f"cannot inline '{f.name}' here: its reduction dimension "
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


def _inline(defs, order, schedules) -> dict[str, A.FuncDef]:
    inline = {n for n in defs if schedules[n].inline}
    funcs: dict[str, A.FuncDef] = {}
    for n in order:  # producers first, so substitutions are already complete
        f = defs[n]
        funcs[n] = A.FuncDef(f.name, f.dims, _substitute(f.expr, funcs, inline), f.loc)
    return funcs


def reachable(funcs, names, stop=frozenset()) -> set[str]:
    """names and the Funcs they use, transitively, not looking past the Funcs in `stop`."""
    seen: set[str] = set()
    stack = list(names)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            stack += [u.name for u in _uses(funcs[n].expr)]
    return seen


def _loops_of(checked_funcs, name) -> tuple[str, ...]:
    f = checked_funcs[name]
    reductions = []
    for e in A.walk(f.expr):
        if isinstance(e, A.Reduce) and e.dim not in reductions:
            reductions.append(e.dim)
    return f.dims + tuple(reductions)


def _check_fuse(producer, consumer, dim, funcs, schedules, fused, dim_kinds):
    loc = schedules[producer].locs.get("fuse_at")
    if consumer not in funcs:
        raise _err(DTScheduleError, f"'{producer}' is fused into '{consumer}', which is not computed "
                   f"(it is inlined or unused)", loc, "fuse into a Func that is computed")
    loops = _loops_of(funcs, consumer)
    if dim not in loops:
        raise _err(DTScheduleError, f"'{consumer}' has no loop over '{dim}' to fuse '{producer}' at",
                   schedules[producer].dim_locs.get(("fuse_at", dim)) or loc,
                   f"the loops of {consumer} are: {', '.join(loops)}")
    seen = {producer}
    c = consumer
    while c in fused:
        if c in seen:
            raise _err(DTScheduleError, f"fuse_at forms a cycle through '{producer}'", loc)
        seen.add(c)
        c = fused[c][0]
    if c == producer:
        raise _err(DTScheduleError, f"fuse_at forms a cycle through '{producer}'", loc)


def top_reductions(e: A.Expr, dim: str) -> list[A.Reduce]:
    """The reductions over `dim` in e that no other reduction encloses."""
    found, stack = [], [e]
    while stack:
        node = stack.pop()
        if isinstance(node, A.Reduce):
            if node.dim == dim:
                found.append(node)
            continue
        stack.extend(reversed(A.children(node)))
    return found


def _shared_loops(funcs, schedules, fused, dim_kinds) -> dict[tuple[str, str], tuple[str, ...]]:
    """(sibling, dim) -> the Funcs whose reductions over dim run in sibling's loop. A chain
    (f.compute_with(g, y); g.compute_with(h, y)) shares the loop of the Func at its end, h."""
    loops: dict[tuple[str, str], tuple[str, ...]] = {}
    for n in funcs:
        if schedules[n].compute_with:
            _check_compute_with(n, *schedules[n].compute_with, funcs, schedules, fused, dim_kinds)
    for n in funcs:
        if schedules[n].compute_with:
            key = (_loop_owner(n, schedules), schedules[n].compute_with[1])
            loops[key] = loops.get(key, ()) + (n,)
    for (owner, dim), members in loops.items():
        for n in members:
            _check_shared_dims(n, owner, funcs, schedules)
            _check_shared_tile(n, owner, dim, schedules, fused)
        _check_shared_loop(owner, dim, members, funcs, schedules)
        _check_other_loops(owner, dim, members, loops, funcs, schedules)
    _check_loop_order(loops, funcs, schedules)
    return loops


def _check_other_loops(owner, dim, members, loops, funcs, schedules):
    """A reduction accumulated in owner's loop over dim reads nothing accumulated in owner's
    loops over other dims: those values are complete only after all of owner's loops."""
    others = {m: d for (o, d), ms in loops.items() if o == owner and d != dim for m in ms}
    for f in members:
        for r in top_reductions(funcs[f].expr, dim):
            used = _dependency_path(funcs, r, set(others))
            if used:
                g = used[-1]
                through = _through(used)
                raise _err(DTScheduleError, f"'{f}' reads '{g}'{through} inside its reduction over '{dim}', but "
                           f"'{g}' is accumulated in '{owner}''s loop over '{others[g]}' (compute_with) and is "
                           f"complete only after {owner}'s loops", schedules[g].locs.get("compute_with"),
                           f"remove {g}'s compute_with (then {g} walks '{others[g]}' in a loop of its own, before "
                           f"{owner}'s)")


def runs_after(f, loops, funcs) -> list[tuple[str, str, bool]]:
    """(g, why, through a shared loop): the Funcs f's computation must follow. f's loops and the
    reductions accumulated in them read g; or f is accumulated in g's loop (compute_with), so
    its value is computed after that loop."""
    members = {m for (owner, dim), ms in loops.items() if owner == f for m in ms}
    reads = [(funcs[f].expr, f"'{f}' uses")]
    reads += [(r, f"'{m}''s reduction over '{dim}' (in '{f}''s loop) reads") for (owner, dim), ms in loops.items()
              if owner == f for m in ms for r in top_reductions(funcs[m].expr, dim)]
    out = [(u.name, f"{what} '{u.name}'", False) for e, what in reads for u in _uses(e)
           if u.name != f and u.name not in members]
    out += [(owner, f"'{f}' is accumulated in '{owner}''s loop over '{dim}'", True)
            for (owner, dim), ms in loops.items() if f in ms]
    return out


def _check_loop_order(loops, funcs, schedules):
    """Each Func's loops run one after another, in the order runs_after gives. compute_with over
    two RVars can make that a cycle (a reads c's result, c is accumulated in b's loop over z,
    and b in a's loop over y); no order of loops computes it."""
    owner_of = {m: (owner, dim) for (owner, dim), members in loops.items() for m in members}
    _, cycle = _post_order(funcs, lambda f: ((g, (why, shared)) for g, why, shared in runs_after(f, loops, funcs)
                                             if g in funcs))
    if cycle is not None:
        member = next(f for f, (_, shared) in cycle if shared)
        raise _err(DTScheduleError, "these compute_with leave no order to compute the loops in: "
                   + "; ".join(why for _, (why, _) in cycle), schedules[member].locs.get("compute_with"),
                   f"remove {member}'s compute_with (then {member} walks '{owner_of[member][1]}' in a loop of "
                   f"its own)")


def _check_shared_tile(func, owner, dim, schedules, fused):
    """A Func accumulated in owner's loop over dim takes owner's tiles: its own tile, if it names
    one, must be the same."""
    own = schedules[func].tensorize.get(dim)
    tile = tile_of(owner, dim, schedules, fused)
    tile = 1 if tile is None else tile
    if own is not None and own != tile:
        s = schedules[func]
        raise _err(DTScheduleError, f"'{func}' is accumulated in '{owner}''s loop over '{dim}', in tiles of "
                   f"{tile}, but its own tile over '{dim}' is {own}",
                   s.dim_locs.get(("tensorize", dim)) or s.locs.get("compute_with"),
                   f"drop {func}'s tensorize of '{dim}', or make it {tile}")


def _loop_owner(func, schedules) -> str:
    """The Func at the end of func's chain of compute_with over one dim: the loop's owner."""
    dim = schedules[func].compute_with[1]
    chain = [func]
    while schedules[chain[-1]].compute_with and schedules[chain[-1]].compute_with[1] == dim:
        sibling = schedules[chain[-1]].compute_with[0]
        if sibling in chain:
            cycle = chain[chain.index(sibling):] + [sibling]
            raise _err(DTScheduleError, f"compute_with forms a cycle: {' -> '.join(cycle)}, so no Func of it "
                       f"owns the loop over '{dim}' they would share", schedules[sibling].locs.get("compute_with"),
                       f"remove the compute_with of the one whose loop the others should share, e.g. "
                       f"{sibling}.compute_with({schedules[sibling].compute_with[0]}, {dim})")
        chain.append(sibling)
    return chain[-1]


def _check_compute_with(func, sibling, dim, funcs, schedules, fused, dim_kinds):
    """func.compute_with(sibling, dim): both reduce over `dim`, are fused at the same loop, and
    func's reductions over `dim` can be accumulated beside sibling's, tile by tile."""
    s = schedules[func]
    loc = s.locs.get("compute_with")
    hint = f"e.g. {func}.fuse_at(c, x); {sibling}.fuse_at(c, x); {func}.compute_with({sibling}, {dim})"
    if sibling not in funcs:
        raise _err(DTScheduleError, f"'{func}' is computed with '{sibling}', which is not computed (it is inlined "
                   f"or unused)", loc, "name a Func that is computed")
    if dim_kinds.get(dim) != "RVar":
        raise _err(DTScheduleError, f"compute_with shares a reduction loop, but '{dim}' is not an RVar",
                   s.dim_locs.get(("compute_with", dim)) or loc, "name the RVar both Funcs reduce over")
    for name in (func, sibling):
        if not top_reductions(funcs[name].expr, dim):
            raise _err(DTScheduleError, f"'{name}' has no reduction over '{dim}' to share", loc,
                       f"name the RVar both {func} and {sibling} reduce over")
    nested = [e for e in A.walk(funcs[func].expr) if isinstance(e, A.Reduce) and e.dim != dim
              and any(isinstance(r, A.Reduce) and r.dim == dim for r in A.walk(e))]
    if nested:
        raise _err(DTScheduleError, f"'{func}' reduces over '{dim}' inside its reduction over '{nested[0].dim}', "
                   f"so that reduction cannot share '{sibling}''s loop", nested[0].loc,
                   "compute the inner reduction in a Func of its own")
    if func not in fused or fused.get(func) != fused.get(sibling):
        where = lambda n: f"fused at '{fused[n][0]}''s loop over '{fused[n][1]}'" if n in fused else "computed at root"
        places = ("both are computed at root, each in a kernel of its own" if func not in fused and sibling not in fused
                  else f"'{func}' is {where(func)} and '{sibling}' is {where(sibling)}")
        raise _err(DTScheduleError, f"'{func}' is computed with '{sibling}', so both must be fused at the same loop; "
                   f"{places}", loc, hint)


def _check_shared_dims(func, owner, funcs, schedules):
    """A Func accumulated in owner's loop is computed over owner's tiles: its dimensions are
    among owner's (owner is its sibling, or the end of its chain of compute_with)."""
    sibling = schedules[func].compute_with[0]
    extra = [d for d in funcs[func].dims if d not in funcs[owner].dims]
    if extra:
        through = f" (whose loop '{sibling}' shares)" if owner != sibling else ""
        fix = (f"compute {sibling} with {func} instead, if {sibling}'s dimensions are a subset of {func}'s"
               if owner == sibling else f"compute {func} with a Func that has dimension '{extra[0]}', or remove the "
               f"compute_with")
        raise _err(DTScheduleError, f"'{func}' has dimension '{extra[0]}', which '{owner}'{through} does not: it is "
                   f"computed inside {owner}'s loop, over {owner}'s tiles", schedules[func].locs.get("compute_with"),
                   fix)


def _check_shared_loop(owner, dim, members, funcs, schedules):
    """What runs in owner's loop over dim (owner's expression, and the members' reductions over
    dim) reads no value computed in that loop, which is complete only after it; the two
    exceptions are a variance around a mean of the loop (Chan's pairwise update) and a sum or
    product of exponentials shifted by a max of the loop (the online softmax, flash attention's
    rescaled accumulators), which the owner's reductions may also be."""
    loop = {owner, *members}
    owned = top_reductions(funcs[owner].expr, dim)
    shifted = [r for r in owned if any(loop_statistic(r, m, funcs[m]) == "exp_sum" for m in members)]
    if shifted and len(owned) > 1:
        raise _err(DTScheduleError, f"'{owner}' has {len(owned)} reductions over '{dim}', one of them shifted by a max "
                   f"computed in its loop; the Func that owns a shared loop may have only that one", owned[1].loc,
                   f"compute the other reductions in Funcs of their own, computed with '{owner}' over '{dim}'")
    for r in shifted:
        nested = [x for a in r.args for x in A.walk(a) if isinstance(x, A.Reduce) and x.dim == dim]
        if nested:
            raise _err(DTScheduleError, f"'{owner}' reduces over '{dim}' inside its reduction over '{dim}', which "
                       f"walks the whole of '{dim}' again in every step of the loop", nested[0].loc,
                       "compute the inner reduction in a Func of its own, computed with the max")
    used = _dependency_path(funcs, funcs[owner].expr, members, skip=shifted)
    if used:
        m = used[-1]
        through = _through(used)
        fix = f"remove {m}'s compute_with (then {m} walks '{dim}' in a loop of its own, before {owner})"
        reads_m = [loop_statistic(r, m, funcs[m]) for r in owned]
        if not through and "variance" in reads_m:
            fix = (f"compute the variance with its mean instead: {owner}.compute_with({m}, {dim}) (and remove "
                   f"{m}'s), so that {owner} accumulates its deviations in {m}'s loop")
        elif max_reduction(funcs[m].expr, dim) is not None:
            own = f"{m}[{', '.join(funcs[m].dims)}]"
            hint = next((h for r in owned if (h := _inline_hint(r, used[:-1], m, funcs, schedules))), None)
            fix = hint or (f"write the reduction that reads it as rsum(exp(e - {own}), {dim}) or "
                           f"rdot(exp(e - {own}), v, {dim}), with e written as in {m}'s rmax; or {fix}")
        raise _err(DTScheduleError, f"'{owner}' uses '{m}'{through}, but '{m}' is accumulated in '{owner}''s loop "
                   f"over '{dim}' and is complete only after it", schedules[m].locs.get("compute_with"), fix)
    for f in [owner, *members]:
        notes = () if f == owner else ((f"'{f}' is computed with '{schedules[f].compute_with[0]}' here",
                                        schedules[f].locs.get("compute_with")),)
        for r in (shifted if f == owner else top_reductions(funcs[f].expr, dim)):
            for read in _uses(r):
                g = read.name
                if g not in loop:
                    used = _dependency_path(funcs, funcs[g].expr, loop)
                    if used:
                        through = "".join(f", which uses '{n}'" for n in used)
                        raise _err(DTScheduleError, f"'{f}' reads '{g}' inside its reduction over '{dim}'{through}, "
                                   f"but '{used[-1]}' is computed in the same loop over '{dim}' (compute_with) and "
                                   f"is complete only after that loop", read.loc,
                                   _inline_hint(r, [g, *used[:-1]], used[-1], funcs, schedules)
                                   or _leave_loop(f, used[-1], owner, loop, dim, funcs), notes)
                    continue
                if loop_statistic(r, g, funcs[g]) is not None:
                    continue  # a variance around a mean of the loop, or an exp-sum shifted by its max
                is_mean = _mean_value(funcs[g].expr, dim) is not None
                is_max = max_reduction(funcs[g].expr, dim) is not None
                deviation = _squared_deviation(r)
                fix = _leave_loop(f, g, owner, loop, dim, funcs)
                if not is_mean and deviation is not None and deviation[1].name == g:
                    raise _err(DTScheduleError, f"'{f}' reads '{g}' inside its reduction over '{dim}', which "
                               f"compute_with allows only for a mean, {g} = rsum(e, {dim}) / len({dim}), and "
                               f"'{g}' is not written so", funcs[g].loc,
                               f"write {g} as rsum(..., {dim}) / len({dim}), or {fix}")
                shifted_read = _shifted_exp(r)
                if not is_max and shifted_read is not None and shifted_read[1].name == g:
                    raise _err(DTScheduleError, f"'{f}' reads '{g}' inside its reduction over '{dim}': compute_with "
                               f"accepts a sum of exponentials shifted by '{g}' only when '{g}' is a max, "
                               f"{g} = rmax(e, {dim}), and '{g}' is not written so", funcs[g].loc,
                               f"if {g} is meant to be the max, write it as rmax(..., {dim}); else {fix}")
                own = f"{g}[{', '.join(funcs[g].dims)}]"
                accepted = (f"; the one such read compute_with accepts is the sum of squared deviations from a "
                            f"mean, rsum((e - {own}) * (e - {own}), {dim}) or rsum(pow(e - {own}, 2), {dim}), where "
                            f"e is written as in {g}'s rsum and {g} is indexed by its own dimensions") if is_mean else \
                    (f"; the one such read compute_with accepts is the sum or product of exponentials shifted by "
                     f"a max, rsum(exp(e - {own}), {dim}) or rdot(exp(e - {own}), v, {dim}), where e is written as "
                     f"in {g}'s rmax, {g} is indexed by its own dimensions and v does not read it") if is_max else ""
                raise _err(DTScheduleError, f"'{f}' reads '{g}' inside its reduction over '{dim}', but '{g}' is "
                           f"computed in the same loop over '{dim}' (compute_with) and is complete only after that "
                           f"loop{accepted}", read.loc,
                           fix + (", or write it in that form" if is_mean or is_max else ""), notes)


def _leave_loop(f, g, owner, loop, dim, funcs) -> str:
    """How to fix f's reduction in owner's loop reading g, of the loop (or through g, a Func of
    it): f leaves the loop; the owner's loop cannot move, so then g leaves it, with the Funcs of
    the loop it uses."""
    if f != owner:
        return f"remove {f}'s compute_with (then {f} walks '{dim}' again, after that loop)"
    leaving = [g] + sorted(n for n in loop - {owner, g} if _dependency_path(funcs, funcs[g].expr, {n}))
    return (f"remove the compute_with of {' and '.join(leaving)} (then "
            f"{'they walk' if len(leaving) > 1 else 'it walks'} '{dim}' before {owner})")


def _through(path: list[str]) -> str:
    """' (through 'a', 'b')' for the Funcs before the last of a dependency path."""
    return f" (through {', '.join(repr(n) for n in path[:-1])})" if len(path) > 1 else ""


def _dependency_path(funcs, e: A.Expr, targets, skip=()) -> list[str] | None:
    """The shortest chain of Funcs through which e uses one of `targets` (the target last),
    leaving out the uses inside the subexpressions `skip`."""
    paths = {}
    queue = []
    for u in _uses_outside(e, {id(x) for x in skip}):
        if u.name not in paths:
            paths[u.name] = [u.name]
            queue.append(u.name)
    while queue:
        name = queue.pop(0)
        if name in targets:
            return paths[name]
        for u in _uses(funcs[name].expr):
            if u.name not in paths:
                paths[u.name] = paths[name] + [u.name]
                queue.append(u.name)
    return None


def mean_reduction(e: A.Expr, dim: str) -> A.Reduce | None:
    """rsum(v, dim) when e is rsum(v, dim) / len(dim)."""
    if isinstance(e, A.Binary) and e.op == "/" and isinstance(e.b, A.Len) and e.b.dim == dim \
            and isinstance(e.a, A.Reduce) and e.a.op == "sum" and e.a.dim == dim:
        return e.a
    return None


def max_reduction(e: A.Expr, dim: str) -> A.Reduce | None:
    """e itself when e is rmax(v, dim)."""
    return e if isinstance(e, A.Reduce) and e.op == "max" and e.dim == dim else None


def _mean_value(e: A.Expr, dim: str) -> A.Expr | None:
    """v when e is rsum(v, dim) / len(dim)."""
    r = mean_reduction(e, dim)
    return None if r is None else r.args[0]


def _squared_deviation(r: A.Reduce) -> tuple[A.Expr, A.Access] | None:
    """(e, f[...]) when reduction r is rsum((e - f[...]) * (e - f[...])) or rsum(pow(e - f[...], 2))."""
    body = r.args[0]
    if r.op != "sum" or not isinstance(body, A.Binary):
        return None
    if body.op == "*" and A.same(body.a, body.b):
        deviation = body.a
    elif body.op == "pow" and isinstance(body.b, A.Num) and body.b.value == 2:
        deviation = body.a
    else:
        return None
    if isinstance(deviation, A.Binary) and deviation.op == "-" and isinstance(deviation.b, A.Access) \
            and deviation.b.kind == "func":
        return deviation.a, deviation.b
    return None


def _inline_hint(r: A.Reduce, between: list[str], sibling: str, funcs, schedules) -> str | None:
    """How to fix a deviation from a mean `sibling` (or an exponential shifted by a max) written
    through other Funcs: inline them, when r then reads as a sum compute_with accepts."""
    try:
        inlined = _substitute(r, funcs, set(between))
    except DTScheduleError:
        return None
    kind = loop_statistic(inlined, sibling, funcs[sibling])
    if kind is None:
        return None
    fused = [n for n in between if schedules[n].fuse_at]
    how = (f"replace {' and '.join(f'{n}.fuse_at(...)' for n in fused)} with "
           f"{' '.join(f'{n}.inline();' for n in between)}" if fused
           else ' '.join(f'{n}.inline();' for n in between))
    form = "the squared deviations from" if kind == "variance" else "the exponentials shifted by"
    return (f"inline {', '.join(between)} ({how}), so that the reduction is written as {form} '{sibling}' that "
            f"compute_with accumulates in its loop")


def shifted_exp_operand(r: A.Reduce) -> int | None:
    """The index of r's operand that is exp(e - f[...]) when r is rsum(exp(e - f[...])), or rdot
    with such an operand (the first, if both are)."""
    if r.op not in ("sum", "dot"):
        return None
    return next((k for k, body in enumerate(r.args) if isinstance(body, A.Unary) and body.op == "exp"
                 and isinstance(body.x, A.Binary) and body.x.op == "-" and isinstance(body.x.b, A.Access)
                 and body.x.b.kind == "func"), None)


def _shifted_exp(r: A.Reduce) -> tuple[A.Expr, A.Access] | None:
    """(e, f[...]) for r's operand exp(e - f[...]) (shifted_exp_operand)."""
    k = shifted_exp_operand(r)
    return None if k is None else (r.args[k].x.a, r.args[k].x.b)


def shifted_exp_value(r: A.Reduce, maximum: str, max_def: A.FuncDef) -> A.Expr | None:
    """e, when reduction r is rsum(exp(e - maximum)) or rdot(exp(e - maximum), v) (either
    operand) over the dim that `maximum`, defined as rmax(e, dim), takes e's max over: the sum
    or product of exponentials that compute_with may accumulate in the max's loop, rescaled
    whenever the running max grows (the online softmax; flash attention's output)."""
    m = max_reduction(max_def.expr, r.dim)
    shifted = _shifted_exp(r)
    if m is None or shifted is None:
        return None
    value, access = shifted
    if access.name == maximum and access.indices == max_def.dims and A.same(value, m.args[0]) \
            and sum(u.name == maximum for u in _uses(r)) == 1:  # the other operand of a product does not read it
        return value
    return None


def loop_statistic(r: A.Reduce, g: str, g_def: A.FuncDef) -> str | None:
    """'variance' or 'exp_sum' when reduction r reads Func g (a Func of its own loop) in one of
    the two forms compute_with accumulates in g's loop: squared deviations from g, a mean, or
    exponentials shifted by g, a max."""
    if centered_value(r, g, g_def) is not None:
        return "variance"
    if shifted_exp_value(r, g, g_def) is not None:
        return "exp_sum"
    return None


def centered_value(r: A.Reduce, mean: str, mean_def: A.FuncDef) -> A.Expr | None:
    """e, when reduction r is rsum((e - mean) * (e - mean)) (or rsum(pow(e - mean, 2))) over the
    dim that `mean`, defined as rsum(e, dim) / len(dim), averages e over: the sum of squared
    deviations that compute_with may accumulate in mean's own loop (Chan's pairwise update)."""
    e = _mean_value(mean_def.expr, r.dim)
    deviation = _squared_deviation(r)
    if e is None or deviation is None:
        return None
    value, access = deviation
    if access.name == mean and access.indices == mean_def.dims and A.same(value, e):
        return e
    return None


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


def _check_fused_uses(cp: CheckedProgram):
    """Every use of a fused producer must lie inside the consumer loop it is computed in. A Func
    computed with a sibling sits inside the sibling's reduction loop."""
    placed = {**cp.fused, **{f: with_ for with_, fs in cp.computed_with.items() for f in fs}}
    for producer, (consumer, dim) in cp.fused.items():
        loc = cp.schedules[producer].locs.get("fuse_at")
        for f in cp.funcs.values():
            for use in _uses(f.expr):
                if use.name == producer and use.indices != cp.funcs[producer].dims:
                    own = ", ".join(cp.funcs[producer].dims)
                    raise _err(DTScheduleError, f"'{producer}' is fused, so it must be indexed by its own dimension "
                               f"names, {producer}[{own}], but '{f.name}' indexes it {producer}"
                               f"[{', '.join(use.indices)}]", use.loc,
                               f"rename the dimensions in the definition of {producer}, or compute it at root "
                               f"(remove its fuse_at)")
        users = [n for n, f in cp.funcs.items() if any(u.name == producer for u in _uses(f.expr))]
        if not users:
            raise _err(DTScheduleError, f"'{producer}' is fused into '{consumer}' but nothing uses it", loc)
        loops = _loops_of(cp.funcs, consumer)
        level = loops.index(dim)
        for user in users:
            # Walk from the user up to the consumer, finding the consumer loop the use sits in.
            chain = user
            while chain != consumer and chain in placed:
                enter = placed[chain]
                if enter[0] == consumer:
                    break
                chain = enter[0]
            if chain != consumer and (chain not in placed or placed[chain][0] != consumer):
                raise _err(DTScheduleError, f"'{producer}' is fused into '{consumer}', but '{user}' also uses it "
                           f"and is not computed inside '{consumer}'", loc,
                           f"remove the fuse_at so that {producer} is computed at root, or fuse {user} into "
                           f"{consumer} as well")
            if chain == consumer:
                for reductions in _enclosing_reductions(cp.funcs[consumer].expr, producer):
                    if dim in cp.dim_kinds and cp.dim_kinds[dim] == "RVar" and dim not in cp.funcs[consumer].dims \
                            and dim not in reductions:
                        raise _err(DTScheduleError, f"'{producer}' is fused at the reduction loop over '{dim}' of "
                                   f"'{consumer}', but '{consumer}' uses it outside that reduction", loc,
                                   f"fuse it at one of {consumer}'s pure loops ({', '.join(cp.funcs[consumer].dims)})")
            else:
                at = placed[chain][1]
                if loops.index(at) < level:
                    raise _err(DTScheduleError, f"'{producer}' is fused at '{consumer}''s loop over '{dim}', but its "
                               f"user '{chain}' is computed further out, at the loop over '{at}'", loc,
                               f"fuse {producer} at the loop over '{at}' or further out")


def _check_func_schedule(cp: CheckedProgram, root: str):
    """Schedules name only dimensions the kernel has; fused Funcs have no block/map of their own."""
    kernel_dims = set(cp.kernel_dims(root))
    for f in cp.kernel_funcs(root):
        s = cp.schedules[f]
        for dim in s.tensorize:
            if dim not in kernel_dims:
                raise _err(DTScheduleError, f"tensorize names '{dim}', but the kernel of '{root}' has no "
                           f"dimension '{dim}'", s.dim_locs.get(("tensorize", dim)),
                           f"its dimensions: {', '.join(cp.kernel_dims(root))}")
        if f != root:
            for prim in ("block", "map"):
                if getattr(s, prim):
                    raise _err(DTScheduleError, f"'{f}' is fused into '{cp.fused[f][0]}', so it has no {prim} of "
                               f"its own", s.locs.get(prim), f"schedule the kernel's root Func '{root}' instead")


def _check_single_kernel(cp: CheckedProgram, out: str):
    unfused = [n for n in cp.kernel_roots if n != out and n in reachable(cp.funcs, (out,))]
    if unfused:
        loc = cp.schedules[out].locs.get("compile_to_kernel")
        notes = tuple((f"'{n}' is computed at root (its own kernel)", cp.funcs[n].loc) for n in unfused)
        raise _err(DTScheduleError, f"compile_to_kernel({out}) needs one kernel, but "
                   f"{', '.join(repr(n) for n in unfused)} would each be a kernel of their own", loc,
                   "fuse each of them into a Func of this kernel, e.g. "
                   + "; ".join(f"{n}.fuse_at({out}, {cp.funcs[out].dims[0] if cp.funcs[out].dims else 'x'})"
                               for n in unfused), notes)
