"""Scans (issue 29): cumsum, cumprod, cummax and cummin along a dimension of the left-hand side,
tile by tile with a carry, on every backend; what the checker refuses, with the schedule change
that fixes it; the Python API and the debugger."""
import numpy as np
import pytest

import dt
from dt.conformance import scans as cases
from dt.errors import DTDimensionError, DTScheduleError
from dt.ir import scheduled as S
from test_llm_examples import BACKENDS, run_program

RNG = np.random.default_rng(29)
ROW = "Func out;\nIn A;\nVar x, y;\nout[x, y] = {fn}(A[x, y], y);\n{schedule}"


@pytest.mark.parametrize("schedule", list(cases.ROWS))
@pytest.mark.parametrize("fn,numpy_fn", [("cumsum", np.cumsum), ("cummax", np.maximum.accumulate)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_running_result_at_every_index(backend, fn, numpy_fn, schedule):
    a = RNG.standard_normal((7, 301)).astype(np.float32)
    a[2, 100], a[3, 7] = np.nan, -np.inf
    out = np.asarray(run_program(dt.loads(ROW.format(fn=fn, schedule=cases.ROWS[schedule])), backend, A=a))
    np.testing.assert_allclose(out, numpy_fn(a.astype(np.float64), axis=1), rtol=1e-5, atol=1e-4, equal_nan=True)


def test_a_carry_runs_across_the_tiles_of_the_loop():
    p = dt.loads(ROW.format(fn="cumsum", schedule=cases.ROWS["tiles"]))
    body = [s for k in p.pipeline("f32").kernels for s in S.walk_statements(k.body)]
    carries = [s for s in body if isinstance(s, S.Assign) and s.name == "y_carry"]
    loop = next(s for s in body if isinstance(s, S.For))
    assert len(carries) == 2 and carries[0] not in loop.body and carries[1] in loop.body
    assert "y_carry" in p.source("triton") and "tl.cumsum(" in p.source("triton")


def test_the_python_api_and_the_debugger_show_the_carry():
    x, y = dt.Var("x"), dt.Var("y")
    A = dt.In("A")
    out = dt.Func("out")
    out[x, y] = dt.cumprod(A[x, y], y)
    out.block(x=1)
    out.tensorize(y=16)
    out.compile()
    p = dt.program(out)
    a = RNG.uniform(0.5, 1.5, (2, 40)).astype(np.float32)
    carries = []

    def look(frame):
        if frame.pid == 0 and "y_carry" in frame.tiles:
            carries.append(float(np.asarray(frame.tiles["y_carry"])))
        if frame.pid == 0:
            frame.step()
    with dt.debug.break_at(func="out", pid=0, action=look):
        got = p(A=a)
    np.testing.assert_allclose(got, np.cumprod(a.astype(np.float64), axis=1), rtol=1e-5)
    for end in (16, 32):  # the carry after the first and the second tile of row 0
        want = np.prod(a[0, :end], dtype=np.float64)
        assert any(c == pytest.approx(want, rel=1e-5) for c in carries), (end, carries)


@pytest.mark.parametrize("source,error,message", [
    (ROW.format(fn="cumsum", schedule="out.block(y:16);\nout.compile();"), DTScheduleError,
     "block splits it over programs"),
    (ROW.format(fn="cumsum", schedule="out.block(x:2);\nout.tensorize(x:1, y:8);\nout.compile();").replace(
        "out[x, y] = cumsum(A[x, y], y)", "out[y, x] = cumsum(A[y, x], y)"), DTScheduleError,
     "'x' is walked in tiles inside the loop over 'y'"),
    ("Func out, p;\nIn A;\nVar x, y;\np[x, y] = cumsum(A[x, y], y);\nout[x, y] = p[x, y] * 2.0;\n"
     "p.inline();\nout.compile();", DTScheduleError, "cannot inline 'p'"),
    ("Func out, p;\nIn A;\nVar x, y;\np[x, y] = cumsum(A[x, y], y);\nout[x, y] = p[x, y] * 2.0;\n"
     "out.tensorize(y:8);\np.fuse_at(out, y);\nout.compile();", DTScheduleError, "each tile would start the scan"),
    ("Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = cumsum(A[x, y], y);\nout.compile();", DTDimensionError,
     "not a dimension of 'out'"),
    ("Func out;\nIn A;\nVar x, y;\nRVar k;\nout[x, y] = rsum(cumsum(A[x, k], y), k);\nout.compile();",
     DTDimensionError, "inside a reduction"),
])
def test_what_a_scan_needs(source, error, message):
    with pytest.raises(error, match=message):
        dt.loads(source).pipeline("f32")


def test_a_fused_scan_along_a_blocked_dimension_is_refused():
    """A fused Func spans only the program's block of a blocked dimension: its scan would restart."""
    source = ("Func c, p;\nIn A;\nVar x, y;\np[x, y] = cumsum(A[x, y], y);\nc[x, y] = p[x, y];\n"
              "c.block(y:4);\nc.tensorize(y:4);\np.fuse_at(c, x);\nc.compile();")
    with pytest.raises(DTScheduleError, match="'p' runs cumsum along 'y'.*but c.block splits it"):
        dt.loads(source)
