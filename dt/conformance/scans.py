"""The catalogue's cases for scans (issue 29): cumsum, cumprod, cummax and cummin along rows and
along columns, walked in tiles (a carry from tile to tile), whole and lane by lane, in blocks of 1;
NaN and +-inf propagating as NumPy's accumulate propagates them; a scan of an expression, and an
expression of a scan.

Each reference is NumPy written for the case."""
from __future__ import annotations

import numpy as np

from dt.conformance.case import Case

ROWS = {
    "tiles": "out.block(x:2);\nout.tensorize(x:2, y:8);\nout.compile();",
    "row_tiles": "out.block(x:1);\nout.tensorize(y:16);\nout.compile();",
    "whole_row": "out.block(x:4);\nout.tensorize(x:4, y:0);\nout.compile();",
    "lanes": "out.compile();",
}
COLUMNS = {  # out[y, x], the scan along y, outermost: x walked in one tile per program
    "whole_columns": "out.tensorize(y:8, x:0);\nout.compile();",
    "column_blocks": "out.block(x:4);\nout.tensorize(y:4, x:4);\nout.compile();",
}
SR = ({"x": 1, "y": 1}, {"x": 5, "y": 37}, {"x": 9, "y": 70})
FR = ({"x": 1, "y": 1}, {"x": 64, "y": 8192}, {"x": 1031, "y": 4099})


def _rows(fn):
    return lambda A: fn(A, axis=1)


def _scan_case(op: str, fn, domain: str, dtypes=("f32", "f16", "bf16", "f64")) -> Case:
    return Case(f"{op}.rows", f"Func out;\nIn A;\nVar x, y;\nout[x, y] = {op}(A[x, y], y);", ROWS, _rows(fn),
                SR, FR, domains={"A": domain}, dtypes=dtypes)


CASES: tuple[Case, ...] = (
    _scan_case("cumsum", np.cumsum, "normal"),
    # factors near 1: 70 of them stay inside bf16's (float32's) range; f16's would overflow
    _scan_case("cumprod", np.cumprod, "scalar", ("f32", "bf16", "f64")),
    _scan_case("cummax", np.maximum.accumulate, "specials"),
    _scan_case("cummin", np.minimum.accumulate, "specials"),
    Case("cumsum.columns", "Func out;\nIn A;\nVar y, x;\nout[y, x] = cumsum(A[y, x], y);", COLUMNS,
         lambda A: np.cumsum(A, axis=0), SR),
    Case("cumsum.normalised", "Func out, p;\nIn A;\nVar x, y;\np[x, y] = exp(A[x, y]);\n"
         "out[x, y] = p[x, y] / cumsum(p[x, y], y);",
         {name: "p.inline();\n" + s for name, s in ROWS.items()},
         lambda A: np.exp(A) / np.cumsum(np.exp(A), axis=1), SR),
)
