"""Performance warnings (docs/performance-warnings.md): each cliff has a program that raises its
warning (the message, the DT line it points at and the estimate asserted) and the schedule of
its hint, which does not; they are the pairs benchmarks/gpu/warning_costs.py times on the GPU.
Then how warnings reach users: once per program and shape at a call, DT_WARNINGS, `# allow:`
lines, `dt lint`, the debugger; and every committed schedule, linted at the shapes it runs."""
import dataclasses
import pickle
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import dt
from dt import backends
from dt.cli import main
from dt.testing import random_inputs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import warning_costs  # noqa: E402  (the pairs; it imports torch only to measure)

def pair(slow: str, **sizes):
    p = next(p for p in warning_costs.PAIRS if p.slow == slow and (not sizes or p.sizes == sizes))
    return dt.load(warning_costs.path(p.slow)), dt.load(warning_costs.path(p.fixed)), p


def only(found, code):
    hits = [w for w in found if w.code == code]
    assert hits, f"no {code} warning in {[w.code for w in found]}"
    return hits[0]


def line_of(w) -> str:
    return w.loc.text.strip()


def _line(path: Path, text: str) -> int:
    """The number of the line of a file that is `text`."""
    return path.read_text().splitlines().index(text) + 1


# ---------------------------------------------------------------- each cliff, raised and fixed
def test_a_batched_product_is_not_on_the_matrix_units():
    slow, fixed, p = pair("batched_product.dt")
    w = only(slow.lint(p.sizes, p.dtype), "not-on-matrix-units")
    assert "its tile spans b besides the product's two free dimensions" in w.message
    assert line_of(w) == "C[b, x, y] = rdot(A[b, x, k], B[b, k, y], k);" and w.loc.col == 14
    assert "a 2x32x32x16 multiply-and-sum (65.5 K FLOPs a step) in float32 on the CUDA cores" in w.cost
    assert "C.block(b:1, ...)" in w.hint
    assert fixed.lint(p.sizes, p.dtype) == []


def test_a_product_tile_under_16_lanes_is_not_on_the_matrix_units():
    slow, fixed, p = pair("small_product.dt")
    w = only(slow.lint(p.sizes, p.dtype), "not-on-matrix-units")
    assert "the 8x64x8 product over k in kernel 'mm_kernel' has a tile under 16 lanes along x, k" in w.message
    assert line_of(w) == "mm.tensorize(x:8, y:64, k:8);"
    assert w.notes[0][1].text.strip().startswith("mm[x, y] = rdot(")
    assert "mm.tensorize(x:16, k:16, ...)" in w.hint
    assert fixed.lint(p.sizes, p.dtype) == []


def test_a_float32_product_in_ieee_precision_is_not_on_the_matrix_units(monkeypatch):
    prog = dt.load(ROOT / "examples" / "matmul.dt")
    sizes = dict(x=4096, y=4096, k=4096)
    monkeypatch.setenv("DT_TRITON_F32_DOT", "ieee")
    w = only(prog.lint(sizes, "f32"), "not-on-matrix-units")
    assert "runs in IEEE precision (DT_TRITON_F32_DOT=ieee, the default)" in w.message
    assert "DT_TRITON_F32_DOT=tf32" in w.hint and "about 15x slower" in w.cost
    assert prog.lint(sizes, "bf16") == []
    monkeypatch.setenv("DT_TRITON_F32_DOT", "tf32")
    assert prog.lint(sizes, "f32") == []


def test_a_product_tile_padded_to_powers_of_two():
    slow, fixed, p = pair("padded_product.dt")
    found = slow.lint(p.sizes, p.dtype)
    assert [w.code for w in found] == ["padded-tile"]
    w = found[0]
    assert "the product over k in kernel 'mm_kernel' is a 96x96x48 tile, which Triton pads to 128x128x64" in w.message
    assert w.cost == "42% of its matrix-unit lanes do useful work"
    assert line_of(w) == "mm.tensorize(x:96, y:96, k:48);"
    assert fixed.lint(p.sizes, p.dtype) == []
    # a whole extent in a product is padded to 16 lanes at least, where tl.dot takes it
    whole = dt.loads("Func mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n"
                     "mm.block(x:16, y:32);\nmm.tensorize(x:16, y:32, k:0);\nmm.compile();")
    assert "tl.dot(" in whole.source("triton", "bf16")
    w = only(whole.lint(dict(x=64, y=64, k=5), "bf16"), "padded-tile")
    assert "is a 16x32x5 tile, which Triton pads to 16x32x16" in w.message
    assert "not-on-matrix-units" not in [w.code for w in whole.lint(dict(x=64, y=64, k=5), "bf16")]
    assert whole.lint(dict(x=64, y=64, k=64), "bf16") == []


def test_an_8bit_product_takes_a_reduction_tile_of_32_on_the_matrix_units():
    """tl.dot reduces 8-bit operands (i8, fp8) 32 lanes at a time: a K tile of 16 is multiplied and
    summed on the CUDA cores (int32 for i8), as the renderer decides, and a whole K is padded to 32."""
    def mm(k: int):
        return dt.loads("Func mm;\nIn X, W;\nVar m, n;\nRVar k;\nmm[m, n] = rdot(X[m, k], W[n, k], k);\n"
                        f"mm.block(m:64, n:64);\nmm.tensorize(m:64, n:64, k:{k});\nmm.compile();")
    sizes, i8, fp8 = dict(m=512, n=512, k=512), {"X": "i8", "W": "i8"}, {"X": "f8e4m3", "W": "f8e4m3"}
    w = only(mm(16).lint(sizes, i8), "not-on-matrix-units")
    assert "the 64x64x16 product over k in kernel 'mm_kernel' has a tile under 32 lanes along k: the matrix " \
           "units take 16 or more along each (32 along the reduction of 8-bit operands)" in w.message
    assert w.cost.startswith("a multiply-and-sum in int32 on the CUDA cores, at least 30x slower")
    assert "1,979 for 8-bit products" in w.cost
    assert w.hint == "tensorize k with 32 lanes or more (mm.tensorize(k:32, ...))"
    assert "tl.dot(" not in mm(16).source("triton", "i8") and "tl.dot(" in mm(32).source("triton", "i8")
    assert "float32 on the CUDA cores, at least 30x" in only(mm(16).lint(sizes, fp8), "not-on-matrix-units").cost
    assert mm(32).lint(sizes, i8) == [] and mm(32).lint(sizes, fp8) == []
    assert mm(16).lint(sizes, "f16") == []  # 16 lanes of K suffice for 16-bit operands
    # a whole K of 12 runs as 32 lanes in an 8-bit product (37.5% useful), as 16 in a 16-bit one (75%)
    w = only(mm(0).lint(dict(m=512, n=512, k=12), i8), "padded-tile")
    assert "is a 64x64x12 tile, which Triton pads to 64x64x32" in w.message
    assert mm(0).lint(dict(m=512, n=512, k=12), "f16") == []

def test_a_whole_row_tile_too_large_for_its_warps():
    slow, fixed, p = pair("wide_row.dt")
    w = only(slow.lint(p.sizes, p.dtype), "registers")
    assert "a 65536 tile of 'A' in kernel 'y_kernel' needs 512 registers a thread in 4 warps" in w.message
    assert line_of(w) == "y.num_warps(4);"
    assert w.cost.startswith("512 of a thread's 255 registers (in 4 warps)")
    assert "y.num_warps" not in w.hint  # no number of warps holds 65,536 lanes: 32 give a thread 64 registers
    assert fixed.lint(p.sizes, p.dtype) == []
    # where more warps suffice, the hint names them
    w = only(slow.lint(dict(r=4096, c=32768), p.dtype), "registers")
    assert w.hint.startswith("y.num_warps(8)")


def test_a_fused_producer_computed_in_every_program_along_a_dimension_it_lacks():
    slow, fixed, p = pair("recomputed.dt")
    w = only(slow.lint(p.sizes, p.dtype), "recomputed")
    assert "'s' is computed 16 times in kernel 'y_kernel'" in w.message and "once per program along c (16)" in w.message
    assert line_of(w) == "s.fuse_at(y, c);"
    assert w.cost.startswith("16x the bytes 's' reads")
    assert w.notes[0][1].text.startswith("s[r] = rsum(")
    assert fixed.lint(p.sizes, p.dtype) == []


def test_a_product_written_as_rsum_is_not_on_the_matrix_units():
    def lint(product):
        return dt.loads(f"Func C;\nIn A, B, W;\nVar x, y;\nRVar k;\nC[x, y] = rsum({product}, k);\n"
                        "C.block(x:32, y:32);\nC.tensorize(x:32, y:32, k:16);\nC.compile();").lint(
            dict(x=512, y=512, k=512), "bf16")
    w = only(lint("A[x, k] * B[k, y]"), "not-on-matrix-units")
    assert "written as rsum of a product" in w.message and w.hint.startswith("write it as rdot(a, b, k)")
    w = only(lint("A[x, k] * B[k, y] * W[k]"), "not-on-matrix-units")
    assert "it multiplies 3 tiles" in w.message
    rows = dt.loads("Func C;\nIn A;\nVar x;\nRVar k;\nC[x] = rsum(A[x, k] * A[x, k], k);\nC.block(x:32);\n"
                    "C.tensorize(x:32, k:16);\nC.compile();")
    assert rows.lint(dict(x=512, k=512), "bf16") == []  # sums of squares of rows: no matrix product


def test_a_fused_producer_computed_in_every_step_of_a_loop():
    prog = dt.loads("""
        Func y, s;
        In A;
        Var r;
        RVar c;
        s[r] = rsum(A[r, c] * A[r, c], c);
        y[r, c] = A[r, c] * rsqrt(s[r] / len(c) + 1e-6);
        y.block(r:1);
        y.tensorize(c:1024);
        s.fuse_at(y, c);
        y.compile_to_kernel();
    """)
    w = only(prog.lint(dict(r=64, c=8192), "f32"), "recomputed")
    assert "once per step of the loop over c (8)" in w.message and w.cost.startswith("8x")
    assert prog.lint(dict(r=64, c=1024), "f32") == []  # one step: nothing repeats
    # blocks of 4096 walked in tiles of 1024: 4 programs along c, 4 steps each
    blocked = dt.loads(RECOMPUTED.replace("y.block(r:1, c:16);\n    y.tensorize(c:16);",
                                          "y.block(r:1, c:4096);\n    y.tensorize(c:1024);"))
    w = only(blocked.lint(dict(r=64, c=16384), "f32"), "recomputed")
    assert "computed 16 times" in w.message
    assert "the loop over c (4)" in w.message and "program along c (4)" in w.message


def test_tiles_one_lane_wide_along_the_contiguous_dimension():
    slow, fixed, p = pair("uncoalesced.dt")
    found = [w for w in slow.lint(p.sizes, p.dtype) if w.code == "uncoalesced"]
    assert {line_of(w)[w.loc.col - 1 - (len(w.loc.text) - len(w.loc.text.lstrip())):][:7] for w in found} >= {"A[x, y]"}
    w = next(w for w in found if "'A'" in w.message)
    assert "spans x but is one lane wide along y, the tensor's contiguous dimension" in w.message
    assert "each of its 128 lanes reads 2 bytes of a 32-byte sector of its own: about 6%" in w.cost
    assert fixed.lint(p.sizes, p.dtype) == []


def test_a_schedule_without_tensorize_computes_one_element_at_a_time():
    slow, fixed, p = pair("one_lane.dt")
    w = only(slow.lint(p.sizes, p.dtype), "one-lane-tiles")
    assert "every tile of kernel 'o_kernel' is one element: its schedule tensorizes none of x, y" in w.message
    assert w.cost.startswith("65.5 K elements computed one at a time")
    assert line_of(w) == "o.compile();"
    assert fixed.lint(p.sizes, p.dtype) == []
    total = dt.loads("Func t;\nIn A;\nRVar x;\nt[] = rsum(A[x], x);\nt.compile();")
    assert "one-lane-tiles" in [w.code for w in total.lint(dict(x=10), "f32")]  # a loop of one-lane steps
    tiled = dt.loads("Func t;\nIn A;\nRVar x;\nt[] = rsum(A[x], x);\nt.tensorize(x:1024);\nt.compile();")
    assert tiled.lint(dict(x=10), "f32") == []


def test_too_few_programs_to_fill_the_gpu():
    slow, fixed, p = pair("few_programs.dt")
    w = only(slow.lint(p.sizes, p.dtype), "too-few-programs")
    assert w.message == "kernel 'o_kernel' runs 8 programs on a GPU of 132 multiprocessors"
    assert w.cost.startswith("124 of 132 multiprocessors idle (6% of the GPU moves its 64.0 MiB)")
    assert line_of(w) == "o.block(x:512);" and "smaller blocks along x" in w.hint
    assert fixed.lint(p.sizes, p.dtype) == []
    assert slow.lint(dict(x=512, y=64), p.dtype) == []  # too little data for it to matter
    # one row a program already: no smaller block helps
    rows = dt.loads("Func m;\nIn L;\nVar r;\nRVar v;\nm[r] = rmax(L[r, v], v);\nm.block(r:1);\n"
                    "m.tensorize(v:4096);\nm.compile();")
    w = only(rows.lint(dict(r=64, v=128256), "f32"), "too-few-programs")
    assert "each program already has one index of r" in w.hint and "block(" not in w.hint
    # an update moves one element of the table it writes for each of its own: 64 tokens' rows, not the table
    update = dt.loads("Func g;\nIn G, I;\nVar v, d, t;\ng[v, d] = 0.0;\ng[I[t], d] += G[t, d];\n"
                      "g.block(v:1, d:1024);\ng.tensorize(d:1024);\ng.update().block(t:64);\n"
                      "g.update().tensorize(t:64, d:64);\ng.compile();")
    assert "too-few-programs" not in [w.code for w in update.lint(dict(t=64, d=64, v=128256), "f32")]
    many = only(update.lint(dict(t=64, d=65536, v=16), "f32"), "too-few-programs")  # 16 MiB of G, g's 4 MiB
    assert "moves its 20.0 MiB" in many.cost


def test_num_stages_with_nothing_to_pipeline():
    slow, fixed, p = pair("no_pipeline.dt")
    w = only(slow.lint(p.sizes, p.dtype), "nothing-to-pipeline")
    assert line_of(w) == "o.num_stages(3);" and "no loop of it loads a tile" in w.message
    assert fixed.lint(p.sizes, p.dtype) == []
    assert dt.load(ROOT / "examples" / "matmul.dt").lint(dict(x=512, y=512, k=512), "f16") == []


def test_stream_with_nothing_to_stream():
    slow, fixed, p = pair("no_stream.dt")
    w = only(slow.lint(p.sizes, p.dtype), "nothing-to-stream")
    assert line_of(w) == "_softmax.stream();" and "to stream the tensors read once, and none is" in w.message
    assert fixed.lint(p.sizes, p.dtype) == []
    slow_kernel, fixed_kernel = (prog.pipeline(p.dtype).kernels[0] for prog in (slow, fixed))
    assert dataclasses.replace(slow_kernel, stream=False) == fixed_kernel  # the same kernel, but for the flag


def test_rows_not_a_multiple_of_16_bytes():
    prog = dt.load(warning_costs.HERE / "unaligned.dt")
    found = prog.lint(dict(r=16384, c=1001), "bf16")
    assert {w.code for w in found} == {"unaligned-rows"}
    w = next(w for w in found if "'A'" in w.message)
    assert "rows of 'A' are 1001 elements (2002 bytes)" in w.message
    assert w.cost == "accesses of 2 bytes instead of 16: 8x the memory instructions"
    assert "pad c to a multiple of 8 elements (1008)" in w.hint
    assert prog.lint(dict(r=16384, c=1008), "bf16") == []
    assert prog.lint(dict(r=16384, c=1004), "f32") == []  # 4016 bytes
    assert only(prog.lint(dict(r=16384, c=1002), "f32"), "unaligned-rows").cost.startswith("accesses of 8 bytes")


def test_tma_tiles_that_fall_back_to_pointers():
    prog = dt.load(warning_costs.HERE / "tma_rows.dt")
    w = only(prog.lint(dict(x=8192, y=4100), "f16"), "tma-fallback")
    assert "rows of 'A' are 8200 bytes, not a multiple of 16" in w.message
    assert line_of(w) == "o.tma();" and w.cost == "no TMA at all at this shape"
    assert prog.lint(dict(x=8192, y=4104), "f16") == []
    # a tile that is no box of its tensor (a load at computed indices) moves through pointers at any shape
    shifted = dt.loads("""
        Func o;
        In A;
        Var x, y;
        o[x, y] = A[x, y] + A[x, y + 1];
        o.block(x:64, y:64);
        o.tensorize(x:64, y:64);
        o.tma();
        o.compile();
    """)
    w = only(shifted.lint(dict(x=4096, y=4096), "f16"), "tma-fallback")
    assert "the tile of 'A' in kernel 'o_kernel' moves through pointers" in w.message
    assert w.notes[0][1].text.strip() == "o.tma();"


class _PerShape:
    """The interpreter, declaring that it compiles its kernels again for each shape."""

    def __init__(self):
        interp = backends.get("interp")
        self.name = "per_shape"
        self.capabilities = dataclasses.replace(interp.capabilities, compiles_per_shape=True)
        self.compile, self.source = interp.compile, interp.source


def test_a_program_called_with_many_shapes_on_a_backend_that_compiles_per_shape():
    backends.register("per_shape", _PerShape())
    prog = dt.load(ROOT / "examples" / "add.dt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 10):
            prog(A=np.ones((2, n), np.float32), B=np.ones((2, n), np.float32), alpha=1.0, backend="per_shape")
    found = [w.message for w in caught if isinstance(w.message, dt.PerformanceWarning)
             and w.message.code == "recompiles"]
    assert len(found) == 1  # at the eighth shape, once
    assert "called with 8 shapes on backend 'per_shape'" in found[0].message and "(y here)" in found[0].message
    assert "pad y up to a few sizes" in found[0].hint


# ---------------------------------------------------------------- compiled kernels (Triton, no GPU)
@pytest.mark.needs_triton
@pytest.mark.slow
def test_compiled_facts_report_spills_and_the_fix_has_none():
    slow, fixed, p = pair("wide_row.dt")
    facts, found = slow.kernel_facts(p.sizes, p.dtype)
    assert facts[0].kernel == "y_kernel" and facts[0].func == "y" and facts[0].warps == 4
    assert facts[0].spill_stores > 0 and 0 < facts[0].registers <= 255
    w = only(found, "spills")
    assert line_of(w) == "y.num_warps(4);" and f"{facts[0].spill_stores} bytes stored" in w.cost
    facts, found = fixed.kernel_facts(p.sizes, p.dtype)
    assert facts[0].spill_stores == 0 and found == []
    assert [w.code for w in slow.lint(p.sizes, p.dtype, compiled=True)] == ["registers", "spills"]


def test_occupancy_is_limited_by_the_scarcest_resource():
    from dt.backends.triton.compiled import occupancy
    assert occupancy(32, 4, 0) == (16, "warps", 1.0)
    assert occupancy(255, 8, 0) == (1, "registers", 0.125)
    assert occupancy(64, 4, 100 * 1024) == (2, "shared memory", 0.125)
    assert occupancy(64, 4, 100 * 1024, capability=86) == (0, "shared memory", 0.0)  # 100 KiB there, less reserved


# ---------------------------------------------------------------- how warnings reach users
def _call(prog, n=64):
    return prog(A=np.ones((4, n), np.float32), backend="interp")


RECOMPUTED = """
    Func y, s;
    In A;
    Var r;
    RVar c;
    s[r] = rsum(A[r, c] * A[r, c], c);
    y[r, c] = A[r, c] * rsqrt(s[r] / len(c) + 1e-6);
    y.block(r:1, c:16);
    y.tensorize(c:16);
    s.fuse_at(y, c);
    y.compile_to_kernel();
"""


def test_a_call_warns_once_per_program_and_shape(monkeypatch):
    monkeypatch.delenv("DT_WARNINGS", raising=False)
    prog = dt.loads(RECOMPUTED, file="recomputed.dt")
    with pytest.warns(dt.PerformanceWarning, match=r"recomputed\.dt:10:\d+: performance warning \[recomputed\]") \
            as caught:
        _call(prog)
        _call(prog)
        _call(prog, 128)
    found = [w for w in caught if isinstance(w.message, dt.PerformanceWarning)]
    assert len(found) == 2 and "computed 4 times" in str(found[0].message) and "8 times" in str(found[1].message)
    assert found[0].filename == __file__  # it points at the call, not into dt


def test_dt_warnings_raises_or_silences(monkeypatch):
    monkeypatch.setenv("DT_WARNINGS", "error")
    with pytest.raises(dt.PerformanceWarning, match="computed 4 times"):
        _call(dt.loads(RECOMPUTED))
    monkeypatch.setenv("DT_WARNINGS", "ignore")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _call(dt.loads(RECOMPUTED))
    monkeypatch.setenv("DT_WARNINGS", "loud")
    with pytest.raises(dt.DTInputError, match="DT_WARNINGS='loud'"):
        _call(dt.loads(RECOMPUTED))


def test_dt_warnings_error_raises_at_every_call(monkeypatch):
    monkeypatch.setenv("DT_WARNINGS", "error")
    prog = dt.loads(RECOMPUTED)
    for _ in range(2):
        with pytest.raises(dt.PerformanceWarning):
            _call(prog)


def test_a_performance_warning_pickles():
    w = only(dt.loads(RECOMPUTED).lint(dict(r=4, c=64), "f32"), "recomputed")
    copy = pickle.loads(pickle.dumps(w))
    assert copy == w and str(copy) == str(w) and copy.hint == w.hint and copy.notes == w.notes


def test_compiled_warnings_need_extents():
    with pytest.raises(dt.DTExtentError, match="need extents"):
        dt.loads(RECOMPUTED).lint(compiled=True)


def test_warnings_filters_apply(monkeypatch):
    monkeypatch.delenv("DT_WARNINGS", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=dt.PerformanceWarning)
        _call(dt.loads(RECOMPUTED))


def test_an_allow_line_with_a_reason_silences_a_warning(monkeypatch):
    monkeypatch.delenv("DT_WARNINGS", raising=False)
    allowed = dt.loads("# allow: recomputed -- measured: the recomputation is cheaper than a second kernel\n"
                       + RECOMPUTED)
    assert allowed.lint(dict(r=4, c=64), "f32") == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _call(allowed)
    for bad in ("# allow: recomputed\n", "# allow: recomputed --\n", "# allow: recomputed: measured\n"):
        assert [w.code for w in dt.loads(bad + RECOMPUTED).lint(dict(r=4, c=64), "f32")] == ["recomputed"], bad


def test_the_debugger_shows_the_warnings_of_the_statement_it_stops_at(monkeypatch):
    monkeypatch.setenv("DT_WARNINGS", "ignore")
    prog = dt.load(warning_costs.HERE / "batched_product.dt")
    args = random_inputs(prog, dict(b=2, x=32, y=32, k=16), "f16")
    stops, product = [], "C[b, x, y] = rdot(A[b, x, k], B[b, k, y], k);"
    with dt.debug.break_at(_line(warning_costs.HERE / "batched_product.dt", product), pid=0, action=stops.append):
        prog(backend="interp", **args)
    assert {w.code for w in stops[0].warnings} == {"not-on-matrix-units", "registers"}
    assert "performance warning [not-on-matrix-units]" in stops[0].where()
    stops.clear()
    fixed = warning_costs.HERE / "batched_product_fixed.dt"
    with dt.debug.break_at(_line(fixed, product), pid=0, action=stops.append):
        dt.load(fixed)(backend="interp", **args)
    assert stops[0].warnings == [] and "performance warning" not in stops[0].where()


def test_dt_lint(capsys):
    path = str(warning_costs.HERE / "recomputed.dt")
    argv = ["lint", path, "--size", "r=4096", "--size", "c=16384", "--dtype", "bf16", "--no-compiled"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    line = _line(warning_costs.HERE / "recomputed.dt", "s.fuse_at(y, c);")
    assert f"recomputed.dt:{line}:1: performance warning [recomputed]: 's' is computed 16 times" in out
    assert "    s.fuse_at(y, c);\n    ^^^^^^^^^^^^^^^^\ncost: 16x" in out
    assert out.rstrip().endswith("recomputed.dt: 1 performance warning on triton (bf16; r=4096, c=16384)")
    assert main(argv + ["--strict"]) == 1
    fixed = ["lint", str(warning_costs.HERE / "recomputed_fixed.dt"), "--size", "r=4096", "--size", "c=16384",
             "--strict", "--no-compiled"]
    assert main(fixed) == 0
    assert "0 performance warnings" in capsys.readouterr().out


@pytest.mark.needs_triton
@pytest.mark.slow
def test_dt_lint_prints_the_compiled_kernels(capsys):
    argv = ["lint", str(warning_costs.HERE / "wide_row.dt"), "--size", "r=4096", "--size", "c=65536",
            "--dtype", "bf16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "performance warning [spills]" in out and "compiled kernels" in out
    assert re.search(r"y_kernel\s*│\s*y\s*│\s*4\s*│", out)


def test_lint_without_extents_gives_the_warnings_no_extent_decides():
    slow, _, p = pair("small_product.dt")
    assert [w.code for w in slow.lint(dtype="bf16")] == ["not-on-matrix-units"]
    assert dt.load(warning_costs.HERE / "few_programs.dt").lint() == []


def test_lint_takes_inputs_as_a_call_does():
    slow, _, p = pair("uncoalesced.dt")

    class Shaped:
        shape = (8192, 8192)
    assert slow.lint(dtype="bf16", A=Shaped()) == slow.lint(dict(x=8192, y=8192), "bf16")
