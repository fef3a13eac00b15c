"""Split partials summed in another Func's walk over its rows (`dw.split(x:32); dw.compute_with(dx, x)`):
results against the reference at sizes no chunk divides, on every backend; the kernel structure
(accumulators before the walk, one store of each chunk after it); the errors; dt.grad's use of it."""
from __future__ import annotations

import numpy as np
import pytest

import dt
from dt.errors import DTScheduleError
from dt.ir.grad.schedule import merged
from dt.ir.printer import ir_text
from dt.testing import random_inputs

BACKWARD = open("examples/llm/layernorm_backward.dt").read()
BACKENDS = ["interp", "numba", pytest.param("triton", marks=pytest.mark.needs_triton)]

# out[y, x]'s walk over x runs inside its loop over tiles of y: the column sums are kept per y tile
COLUMNS = """Func out, total, top;
In A;
RVar x, y;
out[y, x] = A[x, y] * 2.0;
total[y] = rsum(A[x, y], x);
top[y] = rmax(A[x, y] * A[x, y], x);
out.block(x:8);
out.tensorize(y:4, x:2);
total.split(x:8);
top.split(x:8);
total.compute_with(out, x);
top.compute_with(total, x);
total.block(y:4);
top.fuse_at(total, y);
out.compile();
total.compile();
top.compile();
"""


def _check(prog, backend, sizes, seed=0, rtol=1e-4):
    args = random_inputs(prog, sizes, "f32", seed=seed)
    got = prog(backend=backend, **args)
    want = prog.reference(**args)
    for name in want:
        g = got[name]
        g = g.cpu().numpy() if hasattr(g, "cpu") else np.asarray(g)
        np.testing.assert_allclose(g, want[name], rtol=rtol, atol=rtol * float(np.abs(want[name]).max()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layernorm_backward_sums_its_weight_gradients_in_dxs_walk(backend):
    prog = dt.loads(BACKWARD, file="layernorm_backward.dt")
    _check(prog, backend, {"x": 70, "k": 50})  # two whole chunks of 32 rows and one of 6
    assert prog.checked.kernel_roots == ("dx", "dw")  # the chunks are dx's, their sums dw's
    assert prog.checked.walk_sums == {("dx", "x"): ("dw_chunks", "db_chunks")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_walk_inside_a_tile_loop_keeps_its_sums_per_tile(backend):
    _check(dt.loads(COLUMNS, file="columns.dt"), backend, {"x": 37, "y": 10}, seed=1)


def test_the_walk_accumulates_before_and_stores_after_it():
    prog = dt.loads(BACKWARD, file="layernorm_backward.dt")
    text = ir_text(prog.pipeline("f32"))
    kernel = text[text.index("kernel dx_kernel"):text.index("kernel dw_kernel")]
    walk = kernel.index("for x_iter")
    assert kernel.index("x_dw_chunks_accumulator: f32[k] = full(") < walk < kernel.index("store dw_chunks[")
    # the walk's step adds each row to both sums, from the loads that dx's value makes
    step = kernel[walk:kernel.index("store dw_chunks[")]
    assert "x_dw_chunks_accumulator: f32[k] = (x_dw_chunks_accumulator +" in step
    assert step.count("load(DY[") == 1 and step.count("load(A[") == 1
    assert kernel.count("store dw_chunks[") == kernel.count("store db_chunks[") == 1
    source = prog.source("triton")
    dx_kernel = source[source.index("def dx_kernel"):source.index("def dw_kernel")]
    assert "dw_chunks_ptr + x_pid * dw_chunks_x_chunk_stride" in dx_kernel  # a program's chunk: its block
    assert "tl.range(0, x_block_end - x_block_start, num_stages=4)" in dx_kernel


def test_the_host_may_be_written_after_the_funcs_summed_in_its_walk():
    lines = BACKWARD.splitlines()
    host = next(i for i, line in enumerate(lines) if line.startswith("dx[x, k]"))
    lines.insert(next(i for i, line in enumerate(lines) if line.startswith("db[k]")), lines.pop(host))
    prog = dt.loads("\n".join(lines) + "\n", file="moved.dt")
    assert prog.checked.kernel_roots == ("dx", "dw")
    _check(prog, "numba", {"x": 40, "k": 9})


@pytest.mark.parametrize("change,message", [
    (("dx.block(x:32);", "dx.block(x:16);"), r"its block along 'x' is 16.*\n.*\n.*\n.*dx.block\(x:32\)"),
    (("dx.tensorize(x:1, k:0);", "dx.tensorize(x:1, k:16);"), r"walks 'k' in tiles inside that walk"),
    (("dw.split(x:32);\ndb.split(x:32);\n", ""), r"which 'dx' walks as a pure dimension.*\n.*\n.*\n.*dw.split\(x:N\)"),
])
def test_walk_sum_errors(change, message):
    with pytest.raises(DTScheduleError, match=message):
        dt.loads(BACKWARD.replace(*change), file="bad.dt").pipeline("f32")  # tiles are known when lowering


def test_a_host_fused_into_another_kernel_is_refused():
    with pytest.raises(DTScheduleError, match="'h' is fused into 'o': only a Func computed at root walks its block"):
        dt.loads("Func o, h, s;\nIn A;\nRVar x, y;\nh[x, y] = A[x, y] * 2.0;\no[x, y] = h[x, y] + 1.0;\n"
                 "s[y] = rsum(A[x, y], x);\no.block(x:4);\nh.fuse_at(o, x);\ns.split(x:4);\n"
                 "s.compute_with(h, x);\no.compile();\ns.compile();\n", file="bad.dt")


def test_a_sum_over_other_dimensions_than_the_hosts_is_refused():
    source = COLUMNS.replace("total[y] = rsum(A[x, y], x);", "total[y] = rsum(A[x, y], x);\n").replace(
        "out[y, x] = A[x, y] * 2.0;", "out[y, x] = A[x, y] * 2.0 + B[x];").replace("In A;", "In A, B;")
    assert dt.loads(source, file="ok.dt")  # B read along x only: still the host's dimensions
    bad = """Func out, s;
In A;
RVar x, y, z;
out[x, y] = A[x, y];
s[z] = rsum(A[x, z], x);
out.block(x:4);
s.split(x:4);
s.compute_with(out, x);
out.compile();
s.compile();
"""
    with pytest.raises(DTScheduleError, match=r"must have the other dimensions of 'out' \(y\)"):
        dt.loads(bad, file="bad.dt")


def test_dt_grad_sums_the_weight_gradients_in_the_rows_walk():
    backward = dt.grad(dt.load("examples/layernorm.dt"))
    text = backward.dt_source()
    assert "grad_W.compute_with(grad_A, x);" in text and "grad_A.block(x:32);" in text
    assert text.count("grad_A.block(") == 1 and text.count("grad_A.tensorize(") == 1  # merged, not repeated
    assert backward.checked.walk_sums == {("grad_A", "x"): ("grad_W_chunks", "grad_Bias_chunks")}
    _check(backward, "numba", {"x": 45, "y": 20}, seed=3)


def test_merged_writes_each_funcs_sizes_once_later_ones_winning():
    text = "a.block(x:1);\na.tensorize(y:4096);\nb.fuse_at(a, x);\na.block(x:32);\na.tensorize(x:1, y:0);\n" \
           "a.num_stages(3);\na.num_stages(4);\n"
    assert merged(text) == "a.block(x:32);\na.tensorize(y:0, x:1);\nb.fuse_at(a, x);\na.num_stages(4);\n"


def test_kernels_keep_their_order_where_the_walk_allows():
    # K2 stores P for dx's kernel: the host moves ahead of dw, not ahead of K2
    prog = dt.loads("""Func dw, P, K2, dx;
In A, B;
RVar x, k;
dw[k] = rsum(A[x, k], x);
P[x] = rsum(B[x, k], k);
K2[x, k] = B[x, k] * P[x];
dx[x, k] = A[x, k] * P[x];
K2.block(x:1);
K2.tensorize(k:0);
P.fuse_at(K2, x);
dx.block(x:4);
dx.tensorize(x:1, k:0);
dw.split(x:4);
dw.compute_with(dx, x);
dw.compile();
K2.compile();
dx.compile();
""", file="order.dt")
    assert prog.checked.kernel_roots == ("K2", "dx", "dw")
    _check(prog, "numba", {"x": 10, "k": 7})


HOST = "Func dx, w, wb, o;\nIn A, B;\nRVar x, k, j;\ndx[x, k] = A[x, k] * 2.0;\n{defs}\ndx.block(x:4);\n" \
       "dx.tensorize(x:1, k:0);\n{schedule}\ndx.compile();\n"


@pytest.mark.parametrize("defs,schedule,message", [
    # the Func named is the one whose dimensions differ, not the one whose name is a prefix of it
    ("w[k] = rsum(A[x, k], x);\nwb[k, j] = rsum(B[x, k, j], x);",
     "w.split(x:4);\nw.compute_with(dx, x);\nwb.compute_with(w, x);\nw.compile();\nwb.compile();",
     r"'wb' sums in 'dx''s walk over 'x', so it must have the other dimensions of 'dx' \(k\), but it has k, j"),
    ("w[k] = rsum(rsum(B[x, k, j], x), j);", "w.split(j:4);\nw.compute_with(dx, x);\nw.compile();",
     r"'w' is split over 'j' but computed with 'dx' over 'x'"),
    ("w[k] = rsum(dx[x, k] * A[x, k], x);", "w.split(x:4);\nw.compute_with(dx, x);\nw.compile();",
     r"'w' reads 'dx', and its chunks sum in 'dx''s walk over 'x'"),
])
def test_walk_errors_name_the_func_at_fault(defs, schedule, message):
    with pytest.raises(DTScheduleError, match=message):
        dt.loads(HOST.format(defs=defs, schedule=schedule), file="bad.dt")


def test_a_walk_of_an_inlined_func_is_an_error_not_a_dropped_compute_with():
    source = HOST.format(defs="w[k] = rsum(A[x, k], x);\no[x, k] = dx[x, k] + 1.0;",
                         schedule="w.split(x:4);\nw.compute_with(dx, x);\nw.compile();\no.compile();")
    with pytest.raises(DTScheduleError, match=r"'w' is computed with 'dx', which is not computed \(it is inlined"):
        dt.loads(source.replace("dx.compile();", "dx.inline();"), file="bad.dt")
