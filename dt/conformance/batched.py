"""The catalogue's cases for batched products, skipped tiles and split reductions (issue 28):
products under a block of 1 along a batch (a scalar axis: a 2-D Dot), under a loop over batches
and under batch tiles of 2 (a multiply and sum); attention over [b, m, l]; reductions masked by
an index condition (causal, strict, a sliding window) whose fully masked tiles are skipped, with
rows masked throughout and sizes no tile divides; reductions split into chunks over programs
(sums, maxima, minima, a split-k product, attention's online softmax with chunks masked
throughout), chunks that are one tile, several tiles, or not a multiple of the tile, and chunks
summed in another Func's walk over its rows.

Each reference is NumPy written for the case."""
from __future__ import annotations

import numpy as np

from dt.conformance.case import Case

BMM = {  # out[b, x, y]
    "batch_block_1": "out.block(b:1, x:16, y:16);\nout.tensorize(x:16, y:16, k:16);\nout.compile();",
    "batch_loop": "out.block(b:2, x:16, y:16);\nout.tensorize(b:1, x:16, y:16, k:16);\nout.compile();",
    "batch_tile_2": "out.block(b:2, x:16, y:16);\nout.tensorize(b:2, x:16, y:16, k:16);\nout.compile();",
    "scalar": "out.compile();",
}
# out[b, m, n]: scores and weights inlined, the statistics and the product fused at the row block;
# flash accumulates them in one pass over l (compute_with), two_pass walks l for each
_ATTENTION_FUSED = """out.block(b:1, m:16);
out.tensorize(m:16, n:0, k:0, l:16);
s.inline();
e.inline();
num.fuse_at(out, m);
mx.fuse_at(out, m);
dvsr.fuse_at(out, m);
"""
ATTENTION = {
    "flash": _ATTENTION_FUSED + "mx.compute_with(num, l);\ndvsr.compute_with(num, l);\nout.compile_to_kernel();",
    "two_pass": _ATTENTION_FUSED + "out.compile_to_kernel();",
}
ROWS = {  # out[m] = r(..., l)
    "blocked": "out.block(m:16);\nout.tensorize(m:16, l:16);\nout.compile();",
    "rows": "out.block(m:1);\nout.tensorize(l:8);\nout.compile();",
    "whole": "out.block(m:4);\nout.tensorize(m:4, l:0);\nout.compile();",
}
SPLIT_ROWS = {  # out[m] = r(..., l), split over l
    "chunks_of_two_tiles": "out.block(m:4);\nout.tensorize(m:4, l:8);\nout.split(l:16);\nout.compile();",
    "chunk_of_one_tile": "out.block(m:1);\nout.tensorize(l:8);\nout.split(l:8);\nout.compile();",
    "chunks_across_tiles": "out.block(m:2);\nout.tensorize(m:2, l:8);\nout.split(l:12);\nout.compile();",
    "scalar_chunks": "out.split(l:5);\nout.compile();",
}
SPLIT_K = {
    "tiles": "out.block(x:16, y:16);\nout.tensorize(x:16, y:16, k:16);\nout.split(k:32);\nout.compile();",
    "scalar_chunks": "out.split(k:7);\nout.compile();",
}
SPLIT_ATTENTION = {  # the online softmax's three Funcs split together (compute_with)
    "flash_chunks": _ATTENTION_FUSED + "mx.compute_with(num, l);\ndvsr.compute_with(num, l);\nnum.split(l:32);\n"
                    "out.compile();",
    "split_named_on_the_max": _ATTENTION_FUSED + "mx.compute_with(num, l);\ndvsr.compute_with(num, l);\n"
                              "mx.split(l:16);\nout.compile();",
}
WALK_SUMS = {  # out[x, y], and total[y] and top[y] summed in out's walk over its rows
    "a_row_a_step": "out.block(x:4);\nout.tensorize(x:1, y:0);\ntotal.split(x:4);\ntop.split(x:4);\n"
                    "total.compute_with(out, x);\ntop.compute_with(total, x);\ntotal.block(y:8);\n"
                    "total.tensorize(y:8);\ntop.fuse_at(total, y);\nout.compile();\ntotal.compile();\ntop.compile();",
    "two_rows_a_step": "out.block(x:6);\nout.tensorize(x:2, y:0);\ntotal.split(x:6);\ntotal.compute_with(out, x);\n"
                       "top.split(x:6);\ntop.compute_with(out, x);\nout.compile();\ntotal.compile();\ntop.compile();",
}
SB = ({"b": 1, "x": 1, "y": 1, "k": 1}, {"b": 3, "x": 37, "y": 21, "k": 19})
SA = ({"b": 1, "m": 1, "l": 1, "k": 1, "n": 1}, {"b": 2, "m": 37, "l": 37, "k": 8, "n": 5},
      {"b": 2, "m": 20, "l": 45, "k": 16, "n": 16})
SR = ({"m": 1, "l": 1}, {"m": 37, "l": 37}, {"m": 45, "l": 30})

ATTENTION_ALGORITHM = """Func out, s, mx, e, dvsr, num;
In Q, K, V;
Var b, m, n;
RVar k, l;
s[b, m, l] = where({cond}, rdot(Q[b, m, k], K[b, l, k], k), -inf);
mx[b, m] = rmax(s[b, m, l], l);
e[b, m, l] = exp(s[b, m, l] - mx[b, m]);
dvsr[b, m] = rsum(e[b, m, l], l);
num[b, m, n] = rdot(e[b, m, l], V[b, l, n], l);
out[b, m, n] = num[b, m, n] / dvsr[b, m];"""


def _bmm(A, B):
    return A.astype(np.float64) @ B


def _masked_attention(keep):
    def reference(Q, K, V):
        s = Q.astype(np.float64) @ K.swapaxes(1, 2)
        m, l = np.arange(s.shape[1])[:, None], np.arange(s.shape[2])[None, :]
        s = np.where(keep(m, l), s, -np.inf)
        with np.errstate(invalid="ignore"):  # a row masked throughout: exp(-inf - -inf) is NaN
            p = np.exp(s - s.max(axis=2, keepdims=True))
            return (p @ V) / p.sum(axis=2)[..., None]
    return reference


def _masked_rows(keep, fill, reduce):
    def reference(A):
        m, l = np.arange(A.shape[0])[:, None], np.arange(A.shape[1])[None, :]
        return reduce(np.where(keep(m, l), A.astype(np.float64), fill), axis=1)
    return reference


def _grouped(Q, K):
    """Q[b, h] @ K[b, h // 2]^T: a product whose operand is read at a computed head."""
    heads = np.arange(Q.shape[1]) // 2
    return Q.astype(np.float64) @ K[:, heads].swapaxes(2, 3)


def _causal(m, l):
    return l <= m


CASES: tuple[Case, ...] = (
    Case("batched.bmm", "Func out;\nIn A, B;\nVar b, x, y;\nRVar k;\nout[b, x, y] = rdot(A[b, x, k], B[b, k, y], k);",
         BMM, _bmm, SB),
    Case("batched.grouped", "Func out;\nIn Q, K;\nVar b, h, m, l;\nRVar k;\n"
         "out[b, h, m, l] = rdot(Q[b, h, m, k], K[b, h // 2, l, k], k);",
         {"head_block_1": "out.block(b:1, h:1, m:16);\nout.tensorize(m:16, l:16, k:16);\nout.compile();",
          "scalar": "out.compile();"}, _grouped,
         ({"b": 1, "h": 2, "m": 1, "l": 1, "k": 1, "K_axis1": 1},
          {"b": 2, "h": 4, "m": 19, "l": 21, "k": 8, "K_axis1": 2})),
    Case("batched.attention", ATTENTION_ALGORITHM.format(cond="l >= 0"), ATTENTION,
         _masked_attention(lambda m, l: l >= 0), SA),
    Case("causal.attention", ATTENTION_ALGORITHM.format(cond="l <= m"), ATTENTION, _masked_attention(_causal), SA),
    # row 0 is masked throughout: its max is -inf and its weights NaN, skipped or not
    Case("causal.attention_strict", ATTENTION_ALGORITHM.format(cond="l < m"), ATTENTION,
         _masked_attention(lambda m, l: l < m), SA),
    Case("causal.rmax_strict", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rmax(where(l < m, A[m, l], -inf), l);",
         ROWS, _masked_rows(lambda m, l: l < m, -np.inf, np.max), SR),
    Case("causal.prefix_sum", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rsum(where(l <= m, A[m, l], 0.0), l);",
         ROWS, _masked_rows(_causal, 0.0, np.sum), SR),
    Case("split.rsum", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rsum(A[m, l] * A[m, l], l) / len(l);",
         SPLIT_ROWS, lambda A: (A.astype(np.float64) ** 2).mean(axis=1), SR + ({"m": 3, "l": 100},)),
    Case("split.rmax_strict", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rmax(where(l < m, A[m, l], -inf), l);",
         SPLIT_ROWS, _masked_rows(lambda m, l: l < m, -np.inf, np.max), SR),
    Case("split.rmin", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rmin(A[m, l], l);",
         SPLIT_ROWS, lambda A: A.astype(np.float64).min(axis=1), SR + ({"m": 3, "l": 100},)),
    Case("split.rargmax", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rargmax(A[m, l], l);",
         SPLIT_ROWS, lambda A: np.argmax(A, axis=1), SR + ({"m": 3, "l": 100},), domains={"A": "specials"}),
    Case("split.rargmax_strict", "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = rargmax(where(l < m, A[m, l], -inf), l);",
         SPLIT_ROWS, lambda A: np.argmax(np.where(np.arange(A.shape[1]) < np.arange(A.shape[0])[:, None], A, -np.inf),
                                         axis=1), SR, domains={"A": "specials"}),
    Case("split.matmul", "Func out;\nIn A, B;\nVar x, y;\nRVar k;\nout[x, y] = rdot(A[x, k], B[k, y], k);",
         SPLIT_K, lambda A, B: A.astype(np.float64) @ B, ({"x": 1, "y": 1, "k": 1}, {"x": 37, "y": 21, "k": 75})),
    # the chunks summed in another Func's walk over its rows, the last chunk partial
    Case("split.walk_sums", "Func out, total, top;\nIn A;\nRVar x, y;\nout[x, y] = A[x, y] * 2.0;\n"
         "total[y] = rsum(A[x, y] * A[x, y], x);\ntop[y] = rmax(A[x, y], x);", WALK_SUMS,
         lambda A: {"out": 2.0 * A.astype(np.float64), "total": (A.astype(np.float64) ** 2).sum(axis=0),
                    "top": A.astype(np.float64).max(axis=0)},
         ({"x": 1, "y": 1}, {"x": 37, "y": 21}, {"x": 12, "y": 5})),
    # causal and strict: row 0 is masked throughout (NaN), and the chunks past a row's diagonal too
    Case("split.attention", ATTENTION_ALGORITHM.format(cond="l < m"), SPLIT_ATTENTION,
         _masked_attention(lambda m, l: l < m), SA + ({"b": 1, "m": 70, "l": 70, "k": 8, "n": 4},)),
    Case("causal.window", "Func out;\nIn A;\nVar m;\nRVar l;\n"
         "out[m] = rsum(where(l <= m, where(l > m - 5, A[m, l], 0.0), 0.0), l);",
         ROWS, _masked_rows(lambda m, l: (l <= m) & (l > m - 5), 0.0, np.sum), SR),
)
