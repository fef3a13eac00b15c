"""Validation of a DT program and resolution of its schedule.

`check(program)` returns a `CheckedProgram`: the algorithm with inlined Funcs substituted,
the schedule of each Func resolved, and the kernel structure (which Func is computed where).
Every problem raises a DTError pointing at the DT source.

The phases, in the order `check` runs them, each in its own module: names and dimensions
(`names`), index expressions (`subscripts`), the order of Funcs (`uses`), schedule resolution
(`schedule`), updates (`updates`), inlining (`inlining`), split reductions (`split`), fuse_at legality and the kernel
structure (`fusion`), compute_with legality (`compute_with`, with the statistic patterns of `statistics`), and the
tiles each kernel makes (dt.ir.tiles).
"""
from __future__ import annotations

import dataclasses

from dt.ir import algorithm as A
from dt.ir.check.compute_with import shared_loops
from dt.ir.check.fusion import (check_func_schedule, check_fuse, check_fused_uses, check_launch_primitives,
                                check_single_kernel)
from dt.ir.check.inlining import check_inlined_depth, check_inlined_outputs, inline
from dt.ir.check.names import check_expressions, declared_kinds, definitions
from dt.ir.check.program import CheckedProgram
from dt.ir.check.schedule import compiled_outputs, resolve_schedule
from dt.ir.check.split import split_reductions
from dt.ir.check.subscripts import check_subscripts
from dt.ir.check.updates import check_update_schedules, check_updates
from dt.ir.check.uses import reachable, topological_order
from dt.ir.tiles import tiles


def check(program: A.Program) -> CheckedProgram:
    kinds = declared_kinds(program)
    dim_kinds = {n: k for n, k in kinds.items() if k in ("Var", "RVar")}
    defs = definitions(program, kinds, dim_kinds)
    check_updates(defs)
    input_ranks = check_expressions(defs, kinds, dim_kinds)
    check_subscripts(defs)
    order = topological_order(defs)
    schedules = resolve_schedule(program, defs, kinds)
    check_update_schedules(defs, schedules)
    outputs = compiled_outputs(program, defs, order, schedules)

    funcs = inline(defs, order, schedules)
    for n in order:
        check_inlined_depth(funcs[n], defs[n], schedules)
    needed = reachable(funcs, outputs)
    inlined_outputs = {n: funcs[n] for n in outputs if schedules[n].inline}
    funcs = {n: funcs[n] for n in order if n in needed and not schedules[n].inline}
    check_inlined_outputs(inlined_outputs, funcs, schedules)
    unsplit = funcs
    funcs, schedules, dim_kinds, chunk_dims, partials = split_reductions(funcs, schedules, dim_kinds,
                                                                          set(kinds))
    fused = {n: schedules[n].fuse_at for n in funcs if schedules[n].fuse_at}
    for n, (consumer, dim) in fused.items():
        check_fuse(n, consumer, dim, funcs, schedules, fused)
    kernel_roots = tuple(n for n in funcs if n not in fused)
    check_launch_primitives(schedules, fused)
    computed_with = shared_loops(funcs, schedules, fused, dim_kinds)
    read = reachable(defs, outputs)
    written = {n: defs[n] for n in order if n in read}
    checked = CheckedProgram(program, funcs, program.names_of("In"), program.names_of("SIn"), dim_kinds,
                             schedules, outputs, kernel_roots, fused, input_ranks, computed_with, written=written,
                             inlined_outputs=inlined_outputs, chunk_dims=chunk_dims, partials=partials,
                             unsplit=unsplit if partials else {})
    check_fused_uses(checked)
    for root in kernel_roots:
        check_func_schedule(checked, root)
    for out in outputs:
        if schedules[out].compiled == "compile_to_kernel":
            check_single_kernel(checked, out)
    return dataclasses.replace(checked, tiles=tiles(checked))
