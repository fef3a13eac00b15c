"""Dtype promotion: the storage dtype of a pipeline's outputs and temporaries, the dtype its
arithmetic runs in, the dtype dot products feed the matrix units, and which DT expressions are
booleans (comparisons) rather than numbers."""
from __future__ import annotations

from dt.dtypes import FLOAT8
from dt.ir import algorithm as A
from dt.ir.ops import OPS


def promote(dtypes) -> str:
    """The common dtype of `dtypes`: itself when they agree, else f64 if any is, else f32."""
    kinds = set(dtypes)
    if not kinds:
        return "f32"
    if len(kinds) == 1:
        return kinds.pop()
    return "f64" if "f64" in kinds else "f32"


def stored_dtype(dims, inputs: dict[str, tuple[str, tuple[str, ...]]]) -> str:
    """The dtype a Func over `dims` is stored in, given the float inputs (name -> (dtype, axes)):
    the common dtype of the inputs that span its dimensions — a row statistic or a weight vector in
    float32 does not widen bf16 rows (a layer norm's grad_A), and a float32 weight keeps its own
    gradient float32 (its grad_W) — else of every float input. Any f64 input stores f64; a result in
    an 8-bit float only where every float input is one (a scaled fp8 product is stored in f32)."""
    every = promote(d for d, _ in inputs.values())
    if every == "f64":
        return every
    spanning = promote(d for d, axes in inputs.values() if set(dims) <= set(axes)) if \
        any(set(dims) <= set(axes) for _, axes in inputs.values()) else every
    return every if spanning in FLOAT8 and spanning != every else spanning


def compute_dtype_of(storage: str) -> str:
    return "f64" if storage == "f64" else "f32"


def float8_dot_dtype(operand_dtypes) -> str | None:
    """The 8-bit float a product of two stored operands feeds the matrix units in: both operands
    of that one fp8 dtype (Hopper multiplies e4m3 and e5m2 natively, accumulating in f32)."""
    kinds = set(operand_dtypes)
    return kinds.pop() if len(kinds) == 1 and kinds <= set(FLOAT8) else None


def dot_dtype_of(storage: str, compute: str) -> str:
    """The dtype of a dot product's operands: half-precision storage feeds the matrix units as it
    is (the product accumulates in `compute`), any other in the compute dtype."""
    return storage if storage in ("f16", "bf16") else compute


def is_bool(e: A.Expr) -> bool:
    """Whether e is a comparison, or a where choosing between comparisons (at any depth)."""
    branches = [e]
    while branches:
        e = branches.pop()
        if isinstance(e, A.Where):
            branches += (e.a, e.b)
        elif not (isinstance(e, A.Binary) and OPS[e.op].result == "bool"):
            return False
    return True
