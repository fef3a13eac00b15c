"""Schedule resolution: each schedule call checked against the Func it names and gathered into that
Func's `FuncSchedule` (sizes, map, launch hints, fuse_at, compute_with, inline, compile), and the
compiled Funcs, the program's outputs."""
from __future__ import annotations

import operator

from dt.errors import DTNameError, DTScheduleError, Loc
from dt.ir import algorithm as A
from dt.ir.check.program import FuncSchedule, MapEntry
from dt.ir.check.uses import uses
from dt.ir.tiles import MAX_TILE

PRIMITIVES = ("block", "tensorize", "map", "num_warps", "num_stages", "persistent", "tma", "stream", "fuse_at",
              "compute_with", "split", "inline", "compile", "compile_to_kernel", "save")
# Limits on sizes, so that no schedule and no call can make a backend overflow its index
# arithmetic or allocate without bound. A tile holds at most MAX_TILE elements (dt.ir.tiles);
# block sizes, group sizes, stage and program counts fit in 32 bits; extents are at most
# MAX_EXTENT, so that an index plus a block stays within 64 bits.
MAX_COUNT = 2 ** 31 - 1
MAX_WARPS = 32  # 1024 threads, the most one GPU program (CUDA block) has
MAX_EXTENT = 2 ** 62


def resolve_schedule(program, defs, kinds) -> dict[str, FuncSchedule]:
    schedules = {n: FuncSchedule() for n in defs}
    for call in program.schedule:
        if call.func not in kinds:
            raise DTNameError(f"unknown name '{call.func}'", call.loc, f"declare and define `Func {call.func};`")
        if call.func not in defs:
            raise DTScheduleError(f"'{call.func}' is scheduled but is not a defined Func", call.loc,
                                  "only defined Funcs have schedules")
        if call.primitive not in PRIMITIVES:
            raise DTScheduleError(f"unknown schedule primitive '{call.primitive}'", call.loc,
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
                raise DTScheduleError(f"{prim} needs at least one dim:size argument", call.loc,
                                      f"e.g. {call.func}.{prim}({f.dims[0] if f.dims else 'x'}:64)")
            for i, arg in enumerate(call.args):
                if not (isinstance(arg, tuple) and len(arg) == 2):
                    raise DTScheduleError(f"{prim} takes dim:size arguments", arg_loc(i),
                                          f"write it as {call.func}.{prim}(x:128)")
                dim, size = arg[0], _integer(arg[1])
                what = "block" if prim == "block" else "tile"
                if size is None:
                    raise DTScheduleError(f"the {what} size for '{dim}' must be an integer, got {arg[1]!r}",
                                          arg_loc(i), f"write it as {call.func}.{prim}({dim}:128)")
                if kinds.get(dim) not in ("Var", "RVar"):
                    raise DTNameError(f"'{dim}' is not a declared dimension", arg_loc(i),
                                      f"declare it with `Var {dim};`")
                if prim == "block":
                    if dim not in f.dims:
                        raise DTScheduleError(f"block names '{dim}', but '{call.func}' has no dimension "
                                              f"'{dim}' (its dimensions: {', '.join(f.dims) or 'none'})", arg_loc(i),
                                              "block the Func's own left-hand-side dimensions")
                    if size < 1:
                        raise DTScheduleError(f"block size for '{dim}' must be at least 1, got {size}",
                                              arg_loc(i))
                    if size > MAX_COUNT:
                        raise DTScheduleError(f"block size for '{dim}' is {size}; a block spans at most "
                                              f"{MAX_COUNT} (2**31 - 1) indices", arg_loc(i),
                                              f"use a smaller block, or leave '{dim}' out of block() for one block "
                                              f"over its whole extent")
                elif size < 0:
                    raise DTScheduleError(f"tile size for '{dim}' must be 0 (whole) or positive, got {size}",
                                          arg_loc(i))
                elif size > MAX_TILE:
                    raise DTScheduleError(f"tile size for '{dim}' is {size}; a tile holds at most {MAX_TILE} "
                                          f"(2**20) elements", arg_loc(i),
                                          f"tensorize {dim} in tiles of at most {MAX_TILE}")
                getattr(s, prim)[dim] = size
                s.dim_locs[(prim, dim)] = arg_loc(i)
        elif prim == "map":
            s.map = _resolve_map(call, f, arg_loc)
        elif prim in ("num_warps", "num_stages"):
            n = _integer(call.args[0]) if len(call.args) == 1 else None
            if n is None or n < 1:
                raise DTScheduleError(f"{prim} takes one positive integer", call.loc,
                                      f"e.g. {call.func}.{prim}(4)")
            if prim == "num_warps" and (n & (n - 1) or n > MAX_WARPS):
                raise DTScheduleError(f"num_warps must be a power of two up to {MAX_WARPS}, got {n}",
                                      arg_loc(0), "use 1, 2, 4, 8, 16 or 32")
            if n > MAX_COUNT:
                raise DTScheduleError(f"num_stages is {n}; it takes at most {MAX_COUNT} (2**31 - 1)",
                                      arg_loc(0), "pipelines are a few stages deep: try 2 to 4")
            setattr(s, prim, n)
        elif prim == "persistent":
            n = _integer(call.args[0]) if len(call.args) == 1 else None
            if len(call.args) > 1 or (call.args and (n is None or not 1 <= n <= MAX_COUNT)):
                raise DTScheduleError("persistent takes no argument (one program per multiprocessor) or "
                                      f"one integer from 1 to {MAX_COUNT} (the number of programs)", call.loc,
                                      f"e.g. {call.func}.persistent() or {call.func}.persistent(132)")
            s.persistent = True
            s.persistent_programs = n
        elif prim in ("tma", "stream"):
            if call.args:
                raise DTScheduleError(f"{prim} takes no arguments", call.loc, f"write {call.func}.{prim}()")
            setattr(s, prim, True)
        elif prim == "fuse_at":
            consumer, dim = _func_and_dim(call, defs, kinds, arg_loc, "a consumer Func and one of its loop dimensions",
                                          "consumer, x", "fuse into a Func that uses this one", "fused into")
            if s.fuse_at and s.fuse_at != (consumer, dim):
                raise DTScheduleError(f"'{call.func}' is fused twice", call.loc,
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
                raise DTScheduleError(f"'{call.func}' is already computed with '{s.compute_with[0]}' over "
                                      f"'{s.compute_with[1]}'; a Func has one compute_with", call.loc,
                                      "keep one compute_with: a Func shares one loop, and its other reductions walk "
                                      "loops of their own (for one loop shared by three Funcs, compute two of them "
                                      "with the third)",
                                      (("first compute_with here", first),))
            s.dim_locs.setdefault(("compute_with", dim), arg_loc(1))
            s.compute_with = (sibling, dim)
        elif prim == "split":
            s.split = _resolve_split(call, f, kinds, arg_loc)
        elif prim == "inline":
            s.inline = True
        else:
            if call.args:
                raise DTScheduleError(f"{prim} takes no arguments", call.loc)
            # save() marks an output (keeping compile_to_kernel's one kernel); a later compile makes it plain
            s.compiled = (s.compiled or "compile") if prim == "save" else prim
            s.saved = prim == "save"
    for name, s in schedules.items():
        if s.fuse_at and s.inline:
            raise DTScheduleError(f"'{name}' cannot be both fuse_at and inline", s.locs.get("inline"),
                                  "a fused Func is computed once per tile of a loop of its consumer; an inlined one "
                                  "wherever it is read: keep one")
        if s.compiled == "compile_to_kernel" and (s.fuse_at or s.inline):
            placed = "fused into another Func" if s.fuse_at else "inlined"
            raise DTScheduleError(f"'{name}' cannot be both {placed} and compile_to_kernel, which makes it the Func "
                                  "its kernel computes", s.locs.get("compile_to_kernel"),
                                  f"use {name}.compile(): an output fused into another Func's kernel is stored "
                                  "from there")
    return schedules


def _resolve_split(call, f, kinds, arg_loc) -> tuple[str, int]:
    """f.split(r: chunk): the reduction dimension and the chunk size."""
    example = f"e.g. {call.func}.split(l:1024)"
    if len(call.args) != 1 or not (isinstance(call.args[0], tuple) and len(call.args[0]) == 2):
        raise DTScheduleError("split takes one reduction dimension and its chunk size, r:chunk", call.loc, example)
    dim, chunk = call.args[0][0], _integer(call.args[0][1])
    if kinds.get(dim) != "RVar":
        raise DTScheduleError(f"split divides a reduction, but '{dim}' is not an RVar", arg_loc(0),
                              f"name an RVar that '{call.func}' reduces over; {example}")
    if chunk is None or not 1 <= chunk <= MAX_COUNT:
        raise DTScheduleError(f"the chunk size of '{dim}' must be an integer from 1 to {MAX_COUNT}, got "
                              f"{call.args[0][1]!r}", arg_loc(0), example)
    return dim, chunk


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
        raise DTScheduleError(f"{call.primitive} takes {takes}", call.loc,
                              f"e.g. {call.func}.{call.primitive}({example})")
    other, dim = call.args
    if other not in defs:
        error = DTScheduleError if other in kinds else DTNameError
        raise error(f"'{other}' is not a defined Func", arg_loc(0), hint)
    if other == call.func:
        raise DTScheduleError(f"'{call.func}' cannot be {relation} itself", arg_loc(0))
    return other, dim


def _resolve_map(call, f, arg_loc) -> tuple[MapEntry, ...]:
    entries: list[MapEntry] = []
    splits: dict[str, str] = {}
    named: set[str] = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, tuple) and len(arg) == 3:
            dim, inner, group = arg
            if dim not in f.dims:
                raise DTScheduleError(f"map names '{dim}', but '{call.func}' has no dimension '{dim}'",
                                      arg_loc(i), f"its dimensions: {', '.join(f.dims)}")
            group = _integer(group)
            if group is None or not 1 <= group <= MAX_COUNT:
                raise DTScheduleError(f"the group size of '{dim}' must be an integer from 1 to {MAX_COUNT} "
                                      f"(2**31 - 1), got {arg[2]!r}", arg_loc(i))
            if inner in named or inner in f.dims or inner in splits.values():
                raise DTScheduleError(f"'{inner}' already names a dimension of this map", arg_loc(i),
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
                raise DTScheduleError(f"map names '{arg}', which is neither a dimension of '{call.func}' "
                                      f"nor the inner part of an earlier split", arg_loc(i),
                                      f"its dimensions: {', '.join(f.dims)}; a split is written x:x1/8 and x1 "
                                      f"listed after it")
            if arg in named:
                raise DTScheduleError(f"map lists '{arg}' twice", arg_loc(i))
            named.add(arg)
        else:
            raise DTScheduleError("map takes dimension names and splits like x:x1/8", arg_loc(i))
    for dim, inner in splits.items():
        if inner not in named:
            raise DTScheduleError(f"the split of '{dim}' names an inner part '{inner}' that the map never lists",
                                  call.loc, f"list {inner} after {dim}, e.g. map({dim}:{inner}/8, ..., {inner})")
    return tuple(entries)


def compiled_outputs(program: A.Program, defs: dict[str, A.FuncDef], order: list[str],
                     schedules: dict[str, FuncSchedule]) -> tuple[str, ...]:
    """The compiled Funcs, the program's outputs, in topological order: at least one."""
    outputs = tuple(n for n in order if schedules[n].compiled)
    if not outputs:
        used = {u.name for f in defs.values() for u in uses(f.expr)}
        last = next((defs[n] for n in reversed(order) if n not in used), None)  # an output, likely
        raise DTScheduleError("no Func is compiled, so the program computes nothing",
                              last.loc if last else _end_of(program),
                              f"call .compile() on each output Func, e.g. `{last.name if last else 'out'}.compile();`")
    return outputs


def _end_of(program: A.Program) -> Loc:
    """Just past the last character of the program's source."""
    lines = program.source.rstrip("\n").split("\n")
    return Loc(program.file, len(lines), len(lines[-1]) + 1, 1, lines[-1])
