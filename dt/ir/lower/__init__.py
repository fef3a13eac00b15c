"""Lowering: a checked DT program (algorithm + schedule) → the scheduled IR.

One kernel per Func computed at root. In each kernel:
- the program id is decomposed into block indices following `map` (slowest first), with
  partial groups where the group size does not divide the block count;
- pure dimensions of the root are walked in LHS order by tile loops inside the block;
  reductions are innermost loops with an accumulator each;
- a producer fused at consumer c's loop over v is computed inside that loop, just after the
  loop's tile comes into scope, over the current tiles of the dimensions bound there and the
  whole extent of its other pure dimensions; it is never written to memory.

`lower` sets the dtypes (dtypes), names the launcher, the kernels and their parameters
(dt.ir.naming), lowers each kernel (kernel.KernelLowering: grid, loops, expressions, reductions,
online_statistics), splits the expressions too deep for generated code (dt.ir.nesting), and last
checks the result against the IR's invariants (dt.ir.verify).
"""
from __future__ import annotations

from dt.ir import algorithm as A
from dt.ir import naming
from dt.ir import scheduled as S
from dt.ir.check.program import CheckedProgram
from dt.ir.lower.dtypes import compute_dtype_of, promote
from dt.ir.lower.kernel import KernelLowering
from dt.ir.nesting import split_deep_expressions
from dt.ir.verify import verify


def lower(cp: CheckedProgram, input_dtypes: dict[str, str]) -> S.Pipeline:
    storage = promote(input_dtypes[n] for n in cp.inputs if n in input_dtypes)
    compute = compute_dtype_of(storage)
    input_dims = _input_dims(cp)
    inputs = tuple(S.TensorSpec(n, input_dims[n], input_dtypes.get(n, storage), "input")
                   for n in cp.inputs if n in input_dims)
    outputs = tuple(S.TensorSpec(n, cp.funcs[n].dims, storage, "output") for n in cp.outputs)
    temporaries = tuple(S.TensorSpec(n, cp.funcs[n].dims, storage, "temporary")
                        for n in cp.kernel_roots if n not in cp.outputs)
    sizes = tuple(d for d in cp.dim_kinds if d in cp.needed_dims)
    scalars = tuple(s for s in cp.scalars if s in _all_scalars(cp))
    # The names of the module-level code first: the names a kernel makes for itself differ from its
    # parameters' and from the kernels' (not from the launcher's: no kernel calls it, and a Func is
    # often named as its program is).
    launcher, kernel_names = naming.function_names(cp.program.name, cp.kernel_roots, sizes)
    global_names = naming.global_names(launcher, kernel_names.values(), sizes, scalars,
                                       (t.name for t in inputs + temporaries + outputs))
    taken = set(kernel_names.values()) | global_names.all()
    kernels = tuple(KernelLowering(cp, root, compute, storage, kernel_names[root], taken).lower()
                    for root in cp.kernel_roots)
    pipeline = S.Pipeline(launcher, inputs, scalars, sizes, temporaries, outputs, kernels, compute, global_names,
                          cp.program.file)
    return verify(split_deep_expressions(pipeline))


def _input_dims(cp: CheckedProgram) -> dict[str, tuple[str, ...]]:
    dims: dict[str, tuple[str, ...]] = {}
    for f in cp.funcs.values():
        for e in A.walk(f.expr):
            if isinstance(e, A.Access) and e.kind == "input":
                dims.setdefault(e.name, e.indices)
    return dims


def _all_scalars(cp: CheckedProgram) -> set[str]:
    return {e.name for f in cp.funcs.values() for e in A.walk(f.expr) if isinstance(e, A.ScalarRef)}
