"""Lowering: a checked DT program (algorithm + schedule) → the scheduled IR.

One kernel per Func computed at root. In each kernel:
- the program id is decomposed into block indices following `map` (slowest first), with
  partial groups where the group size does not divide the block count;
- pure dimensions of the root are walked in LHS order by tile loops inside the block;
  reductions are innermost loops with an accumulator each;
- a producer fused at consumer c's loop over v is computed inside that loop, just after the
  loop's tile comes into scope, over the current tiles of the dimensions bound there and the
  whole extent of its other pure dimensions; it is never written to memory.

`lower` takes the scales of products' operands out of the products (product_scales), sets the
dtypes (dtypes), names the launcher, the kernels and their parameters
(dt.ir.naming), lowers each kernel (kernel.KernelLowering: grid, loops, expressions, reductions,
online_statistics), turns axes of one always-valid lane into offsets (scalar_axes), loads what
no step of a loop changes before it (invariant_loads) and a tile loaded again from the first
load (shared_loads), splits the
expressions too deep for generated code (dt.ir.nesting), and last checks the result against the
IR's invariants (dt.ir.verify).
"""
from __future__ import annotations

from dt.dtypes import is_integer
from dt.errors import DTScheduleError
from dt.ir import algorithm as A
from dt.ir import naming
from dt.ir import scheduled as S
from dt.ir.check.program import CheckedProgram
from dt.ir.lower.dtypes import compute_dtype_of, stored_dtype
from dt.ir.lower.invariant_loads import hoist_invariant_loads
from dt.ir.lower.kernel import KernelLowering
from dt.ir.lower.product_scales import factor_product_scales
from dt.ir.lower.scalar_axes import squeeze_scalar_axes
from dt.ir.lower.shared_loads import share_repeated_loads
from dt.ir.lower.types import Types
from dt.ir.nesting import split_deep_expressions
from dt.ir.verify import verify


def lower(cp: CheckedProgram, dtypes: dict[str, str]) -> S.Pipeline:
    """The pipeline for inputs of `dtypes` (by input name; an integer scalar's name maps to 'i64')."""
    input_dtypes = {n: d for n, d in dtypes.items() if n not in cp.scalars}
    floats = {n: (d, cp.input_axes.get(n, ())) for n, d in input_dtypes.items() if n in cp.inputs and not is_integer(d)}
    rank = max((len(axes) for _, axes in floats.values()), default=0)
    storage = stored_dtype(next((axes for _, axes in floats.values() if len(axes) == rank), ()), floats)
    compute = compute_dtype_of("f64" if any(d == "f64" for d, _ in floats.values()) else storage)
    # every Func as written (inlined ones too: an inlined integer Func may index a gather)
    # kept in the compute dtype: a split's partials, the outputs of save(), a temporary that is a row
    # statistic (a reduction with fewer dimensions than the widest input: a sum rounded to bf16 loses 3
    # bits for every kernel that reads it back), and one that is the max or min of computed values, which
    # a gradient compares with those values again (ties, `s == mx`): a copy rounded to bf16 would equal
    # none of them
    in_compute = (*cp.partials, *(n for n, f in cp.written.items() if cp.schedules[n].saved or n not in cp.outputs and (
        isinstance(f.expr, A.Reduce) and f.expr.op in ("max", "min") or
        len(f.dims) < rank and any(isinstance(e, A.Reduce) for e in A.walk(f.expr)))))
    written = {**cp.written, **{n: cp.funcs[n] for n in cp.partials}}
    types = Types(written, {n: input_dtypes.get(n, storage) for n in cp.inputs},
                  {n: d for n, d in dtypes.items() if n in cp.scalars},
                  {n: stored_dtype(f.dims, floats) for n, f in written.items()}, in_compute, compute,
                  frozenset(n for n in cp.written if n not in cp.funcs))
    types.check_indices(cp.written)
    _check_integer_splits(cp, types)
    cp = factor_product_scales(cp, types.integer_dot)
    input_dims = cp.input_axes
    inputs = tuple(S.TensorSpec(n, input_dims[n], input_dtypes.get(n, storage), "input")
                   for n in cp.inputs if n in input_dims)
    defined = {**cp.funcs, **cp.inlined_outputs}
    outputs = tuple(S.TensorSpec(n, defined[n].dims, types.func_dtypes[n], "output") for n in cp.outputs)
    temporaries = tuple(S.TensorSpec(n, cp.funcs[n].dims, types.func_dtypes[n], "temporary")
                        for n in cp.kernel_roots + cp.stored_fused
                        if n not in cp.outputs and cp.funcs[n].update is None)  # an update writes into another
    # the declared dimensions the kernels use, then the axes of inputs no dimension spans (E_axis0)
    sizes = tuple(d for d in cp.dim_kinds if d in cp.needed_dims or d in cp.chunk_dims) + \
        tuple(d for d in cp.needed_dims if d not in cp.dim_kinds)
    scalars = tuple(s for s in cp.scalars if s in _all_scalars(cp))
    # The names of the module-level code first: the names a kernel makes for itself differ from its
    # parameters' and from the kernels' (not from the launcher's: no kernel calls it, and a Func is
    # often named as its program is).
    launcher, kernel_names = naming.function_names(cp.program.name, cp.kernel_roots, sizes)
    global_names = naming.global_names(launcher, kernel_names.values(), sizes, scalars,
                                       (t.name for t in inputs + temporaries + outputs))
    taken = set(kernel_names.values()) | global_names.all()
    stored: set[str] = set()  # the inlined outputs a kernel has stored: the first to compute one does
    kernels = tuple(share_repeated_loads(hoist_invariant_loads(squeeze_scalar_axes(KernelLowering(
        cp, root, compute, storage, kernel_names[root], taken, types, stored).lower())))
        for root in cp.kernel_roots)
    pipeline = S.Pipeline(launcher, inputs, scalars, sizes, temporaries, outputs, kernels, compute, global_names,
                          cp.program.file, tuple((d, split, chunk) for d, (split, chunk) in cp.chunk_dims.items()))
    return verify(split_deep_expressions(pipeline))


def _all_scalars(cp: CheckedProgram) -> set[str]:
    return {e.name for f in cp.funcs.values() for e in A.walk(f.expr) if isinstance(e, A.ScalarRef)}


def _check_integer_splits(cp: CheckedProgram, types: Types):
    """A split of a product of two i8 operands is refused: its chunks would add in floats."""
    for partial in cp.partials:
        for e in A.walk(cp.funcs[partial].expr):
            if not (isinstance(e, A.Reduce) and e.op == "dot"):
                continue
            args = tuple(_within_chunk(x, set(cp.chunk_dims)) for x in e.args)
            if types.integer_dot(A.Reduce(e.op, args, e.dim)):
                # the Func the split rewrote: the one reading the partial
                owner = next((f for f, d in cp.funcs.items() if f not in cp.partials and any(
                    isinstance(n, A.Access) and n.name == partial for n in A.walk(d.expr))), partial)
                loc = next((cp.schedules[f].locs["split"] for f in (owner, *cp.schedules)
                            if f in cp.schedules and cp.schedules[f].locs.get("split")), None)
                raise DTScheduleError(f"'{owner}' multiplies two i8 operands as integers (an exact i32 product) over "
                                      f"'{e.dim}', but its split would add the chunks in floats (inexact past 2**24)",
                                      loc, f"remove the split, or make one operand a float (cast(X[m, k], f32)) for "
                                      "a float product")


def _within_chunk(x: A.Expr, chunk_dims) -> A.Expr:
    """x without the wheres a split puts around it to keep its chunk."""
    while isinstance(x, A.Where) and A.free_dims(x.cond) & chunk_dims:
        x = x.a
    return x
