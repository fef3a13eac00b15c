"""The catalogue's cases for arg-reductions (issue 29): rargmax and rargmin along rows, along a
middle dimension and of an expression, tiled, whole and lane by lane; ties (the first index wins),
NaN (the first NaN wins, as in torch.argmax), +-inf, rows that are -inf throughout; an arg-reduction
sharing its loop with the max it finds (compute_with), both outputs of one kernel; rargtopk's
indices and the values gathered through them, k from 1 to more than a row holds.

Each reference is NumPy written for the case (NumPy's argmax and argmin rank NaN first too)."""
from __future__ import annotations

import numpy as np

from dt.conformance.case import Case

ROWS = {
    "tiles": "out.block(x:2);\nout.tensorize(x:2, y:8);\nout.compile();",
    "whole_row": "out.block(x:1);\nout.tensorize(y:0);\nout.compile();",
    "lanes": "out.compile();",
}
MIDDLE = {
    "tiles": "out.block(b:1, y:8);\nout.tensorize(y:8, x:4);\nout.compile();",
    "lanes": "out.compile();",
}
SR = ({"x": 1, "y": 1}, {"x": 5, "y": 37}, {"x": 9, "y": 70})
FR = ({"x": 1, "y": 1}, {"x": 64, "y": 128256}, {"x": 1031, "y": 4099})
SM = ({"b": 1, "x": 1, "y": 1}, {"b": 2, "x": 13, "y": 21})

WITH_MAX = """Func am, mx, r;
In A;
Var x;
RVar y;
mx[x] = rmax(A[x, y], y);
am[x] = rargmax(A[x, y], y);
r[x] = mx[x] + am[x];"""
WITH_MAX_SCHEDULES = {
    "shared_loop": "r.block(x:2);\nr.tensorize(x:2, y:8);\nmx.fuse_at(r, x);\nam.fuse_at(r, x);\n"
                   "am.compute_with(mx, y);\nmx.compile();\nam.compile();\nr.compile_to_kernel();",
    "two_loops": "r.block(x:4);\nr.tensorize(x:4, y:16);\nmx.fuse_at(r, x);\nam.fuse_at(r, x);\nmx.compile();\n"
                 "am.compile();\nr.compile_to_kernel();",
    # the max an output in the compute dtype (save: float32 for f16/bf16 inputs)
    "saved_max": "r.block(x:2);\nr.tensorize(x:2, y:8);\nmx.fuse_at(r, x);\nam.fuse_at(r, x);\n"
                 "am.compute_with(mx, y);\nmx.save();\nam.compile();\nr.compile_to_kernel();",
}


TOPK = """Func tv, ti;
In A;
Var x, i;
RVar y;
ti[x, i] = rargtopk(A[x, y], y, i);
tv[x, i] = A[x, ti[x, i]];"""
TOPK_SCHEDULES = {  # the indices fused into the values' kernel: one pass over each row
    "tiles": "tv.block(x:2);\ntv.tensorize(x:2, i:0, y:8);\nti.fuse_at(tv, x);\nti.compile();\ntv.compile_to_kernel();",
    "whole_row": "tv.block(x:1);\ntv.tensorize(i:0, y:0);\nti.fuse_at(tv, x);\nti.compile();\ntv.compile_to_kernel();",
    "two_kernels": "ti.tensorize(i:0, y:4);\nti.compile();\ntv.compile();",
}
# k = len(i): 1, a few, and more than a row holds (its last ranks are -1, their values 0)
ST = ({"x": 1, "y": 1, "i": 1}, {"x": 5, "y": 37, "i": 3}, {"x": 9, "y": 70, "i": 16}, {"x": 3, "y": 6, "i": 9})


def _top(A, i):
    """The reference's ranking, written apart: NaN first, then larger values, then smaller indices."""
    rows, n = A.shape
    ti = np.full((rows, i), -1)
    for r in range(rows):
        order = sorted(range(n), key=lambda j: (not np.isnan(A[r, j]), -np.nan_to_num(A[r, j], nan=0.0,
                                                                                    posinf=np.inf, neginf=-np.inf), j))
        ti[r, :min(i, n)] = order[:i]
    tv = np.where(ti >= 0, np.take_along_axis(A, np.maximum(ti, 0), 1), 0.0)
    return {"ti": ti, "tv": tv}


def _rows(fn):
    return lambda A: fn(A, axis=1)


def _with_max(A):
    mx, am = A.max(axis=1), np.argmax(A, axis=1)
    return {"am": am, "mx": mx, "r": mx + am}


def _of_expression(A, B):
    return np.argmin(A * B - 0.5 * A * A, axis=1)


CASES: tuple[Case, ...] = (
    Case("rargmax.rows", "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = rargmax(A[x, y], y);", ROWS, _rows(np.argmax),
         SR, FR, domains={"A": "specials"}),
    Case("rargmax.ties", "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = rargmax(A[x, y], y);", ROWS, _rows(np.argmax),
         SR, domains={"A": "ints"}),
    Case("rargmin.rows", "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = rargmin(A[x, y], y);", ROWS, _rows(np.argmin),
         SR, FR, domains={"A": "specials"}),
    Case("rargmax.middle", "Func out;\nIn A;\nVar b, y;\nRVar x;\nout[b, y] = rargmax(A[b, x, y], x);", MIDDLE,
         lambda A: np.argmax(A, axis=1), SM, domains={"A": "ints"}),
    Case("rargmin.of_expression", "Func out;\nIn A, B;\nVar x;\nRVar y;\n"
         "out[x] = rargmin(A[x, y] * B[y] - 0.5 * A[x, y] * A[x, y], y);", ROWS, _of_expression, SR),
    Case("rargmax.with_max", WITH_MAX, WITH_MAX_SCHEDULES, _with_max, SR, domains={"A": "ints"}),
    Case("rargtopk.rows", TOPK, TOPK_SCHEDULES, _top, ST, domains={"A": "specials"}),
    Case("rargtopk.ties", TOPK, TOPK_SCHEDULES, _top, ST, domains={"A": "ints"}),
)
