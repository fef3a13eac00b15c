"""The catalogue's cases for index expressions, gathers, integer and 8-bit data and casts (issue
27): shifts off both ends, a reduction over shifted reads, floor division and remainder in
subscripts, gathers with repeated and out-of-range indices in every integer dtype, integer
outputs, a product of two i8 operands (exact, accumulated in i32), fp8 inputs (a product fed to the
matrix units in fp8, element-wise reads) and casts.

Each reference is NumPy written for the case: reads outside a tensor are 0 (`_padded`)."""
from __future__ import annotations

import numpy as np

from dt.conformance.case import Case
from dt.dtypes import INTEGERS

SHIFT2 = {  # out[x, y]
    "rows": "out.block(x:1, y:16);\nout.tensorize(y:8);\nout.compile();",
    "tiles": "out.block(x:4, y:32);\nout.tensorize(x:2, y:8);\nout.compile();",
    "whole_rows": "out.block(x:1);\nout.tensorize(y:0);\nout.compile();",
    "scalar": "out.compile();",
}
SHIFT_RED = {  # out[x] = r(..., y)
    "rows": "out.block(x:1);\nout.tensorize(y:8);\nout.compile();",
    "blocked": "out.block(x:4);\nout.tensorize(x:2, y:16);\nout.compile();",
    "whole_rows": "out.block(x:2);\nout.tensorize(x:0, y:0);\nout.compile();",
}
GATHER = {  # out[t, d]
    "rows": "out.block(t:1);\nout.tensorize(d:0);\nout.compile();",
    "tiles": "out.block(t:8, d:16);\nout.tensorize(t:4, d:16);\nout.compile();",
    "scalar": "out.block(t:3);\nout.compile();",
}
S2 = ({"x": 1, "y": 1}, {"x": 7, "y": 13}, {"x": 33, "y": 70})
F2 = ({"x": 1, "y": 1}, {"x": 129, "y": 1000}, {"x": 1031, "y": 4099})
SG = ({"t": 1, "d": 1, "E_axis0": 1}, {"t": 37, "d": 19, "E_axis0": 10}, {"t": 100, "d": 70, "E_axis0": 10})
FG = ({"t": 1, "d": 1, "E_axis0": 1}, {"t": 4096, "d": 4096, "E_axis0": 10}, {"t": 1031, "d": 4099, "E_axis0": 10})


def _padded(a: np.ndarray, before: tuple[int, ...], after: tuple[int, ...]) -> np.ndarray:
    return np.pad(a, list(zip(before, after)))


def _shift(A):
    """A[x, y + 1] - A[x - 2, y]: zero where either read falls outside A."""
    p = _padded(A, (2, 0), (0, 1))
    return p[2:, 1:] - p[:-2, :-1]


def _gather_rows(E, I):
    ids = I.astype(np.int64)
    inside = (ids >= 0) & (ids < E.shape[0])
    return np.where(inside[:, None], E[np.where(inside, ids, 0)], 0.0)


def _embedding(index_dtype: str) -> Case:
    return Case(f"gather.embedding_{index_dtype}", "Func out;\nIn E, I;\nVar t, d;\nout[t, d] = E[I[t], d];", GATHER,
                _gather_rows, SG, FG, domains={"I": "ids_u8" if index_dtype == "u8" else "ids"},
                input_dtypes={"I": index_dtype}, op="gather")


CASES: tuple[Case, ...] = (
    Case("index.shift", "Func out;\nIn A;\nVar x, y;\nout[x, y] = A[x, y + 1] - A[x - 2, y];", SHIFT2, _shift, S2, F2),
    Case("index.rmax_shifted", "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = rmax(A[x, y - 1], y);", SHIFT_RED,
         lambda A: _padded(A, (0, 1), (0, 0))[:, :-1].max(axis=1),
         ({"x": 1, "y": 1}, {"x": 5, "y": 13}, {"x": 17, "y": 70}), F2, domains={"A": "negative"}),
    Case("index.conv1d", "Func out;\nIn W, X;\nVar c, t;\nRVar j;\nout[c, t] = rsum(W[c, j] * X[c, t - j], j);",
         {"rows": "out.block(c:1, t:16);\nout.tensorize(t:16, j:0);\nout.compile();",
          "blocked": "out.block(c:2, t:32);\nout.tensorize(c:2, t:8);\nout.compile();"},
         lambda W, X: np.stack([np.convolve(X[c], W[c])[:X.shape[1]] for c in range(X.shape[0])]),
         ({"c": 1, "t": 1, "j": 1}, {"c": 3, "t": 50, "j": 4}, {"c": 5, "t": 130, "j": 4}),
         ({"c": 1, "t": 1, "j": 1}, {"c": 256, "t": 4099, "j": 4}, {"c": 1031, "t": 2048, "j": 4})),
    Case("index.floordiv_mod", "Func out;\nIn K;\nVar h, l;\nout[h, l] = K[h // 3, l] + K[(h + 1) % len(h), l] * 2;",
         {"rows": "out.block(h:1, l:16);\nout.tensorize(l:8);\nout.compile();",
          "tiles": "out.block(h:4, l:32);\nout.tensorize(h:4, l:8);\nout.compile();"},
         lambda K, h: _padded(K, (0, 0), (max(h - K.shape[0], 0), 0))[np.arange(h) // 3] +
         2 * _padded(K, (0, 0), (max(h - K.shape[0], 0), 0))[(np.arange(h) + 1) % h],
         ({"h": 1, "l": 1, "K_axis0": 1}, {"h": 8, "l": 13, "K_axis0": 3}, {"h": 11, "l": 70, "K_axis0": 2}),
         ({"h": 1, "l": 1, "K_axis0": 1}, {"h": 32, "l": 4099, "K_axis0": 8}, {"h": 64, "l": 1000, "K_axis0": 30})),
    *(_embedding(d) for d in INTEGERS if d != "bool"),
    Case("gather.paged", "Func out;\nIn Kc, T;\nVar b, l, k;\nout[b, l, k] = Kc[T[b, l // 4], l % 4, k];",
         {"rows": "out.block(b:1, l:8);\nout.tensorize(l:0, k:0);\nout.compile();",
          "tiles": "out.block(b:2, l:16);\nout.tensorize(l:4, k:8);\nout.compile();"},
         lambda Kc, T, l: np.stack([_gather_rows(Kc.reshape(Kc.shape[0], -1), T[b]).reshape(-1, Kc.shape[2])[:l]
                                    for b in range(T.shape[0])]),
         ({"b": 1, "l": 1, "k": 1, "Kc_axis0": 1, "Kc_axis1": 4, "T_axis1": 1},
          {"b": 2, "l": 10, "k": 5, "Kc_axis0": 10, "Kc_axis1": 4, "T_axis1": 3}),
         ({"b": 1, "l": 1, "k": 1, "Kc_axis0": 1, "Kc_axis1": 4, "T_axis1": 1},
          {"b": 8, "l": 1000, "k": 128, "Kc_axis0": 10, "Kc_axis1": 4, "T_axis1": 250}),
         domains={"T": "ids"}, op="gather"),
    Case("integer.output",
         "Func out;\nIn A;\nVar x, y;\nout[x, y] = (x - 3) // 2 * len(y) + y % 5 - cast(A[x, y] * 2.5, i32);",
         SHIFT2, lambda A, x, y: (np.arange(x)[:, None] - 3) // 2 * y + np.arange(y)[None, :] % 5 - np.trunc(A * 2.5),
         S2, F2, domains={"A": "integers"}, op="integer"),
    Case("integer.data",
         "Func out;\nIn A, N, M;\nVar x, y;\nout[x, y] = where(M[x, y], A[x, y] * N[x, y], -A[x, y]) + N[x, y] // 3;",
         SHIFT2, lambda A, N, M: np.where(M != 0, A * N, -A) + N // 3, S2, F2,
         domains={"N": "integers", "M": "ints"}, input_dtypes={"N": "i16", "M": "bool"}, op="integer"),
    Case("integer.unsigned", "Func out;\nIn A, N;\nVar x, y;\nout[x, y] = A[x, y] + N[x, y] % 7;", SHIFT2,
         lambda A, N: A + N % 7, S2, F2, domains={"N": "ids_u8"}, input_dtypes={"N": "u8"}, op="integer"),
    Case("float8.matmul",
         "Func out;\nIn X, W;\nVar m, n;\nRVar k;\nout[m, n] = cast(rdot(X[m, k], W[n, k], k) * 0.5, f32);",
         {"tiles": "out.block(m:16, n:16);\nout.tensorize(m:16, n:16, k:32);\nout.compile();",
          "whole_k": "out.block(m:16, n:16);\nout.tensorize(m:16, n:16, k:0);\nout.compile();"},
         lambda X, W: X @ W.T * 0.5, ({"m": 1, "n": 1, "k": 1}, {"m": 37, "n": 21, "k": 70}),
         ({"m": 1, "n": 1, "k": 1}, {"m": 1031, "n": 1024, "k": 1000}), input_dtypes={"X": "f8e4m3", "W": "f8e4m3"},
         op="float8"),
    Case("integer.matmul_i8",
         "Func out;\nIn X, W;\nVar m, n;\nRVar k;\nout[m, n] = rdot(X[m, k], W[n, k], k) * 2 + 1;",
         {"tiles": "out.block(m:16, n:16);\nout.tensorize(m:16, n:16, k:32);\nout.compile();",
          "short_k": "out.block(m:16, n:16);\nout.tensorize(m:16, n:16, k:16);\nout.compile();",
          "rows": "out.block(m:1, n:16);\nout.tensorize(n:16, k:64);\nout.compile();"},
         lambda X, W: X @ W.T * 2 + 1, ({"m": 1, "n": 1, "k": 1}, {"m": 37, "n": 21, "k": 1030}),
         ({"m": 1, "n": 1, "k": 1}, {"m": 257, "n": 130, "k": 4099}), domains={"X": "int8", "W": "int8"},
         input_dtypes={"X": "i8", "W": "i8"}, op="integer"),
    Case("float8.elementwise", "Func out;\nIn A, B;\nVar x, y;\nout[x, y] = A[x, y] * 2.0 + B[x, y];", SHIFT2,
         lambda A, B: A * 2 + B, S2, F2, input_dtypes={"A": "f8e5m2"}, op="float8"),
    Case("cast.float", "Func out;\nIn A;\nVar x, y;\nout[x, y] = cast(A[x, y] * 2.5, i32) + cast(A[x, y], bf16) * 0.5;",
         SHIFT2, lambda A: np.trunc(A * 2.5) + A * 0.5, S2, F2, domains={"A": "integers"}, op="cast"),
)
