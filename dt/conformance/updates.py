"""The catalogue's cases for updates (`g[I[t], d] += e`, `c[b, P[b], k] = x[b, k]`): adds at
repeated and out-of-range indices, inside one tile and across programs; a store at computed
positions; a Func read after its updates; two updates in order.

Each reference is NumPy written for the case (np.add.at: repeated indices add up)."""
from __future__ import annotations

import numpy as np

from dt.conformance.case import Case

EMBEDDING_GRAD = "Func g;\nIn E, I, G;\nVar v, d, t;\ng[v, d] = E[v, d];\ng[I[t], d] += G[t, d];"
UPDATE = {  # g[v, d], then its update over [t, d]
    "rows": "g.block(v:1);\ng.tensorize(d:0);\ng.update().block(t:1);\ng.update().tensorize(d:0);\ng.compile();",
    # repeated ids inside one tile of 4 tokens: each lane adds
    "tiles": "g.block(v:4, d:16);\ng.tensorize(v:2, d:8);\ng.update().block(t:8, d:16);\n"
             "g.update().tensorize(t:4, d:8);\ng.compile();",
    "scalar": "g.compile();",
}
SE = ({"t": 1, "d": 1, "v": 10}, {"t": 37, "d": 19, "v": 10}, {"t": 100, "d": 70, "v": 10})
FE = ({"t": 1, "d": 1, "v": 10}, {"t": 4096, "d": 4096, "v": 10}, {"t": 1031, "d": 4099, "v": 10})


def _added(E, I, G):
    out = np.array(E, dtype=np.float64)
    ids = I.astype(np.int64)
    inside = (ids >= 0) & (ids < E.shape[0])
    np.add.at(out, ids[inside], G[inside])
    return out


def _written(C, P, X):
    out = np.array(C, dtype=np.float64)
    for b, p in enumerate(P.astype(np.int64)):
        if 0 <= p < C.shape[1]:
            out[b, p] = X[b]
    return out


def _two_updates(E, I, G, J, H):
    return _added(_added(E, I, G), J, 2 * H)


def _read_after(E, I, G):
    return (_added(E, I, G) ** 2).sum(axis=1)


CASES: tuple[Case, ...] = (
    Case("update.add", EMBEDDING_GRAD, UPDATE, _added, SE, FE, domains={"I": "ids"}),
    Case("update.add_i32", EMBEDDING_GRAD, {"tiles": UPDATE["tiles"]}, _added, SE, domains={"I": "ids"},
         input_dtypes={"I": "i32"}),
    Case("update.store", "Func c;\nIn C, P, X;\nVar b, s, k;\nc[b, s, k] = C[b, s, k];\nc[b, P[b], k] = X[b, k];",
         {"rows": "c.block(b:1, s:4);\nc.tensorize(s:4, k:0);\nc.update().block(b:1);\nc.update().tensorize(k:0);\n"
                  "c.compile();",
          "tiles": "c.block(b:2, s:8, k:16);\nc.update().block(b:4, k:8);\nc.update().tensorize(b:2, k:8);\n"
                   "c.compile();"},
         _written, ({"b": 1, "s": 10, "k": 1}, {"b": 7, "s": 10, "k": 13}), domains={"P": "ids"}),
    Case("update.two", "Func g;\nIn E, I, G, J, H;\nVar v, d, t, u;\ng[v, d] = E[v, d];\ng[I[t], d] += G[t, d];\n"
         "g[J[u], d] += 2 * H[u, d];",
         {"rows": "g.block(v:1);\ng.update().block(t:1);\ng.update().tensorize(d:0);\ng.update(1).block(u:2, d:8);\n"
                  "g.compile();"},
         _two_updates, ({"t": 5, "u": 9, "d": 7, "v": 10}, {"t": 37, "u": 3, "d": 19, "v": 10}),
         domains={"I": "ids", "J": "ids"}),
    Case("update.read_after", "Func g, o;\nIn E, I, G;\nVar v, d, t;\nRVar r;\ng[v, d] = E[v, d];\n"
         "g[I[t], d] += G[t, d];\no[v] = rsum(g[v, r] * g[v, r], r);",
         {"rows": "g.block(v:1);\ng.update().block(t:1);\ng.update().tensorize(d:0);\no.block(v:1);\n"
                  "o.tensorize(r:8);\no.compile();"},
         lambda E, I, G: _read_after(E, I, G), ({"t": 5, "d": 7, "v": 10, "r": 7}, {"t": 37, "d": 19, "v": 10, "r": 19}),
         domains={"I": "ids"}),
)
