"""The catalogue's cases for several outputs from one kernel (issue 29): an output fused into
another output's kernel and stored from there — once per tile where each program computes it once
(a fused residual add next to its RMSNorm, a layernorm's saved statistics), and by the first of
the programs or loop iterations that compute it again (a matmul recomputed in every program along
a dimension it lacks; a row statistic recomputed in each tile of a loop over another dimension); an
inlined output stored where a kernel first reads it at plain dimensions.

Each reference is NumPy written for the case."""
from __future__ import annotations

import numpy as np

from dt.conformance.case import Case

RESIDUAL_RMSNORM = """Func y, h, ss;
In X, R, W;
SIn eps;
Var t;
RVar d;
h[t, d] = X[t, d] + R[t, d];
ss[t] = rsum(h[t, d] * h[t, d], d);
y[t, d] = h[t, d] * rsqrt(ss[t] / len(d) + eps) * W[d];"""
_RESIDUAL_FUSED = "h.fuse_at(y, t);\nss.fuse_at(y, t);\nh.compile();\ny.compile_to_kernel();"
RESIDUAL_SCHEDULES = {
    "row": "y.block(t:1);\ny.tensorize(d:0);\n" + _RESIDUAL_FUSED,
    "rows": "y.block(t:4);\ny.tensorize(t:4, d:0);\n" + _RESIDUAL_FUSED,
    "row_loop": "y.block(t:8);\ny.tensorize(t:2, d:0);\n" + _RESIDUAL_FUSED,
    # h inlined, each row walked in tiles: stored from ss's loop, where it is first read
    "inlined": "y.block(t:1);\ny.tensorize(d:16);\nh.inline();\nss.fuse_at(y, t);\nh.compile();\n"
               "y.compile_to_kernel();",
}

LAYERNORM_STATS = """Func y, mean, variance, rstd;
In A, W, Bias;
SIn eps;
Var x;
RVar k;
mean[x] = rsum(A[x, k], k) / len(k);
variance[x] = rsum((A[x, k] - mean[x]) * (A[x, k] - mean[x]), k) / len(k);
rstd[x] = rsqrt(variance[x] + eps);
y[x, k] = (A[x, k] - mean[x]) * rstd[x] * W[k] + Bias[k];"""
_STATS_FUSED = ("mean.fuse_at(y, x);\nvariance.fuse_at(y, x);\nrstd.fuse_at(y, x);\n"
                "mean.compile();\nrstd.compile();\ny.compile_to_kernel();")
LAYERNORM_SCHEDULES = {
    "row_tiles": "y.block(x:1);\ny.tensorize(k:16);\n" + _STATS_FUSED,
    "rows_whole": "y.block(x:4);\ny.tensorize(x:4, k:0);\n" + _STATS_FUSED,
    "one_pass": "y.block(x:2);\ny.tensorize(x:2, k:8);\nvariance.compute_with(mean, k);\n" + _STATS_FUSED,
}

# mm is computed again by every program along n: the first program of each row block stores it
TWO_MM = """Func out, mm;
In A, B, C;
Var m, n;
RVar k, l;
mm[m, l] = rdot(A[m, k], B[k, l], k);
out[m, n] = rdot(mm[m, l], C[l, n], l);"""
TWO_MM_SCHEDULES = {
    "inner": "out.block(m:16, n:16);\nout.tensorize(m:16, n:16, k:16, l:16);\nmm.fuse_at(out, l);\n"
             "mm.compile();\nout.compile_to_kernel();",
    "outer": "out.block(m:16, n:16);\nout.tensorize(m:16, n:16, k:16, l:0);\nmm.fuse_at(out, m);\n"
             "mm.compile();\nout.compile_to_kernel();",
}

# total[x] is fused at the loop over y, so each y tile of each program computes it again
REPEATED = """Func out, total;
In A, B;
Var x, y;
RVar k;
total[x] = rsum(A[x, k], k);
out[x, y] = B[x, y] * total[x];"""
REPEATED_SCHEDULES = {
    "y_tiles": "out.block(x:4, y:8);\nout.tensorize(x:4, y:4, k:4);\ntotal.fuse_at(out, y);\ntotal.compile();\n"
               "out.compile_to_kernel();",
    "y_lanes": "out.block(x:2);\nout.tensorize(x:1, y:1, k:8);\ntotal.fuse_at(out, y);\ntotal.compile();\n"
               "out.compile_to_kernel();",
}


def _residual_rmsnorm(X, R, W, eps):
    h = X.astype(np.float64) + R
    return {"h": h, "y": h / np.sqrt((h * h).mean(axis=1, keepdims=True) + eps) * W}


def _layernorm_stats(A, W, Bias, eps):
    a = A.astype(np.float64)
    mean = a.mean(axis=1)
    rstd = 1.0 / np.sqrt(a.var(axis=1) + eps)
    return {"mean": mean, "rstd": rstd, "y": (a - mean[:, None]) * rstd[:, None] * W + Bias}


def _two_mm(A, B, C):
    mm = A.astype(np.float64) @ B
    return {"mm": mm, "out": mm @ C}


def _repeated(A, B):
    total = A.astype(np.float64).sum(axis=1)
    return {"total": total, "out": B * total[:, None]}


CASES: tuple[Case, ...] = (
    Case("outputs.residual_rmsnorm", RESIDUAL_RMSNORM, RESIDUAL_SCHEDULES, _residual_rmsnorm,
         ({"t": 1, "d": 1}, {"t": 13, "d": 37}, {"t": 9, "d": 100}), domains={"eps": 1e-5}),
    Case("outputs.layernorm_stats", LAYERNORM_STATS, LAYERNORM_SCHEDULES, _layernorm_stats,
         ({"x": 1, "k": 1}, {"x": 7, "k": 45}, {"x": 10, "k": 70}), domains={"eps": 1e-5, "A": "offset"}),
    Case("outputs.recomputed_matmul", TWO_MM, TWO_MM_SCHEDULES, _two_mm,
         ({"m": 1, "n": 1, "k": 1, "l": 1}, {"m": 37, "n": 50, "k": 19, "l": 21})),
    Case("outputs.repeated_in_loop", REPEATED, REPEATED_SCHEDULES, _repeated,
         ({"x": 1, "y": 1, "k": 1}, {"x": 9, "y": 21, "k": 11})),
)
