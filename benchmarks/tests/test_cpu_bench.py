"""The CPU benchmark harness (benchmarks/cpu/): a quick run end to end (every provider checked
against the reference, well-formed records in the GPU harness's shape, several processes,
side-by-side speed-ups), the semantics of every baseline against dt's algorithm, the output
handling, and the OpenBLAS kernel the measuring processes get."""
import importlib.util
import json
import math
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the CPU benchmark's baselines need PyTorch")
pytest.importorskip("numba", reason="the CPU benchmark times dt's numba backend")
pytest.importorskip("threadpoolctl", reason="the CPU benchmark records NumPy's BLAS kernel with threadpoolctl "
                                           "(pip install 'dt[bench]')")

CPU_DIR = Path(__file__).resolve().parent.parent / "cpu"
sys.path.insert(0, str(CPU_DIR))

import cpu_first_call  # noqa: E402
import cpu_machine  # noqa: E402
import cpu_measure  # noqa: E402
import cpu_report  # noqa: E402
import cpu_rows  # noqa: E402
from cases import MEMORY, Case  # noqa: E402

import dt  # noqa: E402

# benchmarks/gpu/bench.py is imported as `bench` by the GPU harness's tests: load this one apart
_spec = importlib.util.spec_from_file_location("cpu_bench", CPU_DIR / "bench.py")
cpu_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu_bench)

# the fields every record of the GPU harness carries
GPU_FIELDS = {"run", "device", "timer", "kernel", "kind", "shape", "dims", "dtype", "provider", "status", "error",
              "ms", "bytes", "flops", "ms_runs", "tol", "rel_err"}


@pytest.mark.slow
def test_quick_run_checks_every_provider_and_reports_medians_over_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")  # forced here; the measuring processes go without it
    monkeypatch.delenv("OPENBLAS_L2_SIZE", raising=False)  # the other override, which a machine may set too
    assert cpu_bench.main(["--out", str(tmp_path), "--quick", "--processes", "2",
                           "--kernels", "softmax_safe,attention_safe"]) == 0
    doc = json.loads((tmp_path / "cpu.json").read_text())
    md = (tmp_path / "cpu.md").read_text()
    (run,) = doc["runs"]
    assert run["processes"] == 2 and run["quick"] and run["cpu"]["vector_isa"] in md
    assert run["openblas_forced"] == {"env": {"OPENBLAS_CORETYPE": "Haswell"}, "architecture": "Haswell"}
    clean = cpu_machine.numpy_blas(cpu_bench.probe({k: v for k, v in os.environ.items()
                                                             if k not in cpu_machine.OPENBLAS_OVERRIDES}))
    assert run["numpy_blas"]["architecture"] == clean["architecture"]
    records = doc["records"]
    assert {(r["kernel"], r["provider"]) for r in records} == {
        *(("softmax_safe", p) for p in ("dt", "eager", "compile", "numpy")),
        *(("attention_safe", p) for p in ("dt", "dt@attention_safe_onepass", "dt@attention_safe_flash", "eager",
                                          "compile", "numpy", "sdpa"))}
    for r in records:
        assert GPU_FIELDS <= set(r), r
        assert r["status"] == "ok" and r["rel_err"] <= r["tol"], r
        assert len(r["ms_runs"]) == 2 and all(ms > 0 for ms in r["ms_runs"]) and len(r["ms_rounds"]) == 2
        assert all(len(rounds) == 2 for rounds in r["ms_rounds"])  # --quick: two rounds in each process
        assert r["ms_runs"] == [statistics.median(rounds) for rounds in r["ms_rounds"]]
        assert r["ms"] == statistics.median(r["ms_runs"]) and r["ms_spread"] == [min(r["ms_runs"]), max(r["ms_runs"])]
        assert all(s is not None and s >= 0 for s in r["first_call_s_runs"])
        if r["kind"] == MEMORY:
            assert r["output"] == "preallocated" and r["pct_copy_same"] > 0 and len(r["copy_same_ms_runs"]) == 2
        else:
            assert r["output"] == "allocated" and r["tflops"] > 0  # SDPA has no out=
    for row in ("softmax_safe", "attention_safe"):
        baselines = [r for r in records if r["kernel"] == row and not r["provider"].startswith("dt")]
        best = min(baselines, key=lambda r: r["ms"])
        for r in (r for r in records if r["kernel"] == row and r["provider"].startswith("dt")):
            ratios = [b / d for b, d in zip(best["ms_runs"], r["ms_runs"])]
            assert r["best_baseline"] == best["provider"] and r["speedup_runs"] == ratios
            assert r["speedup_vs_best"] == statistics.median(ratios)
            assert r["speedup_range"] == [min(ratios), max(ratios)]
            assert r["schedule"].endswith(".dt")
    assert [f["file"] for f in run["first_call"]] == [
        "examples/cpu/softmax_safe.dt", "benchmarks/cpu/schedules/attention_safe_rows.dt",
        "examples/attention_safe_onepass.dt", "benchmarks/cpu/schedules/attention_safe_flash.dt"]
    assert all(f["empty_cache_s"] > f["cached_s"] > 0 for f in run["first_call"])
    assert "## Memory-bound rows" in md and "## Matmul-like rows" in md and "## First call of each DT file" in md
    assert "| softmax_safe | x=5, y=100 | preallocated | softmax_safe.dt |" in md
    assert "| attention_safe | m=100, l=72, k=16, n=24 | allocated | " in md
    assert "OPENBLAS_CORETYPE=Haswell" in md and f"**{clean['architecture']}** kernel" in md
    assert "every row in 2 fresh processes" in md and "then 2 round-robin rounds" in md


def _inputs(case: Case, scale: float) -> dict:
    g = torch.Generator().manual_seed(3)
    return {n: torch.randn(case.input_shape(n), generator=g) * scale for n in case.kernel.inputs}


# Inputs this large make exp overflow float32 unless each row's max is subtracted first.
OVERFLOWING_SCALE = {"softmax_safe": 100.0, "attention_safe": 10.0, "attention_safe_heads": 10.0}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(cpu_rows.KERNEL_ROWS))
def test_every_provider_computes_dts_algorithm(name):
    """Every provider the harness builds (dt's schedules, PyTorch eager, NumPy, SDPA; writing
    into a preallocated output and allocating its own) against the algorithm of the kernel's
    DT program evaluated directly, on its tiny row; softmax and attention on inputs where
    exp overflows without the max subtracted. torch.compile compiles the reference function
    itself (checked here against the algorithm too)."""
    case = cpu_rows.rows([name], quick=True)[0]
    t = _inputs(case, OVERFLOWING_SCALE.get(name, 1.0))
    arrays = {n: v.numpy() for n, v in t.items()}
    scalars = case.kernel.scalars
    want = dt.load(case.kernel.program).reference(**{n: v.numpy() for n, v in t.items()}, **scalars)
    assert np.isfinite(want).all()
    fn_out = case.kernel.torch_fn(**{n: v.double() for n, v in t.items()}, **scalars)
    np.testing.assert_allclose(fn_out.numpy(), want, rtol=1e-9, atol=1e-9)
    for provider in cpu_rows.providers(case, ["dt", "eager", "numpy", "sdpa"]):
        for out in ([None] if provider == "sdpa" else [torch.full(case.out_shape, math.nan), None]):
            got = cpu_measure.build(case, provider, t, arrays, out)()
            got = got.numpy() if isinstance(got, torch.Tensor) else got
            err = np.linalg.norm(got - want) / np.linalg.norm(want)
            assert err < 1e-5, (provider, out is None, err)
            if out is not None:
                assert np.shares_memory(got, out.numpy()), f"{provider} did not write into out"


@pytest.mark.slow
@pytest.mark.parametrize("name, unsafe", [("softmax_safe", "softmax.dt"), ("attention_safe", "attention.dt")])
def test_the_overflowing_inputs_overflow_without_the_max_subtracted(name, unsafe):
    """What makes the semantics check above able to fail: dt's softmax and attention without
    the max (examples/softmax.dt, attention.dt) are not finite on the inputs it uses."""
    case = cpu_rows.rows([name], quick=True)[0]
    t = _inputs(case, OVERFLOWING_SCALE[name])
    with np.errstate(all="ignore"):
        got = dt.load(cpu_rows.EXAMPLES / unsafe)(**{n: v.numpy() for n, v in t.items()}, backend="numba")
    assert not np.isfinite(got).all()


def test_a_row_is_allocated_for_every_provider_when_one_has_no_out():
    attention = cpu_rows.rows(["attention_safe"])[0]
    with_sdpa = cpu_rows.providers(attention, cpu_rows.PROVIDERS)
    assert "sdpa" in with_sdpa and cpu_rows.output_mode(with_sdpa) == cpu_rows.ALLOCATED
    without = cpu_rows.providers(attention, ["dt", "eager", "compile", "numpy"])
    assert cpu_rows.output_mode(without) == cpu_rows.PREALLOCATED
    softmax = cpu_rows.rows(["softmax_safe"])[0]
    assert "sdpa" not in cpu_rows.providers(softmax, cpu_rows.PROVIDERS)  # SDPA only on attention rows


def test_a_provider_that_does_not_write_into_out_fails_its_check(monkeypatch):
    k = cpu_rows.KERNEL_ROWS["relu"]
    monkeypatch.setitem(cpu_rows.KERNEL_ROWS, "relu",
                        cpu_rows.CpuKernel(k.kernel, k.shapes, k.quick, k.schedules, k.eager,
                                           lambda a, s, out: (lambda: np.maximum(a["A"], 0)), k.calls))
    case = cpu_rows.rows(["relu"], quick=True)[0]
    res = cpu_measure.measure_row(case, ["eager", "numpy"], rounds=1, seconds=0.0, min_runs=1, pause=0.0)
    assert res["output"] == "preallocated" and res["providers"]["eager"]["status"] == "ok"
    numpy = res["providers"]["numpy"]
    assert numpy["status"] == "error" and numpy["ms_rounds"] == [] and numpy["rel_err"] is None
    assert numpy["error"] == "RuntimeError: did not write into the preallocated output"


def test_speed_ups_are_ratios_within_each_process_and_a_dead_process_is_an_error():
    case = cpu_rows.rows(["relu"], quick=True)[0]

    def proc(dt_ms, eager_ms, numpy_ms):
        ok = {"status": "ok", "error": None, "rel_err": 1e-7, "first_call_s": 0.1}
        return {"output": "preallocated", "copy_same_ms_rounds": [0.5], "copy_same_bytes": case.bytes,
                "providers": {"dt": dict(ok, ms_rounds=dt_ms), "eager": dict(ok, ms_rounds=eager_ms),
                              "numpy": dict(ok, ms_rounds=numpy_ms)}}

    processes = [proc([1.0, 1.0], [2.0, 2.0], [4.0]), proc([2.0], [2.0], [4.0]), proc([1.5], [3.0], [4.0])]
    records = cpu_report.row_records({"run": "r"}, case, ["dt", "eager", "numpy"], processes)
    by = {r["provider"]: r for r in records}
    assert by["eager"]["ms_runs"] == [2.0, 2.0, 3.0] and by["eager"]["ms"] == 2.0
    # in each process eager / dt: 2, 1, 2 (the ratio of the medians over processes would be 2 / 1.5)
    assert by["dt"]["best_baseline"] == "eager" and by["dt"]["speedup_runs"] == [2.0, 1.0, 2.0]
    assert by["dt"]["speedup_vs_best"] == 2.0 and by["dt"]["speedup_range"] == [1.0, 2.0]
    assert by["dt"]["pct_copy_same"] == pytest.approx(100 * 0.5 / 1.5)

    died = cpu_report.row_records({"run": "r"}, case, ["dt", "eager", "numpy"],
                                  processes[:2] + [{"failed": "the measuring process exited with status -9"}])
    for r in died:
        assert r["status"] == "error" and r["error"].endswith("status -9") and r["ms_runs"][2] is None
        assert r["ms"] == statistics.median(r["ms_runs"][:2])
    assert "speedup_vs_best" not in {k for r in died for k in r}


def test_the_measuring_processes_run_without_the_openblas_overrides(tmp_path):
    base = {"PATH": "/bin", "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576"}
    env = cpu_machine.measuring_env(base, tmp_path)
    assert env == {"PATH": "/bin", "DT_CACHE_DIR": str(tmp_path / "dt"),
                   "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    forced = cpu_machine.numpy_blas(cpu_bench.probe(dict(os.environ, OPENBLAS_CORETYPE="Haswell")))
    assert forced["internal_api"] == "openblas" and forced["architecture"] == "Haswell"


def test_the_vector_isa_is_the_widest_the_cpu_flags_name():
    assert cpu_machine.vector_isa(["sse4_2", "avx", "avx2", "fma"]) == "AVX2"
    assert cpu_machine.vector_isa(["avx2", "avx512f", "avx512bw"]) == "AVX-512"
    assert cpu_machine.vector_isa(["sse2"]) == "none recognised"


@pytest.mark.slow
def test_first_call_is_timed_with_an_empty_cache_then_cached():
    times = cpu_first_call.first_call_times(cpu_rows.KERNEL_ROWS["relu"].schedules[0], {"x": 8, "y": 16},
                                            dict(os.environ))
    assert times["empty_cache_s"] > times["cached_s"] > 0 and times["numba_start_s"] > 0


def test_list_names_each_rows_providers_and_output(capsys):
    assert cpu_bench.main(["--out", "unused", "--list", "--kernels", "attention_safe,matmul"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4  # attention_safe's row and matmul's three
    assert "allocated" in lines[0] and "dt@attention_safe_onepass" in lines[0] and "sdpa" in lines[0]
    assert all("preallocated" in line and "examples/cpu/matmul.dt" in line for line in lines[1:])

