"""The `numba` backend: every example (and its CPU schedule) matches the reference in f32, f16
and bf16 at sizes that divide and sizes that do not; the generated module is standalone and is
what compile() runs; its machine code is cached on disk for the next process; its float16 /
bfloat16 / 8-bit float conversions and float32 transcendentals are exact / accurate over dense
samples.

Numba's compile time dominates: each test compiles one pipeline (one example in one dtype) and
runs it at every size, since sizes are run-time arguments of the same compiled code."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import dt
from dt import backends
from dt.cli import main
from dt.testing import assert_close, random_inputs
from example_sizes import EXAMPLES_DIR, SIZES, example_path

if not backends.available("numba"):
    pytest.skip(f"the numba backend is not available: {backends.failures().get('numba')}", allow_module_level=True)

import numba  # noqa: E402

from dt.backends.numba_cpu import helpers, module  # noqa: E402

CPU_EXAMPLES = sorted(p.stem for p in (EXAMPLES_DIR / "cpu").glob("*.dt"))
# sizes the CPU schedules' (larger) blocks and tiles divide, besides the examples' own
CPU_DIVISIBLE = {"add": dict(x=2, y=2048), "relu": dict(x=2, y=2048), "swish": dict(x=2, y=2048),
                 "dyt": dict(x=2, y=4096), "matmul": dict(x=256, y=512, k=256),
                 "2mm_outer": dict(m=64, n=1024, k=32, l=32), "2mm_inner": dict(m=64, n=128, k=64, l=128),
                 "attention": dict(m=32, l=128, k=16, n=32), "softmax_safe": dict(x=2, y=4096)}
ROOT = EXAMPLES_DIR.parent


def _check_every_size(path: Path, sizes: list, dtype: str):
    prog = dt.load(path)
    for extents in sizes:
        args = random_inputs(prog, extents, dtype, seed=3)
        out = prog(backend="numba", **args)
        assert out.dtype == args[prog.inputs[0]].dtype
        assert out.shape == tuple(extents[d] for d in prog.checked.funcs[prog.outputs[0]].dims)
        assert_close(out, prog.reference(**args), dtype)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("name", sorted(SIZES))
def test_example(name, dtype):
    _check_every_size(example_path(name), SIZES[name], dtype)


@pytest.mark.parametrize("name", CPU_EXAMPLES)
def test_cpu_schedule(name):
    # The dtype handling is the same code as above; what differs is the schedule.
    _check_every_size(EXAMPLES_DIR / "cpu" / f"{name}.dt", [CPU_DIVISIBLE[name]] + SIZES[name], "f32")


def test_every_cpu_schedule_computes_its_example():
    for name in CPU_EXAMPLES:
        cpu, talk = dt.load(EXAMPLES_DIR / "cpu" / f"{name}.dt"), dt.load(example_path(name))
        args = random_inputs(talk, SIZES[name][-1], "f32", seed=5)
        np.testing.assert_array_equal(cpu.reference(**args), talk.reference(**args), err_msg=name)


def test_f64_and_mixed_dtypes():
    prog = dt.load(example_path("layernorm"))
    args = random_inputs(prog, dict(x=3, y=70), "f64", seed=1)
    out = prog(backend="numba", **args)
    assert out.dtype == np.float64
    assert_close(out, prog.reference(**args), "f64")
    mixed = dict(args, W=args["W"].astype(np.float16), Bias=args["Bias"].astype(np.float32))
    assert_close(prog(backend="numba", **mixed), prog.reference(**mixed), "f32")


OPS = """
Func f;
In A, B;
Var x, y;
f[x, y] = where(A[x, y] > B[y], log(abs(A[x, y]) + 1) * erf(B[y]), pow(abs(B[y]), 1.5) - exp2(A[x, y]))
          + sqrt(abs(A[x, y])) - rsqrt(B[y] * B[y] + 1) + sin(A[x, y]) * cos(B[y]) + floor(A[x, y]) * ceil(B[y])
          + log2(A[x, y] * A[x, y] + 2) + minimum(A[x, y], B[y]) * tanh(A[x, y]) - sigmoid(-A[x, y]) + x - len(y);
f.block(x:2, y:8);
f.tensorize(y:4);
f.compile();
"""


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_every_elementwise_op(dtype):
    prog = dt.loads(OPS, "ops")
    args = random_inputs(prog, dict(x=5, y=19), dtype, seed=2)
    assert_close(prog(backend="numba", **args), prog.reference(**args), dtype)


@pytest.mark.parametrize("expression,op", [("exp(A[x])", "exp"), ("A[x] * 2", "*"),
                                           ("where(A[x] > 0, A[x], 0)", "where")])
def test_an_op_missing_from_the_rendering_table_is_an_error_at_compile_time(monkeypatch, expression, op):
    from dt.backends.numba_cpu import expr
    monkeypatch.delitem(expr.OPS, op)  # as for an op of dt.ir.ops the backend has not learnt yet
    prog = dt.loads(f"Func f;\nIn A;\nVar x;\nf[x] = {expression};\nf.compile();\n", "f")
    with pytest.raises(dt.DTBackendError, match=f"the numba backend does not support the op '{re.escape(op)}'") as e:
        backends.get("numba").compile(prog.pipeline("f32"))
    assert e.value.loc.line == 4  # the statement using it


def test_reductions_nan_and_inf():
    src = ("Func s, t, u;\nIn A;\nVar x;\nRVar y;\ns[x] = rmax(A[x, y], y);\nt[x] = rmin(A[x, y], y);\n"
           "u[x] = rsum(A[x, y], y);\ns.tensorize(y:4);\nt.tensorize(y:0);\ns.compile();\nt.compile();\nu.compile();\n")
    prog = dt.loads(src, "reductions")
    A = np.array([[1, 2, np.nan, 4, 5], [-np.inf, 1, 2, 3, 4], [np.inf, -1, 0, 1, 7]], np.float32)
    out = prog(backend="numba", A=A)
    ref = prog.reference(A=A)
    for name in ("s", "t", "u"):
        np.testing.assert_array_equal(out[name], ref[name].astype(np.float32))


REDUCTIONS = ("Func s, t;\nIn A;\nVar x;\nRVar y;\ns[x] = rmax(A[x, y], y);\nt[x] = rmin(A[x, y], y);\n"
              "s.tensorize(y:512);\nt.tensorize(y:0);\ns.compile();\nt.compile();\n")


def _special_rows(dtype, width=1031):
    """Rows of `width` values with a NaN, an inf or a -inf at each place a vectorised loop may
    treat apart (first lane, vector body, the end of a 512-wide tile, the scalar remainder),
    all -inf, all inf, and a NaN beside infinities."""
    rng = np.random.default_rng(7)
    rows = []
    for special in (np.nan, np.inf, -np.inf):
        for at in (0, 5, 300, 511, 512, 1023, 1030):
            row = rng.standard_normal(width)
            row[at] = special
            rows.append(row)
    rows += [np.full(width, -np.inf), np.full(width, np.inf), rng.standard_normal(width)]
    mixed = rng.standard_normal(width)
    mixed[[3, 600, 1029]] = (np.inf, np.nan, -np.inf)
    rows.append(mixed)
    return np.array(rows, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_and_min_reductions_match_the_reference_on_nan_and_inf(dtype):
    prog = dt.loads(REDUCTIONS, "reductions")
    A = _special_rows(dtype)
    out, ref = prog(backend="numba", A=A), prog.reference(A=A)
    for name in ("s", "t"):
        np.testing.assert_array_equal(out[name], ref[name].astype(dtype), err_msg=name)


def test_safe_softmax_matches_the_reference_on_nan_and_inf():
    prog = dt.load(example_path("softmax_safe"))
    A = _special_rows(np.float32)
    assert_close(prog(backend="numba", A=A), prog.reference(A=A), "f32")


def test_max_and_min_reductions_vectorise(tmp_path):
    # rmax / rmin accumulate with llvm.maximum / llvm.minimum, which LLVM's loop vectoriser turns
    # into vector operations on every x86-64 (SSE2 and up); a NaN-propagating compare-and-select
    # stays scalar without 'nnan'. Inspection needs code compiled in this process, not cached.
    prog = dt.loads(REDUCTIONS, "reductions")
    source = prog.source("numba", "f32")
    assert "_reduce_max(max_y, " in source and "_reduce_min(min_y, " in source
    (tmp_path / "reductions_nocache.py").write_text(source.replace("cache=True", "cache=False"))
    sys.path.insert(0, str(tmp_path))
    try:
        import reductions_nocache as module
    finally:
        sys.path.remove(str(tmp_path))
    module.reductions(np.ones((3, 70), np.float32), 3, 70)
    for kernel, op in ((module.s_kernel, "maximum"), (module.t_kernel, "minimum")):
        llvm = kernel.inspect_llvm(kernel.signatures[0])
        assert re.search(rf"@llvm\.{op}\.v\d+f32\(", llvm), f"no vector llvm.{op} in {kernel.__name__}"


def test_rank0_output():
    prog = dt.loads("Func out;\nIn u, v;\nRVar k;\nout[] = rdot(u[k], v[k], k);\nout.tensorize(k:8);\nout.compile();\n", "dot")
    args = random_inputs(prog, dict(k=37), "f32")
    out = prog(backend="numba", **args)
    assert out.shape == ()
    assert_close(out, prog.reference(**args), "f32")


def test_threads_do_not_change_results():
    import numba
    prog = dt.load(example_path("softmax"))
    args = random_inputs(prog, dict(x=37, y=300), "f32")
    parallel = prog(backend="numba", **args)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        serial = prog(backend="numba", **args)
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(parallel, serial)


class _DeferredPool:
    """A pool whose work runs when its result is asked for: the calling thread takes every chunk first."""

    def __init__(self):
        self.submitted = 0

    def submit(self, work):
        self.submitted += 1
        return type("Deferred", (), {"result": staticmethod(work)})()


def test_a_launch_with_little_work_stays_on_the_calling_thread(monkeypatch):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread: every launch runs on the calling thread")
    prog = dt.load(ROOT / "examples" / "cpu" / "add.dt")
    generated = backends.get("numba").module(prog.pipeline("f32"))
    pool = _DeferredPool()
    monkeypatch.setattr(generated, "_POOL", pool)
    monkeypatch.setattr(generated, "_WORK_SECONDS", {})
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    args = random_inputs(prog, dict(x=3, y=2500), "f32", seed=1)
    expected = prog.reference(**args)

    def call():
        out = generated.add(args["A"], args["B"], args["alpha"], 3, 2500)["add_out"]
        np.testing.assert_allclose(out, expected, rtol=1e-6)
        return pool.submitted

    monkeypatch.setattr(generated, "_SERIAL_BELOW", 1e9)  # any work is little
    assert call() == 1  # nothing measured yet: the pool's thread is asked
    assert call() == 1  # measured little: this thread alone
    monkeypatch.setattr(generated, "_SERIAL_BELOW", 0.0)  # no work is little
    assert call() == 2
    assert call() == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")
def test_a_forked_process_launches_on_threads_of_its_own():
    """A child forked after a launch used the pool inherits none of its threads: its launches
    waited for ever (a DataLoader worker, forked by default on Linux, calling a DT kernel)."""
    code = textwrap.dedent(f"""
        import os, signal, sys, numpy as np, dt
        prog = dt.load({str(ROOT / "examples" / "cpu" / "add.dt")!r})
        a = np.arange(2048 * 2048, dtype=np.float32).reshape(2048, 2048) / 1e6
        want = prog(A=a, B=a, alpha=2.0, backend="numba")
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a child that hangs ends itself
            got = prog(A=a, B=a, alpha=2.0, backend="numba")
            os._exit(0 if np.array_equal(got, want) else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 0


def test_source_is_what_compile_runs_and_what_dt_compile_writes(tmp_path):
    prog = dt.load(example_path("matmul"))
    backend = backends.get("numba")
    source = prog.source("numba", "bf16")
    module = backend.module(prog.pipeline("bf16"))
    assert Path(module.__file__).read_text() == source
    out = tmp_path / "kernel.py"
    assert main(["compile", str(example_path("matmul")), "--backend", "numba", "--dtype", "bf16", "-o", str(out)]) == 0
    assert out.read_text() == source
    assert "import dt" not in source and "from dt" not in source
    # named after the DT names: the kernel, its tiles, the entry point
    for name in ("def mm_kernel(", "k_accumulator", "def matmul(", "A_global"):
        assert name in source


def test_entry_writes_into_out_and_checks_its_arguments():
    prog = dt.load(example_path("add"))
    entry = backends.get("numba").entry(prog.pipeline("f32"))
    A, B = np.ones((3, 5), np.float32), np.full((3, 5), 2, np.float32)
    out = np.empty((3, 5), np.float32)
    result = entry(A, B, 0.5, 3, 5, out=out)
    assert result["add_out"] is out
    np.testing.assert_array_equal(out, 1.5)
    np.testing.assert_array_equal(entry(np.asfortranarray(A), B, 0.5, 3, 5)["add_out"], 1.5)
    with pytest.raises(ValueError, match="A must be a float32 array of shape"):
        entry(A.astype(np.float64), B, 0.5, 3, 5)
    with pytest.raises(ValueError, match="A must be a float32 array of shape"):
        entry(A, B, 0.5, 4, 5)
    with pytest.raises(ValueError, match="add_out must be a C-contiguous float32 array"):
        entry(A, B, 0.5, 3, 5, out=np.empty((5, 3), np.float32))


STANDALONE = """
import sys

class NoDt:
    def find_spec(self, name, path=None, target=None):
        if name == "dt" or name.startswith("dt."):
            raise ImportError("dt must not be needed")

sys.meta_path.insert(0, NoDt())
import importlib.util
import ml_dtypes
import numpy as np

spec = importlib.util.spec_from_file_location("kernel", sys.argv[1])
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)
inputs = np.load(sys.argv[2])
A = inputs["A"].astype(ml_dtypes.bfloat16)
out = kernel.swish(A, float(inputs["beta"]), *A.shape)["swish_out"]
assert out.dtype == ml_dtypes.bfloat16
np.save(sys.argv[3], out.astype(np.float32))
"""


def test_module_runs_without_dt(tmp_path):
    prog = dt.load(example_path("swish"))
    (tmp_path / "kernel.py").write_text(prog.source("numba", "bf16"))
    args = random_inputs(prog, dict(x=3, y=1030), "bf16", seed=4)
    np.savez(tmp_path / "inputs.npz", A=args["A"].astype(np.float32), beta=args["beta"])
    (tmp_path / "run.py").write_text(STANDALONE)
    subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "kernel.py"),
                    str(tmp_path / "inputs.npz"), str(tmp_path / "out.npy")], check=True, cwd=tmp_path)
    out = np.load(tmp_path / "out.npy")
    assert_close(out, prog.reference(**args), "bf16")


CACHE_PROBE = """
import json, sys
import dt
from dt import backends
from dt.testing import random_inputs
prog = dt.load(sys.argv[1])
prog(backend="numba", **random_inputs(prog, dict(x=3, y=200), "f32"))
module = backends.get("numba").module(prog.pipeline("f32"))
stats = [getattr(module, k.name).stats for k in prog.pipeline("f32").kernels]
print(json.dumps(dict(file=module.__file__, hits=sum(sum(s.cache_hits.values()) for s in stats),
                      misses=sum(sum(s.cache_misses.values()) for s in stats))))
"""


def test_second_process_loads_the_compiled_code_from_disk(tmp_path):
    env = dict(os.environ, DT_CACHE_DIR=str(tmp_path))
    runs = [json.loads(subprocess.run([sys.executable, "-c", CACHE_PROBE, str(example_path("relu"))], env=env,
                                      capture_output=True, text=True, check=True).stdout.splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["file"] == runs[1]["file"] and runs[0]["file"].startswith(str(tmp_path / "numba"))
    assert runs[0]["misses"] >= 1 and runs[0]["hits"] == 0
    assert runs[1]["misses"] == 0 and runs[1]["hits"] >= 1
    assert list((tmp_path / "numba" / "__pycache__").glob("*.nbc"))


def _helpers(*names, scalef: bool | None = None):
    """The helpers `names` and what they call, compiled afresh (not from numba's cache) under the
    current config; `scalef`: _pow2_scale's lowering forced (vscalefps, or the exponent bits)
    rather than chosen for this CPU."""
    source = "import math\nimport numba\nimport numpy as np\nfrom llvmlite import ir\n" \
             "from llvmlite.binding import llvm_version_info\nfrom numba import njit\nfrom numba.core import cgutils\n" \
             "from numba.core.codegen import get_host_cpu_features\nfrom numba.extending import intrinsic\n" \
             "f32, i32, u16, u32, u64 = np.float32, np.int32, np.uint16, np.uint32, np.uint64\n" \
             f"_HELPER = dict(error_model='numpy', fastmath={set(module.HELPER_FASTMATH)})\n"
    source += "\n".join(helpers.HELPERS[n] for n in helpers.closure(names))
    if scalef is not None:
        source += f"\n_has_scalef = lambda: {scalef}\n"
    source += textwrap.dedent("""
        @njit
        def apply(f, x, out):
            for i in range(x.shape[0]):
                out[i] = f(x[i])
        """)
    namespace = {}
    exec(compile(source, "<helpers>", "exec"), namespace)
    return namespace


def test_half_conversions_match_numpy_and_ml_dtypes():
    h = _helpers("_round_f16", "_round_bf16")
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for dtype, widen, narrow in ((np.float16, "_f16_to_f32", "_f32_to_f16"),
                                 (ml_dtypes.bfloat16, "_bf16_to_f32", "_f32_to_bf16")):
        wide = np.empty(bits.shape, np.float32)
        h["apply"](h[widen], bits, wide)
        want = bits.view(dtype).astype(np.float32)
        assert ((wide.view(np.uint32) == want.view(np.uint32)) | (np.isnan(wide) & np.isnan(want))).all()
        # every value, the midpoints between neighbours (ties round to even), just either side of
        # them, and random floats over the whole range
        finite = np.sort(want[np.isfinite(want)].astype(np.float64))
        mid = (finite[1:] + finite[:-1]) / 2
        rng = np.random.default_rng(0)
        x = np.concatenate([finite, mid, np.nextafter(mid.astype(np.float32), np.inf).astype(np.float64),
                            np.nextafter(mid.astype(np.float32), -np.inf).astype(np.float64)]).astype(np.float32)
        x = np.concatenate([x, rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32),
                            np.array([np.inf, -np.inf, np.nan, 1e30, -1e-30, 0.0, -0.0], np.float32)])
        got = np.empty(x.shape, np.uint16)
        h["apply"](h[narrow], x, got)
        with np.errstate(over="ignore", invalid="ignore"):
            ref = x.astype(dtype)
        same = got == ref.view(np.uint16)
        same |= np.isnan(x) & np.isnan(got.view(dtype).astype(np.float32))
        assert same.all(), x[~same][:5]


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_float8_conversions_match_ml_dtypes_bit_for_bit(dtype):
    """Every 8-bit pattern widens to ml_dtypes' float32 (NaN included: quiet, sign kept); float32
    rounds to nearest even and saturates as ml_dtypes' astype: past the largest finite value, and
    inf and NaN, to NaN in e4m3fn (no infinities), to inf in e5m2 (NaN stays NaN). float64
    values round through float32, as ml_dtypes' astype from float64 does."""
    name = {ml_dtypes.float8_e4m3fn: "f8e4m3", ml_dtypes.float8_e5m2: "f8e5m2"}[dtype]
    h = _helpers(f"_round_{name}")
    bits = np.arange(256, dtype=np.uint16).astype(np.uint8)
    wide = np.empty(bits.shape, np.float32)
    h["apply"](h[f"_{name}_to_f32"], bits, wide)
    want = bits.view(dtype).astype(np.float32)
    np.testing.assert_array_equal(wide.view(np.uint32), want.view(np.uint32))
    # every value, the midpoints between neighbours (ties round to even), the midpoint past the
    # largest value (it rounds down, to even, in both formats) and beyond, each with its float32
    # neighbours; special values, NaNs with payloads, float32 subnormals and random bit patterns
    finite = np.unique(want[np.isfinite(want)].astype(np.float64))
    largest, step = finite[-1], finite[-1] - finite[-2]
    edges = np.array([largest + step / 2, largest + step, 2 * largest, 1e30, 3.4e38])
    x = np.concatenate([finite, (finite[1:] + finite[:-1]) / 2, edges, -edges]).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    rng = np.random.default_rng(0)
    special = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x00000001,
                        0x807FFFFF], np.uint32)
    x = np.concatenate([x, special.view(np.float32),
                        rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    got = np.empty(x.shape, np.uint8)
    h["apply"](h[f"_f32_to_{name}"], x, got)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(dtype).view(np.uint8)
    assert (got == ref).all(), (x[got != ref][:5], got[got != ref][:5], ref[got != ref][:5])
    assert (got[np.isinf(x)] == (0x7F if name == "f8e4m3" else 0x7C) | (np.signbit(x[np.isinf(x)]) << 7)).all()
    # float64: values a hair either side of float8 midpoints, which float32 rounds onto them
    y = np.concatenate([(finite[1:] + finite[:-1]) / 2 * (1 + s) for s in (2.0 ** -30, -2.0 ** -30)])
    got = np.empty(y.shape, np.uint8)
    h["apply"](h[f"_f32_to_{name}"], y, got)
    np.testing.assert_array_equal(got, y.astype(dtype).view(np.uint8))


@pytest.mark.parametrize("scalef", [pytest.param(True, marks=pytest.mark.skipif(
    not _helpers("_has_scalef")["_has_scalef"](), reason="vscalefps needs an AVX-512 CPU and LLVM 17")), False])
@pytest.mark.parametrize("name,ulps", [("_exp_f32", 1.0), ("_tanh_f32", 1.5), ("_sigmoid_f32", 2.5)])
def test_float32_transcendentals(name, ulps, scalef):
    f = _helpers(name, scalef=scalef)
    x = np.arange(0, 0xFF800001, 4093, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every sign, exponent
    x = x[np.isfinite(x)]
    got = np.empty(x.shape, np.float32)
    f["apply"](f[name], x, got)
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):
        ref = {"_exp_f32": np.exp, "_tanh_f32": np.tanh, "_sigmoid_f32": lambda v: 1 / (1 + np.exp(-v))}[name](wide)
        ref32 = ref.astype(np.float32)
    normal = np.abs(ref) >= np.finfo(np.float32).tiny
    overflow = np.abs(ref) > np.finfo(np.float32).max
    np.testing.assert_array_equal(got[overflow], ref32[overflow])
    ok = normal & ~overflow
    err = np.abs(got[ok] - ref[ok]) / np.spacing(np.abs(ref32[ok]))
    assert err.max() <= ulps, (x[ok][np.argmax(err)], err.max())
    f["apply"](f[name], np.array([np.nan], np.float32), got[:1])
    assert np.isnan(got[0])


def test_a_reduction_over_the_lanes_just_computed_runs_in_their_loop():
    """examples/cpu/softmax_safe.dt: e = exp(A - max) and the sum over e share one walk over
    the row (three walks: max, e and its sum, output), with results unchanged. e lives in the
    output's row, divided there by the sum: no scratch row."""
    prog = dt.load(EXAMPLES_DIR / "cpu" / "softmax_safe.dt")
    source = prog.source("numba")
    kernel = source[source.index("def _softmax_kernel"):source.index("def softmax_safe")]
    assert kernel.count("for y_i in range(y_valid):") == 3 and "np.empty" not in kernel
    e = "_softmax_global[x_start, y_start + y_i]"
    walk = kernel[kernel.index(f"{e} = _exp_f32("):].splitlines()
    assert walk[1].strip() == f"sum_y += {e}"
    assert kernel.rstrip().endswith(f"{e} = ({e} / y_sum_accumulator)")
    _check_every_size(EXAMPLES_DIR / "cpu" / "softmax_safe.dt", [dict(x=3, y=1), dict(x=2, y=1031)], "f32")


def test_a_row_reduction_over_a_tile_of_rows_just_computed_runs_in_its_loops():
    """examples/attention_safe_onepass.dt: each row's sum of the tile of exponentials runs in the
    walk computing them, inside the loop over the rows (one walk over the 64 x 64 tile, not
    two); in attention_safe_rows.dt, so do the scores' row max and the row sums of e, the sums'
    zero fill (a loop over the rows, reading and writing nothing the walk does) moved before;
    results unchanged at sizes that divide nothing."""
    kernel = _kernel_source((EXAMPLES_DIR / "attention_safe_onepass.dt").read_text())
    walk = kernel[kernel.index("sum_l = f32(0.0)"):].splitlines()
    assert [line.strip() for line in walk[1:5]] == [
        "for l_i in range(l_valid):", "l_exp[m_i, l_i] = _exp_f32(((k_accumulator[m_i, l_i] / np.sqrt(f32(k_SIZE))) "
        "- l_shift[m_i]))", "sum_l += l_exp[m_i, l_i]", "l_tile_exp_sum[m_i] = sum_l"]
    rows = _kernel_source((BENCH_SCHEDULES / "attention_safe_rows.dt").read_text())
    assert rows.count("for l_i in range(l_valid):") == 3
    assert rows.index("l_dvsr_accumulator[m_i] = f32(0.0)") < rows.index("e[m_i, l_i] = _exp_f32(")
    for path in (EXAMPLES_DIR / "attention_safe_onepass.dt", BENCH_SCHEDULES / "attention_safe_rows.dt"):
        _check_every_size(path, [dict(m=70, l=131, k=24, n=40)], "f32")


def _kernel_source(text: str, dtype: str = "f32") -> str:
    source = dt.loads(text, name="k").source("numba", dtype)
    return source[source.index("@njit(**_KERNEL)"):]


TWO_OUTPUTS = """Func e, total, twice, plus; In A; Var x; RVar y;
e[x, y] = exp(A[x, y]);
twice[x, y] = e[x, y] * 2.0;
total[x] = rsum(e[x, y], y);
plus[x, y] = e[x, y] / total[x];
plus.block(x:1); plus.tensorize(y:0);
e.fuse_at(plus, x); total.fuse_at(plus, x); twice.fuse_at(plus, x); twice.compile(); plus.compile_to_kernel();"""


def test_a_tile_is_kept_in_the_output_read_last_and_only_in_one_of_the_compute_dtype():
    """A tile read by two outputs' stores lives in the one stored last (the other store reads it
    there before that output is written); with bf16 outputs, which round, it stays a scratch tile."""
    kernel = _kernel_source(TWO_OUTPUTS)
    assert "np.empty" not in kernel and "plus_global[x_start, y_start + y_i] = np.exp(" in kernel.replace(
        "_exp_f32", "np.exp")
    assert "twice_global[x_start, y_start + y_i] = (plus_global[x_start, y_start + y_i] * f32(2.0))" in kernel
    assert "e = np.empty((y_SIZE,), np.float32)" in _kernel_source(TWO_OUTPUTS, "bf16")
    prog = dt.loads(TWO_OUTPUTS, name="k")
    for dtype in ("f32", "bf16"):
        for extents in (dict(x=3, y=1), dict(x=2, y=1031)):
            args = random_inputs(prog, extents, dtype, seed=3)
            got, want = prog(backend="numba", **args), prog.reference(**args)
            for name in ("twice", "plus"):
                assert_close(got[name], want[name], dtype)


# e is read after o2's store: by a reduction through t, a tile inlined into it
READ_AFTER_THE_STORE = """Func e, t, o2, s2, o1; In A; Var x; RVar y;
e[x, y] = exp(A[x, y]); t[x, y] = e[x, y] * 3.0; o2[x, y] = e[x, y] * 2.0;
s2[x] = rsum(t[x, y], y); o1[x] = s2[x] + 1.0;
o1.block(x:1); o1.tensorize(y:0);
e.fuse_at(o1, x); t.fuse_at(o1, x); o2.fuse_at(o1, x); s2.fuse_at(o1, x); o2.compile(); o1.compile_to_kernel();"""
# e has one lane: o2's store has no loop, and the renderer moves such a statement before the
# loop over y (to run the sum in it), which reads e
ONE_LANE = """Func e, t, o2, s, o1; In A, B; Var x; RVar y;
e[x] = exp(B[x]); t[x, y] = e[x] * A[x, y]; o2[x] = e[x] * 2.0;
s[x] = rsum(t[x, y], y); o1[x, y] = t[x, y] + s[x];
o1.block(x:1); o1.tensorize(y:0);
e.fuse_at(o1, x); t.fuse_at(o1, x); o2.fuse_at(o1, x); s.fuse_at(o1, x); o2.compile(); o1.compile_to_kernel();"""


@pytest.mark.parametrize("text", [READ_AFTER_THE_STORE, ONE_LANE])
def test_a_tile_read_after_the_store_or_of_one_lane_stays_out_of_the_output(text):
    """A tile inlined into a statement after the store reads the tile it was computed from; a
    store of a tile of one lane may move before a loop reading that tile: either way the tile
    kept in the output would be read after the output overwrote it."""
    assert "o2_global[x_start] = (o2_global[x_start] * f32(2.0))" not in _kernel_source(text)
    prog = dt.loads(text, name="k")
    args = random_inputs(prog, dict(x=3, y=1031), "f32", seed=3)
    got, want = prog(backend="numba", **args), prog.reference(**args)
    for name in ("o1", "o2"):
        assert_close(got[name], want[name], "f32")


# the register block by CPU features: (rows, cols) in f32 and f64, two vectors a row
DOT_SHAPES = {"+avx512f,+avx2,+fma": ((8, 32), (8, 16)), "+avx2,+fma": ((6, 16), (6, 8)), "+sse4.2": ((4, 8), (4, 4))}


@pytest.mark.parametrize("features", list(DOT_SHAPES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dot_micro_kernel_on_tiles_its_blocks_divide_and_tiles_they_divide_nowhere(monkeypatch, features, dtype):
    # every register-block shape (chosen from the CPU features numba compiles for), with operands
    # at offsets in larger arrays, added to c's tile or written over it; c outside the tile stays
    # as it was
    numba.njit(lambda: 0)()  # numba's CPU target set up under the real features first
    monkeypatch.setattr(numba.config, "CPU_FEATURES", features)
    h = _helpers("_dot", "_dot_packing")
    block = DOT_SHAPES[features][dtype == np.float64]
    rows, lanes = h["_dot_registers"](numba.from_dtype(dtype))
    assert (rows, 2 * lanes) == block
    rng = np.random.default_rng(7)
    bits = np.dtype(dtype).itemsize * 8
    # up to two blocks of rows read b's strips in place, more copy them (_dot_strip), edges or not
    for ni, nj, nk in [block + (16,), (2 * block[0], 3 * block[1], 40), (1, 1, 1), (13, 37, 19), (5, 70, 300),
                       (block[0] + 1, block[1] - 1, 17), (4, 8, 0), (3 * block[0], 2 * block[1], 33),
                       (3 * block[0] + 2, 2 * block[1] + 5, 21), (1, 3 * block[1], 70), (2 * block[0], block[1], 3)]:
        a = rng.standard_normal((ni + 5, nk + 7)).astype(dtype)
        b = rng.standard_normal((nk + 3, nj + 9)).astype(dtype)
        for accumulate in (True, False):
            c = rng.standard_normal((ni + 3, nj + 6)).astype(dtype)
            if not accumulate:
                c[1:1 + ni, 2:2 + nj] = np.nan  # never read
            expected = c.astype(np.float64)
            product = a[2:2 + ni, 3:3 + nk].astype(np.float64) @ b[1:1 + nk, 4:4 + nj]
            expected[1:1 + ni, 2:2 + nj] = product + (expected[1:1 + ni, 2:2 + nj] if accumulate else 0)
            packing = h["_dot_packing"](c, np.uint64(ni), np.uint64(nk))
            h["_dot"](c, np.uint64(1), np.uint64(2), a, np.uint64(2), np.uint64(3), b, np.uint64(1), np.uint64(4),
                      np.uint64(ni), np.uint64(nj), np.uint64(nk), accumulate, packing)
            tolerance = (1e-5 if dtype == np.float32 else 1e-12) * (nk + 1)
            np.testing.assert_allclose(c[1:1 + ni, 2:2 + nj], expected[1:1 + ni, 2:2 + nj], rtol=tolerance,
                                       atol=tolerance)
            untouched = np.ones(c.shape, bool)
            untouched[1:1 + ni, 2:2 + nj] = False
            assert np.array_equal(c[untouched], expected[untouched].astype(dtype)), (ni, nj, nk)
        llvm = h["_dot"].inspect_llvm(h["_dot"].signatures[0])
        assert f"@llvm.fmuladd.v{lanes}f{bits}(" in llvm  # the shape compiled is the one named


@pytest.mark.parametrize("features", list(DOT_SHAPES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dot_micro_kernel_reads_b_transposed_and_a_where_it_lies_or_packed(monkeypatch, features, dtype):
    # b held transposed (K[l, k] in a product over k): full strips transposed a vector of k at a
    # time in registers, the steps past the last whole vector and edge panels element by element;
    # a read where it lies (whole blocks of rows less than 4 KB long together) or packed (a last,
    # partial block; long rows); every register-block shape, so every transposition width
    numba.njit(lambda: 0)()  # numba's CPU target set up under the real features first
    monkeypatch.setattr(numba.config, "CPU_FEATURES", features)
    h = _helpers("_dot", "_dot_packing")
    rows, cols = DOT_SHAPES[features][dtype == np.float64]
    lanes = cols // 2
    rng = np.random.default_rng(11)
    u = np.uint64
    for ni, nj, nk in [(rows, cols, lanes), (2 * rows, 2 * cols, 2 * lanes + 3), (50, 70, 33), (64, 64, 64),
                       (5, 3, 1), (3 * rows, cols + 1, 300), (rows, 2 * cols, lanes - 1), (rows + 1, cols, 0)]:
        a = rng.standard_normal((ni + 5, nk + 7)).astype(dtype)
        b = rng.standard_normal((nj + 9, nk + 3)).astype(dtype)  # the tile's transpose
        for accumulate in (True, False):
            c = rng.standard_normal((ni + 3, nj + 6)).astype(dtype)
            expected = c.astype(np.float64)
            product = a[2:2 + ni, 3:3 + nk].astype(np.float64) @ b[4:4 + nj, 1:1 + nk].T
            expected[1:1 + ni, 2:2 + nj] = product + (expected[1:1 + ni, 2:2 + nj] if accumulate else 0)
            h["_dot"](c, u(1), u(2), a, u(2), u(3), b, u(1), u(4), u(ni), u(nj), u(nk), accumulate,
                      h["_dot_packing"](c, u(ni + 2), u(nk + 1)), True)
            tolerance = (1e-5 if dtype == np.float32 else 1e-12) * (nk + 1)
            np.testing.assert_allclose(c, expected, rtol=tolerance, atol=tolerance, err_msg=str((ni, nj, nk)))


def test_an_a_tile_packed_once_serves_products_with_every_b():
    # _dot_pack_a before a loop, _dot with a_packed in it: the strips and edge blocks of each
    # step's b go past the packed a tile in the packing, which stays as it was for the next step
    h = _helpers("_dot_pack_a", "_dot", "_dot_packing")
    rng = np.random.default_rng(5)
    u = np.uint64
    ni, nj, nk = 50, 70, 33
    a = rng.standard_normal((ni + 1, nk + 2)).astype(np.float32)
    c = np.zeros((ni, nj), np.float32)
    packing = h["_dot_packing"](c, u(ni), u(nk))
    h["_dot_pack_a"](packing, a, u(1), u(2), u(ni), u(nk))
    for step in range(3):
        b = rng.standard_normal((nk, nj + 4)).astype(np.float32)
        transposed = step == 1
        a_elsewhere = np.full_like(a, np.nan)  # not read: the packed tile is
        h["_dot"](c, u(0), u(0), a_elsewhere, u(1), u(2), np.ascontiguousarray(b.T) if transposed else b, u(0), u(0),
                  u(ni), u(nj), u(nk), False, packing, transposed, True)
        np.testing.assert_allclose(c, a[1:1 + ni, 2:2 + nk] @ b[:, :nj], rtol=1e-4, atol=1e-4)


def test_dot_helpers_allocate_nothing_a_call():
    # each product's copies go into its packing, made once per call of the kernel function
    for name in ("_dot", "_dot_pack_a"):
        assert "np.empty" not in helpers.HELPERS[name], name


def test_an_a_tile_the_same_in_every_step_of_a_loop_is_packed_before_it():
    """2mm_inner's first product reads A[m, k] over all of k in every step of the loop over l: A's
    tile is packed once before that loop, and the product reads the packed tile each step; a
    tile that changes in the loop (attention's e) or over its axis (a matmul's A over k's tiles)
    is packed by each step's _dot, as before."""
    prog = dt.load(EXAMPLES_DIR / "cpu" / "2mm_inner.dt")
    source = prog.source("numba")
    kernel = source[source.index("@njit(**_KERNEL)"):]
    packing = kernel.index("k_accumulator_packing = _dot_packing(k_accumulator, 32, k_SIZE)\n")
    pack = kernel.index("_dot_pack_a(k_accumulator_packing, A_global, m_start, k_start, m_valid, k_valid)\n")
    loop = kernel.index("for l_iter in range(")
    product = kernel.index("_dot(k_accumulator, u64(0), u64(0), A_global, m_start, k_start, B_global, k_start, "
                           "l_start, m_valid, l_valid, k_valid, False, k_accumulator_packing, a_packed=True)")
    assert packing < kernel.index("for pid in range(") < pack < loop < product
    assert kernel.count("_dot_pack_a(") == 1
    for sizes in [dict(m=50, n=70, k=33, l=77), dict(m=1, n=65, k=1, l=130), dict(m=64, n=128, k=64, l=128)]:
        args = random_inputs(prog, sizes, "f32", seed=4)
        assert_close(prog(backend="numba", **args), prog.reference(**args), "f32")
    source = dt.loads(MATMUL_DT.format(k=8)).source("numba")
    kernel = source[source.index("@njit(**_KERNEL)"):]
    assert "_dot_pack_a(" not in kernel and "a_packed" not in kernel and "_dot(k_accumulator, " in kernel
    kernel = dt.load(BENCH_SCHEDULES / "attention_safe_heads.dt").source("numba")
    assert re.search(r"\n            _dot\(l_num_accumulator, u64\(0\), u64\(0\), l_exp, ", kernel)


def test_dot_micro_kernel_keeps_its_block_in_vector_registers():
    # _dot_block is one loop of vector fused multiply-adds over the block's accumulators, as many
    # lanes wide as the CPU's vectors; c is loaded before the loop and stored after it, never inside
    h = _helpers("_dot", "_dot_packing")
    c = np.zeros((16, 64), np.float32)
    h["_dot"](c, np.uint64(0), np.uint64(0), np.ones((16, 8), np.float32), np.uint64(0), np.uint64(0),
              np.ones((8, 64), np.float32), np.uint64(0), np.uint64(0), np.uint64(16), np.uint64(64), np.uint64(8), True,
              h["_dot_packing"](c, np.uint64(16), np.uint64(8)))
    assert (c == 8).all()
    rows, lanes = h["_dot_registers"](numba.float32)
    llvm = h["_dot"].inspect_llvm(h["_dot"].signatures[0])
    loop = llvm[llvm.index("dot_block.loop:"):]
    loop = loop[:loop.index("br i1")]
    # each step: two vectors of fused multiply-adds a row of the block (LLVM may unroll the loop, so
    # a whole number of steps), none of them scalar
    fmas = loop.count(f"@llvm.fmuladd.v{lanes}f32(")
    assert fmas and fmas % (2 * rows) == 0 and "@llvm.fmuladd.f32(" not in loop
    assert loop.count("store ") == 0


BENCH_SCHEDULES = EXAMPLES_DIR.parent / "benchmarks" / "cpu" / "schedules"
MATMUL_DT = """
Func mm;
In A, B;
Var x, y;
RVar k;
mm[x, y] = rdot(A[x, k], B[k, y], k);
mm.block(x:16, y:64);
mm.tensorize(x:16, y:64, k:{k});
mm.compile();
"""


def test_a_product_stored_as_it_is_is_computed_in_the_output():
    # the Dot, over the whole reduction in one tile, writes the output's tile without a zero fill
    # (no scratch tile copied out). Sizes that divide nothing, one row, k smaller than a step of
    # the micro-kernel
    prog = dt.loads(MATMUL_DT.format(k=0))
    source = prog.source("numba")
    kernel = source[source.index("def mm_kernel"):]
    assert "np.empty" not in kernel and "= f32(0.0)" not in kernel
    assert "_dot(mm_global, x_start, y_start, A_global, x_start, k_start, B_global, k_start, y_start, x_valid, " \
           "y_valid, k_valid, False, mm_packing)" in kernel
    for x, y, k in [(37, 101, 23), (1, 70, 5), (16, 64, 8), (3, 5, 1), (20, 9, 2)]:
        args = random_inputs(prog, dict(x=x, y=y, k=k), "f32", seed=x)
        out = np.full((x, y), np.nan, np.float32)  # whatever the output held is not read
        got = prog(backend="numba", out=out, **args)
        assert np.shares_memory(got, out)
        assert_close(out, prog.reference(**args), "f32")


def test_a_product_over_whole_rows_of_the_output_is_summed_there():
    # 2mm_inner's second product: summed over l's tiles, over all of n (whole rows of the
    # output, contiguous as a scratch tile), so it accumulates in the output; its first step
    # writes over the output's tile, which is zero-filled only where the loop over l runs no step
    prog = dt.load(EXAMPLES_DIR / "cpu" / "2mm_inner.dt")
    source = prog.source("numba")
    kernel = source[source.index("@njit(**_KERNEL)"):]
    assert "        if 0 >= l_SIZE:\n            for m_i in range(m_valid):\n                for n_i in range(n_valid):\n" \
           "                    _2mm_global[m_start + m_i, n_start + n_i] = f32(0.0)\n" in kernel
    assert "l_accumulator" not in kernel
    assert "_dot(_2mm_global, m_start, n_start, k_accumulator, u64(0), u64(0), C_global, l_start, n_start, " \
           "m_valid, n_valid, l_valid, l_iter != 0, _2mm_packing)" in kernel
    for sizes in [dict(m=33, n=7, k=3, l=130), dict(m=1, n=65, k=1, l=64)]:
        args = random_inputs(prog, sizes, "f32", seed=2)
        out = np.full((sizes["m"], sizes["n"]), np.nan, np.float32)  # the first step reads none of it
        prog(backend="numba", out=out, **args)
        assert_close(out, prog.reference(**args), "f32")
    # a loop over l of no step (no extent is 0; the kernel called as a launch would with l = 0)
    generated = backends.get("numba").module(prog.pipeline("f32"))
    A, B, C = np.ones((40, 3), np.float32), np.ones((3, 0), np.float32), np.ones((0, 70), np.float32)
    out = np.full((40, 70), np.nan, np.float32)
    generated._2mm_kernel(0, 2, A, B, C, out, 40, 70, 3, 0)
    np.testing.assert_array_equal(out, 0)


def test_a_product_summed_over_a_loop_writes_its_first_step_over_its_accumulator():
    # matmul's k_accumulator: the zero fill runs only where the loop over k's tiles runs no step
    # (`if 0 >= k_SIZE:`); otherwise the loop's first step writes the product over whatever the tile held
    prog = dt.loads(MATMUL_DT.format(k=8))
    kernel = prog.source("numba")
    kernel = kernel[kernel.index("def mm_kernel"):]
    assert "        if 0 >= k_SIZE:\n            for x_i in range(x_valid):\n" in kernel
    assert "k_valid, k_iter != 0, k_accumulator_packing)" in kernel
    for x, y, k in [(37, 101, 23), (16, 64, 8), (3, 5, 1)]:
        args = random_inputs(prog, dict(x=x, y=y, k=k), "f32", seed=k)
        assert_close(prog(backend="numba", **args), prog.reference(**args), "f32")


def test_a_product_used_beyond_its_store_keeps_its_scratch_tile():
    # an epilogue (sigmoid), another product reading it (2mm's first), an output of another dtype
    # (bf16), a sum over k's tiles of part of the output's rows: the product is computed in a
    # scratch tile, as before
    for text, dtype, sizes, kept in [
            (MATMUL_DT.format(k=8), "f32", dict(x=37, y=101, k=23), "k_accumulator"),
            ((BENCH_SCHEDULES / "mmsigmoid.dt").read_text(), "f32", dict(x=37, y=101, k=23), "k_accumulator"),
            ((EXAMPLES_DIR / "cpu" / "2mm_outer.dt").read_text(), "f32", dict(m=37, n=515, k=3, l=33),
             "k_accumulator"),
            (MATMUL_DT.format(k=8), "bf16", dict(x=37, y=101, k=23), "k_accumulator")]:
        prog = dt.loads(text)
        source = prog.source("numba", dtype)
        kernel = source[source.index("@njit(**_KERNEL)"):]
        assert f"{kept} = np.empty(" in kernel and f"_dot({kept}, u64(0), u64(0), " in kernel, text
        args = random_inputs(prog, sizes, dtype, seed=1)
        assert_close(prog(backend="numba", **args), prog.reference(**args), dtype)


def test_a_head_of_a_batched_operand_is_read_in_place():
    """Q[b, h, m, k], K[b, h, l, k] and V[b, h, l, n] with blocks of one along b and h: each
    product reads the head's 2-D view of the tensor, no copy a step; K, the product's [k, l] in
    [l, k], as a transposed operand (_dot copies its strips from it); Q, the same in every step of
    the loop over l, packed once before it."""
    prog = dt.loads((BENCH_SCHEDULES / "attention_safe_heads.dt").read_text())
    kernel = prog.source("numba", "f32")
    kernel = kernel[kernel.index("@njit(**_KERNEL)"):]
    assert "_dot_pack_a(k_accumulator_packing, Q_global[b_start, h_start], m_start, k_start, m_valid, k_valid)\n" \
           "        for l_iter in range(" in kernel
    assert "_dot(k_accumulator, u64(0), u64(0), Q_global[b_start, h_start], m_start, k_start, K_global[b_start, " \
           "h_start], k_start, l_start, m_valid, l_valid, k_valid, False, k_accumulator_packing, b_transposed=True, " \
           "a_packed=True)" in kernel
    assert "V_global[b_start, h_start], l_start, n_start" in kernel
    assert not re.search(r"\b[QKV]_tile\b", kernel)
    for sizes in (dict(b=2, h=3, m=100, l=77, k=40, n=24), dict(b=1, h=2, m=64, l=128, k=64, n=64),
                  dict(b=1, h=1, m=300, l=200, k=50, n=70)):
        args = random_inputs(prog, sizes, "f32", seed=2)
        assert_close(prog(backend="numba", **args), prog.reference(**args), "f32")


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_weight_stored_transposed_is_read_in_place(dtype):
    """A linear layer's W[n, k] in X[m, k] · W[n, k]: the product reads W as it lies, transposed,
    at sizes that leave edge blocks along every axis."""
    prog = dt.loads("Func y;\nIn X, W;\nVar m, n;\nRVar k;\ny[m, n] = rdot(X[m, k], W[n, k], k);\n"
                    "y.block(m:64, n:64);\ny.tensorize(m:64, n:64, k:32);\ny.compile();")
    kernel = prog.source("numba", dtype)
    assert "W_global, k_start, n_start, m_valid, n_valid, k_valid, k_iter != 0, k_accumulator_packing, b_transposed=True)" \
        in kernel and "W_tile" not in kernel
    for sizes in (dict(m=70, n=45, k=77), dict(m=64, n=64, k=64)):
        args = random_inputs(prog, sizes, dtype, seed=3)
        assert_close(prog(backend="numba", **args), prog.reference(**args), dtype)
