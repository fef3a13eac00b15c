"""The op catalogue: every case the conformance suite runs, as data.

Each `Case` pairs a DT algorithm with the schedules it runs under and a NumPy reference
written for it (never dt's own reference evaluator, which is itself under test). The
element-wise ops' cases come from the op table (dt.ir.ops: each op's `checks`).
Element-wise families share an algorithm template and a schedule set; everything else is
spelled out. Sizes include 1, primes, non-powers of two and extents of several blocks;
`full_sizes` are for GPUs (`--full`). The talk's kernels (examples/*.dt) appear verbatim as
`talk.<file name>`, with the talk's schedule named "talk".

Longer than 500 lines: it is data, one case after another, read by searching for a case's name.
"""
from __future__ import annotations

import numpy as np

from dt.conformance.case import Case
from dt.conformance.arg_reductions import CASES as ARG_REDUCTION_CASES
from dt.conformance.batched import CASES as BATCHED_CASES
from dt.conformance.gradients import CASES as GRADIENT_CASES
from dt.conformance.indexing import CASES as INDEXING_CASES
from dt.conformance.updates import CASES as UPDATE_CASES
from dt.conformance.outputs import CASES as OUTPUT_CASES
from dt.conformance.scans import CASES as SCAN_CASES
from dt.ir.ops import OPS_LIST, Check, Op


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _softmax_rows(v):
    e = np.exp(v)
    return e / e.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------- sizes

S1 = ({"x": 1}, {"x": 13}, {"x": 100})
F1 = ({"x": 1}, {"x": 1031}, {"x": (1 << 20) - 3})  # rank.1d's whole-extent tile: at most 2**20 elements (dt/ir/tiles.py)
S2 = ({"x": 1, "y": 1}, {"x": 7, "y": 13}, {"x": 33, "y": 70})
F2 = ({"x": 1, "y": 1}, {"x": 129, "y": 1000}, {"x": 1031, "y": 4099})
S3 = ({"b": 1, "x": 1, "y": 1}, {"b": 2, "x": 13, "y": 9}, {"b": 3, "x": 20, "y": 33})
F3 = ({"b": 1, "x": 1, "y": 1}, {"b": 4, "x": 129, "y": 100}, {"b": 16, "x": 127, "y": 513})
SR = ({"x": 1, "y": 1}, {"x": 5, "y": 13}, {"x": 17, "y": 70})
FR = ({"x": 1, "y": 1}, {"x": 129, "y": 1000}, {"x": 1031, "y": 4099})
SMM = ({"x": 1, "y": 1, "k": 1}, {"x": 13, "y": 7, "k": 19}, {"x": 40, "y": 33, "k": 70})
FMM = ({"x": 1, "y": 1, "k": 1}, {"x": 127, "y": 255, "k": 129}, {"x": 1031, "y": 1024, "k": 1000})
SK = ({"k": 1}, {"k": 13}, {"k": 100})
FK = ({"k": 1}, {"k": 1031}, {"k": 100003})

# ---------------------------------------------------------------- shared schedules
# Every schedule stays GPU-sized at full sizes: a whole-extent tile spans one dimension at most.

EW2 = {  # out[x, y]
    "rows": "out.block(x:1, y:16);\nout.tensorize(y:8);\nout.compile();",
    "tiles": "out.block(x:4, y:32);\nout.tensorize(x:2, y:8);\nout.map(y, x);\nout.num_warps(2);\nout.compile();",
    "whole_rows": "out.block(x:1);\nout.tensorize(y:0);\nout.compile();",
}
RED = {  # out[x] = r(..., y)
    "rows": "out.block(x:1);\nout.tensorize(y:8);\nout.compile();",
    # a walk pipelined 3 deep (tiles this wide are copied asynchronously in every dtype on sm_90)
    "staged_rows": "out.block(x:1);\nout.tensorize(y:256);\nout.num_stages(3);\nout.compile();",
    "blocked": "out.block(x:4);\nout.tensorize(x:2, y:16);\nout.compile();",
    "scalar": "out.block(x:3);\nout.compile();",
    "whole_rows": "out.block(x:2);\nout.tensorize(x:0, y:0);\nout.compile();",
}
MM = {  # out[x, y] = rdot(..., k)
    "tiles": "out.block(x:16, y:16);\nout.tensorize(x:16, y:8, k:8);\nout.compile();",
    "grouped": "out.block(x:8, y:8);\nout.tensorize(x:8, y:8, k:16);\nout.map(x:x1/3, y, x1);\n"
               "out.num_stages(2);\nout.compile();",
    "scalar_k": "out.block(x:8, y:4);\nout.tensorize(x:8, y:4);\nout.compile();",
    "whole_k": "out.block(x:16, y:16);\nout.tensorize(x:16, y:16, k:0);\nout.compile();",
}
MV = {  # out[x] = r(..., k)
    "rows": "out.block(x:1);\nout.tensorize(k:8);\nout.compile();",
    "blocked": "out.block(x:4);\nout.tensorize(x:2, k:16);\nout.compile();",
    "whole_k": "out.block(x:2);\nout.tensorize(x:0, k:0);\nout.compile();",
}
TO_SCALAR = {  # out[] = r(..., k)
    "tiles": "out.tensorize(k:8);\nout.compile();",
    "whole": "out.tensorize(k:0);\nout.compile();",
    "scalar": "out.compile();",
}

ONE_INPUT = "Func out;\nIn A;\nVar x, y;\nout[x, y] = {};"
TWO_INPUTS = "Func out;\nIn A, B;\nVar x, y;\nout[x, y] = {};"
ROW_REDUCTION = "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = {};"
MATMUL = "Func out;\nIn A, B;\nVar x, y;\nRVar k;\nout[x, y] = {};"


def unary(name, expr, reference, domain="normal", **kw) -> Case:
    return Case(name, ONE_INPUT.format(expr), EW2, reference, S2, F2, domains={"A": domain}, **kw)


def binary(name, expr, reference, domain_a="normal", domain_b="normal", **kw) -> Case:
    return Case(name, TWO_INPUTS.format(expr), EW2, reference, S2, F2, domains={"A": domain_a, "B": domain_b}, **kw)


def row_reduction(name, expr, reference, domain="normal", **kw) -> Case:
    return Case(name, ROW_REDUCTION.format(expr), RED, reference, SR, FR, domains={"A": domain}, **kw)


def matmul(name, expr, reference, **kw) -> Case:
    return Case(name, MATMUL.format(expr), MM, reference, SMM, FMM, **kw)


def _op_case(op: Op, check: Check) -> Case:
    """An op's conformance check from the op table, as a case over A (and B)."""
    operands = ("A[x, y]", "B[x, y]")[:len(check.domains)]
    if check.expression is not None:
        expression = check.expression
    elif op.syntax == "function":
        expression = f"{op.name}({', '.join(operands)})"
    else:
        expression = f" {op.name} ".join(operands)
    if len(check.domains) == 1:
        return unary(check.name, expression, check.expected, check.domains[0])
    return binary(check.name, expression, check.expected, *check.domains)


def talk(stem, *args, **kw) -> Case:
    """A kernel of the talk, as in examples/{stem}.dt: a summary row of its own."""
    return Case(f"talk.{stem}", *args, op=f"talk.{stem}", **kw)


# The talk's 2mm, (A B) C, under its inner and outer fusions.
TWO_MM = ("Func _2mm, mm;\nIn A, B, C;\nVar m, n;\nRVar k, l;\nmm[m, l] = rdot(A[m, k], B[k, l], k);\n"
          "_2mm[m, n] = rdot(mm[m, l], C[l, n], l);")

# The talk's attention algorithm, under two schedule families (examples/attention.dt and
# examples/attention_talk.dt): its reference and sizes.
ATTENTION = ("Func attention, mm, e, sm, dvsr;\nIn A, B, C;\nVar m, n;\nRVar k, l;\n"
             "mm[m, l] = rdot(A[m, k], B[k, l], k) / sqrt(len(k));\ne[m, l] = exp(mm[m, l]);\n"
             "dvsr[m] = rsum(e[m, l], l);\nsm[m, l] = e[m, l] / reshape(dvsr[m], m, 1);\n"
             "attention[m, n] = rdot(sm[m, l], C[l, n], l);")
# The same attention, normalised after the product: one pass over l (compute_with).
ATTENTION_ONEPASS = ("Func attention, mm, e, num, dvsr;\nIn A, B, C;\nVar m, n;\nRVar k, l;\n"
                     "mm[m, l] = rdot(A[m, k], B[k, l], k) / sqrt(len(k));\ne[m, l] = exp(mm[m, l]);\n"
                     "dvsr[m] = rsum(e[m, l], l);\nnum[m, n] = rdot(e[m, l], C[l, n], l);\n"
                     "attention[m, n] = num[m, n] / reshape(dvsr[m], m, 1);")
# The same attention with the row max subtracted, its max and sum in one pass (compute_with).
ATTENTION_SAFE = ("Func attention, mm, mx, e, sm, dvsr;\nIn A, B, C;\nVar m, n;\nRVar k, l;\n"
                  "mm[m, l] = rdot(A[m, k], B[k, l], k) / sqrt(len(k));\nmx[m] = rmax(mm[m, l], l);\n"
                  "e[m, l] = exp(mm[m, l] - mx[m]);\ndvsr[m] = rsum(e[m, l], l);\n"
                  "sm[m, l] = e[m, l] / reshape(dvsr[m], m, 1);\nattention[m, n] = rdot(sm[m, l], C[l, n], l);")
# The same, normalised after the product: max, sums and product in one pass (flash attention).
ATTENTION_SAFE_ONEPASS = ("Func attention, mm, mx, e, dvsr, num;\nIn A, B, C;\nVar m, n;\nRVar k, l;\n"
                          "mm[m, l] = rdot(A[m, k], B[k, l], k) / sqrt(len(k));\nmx[m] = rmax(mm[m, l], l);\n"
                          "e[m, l] = exp(mm[m, l] - mx[m]);\ndvsr[m] = rsum(e[m, l], l);\n"
                          "num[m, n] = rdot(e[m, l], C[l, n], l);\nattention[m, n] = num[m, n] / reshape(dvsr[m], m, 1);")
ATTENTION_CHECK = (
    lambda A, B, C: _softmax_rows(A @ B / np.sqrt(A.shape[1])) @ C,
    ({"m": 1, "n": 1, "k": 1, "l": 1}, {"m": 13, "n": 7, "k": 19, "l": 5}, {"m": 40, "n": 70, "k": 33, "l": 50}),
    ({"m": 1, "n": 1, "k": 1, "l": 1}, {"m": 1024, "n": 64, "k": 64, "l": 1024},
     {"m": 1031, "n": 63, "k": 65, "l": 999}))


CATALOGUE: tuple[Case, ...] = (
    # ------------------------------------------------------------ element-wise ops (dt.ir.ops)
    *(_op_case(op, check) for op in OPS_LIST for check in op.checks),
    unary("arith.literals", "(A[x, y] - 2.5) * 0.5 + 1 / (1 + A[x, y] * A[x, y])",
          lambda A: (A - 2.5) * 0.5 + 1.0 / (1.0 + A * A)),
    binary("arith.associativity", "A[x, y] - B[x, y] - B[x, y] * 2 / 4 - -A[x, y]",
           lambda A, B: ((A - B) - ((B * 2) / 4)) + A),
    Case("SIn.affine", "Func out;\nIn A;\nSIn alpha, beta;\nVar x, y;\nout[x, y] = alpha * A[x, y] + beta;",
         EW2, lambda A, alpha, beta: alpha * A + beta, S2, F2, domains={"beta": "normal"}),
    Case("SIn.in_reduction",
         "Func out;\nIn A;\nSIn alpha;\nVar x;\nRVar y;\nout[x] = rsum(A[x, y] * alpha, y) + alpha;",
         RED, lambda A, alpha: (A * alpha).sum(axis=1) + alpha, SR, FR),

    # ------------------------------------------------------------ ranks, broadcasting, transposes
    Case("rank.1d", "Func out;\nIn A, B;\nVar x;\nout[x] = exp(A[x]) * B[x] - 1;",
         {"blocks": "out.block(x:16);\nout.tensorize(x:4);\nout.compile();",
          "whole": "out.tensorize(x:0);\nout.compile();",
          "scalar": "out.block(x:8);\nout.compile();"},
         lambda A, B: np.exp(A) * B - 1, S1, F1),
    Case("rank.3d", "Func out;\nIn A, B;\nVar b, x, y;\nout[b, x, y] = A[b, x, y] * sigmoid(B[b, x, y]);",
         {"grouped": "out.block(b:1, x:4, y:8);\nout.tensorize(x:2, y:8);\nout.map(x:x1/3, b, y, x1);\nout.compile();",
          "plane": "out.block(b:1, x:1);\nout.tensorize(y:0);\nout.compile();"},
         lambda A, B: A * _sigmoid(B), S3, F3),
    Case("broadcast.row", "Func out;\nIn A, s;\nVar x, y;\nout[x, y] = A[x, y] - s[x];",
         EW2, lambda A, s: A - s[:, None], S2, F2),
    Case("broadcast.column", "Func out;\nIn A, r;\nVar x, y;\nout[x, y] = A[x, y] * r[y];",
         EW2, lambda A, r: A * r[None, :], S2, F2),
    Case("broadcast.outer", "Func out;\nIn u, v;\nVar x, y;\nout[x, y] = u[x] * v[y] + u[x];",
         EW2, lambda u, v: np.outer(u, v) + u[:, None], S2, F2),
    Case("broadcast.reshape", "Func out;\nIn A, s;\nVar x, y;\nout[x, y] = A[x, y] / reshape(s[x], x, 1);",
         EW2, lambda A, s: A / s[:, None], S2, F2, domains={"s": "nonzero"}),
    Case("broadcast.only", "Func out;\nIn v;\nVar x, y;\nout[x, y] = v[y];",
         EW2, lambda v, x: np.tile(v, (x, 1)), S2, F2),
    Case("broadcast.3d", "Func out;\nIn A, M, v;\nVar b, x, y;\nout[b, x, y] = A[b, x, y] + M[x, y] * v[b];",
         {"tiles": "out.block(b:1, x:4, y:8);\nout.tensorize(x:2, y:4);\nout.compile();",
          "plane": "out.block(b:1, x:1);\nout.tensorize(y:0);\nout.compile();"},
         lambda A, M, v: A + M[None] * v[:, None, None], S3, F3),
    Case("transpose.2d", "Func out;\nIn A, B;\nVar x, y;\nout[x, y] = A[y, x] + B[x, y];",
         EW2, lambda A, B: A.T + B, S2, F2),
    Case("transpose.3d", "Func out;\nIn A, B;\nVar b, x, y;\nout[y, b, x] = A[b, x, y] - B[x, y, b];",
         {"tiles": "out.block(y:8, b:1, x:4);\nout.tensorize(y:4, x:4);\nout.compile();",
          "plane": "out.block(y:1, b:1);\nout.tensorize(x:0);\nout.compile();"},
         lambda A, B: np.einsum("bxy->ybx", A) - np.einsum("xyb->ybx", B), S3, F3),

    # ------------------------------------------------------------ dimensions as values, len
    # Normalised by the extents, so that values stay inside f16's range at full sizes.
    Case("dim_value.iota", "Func out;\nIn A;\nVar x, y;\nout[x, y] = A[x, y] + (x * len(y) + y) / (len(x) * len(y));",
         EW2, lambda A, x, y: A + (np.arange(x)[:, None] * y + np.arange(y)[None, :]) / (x * y), S2, F2),
    Case("dim_value.in_reduction", "Func out;\nIn A;\nVar x;\nRVar k;\nout[x] = rsum(A[x, k] * k / len(k), k);",
         MV, lambda A: (A * np.arange(A.shape[1])[None, :] / A.shape[1]).sum(axis=1),
         tuple({"x": s["x"], "k": s["y"]} for s in SR), tuple({"x": s["x"], "k": s["y"]} for s in FR)),
    Case("causal.mask", "Func out;\nIn A;\nVar x, y;\nout[x, y] = where(y <= x, A[x, y], 0);",
         EW2, lambda A: np.tril(A), S2, F2),
    Case("causal.rsum", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rsum(where(l <= m, exp(A[m, l]), 0), l);",
         {"rows": "out.block(m:1);\nout.tensorize(l:8);\nout.compile();",
          "blocked": "out.block(m:4);\nout.tensorize(m:2, l:16);\nout.compile();"},
         lambda A: np.tril(np.exp(A)).sum(axis=1),
         tuple({"m": s["x"], "l": s["y"]} for s in SR), tuple({"m": s["x"], "l": s["y"]} for s in FR)),
    Case("causal.softmax",
         "Func out, e, s;\nIn A;\nVar m;\nRVar l;\ne[m, l] = where(l <= m, exp(A[m, l]), 0);\n"
         "s[m] = rsum(e[m, l], l);\nout[m, l] = e[m, l] / s[m];",
         {"fused": "e.inline();\nout.block(m:2);\nout.tensorize(m:0, l:8);\ns.fuse_at(out, m);\n"
                   "out.compile_to_kernel();",
          "root": "e.inline();\ns.block(m:4);\ns.tensorize(m:4, l:8);\nout.block(m:2, l:16);\nout.tensorize(l:8);\n"
                  "out.compile();"},
         lambda A: np.tril(np.exp(A)) / np.tril(np.exp(A)).sum(axis=1, keepdims=True),
         tuple({"m": s["x"], "l": s["y"]} for s in SR), tuple({"m": s["x"], "l": s["y"]} for s in FR)),
    Case("len", "Func out;\nIn A;\nVar x, y;\nout[x, y] = A[x, y] / len(y) + len(x);",
         EW2, lambda A, x, y: A / y + x, S2, F2),
    Case("len.mean", "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = rsum(A[x, y], y) / len(y);",
         RED, lambda A: A.mean(axis=1), SR, FR),

    # ------------------------------------------------------------ reductions
    row_reduction("rsum", "rsum(A[x, y], y)", lambda A: A.sum(axis=1)),
    row_reduction("rsum.exp", "rsum(exp(A[x, y]), y)", lambda A: np.exp(A).sum(axis=1)),
    row_reduction("rmax", "rmax(A[x, y], y)", lambda A: A.max(axis=1)),
    row_reduction("rmax.negative", "rmax(A[x, y], y)", lambda A: A.max(axis=1), "negative"),
    row_reduction("rmin", "rmin(A[x, y], y)", lambda A: A.min(axis=1)),
    row_reduction("rmin.positive", "rmin(A[x, y], y)", lambda A: A.min(axis=1), "positive"),
    row_reduction("rmin.with_rmax", "rmax(A[x, y], y) - rmin(A[x, y], y)", lambda A: A.max(axis=1) - A.min(axis=1)),
    Case("rsum.first_axis", "Func out;\nIn A;\nVar y;\nRVar x;\nout[y] = rsum(A[x, y], x);",
         {"columns": "out.block(y:1);\nout.tensorize(x:8);\nout.compile();",
          "blocked": "out.block(y:4);\nout.tensorize(y:2, x:16);\nout.compile();",
          "whole": "out.block(y:2);\nout.tensorize(y:0, x:0);\nout.compile();"},
         lambda A: A.sum(axis=0), SR, FR),
    Case("rmax.3d", "Func out;\nIn A;\nVar b, y;\nRVar k;\nout[b, y] = rmax(A[b, k, y], k);",
         {"tiles": "out.block(b:1, y:8);\nout.tensorize(y:4, k:8);\nout.compile();",
          "whole_k": "out.block(b:1, y:2);\nout.tensorize(y:2, k:0);\nout.compile();"},
         lambda A: A.max(axis=1),
         tuple({"b": s["b"], "k": s["x"], "y": s["y"]} for s in S3),
         tuple({"b": s["b"], "k": s["x"], "y": s["y"]} for s in F3), domains={"A": "negative"}),
    Case("rsum.constant_body", "Func out;\nIn u;\nVar x;\nRVar k;\nout[x] = rsum(u[x] * 2, k);",
         MV, lambda u, k: 2 * u * k,
         tuple({"x": s["x"], "k": s["y"]} for s in SR), tuple({"x": s["x"], "k": s["y"]} for s in FR)),
    Case("rsum.to_scalar", "Func out;\nIn v;\nRVar k;\nout[] = rsum(v[k], k);",
         TO_SCALAR, lambda v: v.sum(), SK, FK),
    Case("rmax.to_scalar", "Func out;\nIn v;\nRVar k;\nout[] = rmax(v[k], k);",
         TO_SCALAR, lambda v: v.max(), SK, FK, domains={"v": "negative"}),
    Case("rsum.nested", "Func out;\nIn A, B;\nVar x;\nRVar y, k;\nout[x] = rsum(A[x, y] * rmax(B[x, k], k), y);",
         {"rows": "out.block(x:1);\nout.tensorize(y:8, k:4);\nout.compile();",
          "blocked": "out.block(x:4);\nout.tensorize(x:4, y:16, k:0);\nout.compile();"},
         lambda A, B: A.sum(axis=1) * B.max(axis=1),
         ({"x": 1, "y": 1, "k": 1}, {"x": 5, "y": 13, "k": 7}, {"x": 17, "y": 40, "k": 20}),
         ({"x": 1, "y": 1, "k": 1}, {"x": 129, "y": 1000, "k": 33}, {"x": 1031, "y": 4099, "k": 65})),
    matmul("rdot.matmul", "rdot(A[x, k], B[k, y], k)", lambda A, B: A @ B),
    # 1x1 tiles everywhere: many tiny dots, so small sizes only.
    Case("rdot.scalar_tiles", MATMUL.format("rdot(A[x, k], B[k, y], k)"),
         {"scalar": "out.block(x:2, y:2);\nout.compile();"},
         lambda A, B: A @ B, SMM[:2], SMM[:2]),
    matmul("rdot.transposed_a", "rdot(A[k, x], B[k, y], k)", lambda A, B: A.T @ B),
    matmul("rdot.transposed_b", "rdot(A[x, k], B[y, k], k)", lambda A, B: A @ B.T),
    matmul("rdot.computed_operands", "rdot(exp(A[x, k]), B[k, y] * 2, k)", lambda A, B: np.exp(A) @ (2 * B)),
    Case("rdot.matvec", "Func out;\nIn A, v;\nVar x;\nRVar k;\nout[x] = rdot(A[x, k], v[k], k);",
         MV, lambda A, v: A @ v,
         tuple({"x": s["x"], "k": s["k"]} for s in SMM), tuple({"x": s["x"], "k": s["k"]} for s in FMM)),
    Case("rdot.same_operand", "Func out;\nIn A;\nVar x;\nRVar k;\nout[x] = rdot(A[x, k], A[x, k], k);",
         MV, lambda A: (A * A).sum(axis=1),
         tuple({"x": s["x"], "k": s["k"]} for s in SMM), tuple({"x": s["x"], "k": s["k"]} for s in FMM)),
    Case("rdot.to_scalar", "Func out;\nIn u, v;\nRVar k;\nout[] = rdot(u[k], v[k], k);",
         TO_SCALAR, lambda u, v: u @ v, SK, FK),
    Case("rdot.batched", "Func out;\nIn A, B;\nVar b, x, y;\nRVar k;\nout[b, x, y] = rdot(A[b, x, k], B[b, k, y], k);",
         {"tiles": "out.block(b:1, x:8, y:8);\nout.tensorize(x:8, y:8, k:8);\nout.compile();",
          "whole_k": "out.block(b:1, x:16, y:16);\nout.tensorize(x:16, y:16, k:0);\nout.compile();"},
         lambda A, B: np.einsum("bxk,bky->bxy", A, B),
         ({"b": 1, "x": 1, "y": 1, "k": 1}, {"b": 2, "x": 13, "y": 7, "k": 19}, {"b": 3, "x": 20, "y": 17, "k": 33}),
         ({"b": 1, "x": 1, "y": 1, "k": 1}, {"b": 4, "x": 127, "y": 129, "k": 65},
          {"b": 8, "x": 512, "y": 300, "k": 257})),

    # ------------------------------------------------------------ schedule primitives
    Case("tensorize.non_pow2", TWO_INPUTS.format("A[x, y] * B[x, y]"),
         {"threes": "out.block(x:3, y:12);\nout.tensorize(x:3, y:6);\nout.compile();",
          "odd": "out.block(x:5, y:7);\nout.tensorize(y:7);\nout.compile();"},
         lambda A, B: A * B, S2, F2),
    Case("tensorize.non_pow2_reduction", ROW_REDUCTION.format("rmax(A[x, y], y)"),
         {"fives": "out.block(x:3);\nout.tensorize(x:3, y:5);\nout.compile();"},
         lambda A: A.max(axis=1), SR, FR, domains={"A": "negative"}),
    Case("map.orders", TWO_INPUTS.format("A[x, y] * 2 + B[x, y]"),
         {"x_groups_of_3": "out.block(x:2, y:4);\nout.map(x:x1/3, y, x1);\nout.compile();",
          "y_groups_of_2": "out.block(x:4, y:2);\nout.map(y:y1/2, x, y1);\nout.compile();",
          "x_slowest": "out.block(x:2, y:4);\nout.map(x, y);\nout.compile();",
          "default": "out.block(x:2, y:4);\nout.compile();"},
         lambda A, B: A * 2 + B,
         ({"x": 1, "y": 1}, {"x": 13, "y": 9}, {"x": 14, "y": 30}),
         ({"x": 1, "y": 1}, {"x": 13, "y": 9}, {"x": 1031, "y": 4099})),
    # Launch hints: persistent programs walking several blocks each, tiles moved through TMA
    # descriptors, rows read once streamed through the cache. Sizes give rows that are 16-byte
    # aligned (TMA) and rows that are not (pointers).
    Case("persistent.matmul", MATMUL.format("rdot(A[x, k], B[k, y], k)"),
         {"three_programs": "out.block(x:16, y:16);\nout.tensorize(x:16, y:16, k:16);\nout.map(x:x1/2, y, x1);\n"
                            "out.persistent(3);\nout.compile();",
          "tma": "out.block(x:16, y:16);\nout.tensorize(x:16, y:16, k:16);\nout.map(x:x1/2, y, x1);\n"
                 "out.persistent(3);\nout.tma();\nout.compile();",
          "tma_per_multiprocessor": "out.block(x:16, y:32);\nout.tensorize(x:16, y:32, k:32);\nout.persistent();\n"
                                    "out.tma();\nout.compile();"},
         lambda A, B: A @ B,
         ({"x": 1, "y": 1, "k": 1}, {"x": 13, "y": 7, "k": 19}, {"x": 40, "y": 24, "k": 72}),
         ({"x": 1, "y": 1, "k": 1}, {"x": 127, "y": 255, "k": 129}, {"x": 1031, "y": 1024, "k": 1000})),
    Case("persistent.rows", "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = rsum(exp(A[x, y]), y);",
         {"tma": "out.block(x:2);\nout.tensorize(x:2, y:16);\nout.persistent(2);\nout.tma();\nout.compile();",
          "per_multiprocessor": "out.block(x:1);\nout.tensorize(y:0);\nout.persistent();\nout.compile();",
          "streamed": "out.block(x:1);\nout.tensorize(y:16);\nout.stream();\nout.compile();"},
         lambda A: np.exp(A).sum(axis=1),
         ({"x": 1, "y": 1}, {"x": 5, "y": 13}, {"x": 17, "y": 64}), FR),
    Case("tma.elementwise", TWO_INPUTS.format("A[x, y] * B[x, y] + A[x, y]"),
         {"tiles": "out.block(x:4, y:32);\nout.tensorize(x:4, y:32);\nout.tma();\nout.compile();",
          "persistent_tiles": "out.block(x:8, y:64);\nout.tensorize(x:4, y:16);\nout.persistent(4);\nout.tma();\n"
                              "out.compile();"},
         lambda A, B: A * B + A, ({"x": 1, "y": 1}, {"x": 7, "y": 13}, {"x": 33, "y": 80}), F2),
    Case("fuse_at.blocked_dim", "Func out, m;\nIn A;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y], y);\n"
         "out[x, y] = exp(A[x, y] - m[x]);",
         {"block": "out.block(x:4);\nout.tensorize(x:0, y:8);\nm.fuse_at(out, x);\nout.compile_to_kernel();",
          "tile_loop": "out.block(x:4);\nout.tensorize(x:2, y:8);\nm.tensorize(y:16);\nm.fuse_at(out, x);\n"
                       "out.compile_to_kernel();"},
         lambda A: np.exp(A - A.max(axis=1, keepdims=True)), SR, FR, op="fuse_at", domains={"A": "negative"}),
    Case("fuse_at.tile_loop",
         "Func out, t;\nIn A, B;\nVar x, y;\nt[x, y] = exp(A[x, y]);\nout[x, y] = t[x, y] * B[x, y];",
         {"y_loop": "out.block(x:1, y:32);\nout.tensorize(y:8);\nt.fuse_at(out, y);\nout.compile_to_kernel();",
          "x_and_y_loops": "out.block(x:4, y:16);\nout.tensorize(x:2, y:4);\nt.fuse_at(out, y);\n"
                           "out.compile_to_kernel();"},
         lambda A, B: np.exp(A) * B, S2, F2),
    Case("fuse_at.reduction_loop", "Func out, t;\nIn A, v;\nVar x;\nRVar k;\nt[x, k] = exp(A[x, k]);\n"
         "out[x] = rsum(t[x, k] + v[k], k);",
         {"tiles": "out.block(x:2);\nout.tensorize(x:2, k:8);\nt.fuse_at(out, k);\nout.compile_to_kernel();",
          "scalar": "out.block(x:1);\nt.fuse_at(out, k);\nout.compile_to_kernel();"},
         lambda A, v: (np.exp(A) + v[None, :]).sum(axis=1),
         tuple({"x": s["x"], "k": s["y"]} for s in SR), tuple({"x": s["x"], "k": s["y"]} for s in FR)),
    Case("compute_with.rows", "Func out, s1, s2;\nIn A;\nVar x;\nRVar y;\ns1[x] = rsum(A[x, y], y);\n"
         "s2[x] = rmax(A[x, y] * A[x, y], y) + rsum(A[x, y] * A[x, y], y) / len(y);\n"
         "out[x, y] = A[x, y] * s1[x] - s2[x];",
         {"tiles": "out.block(x:2);\nout.tensorize(x:0, y:16);\ns1.fuse_at(out, x);\ns2.fuse_at(out, x);\n"
                   "s2.compute_with(s1, y);\nout.compile_to_kernel();",
          "whole_rows": "out.block(x:1);\nout.tensorize(y:0);\ns1.fuse_at(out, x);\ns2.fuse_at(out, x);\n"
                        "s2.compute_with(s1, y);\nout.compile_to_kernel();",
          "before_sibling": "out.block(x:3);\nout.tensorize(x:0, y:8);\ns2.fuse_at(out, x);\ns1.fuse_at(out, x);\n"
                            "s1.compute_with(s2, y);\nout.compile_to_kernel();"},
         lambda A: A * A.sum(axis=1, keepdims=True) - ((A * A).max(axis=1, keepdims=True)
                                                      + (A * A).mean(axis=1, keepdims=True)),
         SR, FR, op="compute_with"),
    # The variance around a mean computed in the same loop (Chan's pairwise update), on data whose
    # mean is far from 0, where E[x^2] - E[x]^2 would cancel.
    Case("compute_with.variance", "Func out, mean, variance;\nIn A;\nSIn eps;\nVar x;\nRVar y;\n"
         "mean[x] = rsum(A[x, y], y) / len(y);\n"
         "variance[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);\n"
         "out[x, y] = (A[x, y] - mean[x]) * rsqrt(variance[x] + eps);",
         {"tiles": "out.block(x:2);\nout.tensorize(x:0, y:16);\nmean.fuse_at(out, x);\nvariance.fuse_at(out, x);\n"
                   "variance.compute_with(mean, y);\nout.compile_to_kernel();",
          "wide_tiles": "out.block(x:1);\nout.tensorize(y:1024);\nmean.fuse_at(out, x);\nvariance.fuse_at(out, x);\n"
                        "variance.compute_with(mean, y);\nout.compile_to_kernel();",
          "whole_rows": "out.block(x:1);\nout.tensorize(y:0);\nmean.fuse_at(out, x);\nvariance.fuse_at(out, x);\n"
                        "variance.compute_with(mean, y);\nout.compile_to_kernel();",
          # the statistics walk in wider tiles than the output walk (the tuned layernorm at 128x65536)
          "wide_statistics": "out.block(x:1);\nout.tensorize(y:8);\nmean.fuse_at(out, x);\nvariance.fuse_at(out, x);\n"
                             "mean.tensorize(y:32);\nvariance.tensorize(y:32);\nvariance.compute_with(mean, y);\n"
                             "out.compile_to_kernel();"},
         lambda A, eps: (A - A.mean(axis=1, keepdims=True)) / np.sqrt(A.var(axis=1, keepdims=True) + eps),
         SR, FR, domains={"A": "offset", "eps": 1e-5}, op="compute_with"),
    # The online softmax: a sum of exponentials shifted by a max of the same loop, rescaled as the
    # max grows, on logits whose exponentials overflow float32 unless shifted by the max.
    Case("compute_with.softmax", "Func out, m, s;\nIn A;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y], y);\n"
         "s[x] = rsum(exp(A[x, y] - m[x]), y);\nout[x, y] = exp(A[x, y] - m[x]) / s[x];",
         {"tiles": "out.block(x:2);\nout.tensorize(x:0, y:16);\nm.fuse_at(out, x);\ns.fuse_at(out, x);\n"
                   "s.compute_with(m, y);\nout.compile_to_kernel();",
          "wide_tiles": "out.block(x:1);\nout.tensorize(y:1024);\nm.fuse_at(out, x);\ns.fuse_at(out, x);\n"
                        "s.compute_with(m, y);\nout.compile_to_kernel();",
          "whole_rows": "out.block(x:1);\nout.tensorize(y:0);\nm.fuse_at(out, x);\ns.fuse_at(out, x);\n"
                        "s.compute_with(m, y);\nout.compile_to_kernel();"},
         lambda A: _softmax_rows(A - A.max(axis=1, keepdims=True)),
         SR, FR, domains={"A": "logits"}, op="compute_with"),
    Case("inline.into_reduction", "Func out, t;\nIn A, B;\nVar x;\nRVar y;\nt[x, y] = A[x, y] * B[x, y];\n"
         "out[x] = rsum(t[x, y], y);",
         {"tiles": "t.inline();\nout.block(x:2);\nout.tensorize(x:2, y:8);\nout.compile();"},
         lambda A, B: (A * B).sum(axis=1), SR, FR),
    Case("inline.used_twice",
         "Func out, u;\nIn A, B;\nVar x, y;\nu[x, y] = exp(A[x, y]);\nout[x, y] = u[x, y] + u[x, y] * B[x, y];",
         {"tiles": "u.inline();\nout.block(x:4, y:16);\nout.tensorize(x:2, y:8);\nout.compile();"},
         lambda A, B: np.exp(A) * (1 + B), S2, F2),
    Case("root.two_kernels", "Func out, s;\nIn A;\nVar x;\nRVar y;\ns[x] = rsum(exp(A[x, y]), y);\n"
         "out[x, y] = exp(A[x, y]) / s[x];",
         {"root": "s.block(x:4);\ns.tensorize(x:4, y:8);\nout.block(x:2, y:16);\nout.tensorize(y:8);\nout.compile();",
          "fused": "s.fuse_at(out, x);\nout.block(x:2);\nout.tensorize(x:0, y:16);\nout.compile_to_kernel();"},
         lambda A: _softmax_rows(A), SR, FR, op="root"),
    # No schedule at all: one program instance, scalar loops (so small sizes only, even with --full).
    Case("defaults", "Func out, s;\nIn A;\nVar x;\nRVar y;\ns[x] = rmax(A[x, y], y);\nout[x, y] = A[x, y] - s[x];",
         {"none": "out.compile();"}, lambda A: A - A.max(axis=1, keepdims=True), SR, SR),
    Case("root.three_kernels",
         "Func out, e, s;\nIn A;\nVar x;\nRVar y;\ne[x, y] = exp(A[x, y]);\ns[x] = rsum(e[x, y], y);\n"
         "out[x, y] = e[x, y] / s[x];",
         {"root": "e.block(x:2, y:8);\ne.tensorize(y:8);\ns.block(x:4);\ns.tensorize(x:4, y:8);\n"
                  "out.block(x:1, y:16);\nout.tensorize(y:8);\nout.compile();",
          "mixed": "e.block(x:2, y:8);\ns.fuse_at(out, x);\nout.block(x:2);\nout.tensorize(x:0, y:8);\nout.compile();"},
         lambda A: _softmax_rows(A), SR, FR, op="root"),
    Case("outputs.independent",
         "Func lo, hi;\nIn A;\nVar x;\nRVar y;\nlo[x] = rmin(A[x, y], y);\nhi[x] = rmax(A[x, y], y);",
         {"two_kernels": "lo.block(x:2);\nlo.tensorize(x:2, y:8);\nhi.block(x:4);\nhi.tensorize(y:16);\n"
                         "lo.compile();\nhi.compile();"},
         lambda A: {"lo": A.min(axis=1), "hi": A.max(axis=1)}, SR, FR),
    Case("outputs.consumed", "Func mean, out;\nIn A;\nVar x;\nRVar y;\nmean[x] = rsum(A[x, y], y) / len(y);\n"
         "out[x, y] = A[x, y] - mean[x];",
         {"two_kernels": "mean.block(x:4);\nmean.tensorize(x:4, y:8);\nout.block(x:2, y:8);\nmean.compile();\n"
                         "out.compile();"},
         lambda A: {"mean": A.mean(axis=1), "out": A - A.mean(axis=1, keepdims=True)}, SR, FR),

    # ------------------------------------------------------------ the talk's kernels (examples/*.dt)
    talk("add", "Func add_out;\nIn A, B;\nSIn alpha;\nVar x, y;\nadd_out[x, y] = alpha * (A[x, y] + B[x, y]);",
         {"talk": "add_out.block(x:1, y:256);\nadd_out.tensorize(y:64);\nadd_out.compile();",
          "grouped": "add_out.block(x:2, y:8);\nadd_out.tensorize(x:2, y:4);\nadd_out.map(x:x1/3, y, x1);\n"
                     "add_out.compile();"},
         lambda A, B, alpha: alpha * (A + B),
         ({"x": 1, "y": 1}, {"x": 7, "y": 13}, {"x": 13, "y": 300}),
         ({"x": 1, "y": 1}, {"x": 4096, "y": 4096}, {"x": 1031, "y": 4099})),
    talk("relu", "Func relu_out;\nIn A;\nVar x, y;\nrelu_out[x, y] = maximum(0, A[x, y]);",
         {"talk": "relu_out.block(x:1, y:128);\nrelu_out.tensorize(y:128);\nrelu_out.map(y, x);\nrelu_out.compile();",
          "tiles": "relu_out.block(x:4, y:8);\nrelu_out.tensorize(x:1, y:8);\nrelu_out.compile();"},
         lambda A: np.where(A > 0, A, 0.0),
         ({"x": 1, "y": 1}, {"x": 7, "y": 13}, {"x": 9, "y": 300}),
         ({"x": 1, "y": 1}, {"x": 4096, "y": 4096}, {"x": 1031, "y": 4099})),
    talk("swish", "Func swish_out, tmp;\nIn A;\nSIn beta;\nVar x, y;\ntmp[x, y] = sigmoid(beta * A[x, y]);\n"
         "swish_out[x, y] = A[x, y] * tmp[x, y];",
         {"talk": "swish_out.block(x:1, y:1024);\nswish_out.tensorize(y:1024);\ntmp.fuse_at(swish_out, y);\n"
                  "swish_out.compile_to_kernel();",
          "tile_loop": "swish_out.block(x:1, y:16);\nswish_out.tensorize(y:8);\ntmp.fuse_at(swish_out, y);\n"
                       "swish_out.compile_to_kernel();",
          "inline": "tmp.inline();\nswish_out.block(x:2, y:16);\nswish_out.tensorize(x:2, y:16);\n"
                    "swish_out.compile();"},
         lambda A, beta: A * _sigmoid(beta * A),
         ({"x": 1, "y": 1}, {"x": 7, "y": 13}, {"x": 3, "y": 1100}),
         ({"x": 1, "y": 1}, {"x": 4096, "y": 4096}, {"x": 1031, "y": 4099}), domains={"A": "wide"}),
    talk("softmax", "Func _softmax, _sum;\nIn A;\nVar x;\nRVar y;\n_sum[x] = rsum(exp(A[x, y]), y);\n"
         "_softmax[x, y] = exp(A[x, y]) / reshape(_sum[x], x, 1);",
         {"talk": "_softmax.block(x:4);\n_softmax.tensorize(y:512);\n_softmax.tensorize(x:0);\n"
                  "_softmax.num_warps(32);\n_sum.fuse_at(_softmax, x);\n_softmax.compile_to_kernel();",
          "small": "_softmax.block(x:2);\n_softmax.tensorize(x:0, y:16);\n_sum.fuse_at(_softmax, x);\n"
                   "_softmax.compile_to_kernel();",
          "root": "_sum.block(x:4);\n_sum.tensorize(x:4, y:8);\n_softmax.block(x:2, y:16);\n_softmax.tensorize(y:8);\n"
                  "_softmax.compile();"},
         lambda A: _softmax_rows(A),
         ({"x": 1, "y": 1}, {"x": 5, "y": 13}, {"x": 9, "y": 700}),
         ({"x": 1, "y": 1}, {"x": 1024, "y": 4096}, {"x": 1031, "y": 4099})),
    talk("softmax_safe", "Func _softmax, _max, _sum;\nIn A;\nVar x;\nRVar y;\n_max[x] = rmax(A[x, y], y);\n"
         "_sum[x] = rsum(exp(A[x, y] - _max[x]), y);\n_softmax[x, y] = exp(A[x, y] - _max[x]) / reshape(_sum[x], x, 1);",
         {"talk": "_softmax.block(x:4);\n_softmax.tensorize(y:512);\n_softmax.tensorize(x:0);\n_max.fuse_at(_softmax, x);\n"
                  "_sum.fuse_at(_softmax, x);\n_sum.compute_with(_max, y);\n_softmax.num_warps(8);\n"
                  "_softmax.compile_to_kernel();",
          "small": "_softmax.block(x:2);\n_softmax.tensorize(x:0, y:16);\n_max.fuse_at(_softmax, x);\n"
                   "_sum.fuse_at(_softmax, x);\n_sum.compute_with(_max, y);\n_softmax.compile_to_kernel();"},
         lambda A: _softmax_rows(A - A.max(axis=1, keepdims=True)),
         ({"x": 1, "y": 1}, {"x": 5, "y": 13}, {"x": 9, "y": 700}),
         ({"x": 1, "y": 1}, {"x": 1024, "y": 4096}, {"x": 1031, "y": 4099}), domains={"A": "logits"}),
    talk("layernorm", "Func layernorm, mean, variance;\nIn A, W, Bias;\nSIn eps;\nVar x;\nRVar y;\n"
         "mean[x] = rsum(A[x, y], y) / len(y);\n"
         "variance[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);\n"
         "layernorm[x, y] = (A[x, y] - mean[x]) * rsqrt(variance[x] + eps) * W[y] + Bias[y];",
         {"talk": "layernorm.block(x:1);\nlayernorm.tensorize(y:1024);\nmean.fuse_at(layernorm, x);\n"
                  "variance.fuse_at(layernorm, x);\nlayernorm.num_warps(8);\nlayernorm.compile_to_kernel();",
          "small": "layernorm.block(x:2);\nlayernorm.tensorize(x:0, y:16);\nmean.fuse_at(layernorm, x);\n"
                   "variance.fuse_at(layernorm, x);\nlayernorm.compile_to_kernel();",
          "root": "mean.block(x:4);\nmean.tensorize(x:4, y:8);\nvariance.block(x:4);\nvariance.tensorize(x:4, y:8);\n"
                  "layernorm.block(x:2, y:16);\nlayernorm.tensorize(x:2, y:8);\nlayernorm.compile();"},
         lambda A, W, Bias, eps: (A - A.mean(axis=1, keepdims=True))
         / np.sqrt(A.var(axis=1, keepdims=True) + eps) * W + Bias,
         ({"x": 1, "y": 1}, {"x": 3, "y": 13}, {"x": 5, "y": 1100}),
         ({"x": 1, "y": 1}, {"x": 2048, "y": 4096}, {"x": 1031, "y": 4099}), domains={"eps": 1e-5}),
    talk("dyt", "Func dyt;\nIn A, gamma, beta;\nSIn alpha;\nVar x, y;\n"
         "dyt[x, y] = gamma[y] * tanh(alpha * A[x, y]) + beta[y];",
         {"talk": "dyt.block(x:1, y:2048);\ndyt.tensorize(y:2048);\ndyt.num_warps(8);\ndyt.compile();",
          "tiles": "dyt.block(x:2, y:16);\ndyt.tensorize(x:2, y:8);\ndyt.compile();"},
         lambda A, gamma, beta, alpha: gamma * np.tanh(alpha * A) + beta,
         ({"x": 1, "y": 1}, {"x": 3, "y": 13}, {"x": 2, "y": 2100}),
         ({"x": 1, "y": 1}, {"x": 128, "y": 65536}, {"x": 1031, "y": 4099}), domains={"A": "wide"}),
    talk("matmul", "Func mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);",
         {"talk": "mm.tensorize(x:128, k:32, y:128);\nmm.block(x:128, y:128);\nmm.map(x:x1/8, y, x1);\n"
                  "mm.num_warps(4);\nmm.num_stages(3);\nmm.compile();",
          "small_grouped": "mm.block(x:16, y:16);\nmm.tensorize(x:16, y:16, k:8);\nmm.map(x:x1/3, y, x1);\n"
                           "mm.compile();"},
         lambda A, B: A @ B,
         ({"x": 1, "y": 1, "k": 1}, {"x": 13, "y": 7, "k": 19}, {"x": 100, "y": 33, "k": 40},
          {"x": 130, "y": 20, "k": 40}),
         ({"x": 1, "y": 1, "k": 1}, {"x": 512, "y": 512, "k": 512}, {"x": 1031, "y": 1000, "k": 999})),
    talk("mmsigmoid", "Func out, mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n"
         "out[x, y] = sigmoid(mm[x, y]);",
         {"talk": "out.block(x:128, y:128);\nout.tensorize(x:128, y:128, k:32);\nout.map(x:x1/8, y, x1);\n"
                  "out.num_warps(4);\nout.num_stages(3);\nmm.fuse_at(out, y);\nout.compile_to_kernel();",
          "tile_loop": "out.block(x:16, y:32);\nout.tensorize(x:16, y:16, k:8);\nmm.fuse_at(out, y);\n"
                       "out.compile_to_kernel();"},
         lambda A, B: _sigmoid(A @ B),
         ({"x": 1, "y": 1, "k": 1}, {"x": 13, "y": 7, "k": 19}, {"x": 130, "y": 40, "k": 40}),
         ({"x": 1, "y": 1, "k": 1}, {"x": 512, "y": 512, "k": 512}, {"x": 1031, "y": 1000, "k": 999})),
    talk("2mm_inner", TWO_MM,
         {"talk": "_2mm.block(m:64, n:64);\n_2mm.tensorize(m:64, n:64, k:32, l:32);\n_2mm.num_warps(4);\n"
                  "_2mm.num_stages(3);\nmm.fuse_at(_2mm, l);\n_2mm.compile_to_kernel();",
          "small": "_2mm.block(m:16, n:16);\n_2mm.tensorize(m:16, n:16, k:8, l:8);\nmm.fuse_at(_2mm, l);\n"
                   "_2mm.compile_to_kernel();",
          "root": "mm.block(m:16, l:16);\nmm.tensorize(m:16, l:16, k:8);\n_2mm.block(m:16, n:16);\n"
                  "_2mm.tensorize(m:16, n:16, l:8);\n_2mm.compile();"},
         lambda A, B, C: (A @ B) @ C,
         ({"m": 1, "n": 1, "k": 1, "l": 1}, {"m": 13, "n": 7, "k": 19, "l": 5}, {"m": 70, "n": 65, "k": 40, "l": 33}),
         ({"m": 1, "n": 1, "k": 1, "l": 1}, {"m": 1024, "n": 1024, "k": 64, "l": 64},
          {"m": 1031, "n": 999, "k": 65, "l": 63})),
    talk("2mm_outer", TWO_MM,
         {"talk": "_2mm.block(m:16);\n_2mm.tensorize(m:16);\n_2mm.tensorize(n:64);\n_2mm.tensorize(k:32);\n"
                  "_2mm.tensorize(l:0);\n_2mm.num_stages(4);\n_2mm.num_warps(4);\nmm.fuse_at(_2mm, m);\n"
                  "_2mm.compile_to_kernel();",
          "small": "_2mm.block(m:8);\n_2mm.tensorize(m:8, n:16, k:8, l:0);\nmm.fuse_at(_2mm, m);\n"
                   "_2mm.compile_to_kernel();"},
         lambda A, B, C: (A @ B) @ C,
         ({"m": 1, "n": 1, "k": 1, "l": 1}, {"m": 13, "n": 7, "k": 19, "l": 5}, {"m": 40, "n": 70, "k": 33, "l": 40}),
         ({"m": 1, "n": 1, "k": 1, "l": 1}, {"m": 512, "n": 1024, "k": 32, "l": 32},
          {"m": 1031, "n": 999, "k": 33, "l": 31})),
    talk("attention", ATTENTION,
         {"talk": "attention.block(m:32);\nattention.tensorize(m:32, n:0, k:0, l:64);\nmm.inline();\ne.inline();\n"
                  "dvsr.fuse_at(attention, m);\nsm.fuse_at(attention, l);\nattention.num_warps(4);\n"
                  "attention.num_stages(2);\nattention.compile_to_kernel();",
          "small": "attention.block(m:8);\nattention.tensorize(m:8, n:16, k:8, l:16);\nmm.inline();\ne.inline();\n"
                   "dvsr.fuse_at(attention, m);\nsm.fuse_at(attention, l);\nattention.compile_to_kernel();"},
         *ATTENTION_CHECK),
    talk("attention_safe", ATTENTION_SAFE,
         {"talk": "attention.block(m:32);\nattention.tensorize(m:32, n:0, k:0, l:64);\nmm.inline();\ne.inline();\n"
                  "mx.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\ndvsr.compute_with(mx, l);\n"
                  "sm.fuse_at(attention, l);\nattention.num_warps(4);\nattention.num_stages(2);\n"
                  "attention.compile_to_kernel();",
          "small": "attention.block(m:8);\nattention.tensorize(m:8, n:16, k:8, l:16);\nmm.inline();\ne.inline();\n"
                   "mx.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\ndvsr.compute_with(mx, l);\n"
                   "sm.fuse_at(attention, l);\nattention.compile_to_kernel();"},
         *ATTENTION_CHECK),
    talk("attention_safe_onepass", ATTENTION_SAFE_ONEPASS,
         {"talk": "attention.block(m:64);\nattention.tensorize(m:64, n:0, k:0, l:64);\nmm.inline();\ne.inline();\n"
                  "num.fuse_at(attention, m);\nmx.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\n"
                  "mx.compute_with(num, l);\ndvsr.compute_with(num, l);\nattention.num_warps(4);\n"
                  "attention.num_stages(2);\nattention.compile_to_kernel();",
          "small": "attention.block(m:8);\nattention.tensorize(m:8, n:0, k:8, l:16);\nmm.inline();\ne.inline();\n"
                   "num.fuse_at(attention, m);\nmx.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\n"
                   "mx.compute_with(num, l);\ndvsr.compute_with(num, l);\nattention.compile_to_kernel();"},
         *ATTENTION_CHECK),
    talk("attention_onepass", ATTENTION_ONEPASS,
         {"talk": "attention.block(m:64);\nattention.tensorize(m:64, n:0, k:0, l:64);\nmm.inline();\n"
                  "e.fuse_at(num, l);\nnum.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\n"
                  "dvsr.compute_with(num, l);\nattention.num_warps(4);\nattention.num_stages(2);\n"
                  "attention.compile_to_kernel();",
          "small": "attention.block(m:8);\nattention.tensorize(m:8, n:0, k:8, l:16);\nmm.inline();\n"
                   "e.fuse_at(num, l);\nnum.fuse_at(attention, m);\ndvsr.fuse_at(attention, m);\n"
                   "dvsr.compute_with(num, l);\nattention.compile_to_kernel();"},
         *ATTENTION_CHECK),
    talk("attention_talk", ATTENTION,
         {"talk": "attention.tensorize(m:16);\nattention.block(m:16);\nattention.tensorize(n:64);\n"
                  "attention.tensorize(k:16);\nattention.tensorize(l:0);\nattention.num_stages(8);\n"
                  "attention.num_warps(8);\nmm.fuse_at(e, l);\ndvsr.fuse_at(sm, m);\nsm.fuse_at(attention, m);\n"
                  "e.fuse_at(attention, m);\nattention.compile();",
          "small": "attention.block(m:8);\nattention.tensorize(m:8, n:16, k:8, l:0);\nmm.fuse_at(e, l);\n"
                   "dvsr.fuse_at(sm, m);\nsm.fuse_at(attention, m);\ne.fuse_at(attention, m);\nattention.compile();"},
         *ATTENTION_CHECK),
    # ------------------------------------------------------------ index expressions, gathers, integers, casts
    *INDEXING_CASES,
    *UPDATE_CASES,
    *BATCHED_CASES,
    *OUTPUT_CASES,
    *ARG_REDUCTION_CASES,
    *SCAN_CASES,
    *GRADIENT_CASES,
)
