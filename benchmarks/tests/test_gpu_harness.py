"""The GPU benchmark harness (benchmarks/gpu/), exercised on the CPU: its dry run end to end,
a failing provider, the time budget, merging runs, and the kernel catalogue and schedules
it relies on (every baseline computes the DT algorithm; every schedule is that algorithm)."""
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from dt.tune import timing

torch = pytest.importorskip("torch", reason="the GPU benchmark harness needs torch (pip install -e '.[triton]')")

GPU_DIR = Path(__file__).resolve().parent.parent / "gpu"
sys.path.insert(0, str(GPU_DIR))

import bench  # noqa: E402
import measure  # noqa: E402
import cases  # noqa: E402
import render  # noqa: E402
import report  # noqa: E402
import space  # noqa: E402
import tune  # noqa: E402

import dt  # noqa: E402

FIELDS = {"kernel", "shape", "dtype", "provider", "ms", "device", "status", "gbps", "pct_copy", "rel_err"}


def _run(tmp_path, *extra):
    assert bench.main(["--dry-run", "--out", str(tmp_path), "--tag", "t", *extra]) == 0
    doc = json.loads((tmp_path / "gpu-t.json").read_text())
    return doc, (tmp_path / "gpu-t.md").read_text()


def test_dry_run_checks_times_and_reports(tmp_path):
    doc, md = _run(tmp_path, "--kernels", "softmax,matmul,2mm_outer", "--dtypes", "f32,f16", "--providers", "dt,eager")
    (run,) = doc["runs"]
    assert run["dry_run"] and run["copy"]["gbps"] > 0 and run["cublas_peak"]["f16"]["tflops"] > 0
    records = doc["records"]
    # tiny shapes: softmax has 2 in f32; matmul and 2mm_outer have 2 and 2 in f16; dt and eager each
    assert {(r["kernel"], r["provider"]) for r in records} == {
        (k, p) for k in ("softmax", "matmul", "2mm_outer") for p in ("dt", "eager")}
    assert len(records) == 12
    for r in records:
        assert FIELDS <= set(r), r
        assert r["status"] == "ok", r
        assert r["rel_err"] <= r["tol"] and r["ms"] > 0 and r["gbps"] > 0
        if r["kind"] == cases.MEMORY:  # the same-size copy moves the row's bytes, timed in the row's rounds
            assert len(r["copy_same_ms_runs"]) == len(r["ms_runs"]) and r["copy_same_gbps"] > 0
            assert math.isclose(r["copy_same_gbps"], r["bytes"] / statistics.median(r["copy_same_ms_runs"]) / 1e6,
                                rel_tol=1e-3)
            assert math.isclose(r["pct_copy_same"], 100 * r["gbps"] / r["copy_same_gbps"])
        if r["kind"] == cases.MATMUL:
            assert r["tflops"] > 0 and r["cublas_ms"] > 0 and r["pct_cublas"] > 0
        if r["provider"] == "dt":
            assert r["schedule"].endswith(".dt") and r["best_baseline"] == "eager"
            assert math.isclose(r["speedup_vs_best"], next(
                e["ms"] for e in records if e["provider"] == "eager" and render.case_key(e) == render.case_key(r))
                / r["ms"])
    assert "## Memory-bound kernels" in md and "## Matmul-like kernels" in md
    assert "dt % of same-size copy" in md
    assert "| softmax | x=8, y=256 | f32 |" in md and "| 2mm_outer | m=32, n=64, k=32, l=32 | f16 |" in md
    assert (tmp_path / "gpu-t-memory.png").stat().st_size > 0
    assert (tmp_path / "gpu-t-matmul.png").stat().st_size > 0


def test_llm_rows_take_integer_inputs_sizes_and_several_outputs(tmp_path):
    """issue 27's rows: ids, targets, tables and int8 weights drawn by each kernel; extents no
    tensor gives passed to dt as sizes=; rope's two outputs checked each; SDPA's own call."""
    doc, md = _run(tmp_path, "--kernels", "rope,embedding,cross_entropy,group_norm,int8_matmul,paged_decode",
                   "--dtypes", "bf16", "--providers", "dt,eager,sdpa", "--no-plots")
    records = doc["records"]
    assert {(r["kernel"], r["provider"]) for r in records} == {
        (k, p) for k in ("rope", "embedding", "cross_entropy", "group_norm", "int8_matmul", "paged_decode")
        for p in ("dt", "eager")} | {("paged_decode", "sdpa")}
    for r in records:
        assert r["status"] == "ok" and r["rel_err"] <= r["tol"], r
    e = cases.KERNELS["embedding"].extents((7, 33, 50))
    assert cases.Case(cases.KERNELS["embedding"], (7, 33, 50), "bf16", e).bytes == 7 * 8 + 2 * 7 * 33 * 2
    c, s = (bench.measure.case_inputs(cases.Case(cases.KERNELS["rope"], (1, 5, 3, 1, 12), "f32",
                                                 cases.KERNELS["rope"].extents((1, 5, 3, 1, 12))), torch.device("cpu"), 1)[n]
            for n in "CS")
    assert torch.equal(c[:, :6], c[:, 6:]) and torch.allclose(c * c + s * s, torch.ones_like(c))  # real RoPE tables
    inputs = bench.measure.case_inputs(cases.Case(cases.KERNELS["cross_entropy"], (6, 5003), "bf16",
                                                   {"r": 400, "v": 5003}), torch.device("cpu"), 1)
    targets = inputs["T"]
    assert targets.dtype == torch.int64 and (targets == -100).any() and ((targets >= 0) & (targets < 5003)).any()
    assert "| paged_decode |" in md and "| int8_matmul |" in md


def test_failing_provider_is_a_row_and_the_run_goes_on(tmp_path, monkeypatch):
    def broken(case, ctx):
        raise RuntimeError("compiler exploded")
    monkeypatch.setitem(bench.BUILDERS, "eager", broken)
    doc, md = _run(tmp_path, "--kernels", "rmsnorm,attention", "--dtypes", "f32,bf16", "--providers",
                   "dt,eager,liger,sdpa", "--no-plots")
    by = {}
    for r in doc["records"]:
        by.setdefault((r["kernel"], r["provider"]), []).append(r["status"])
    assert set(by[("rmsnorm", "eager")]) == {"error"} and set(by[("attention", "eager")]) == {"error"}
    assert set(by[("rmsnorm", "dt")]) == {"ok"} and set(by[("attention", "sdpa")]) == {"ok"}
    assert set(by[("rmsnorm", "liger")]) == {"skipped"}  # Liger needs a GPU
    assert ("attention", "liger") not in by and ("rmsnorm", "sdpa") not in by  # no such op in those libraries
    assert "RuntimeError: compiler exploded" in md
    assert "compiler exploded" in (tmp_path / "gpu-t.log").read_text()


def test_time_budget_skips_the_remaining_rows(tmp_path):
    doc, _ = _run(tmp_path, "--kernels", "add", "--providers", "eager", "--budget", "1e-9", "--no-plots")
    assert doc["records"] and all(r["status"] == "skipped" and "budget" in r["error"] for r in doc["records"])


@pytest.mark.slow
def test_repeats_time_the_providers_round_robin_and_report_the_speed_up_range(tmp_path, monkeypatch):
    clock, timed = iter(range(1, 1000)), []
    monkeypatch.setattr(bench.measure.Timer, "__call__", lambda self, fn: timed.append(fn) or float(next(clock)))
    doc, md = _run(tmp_path, "--kernels", "add", "--dtypes", "f32", "--quick", "--providers", "dt,eager,compile",
                   "--repeats", "3", "--no-plots")
    rows = {r["provider"]: r for r in doc["records"] if r["kind"] == cases.MEMORY}
    first = rows["dt"]["ms_runs"][0]
    assert timed[int(first) - 2] is timed[int(first) - 1]  # dt timed once more before the rounds, and that time discarded
    # one timing per provider per round, then the same-size copy's
    assert rows["dt"]["ms_runs"] == [first, first + 4, first + 8]
    assert rows["eager"]["ms_runs"] == [first + 1, first + 5, first + 9]
    assert rows["compile"]["ms_runs"] == [first + 2, first + 6, first + 10]
    assert rows["dt"]["copy_same_ms_runs"] == [first + 3, first + 7, first + 11]
    assert math.isclose(rows["dt"]["copy_same_gbps"], rows["dt"]["bytes"] / (first + 7) / 1e6, rel_tol=1e-3)
    assert rows["dt"]["ms"] == first + 4 and rows["dt"]["best_baseline"] == "eager"
    low, high = rows["dt"]["speedup_range"]
    assert (low, high) == ((first + 1) / (first + 8), (first + 9) / first)
    assert f"| {(first + 5) / (first + 4):.2f}x ({low:.2f}-{high:.2f}) |" in md


def test_the_cublas_reference_is_timed_round_robin_with_the_providers(tmp_path, monkeypatch):
    clock, timed = iter(range(1, 1000)), []
    monkeypatch.setattr(bench.measure.Timer, "__call__", lambda self, fn: timed.append(fn) or float(next(clock)))
    doc, _ = _run(tmp_path, "--kernels", "matmul", "--dtypes", "f16", "--providers", "dt,eager", "--repeats", "3",
                  "--no-plots")
    for row in {render.case_key(r) for r in doc["records"]}:
        dt, eager = sorted((r for r in doc["records"] if render.case_key(r) == row), key=lambda r: r["provider"])
        first = dt["ms_runs"][0]
        assert dt["ms_runs"] == [first, first + 3, first + 6] and eager["ms_runs"] == [first + 1, first + 4, first + 7]
        assert dt["cublas_ms_runs"] == eager["cublas_ms_runs"] == [first + 2, first + 5, first + 8]
        assert dt["cublas_ms"] == first + 5 and dt["pct_cublas"] == 100 * (first + 5) / (first + 3)


@pytest.mark.parametrize("fails_after", [0, 1])
def test_a_cublas_reference_failing_in_the_rounds_leaves_the_row_without_its_percentage(tmp_path, monkeypatch,
                                                                                        fails_after):
    real_call = bench.measure.cublas_call

    def call(device, shapes, dtype):
        if shapes == [(bench.measure.PEAK_GEMM_CPU,) * 3]:
            return real_call(device, shapes, dtype)
        calls = itertools.count()

        def products():
            if next(calls) > fails_after:  # the discarded first timing, then `fails_after` rounds
                raise RuntimeError("cuBLAS went away")
        return products
    monkeypatch.setattr(bench.measure, "cublas_call", call)
    doc, _ = _run(tmp_path, "--kernels", "matmul", "--dtypes", "f16", "--quick", "--providers", "dt,eager",
                  "--repeats", "3", "--no-plots")
    assert doc["records"] and all(r["status"] == "ok" and len(r["ms_runs"]) == 3 and r["pct_cublas"] is None
                                  and "cublas_ms_runs" not in r and "cuBLAS went away" in r["cublas_error"]
                                  for r in doc["records"])
    assert f"/ {bench.measure.CUBLAS}\n" in (tmp_path / "gpu-t.log").read_text()


@pytest.mark.parametrize("kernel, field", [("matmul", "cublas_error"), ("add", "copy_same_error")])
def test_a_row_whose_providers_all_fail_says_why_its_ceiling_was_not_timed(tmp_path, monkeypatch, kernel, field):
    def fails(case, ctx):
        raise RuntimeError("no kernel for you")
    monkeypatch.setitem(bench.BUILDERS, "eager", fails)
    doc, _ = _run(tmp_path, "--kernels", kernel, "--dtypes", "f16" if kernel == "matmul" else "f32", "--quick",
                  "--providers", "eager", "--no-plots")
    assert doc["records"] and all(r["status"] == "error" and "no kernel for you" in r["error"]
                                  and r[field] == "not timed: every provider failed or was skipped"
                                  for r in doc["records"])


def test_a_context_lost_before_the_rounds_says_the_ceiling_was_not_timed(tmp_path, monkeypatch):
    def dies(case, ctx):
        raise RuntimeError("unspecified launch failure")
    monkeypatch.setitem(bench.BUILDERS, "eager", dies)
    monkeypatch.setattr(bench.measure, "cuda_usable", lambda device: False)
    argv = ["--dry-run", "--out", str(tmp_path), "--tag", "t", "--kernels", "add", "--dtypes", "f32", "--quick",
            "--providers", "dt,eager", "--no-plots"]
    assert bench.main(argv) == 3
    doc = json.loads((tmp_path / "gpu-t.json").read_text())
    first = {r["provider"]: r for r in doc["records"] if r["shape"] == doc["records"][0]["shape"]}
    assert first["dt"]["error"] == "not timed: the row stopped before its timing"  # it passed its check
    assert {r["copy_same_error"] for r in first.values()} == {"not timed: the row stopped before its timing"}


def test_the_same_size_copy_is_timed_in_each_round_and_its_median_kept(tmp_path, monkeypatch):
    copy_times = itertools.cycle([1.0, 9.0, 2.0])  # each row's rounds: the median (2.0), not the mean (4.0)

    def copy():
        return "copy"
    real_copy_call = bench.measure.copy_call  # the run's own 1 GiB copy (moved=None) stays real
    monkeypatch.setattr(bench.measure, "copy_call",
                        lambda device, moved: (copy, moved) if moved else real_copy_call(device, moved))
    monkeypatch.setattr(bench.measure.Timer, "__call__",
                        lambda self, fn: next(copy_times) if fn is copy else 0.5)
    doc, _ = _run(tmp_path, "--kernels", "add", "--dtypes", "f32", "--quick", "--providers", "dt,eager",
                  "--repeats", "3", "--no-plots")
    records = [r for r in doc["records"] if r["kind"] == cases.MEMORY]
    assert len(records) == 4  # two rows, two providers
    for r in records:
        assert r["copy_same_ms_runs"] == [1.0, 9.0, 2.0] and r["ms_runs"] == [0.5] * 3
        assert r["copy_same_gbps"] == r["bytes"] / 2.0 / 1e6 and r["pct_copy_same"] == 400.0


@pytest.mark.parametrize("fails_at", ["set-up", "timing"])
def test_a_failing_same_size_copy_leaves_the_row_timed_without_its_percentage(tmp_path, monkeypatch, fails_at):
    def copy_call(device, moved):
        def fails():
            raise RuntimeError("copy engine on fire")
        if fails_at == "set-up" and moved:  # the run's own 1 GiB copy (moved=None) still works
            fails()
        return fails, moved
    monkeypatch.setattr(bench.measure, "copy_call", copy_call)
    doc, _ = _run(tmp_path, "--kernels", "add", "--dtypes", "f32", "--quick", "--providers", "dt,eager", "--no-plots")
    records = [r for r in doc["records"] if r["kind"] == cases.MEMORY]
    assert records and all(r["status"] == "ok" and r["ms"] > 0 and r["pct_copy_same"] is None
                           and "copy engine on fire" in r["copy_same_error"]
                           and "copy_same_ms_runs" not in r and "copy_same_gbps" not in r for r in records)
    assert "same-size copy" in (tmp_path / "gpu-t.log").read_text()


def test_a_context_lost_while_timing_leaves_no_row_checked_but_untimed(tmp_path, monkeypatch):
    real = bench.BUILDERS["eager"]

    def dies_when_timed(case, ctx):
        make = real(case, ctx)
        made = []

        def build(inputs):
            made.append(inputs)
            if len(made) == 1:
                return make(inputs)  # the correctness check passes

            def run():
                raise RuntimeError("unspecified launch failure")
            return run
        return build

    monkeypatch.setitem(bench.BUILDERS, "eager", dies_when_timed)
    monkeypatch.setattr(bench.measure, "cuda_usable", lambda device: False)
    argv = ["--dry-run", "--out", str(tmp_path), "--tag", "t", "--kernels", "add,relu", "--dtypes", "f32", "--quick",
            "--providers", "dt,eager,compile", "--repeats", "2", "--no-plots"]
    assert bench.main(argv) == 3  # the context is lost: the run says so
    doc = json.loads((tmp_path / "gpu-t.json").read_text())
    first, *rest = dict.fromkeys(r["shape"] for r in doc["records"] if r["kernel"] == "add")
    add = {r["provider"]: r for r in doc["records"] if r["kernel"] == "add" and r["shape"] == first}
    assert add["dt"]["status"] == "ok" and len(add["dt"]["ms_runs"]) == 1 and add["dt"]["ms"] is not None
    assert add["eager"]["status"] == "error" and "launch failure" in add["eager"]["error"]
    assert add["compile"]["status"] == "error" and add["compile"]["error"].startswith("not timed")
    assert len(doc["records"]) == len({(r["kernel"], r["shape"], r["provider"]) for r in doc["records"]})  # no duplicates
    later = [r for r in doc["records"] if r["kernel"] == "relu" or r["shape"] in rest]
    assert later and {r["status"] for r in later} == {"skipped"}


def test_repeats_must_be_positive(tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["--dry-run", "--out", str(tmp_path), "--repeats", "0"])


def test_the_cold_timer_demotes_kept_lines_and_flushes_before_every_timed_run(monkeypatch):
    pytest.importorskip("triton")
    import measure
    import triton
    log, events = [], []
    # run k takes 1 + k ms, but run 3 takes 100 ms (so the median, not the mean, is asked), and
    # the host queues run 5 too late (its start event has passed): that run is not kept
    stalled_run, slow_run = 5, 3

    class Event:
        def __init__(self, enable_timing):
            self.run = len(events) // 2
            events.append(self)

        def record(self):
            log.append("start" if self is events[2 * self.run] else "end")

        def query(self):
            return self.run == stalled_run

        def elapsed_time(self, end):
            return 100.0 if self.run == slow_run else 1.0 + self.run

    driver = types.SimpleNamespace(get_empty_cache_for_benchmark=lambda: "cache",
                                   clear_cache=lambda cache: log.append("flush" if cache == "cache" else "?"))
    monkeypatch.setattr(triton.runtime, "driver", types.SimpleNamespace(active=driver))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(("sleep", cycles)))
    monkeypatch.setattr(timing, "reset_persisting_l2", lambda: log.append("reset"))
    ms = measure.cold_bench(lambda: log.append("fn"), warmup=0, rep=0)
    assert log[:2] == ["fn", "sync"]  # compiled and idle before the flush buffer is made
    head_start = measure.HEAD_START_CYCLES

    def run(cycles):
        return ["sync", "reset", ("sleep", cycles), "flush", "start", "fn", "end"]

    # every run on a cold L2 behind a spin kernel; after the stalled run the spin is doubled
    assert log[2:] == (run(head_start) * (stalled_run + 1) + run(2 * head_start) * 5 + ["sync"])
    kept = [1.0 + k for k in range(11) if k != stalled_run]
    kept[slow_run] = 100.0
    assert ms == pytest.approx(sorted(kept)[4] / 2 + sorted(kept)[5] / 2)  # the median of the ten kept runs


def test_the_cold_timer_keeps_the_runs_of_a_call_that_waits_for_the_gpu_itself(monkeypatch):
    """A call that synchronizes inside (Liger's cross-entropy reads a count back) is never queued
    ahead of the GPU: the head start doubles to its longest, then its runs are kept (it once
    looped forever)."""
    pytest.importorskip("triton")
    import measure
    import triton
    sleeps = []

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            pass

        def query(self):
            return True  # every start event has passed by the time the call returns

        def elapsed_time(self, end):
            return 2.0

    driver = types.SimpleNamespace(get_empty_cache_for_benchmark=lambda: "cache", clear_cache=lambda cache: None)
    monkeypatch.setattr(triton.runtime, "driver", types.SimpleNamespace(active=driver))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", sleeps.append)
    monkeypatch.setattr(timing, "reset_persisting_l2", lambda: None)
    assert measure.cold_bench(lambda: None, warmup=0, rep=0) == 2.0
    longest = sleeps.index(measure.MAX_HEAD_START_CYCLES)
    assert sleeps[longest:] == [measure.MAX_HEAD_START_CYCLES] * 10 and sleeps[:longest] == sorted(sleeps[:longest])


def test_the_cold_timer_says_what_to_do_without_the_cuda_driver(monkeypatch, request):
    import ctypes

    import measure
    timing.libcuda.cache_clear()  # loaded once per process: forget it before and after the fakes
    request.addfinalizer(timing.libcuda.cache_clear)

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    with pytest.raises(RuntimeError, match="--timer do_bench"):
        measure.reset_persisting_l2()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: types.SimpleNamespace(cuCtxResetPersistingL2Cache=lambda: 201))
    with pytest.raises(RuntimeError, match="CUDA error 201"):
        measure.reset_persisting_l2()


def test_memory_bound_rows_are_timed_cold_and_compute_bound_rows_steady_by_default():
    import measure
    assert bench.parse_args(["--out", "x"]).timer == "auto"
    rows = {c.title: c for c in cases.cases(["softmax", "matmul", "attention"], ["f16", "f32"])}
    auto = {title: bench.row_timer("auto", False, c.flops, c.bytes).mode for title, c in rows.items()}
    assert auto["softmax [x=128, y=65536] f32"] == "cold"  # no FLOPs counted: memory-bound
    assert auto["matmul [x=16, y=4096, k=4096] f16"] == "cold"  # 16 FLOP/B: it streams the 32 MB operand
    assert auto["matmul [x=4096, y=4096, k=4096] f16"] == "do_bench"  # 1365 FLOP/B
    assert auto["attention [m=1024, l=1024, k=64, n=64] f16"] == "do_bench"  # 512 FLOP/B
    edge = measure.RIDGE_FLOP_PER_BYTE
    assert measure.row_timer("auto", edge * 10, 10).mode == "do_bench" and measure.row_timer("auto", edge * 10 - 1, 10).mode == "cold"
    assert bench.row_timer("cold", False, 1e12, 1).mode == "cold"  # --timer other than auto: every row
    assert bench.row_timer("auto", True, 1e12, 1).mode == "cpu"  # a dry run
    case = next(c for c in rows.values() if c.kernel.name == "matmul" and c.shape[0] == 4096)
    assert tune._timer(case).mode == "do_bench" and (tune._timer(case).warmup, tune._timer(case).rep) == (10, 40)


def test_the_timers_call_cold_bench_and_do_bench_with_their_repetitions(monkeypatch):
    pytest.importorskip("triton")
    import measure
    import triton.testing
    seen = []
    monkeypatch.setattr(measure, "cold_bench", lambda fn, warmup, rep: seen.append(("cold", warmup, rep)) or 1.0)
    monkeypatch.setattr(triton.testing, "do_bench",
                        lambda fn, warmup, rep, return_mode: seen.append(("do_bench", warmup, rep, return_mode)) or 2.0)
    assert measure.Timer("cold")(lambda: None) == 1.0 and measure.Timer("do_bench", 10, 40)(lambda: None) == 2.0
    assert seen == [("cold", 25, 100), ("do_bench", 10, 40, "median")]


def test_cublas_reference_runs_each_product_of_the_row():
    import measure
    row = next(c for c in cases.cases(["attention"], ["f16"], tiny=True))
    products = []
    real = torch.matmul
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "matmul", lambda a, b: products.append((a.shape, b.shape)) or real(a, b))
        measure.cublas_call(torch.device("cpu"), row.gemm_shapes, torch.float16)()
    assert products == [((m, k), (k, n)) for m, n, k in row.gemm_shapes] and len(products) == 2


def test_the_cublas_reference_is_timed_in_each_round_with_the_rows_timer_and_its_median_kept(tmp_path, monkeypatch):
    """Each matmul-like row's products are timed as one more call of its rounds, with the row's
    own timer (attention's and 2mm's rows differ), and their median is the row's cuBLAS time."""
    reference_times, reference_modes = itertools.cycle([1.0, 9.0, 2.0]), []
    real_call = bench.measure.cublas_call

    def call(device, shapes, dtype):
        products = real_call(device, shapes, dtype)
        peak = shapes == [(bench.measure.PEAK_GEMM_CPU,) * 3]
        return products if peak else lambda: products() and "row's products"

    def time(self, fn):
        if fn() == "row's products":
            reference_modes.append(self.mode)
            return next(reference_times)
        return 0.5
    monkeypatch.setattr(bench.measure, "cublas_call", call)
    monkeypatch.setattr(bench.measure.Timer, "__call__", time)
    monkeypatch.setattr(bench, "row_timer", lambda mode, dry, flops, nbytes: bench.measure.Timer(f"timer of {nbytes}"))
    doc, _ = _run(tmp_path, "--kernels", "attention,2mm_outer", "--dtypes", "f16", "--quick", "--providers",
                  "dt,eager", "--repeats", "3", "--no-plots")
    records = [r for r in doc["records"] if r["kind"] == cases.MATMUL]
    assert {r["kernel"] for r in records} == {"attention", "2mm_outer"}
    row_timers = [r["timer"] for r in records if r["provider"] == "dt"]
    assert len(set(row_timers)) == len(row_timers) == 3  # attention's row and two 2mm rows, each its own timer
    assert reference_modes == [timer for timer in row_timers for _ in range(3)]
    for r in records:
        assert r["cublas_ms_runs"] == [1.0, 9.0, 2.0] and r["ms_runs"] == [0.5] * 3
        assert r["cublas_ms"] == 2.0 and r["pct_cublas"] == 400.0  # the median, not the mean


def test_a_failing_cublas_reference_leaves_the_row_timed_without_its_percentage(tmp_path, monkeypatch):
    def call(device, shapes, dtype):
        def fails():
            raise RuntimeError("no cuBLAS handle")
        return fails if shapes[0][0] < 1000 else (lambda: None)  # the run's peak (8192^3 on a GPU) works
    monkeypatch.setattr(bench.measure, "cublas_call", call)
    monkeypatch.setattr(bench.measure, "PEAK_GEMM_CPU", 1024)
    doc, _ = _run(tmp_path, "--kernels", "matmul", "--dtypes", "f16", "--quick", "--providers", "dt,eager",
                  "--no-plots")
    records = doc["records"]
    assert records and all(r["status"] == "ok" and r["ms"] > 0 and r["pct_cublas"] is None and r["cublas_ms"] is None
                           and "no cuBLAS handle" in r["cublas_error"] for r in records)
    assert f"/ {bench.measure.CUBLAS}\n" in (tmp_path / "gpu-t.log").read_text()


def test_the_benchmark_records_each_rows_timer(tmp_path):
    assert bench.main(["--dry-run", "--out", str(tmp_path), "--kernels", "relu", "--dtypes", "f32",
                       "--providers", "dt", "--no-plots", "--tag", "t"]) == 0
    doc = json.loads((tmp_path / "gpu-t.json").read_text())
    assert doc["runs"][0]["timer"] == "cpu" and {r["timer"] for r in doc["records"]} == {"cpu"}


def test_round_robin_drops_a_call_that_fails_and_says_so():
    import measure
    errors = []

    def time(call):
        if call == "broken":
            raise RuntimeError("launch failed")
        return len(call)

    calls = {"ok": "ok", "broken": "broken", "last": "last"}
    kept = list(measure.round_robin(time, calls, 2, on_error=lambda name, e: errors.append((name, str(e)))))
    assert kept == [("ok", 2), ("last", 4), ("ok", 2), ("last", 4)] and errors == [("broken", "launch failed")]
    with pytest.raises(RuntimeError, match="launch failed"):
        list(measure.round_robin(time, {"broken": "broken"}, 1))
    errors.clear()  # the first call failing: the next one takes the discarded timing
    kept = list(measure.round_robin(time, {"broken": "broken", "ok": "ok"}, 1, on_error=lambda n, e: errors.append(n)))
    assert kept == [("ok", 2)] and errors == ["broken"]
    errors.clear()  # every call failing: nothing timed, each failure told once
    assert list(measure.round_robin(time, {"broken": "broken"}, 3, on_error=lambda n, e: errors.append(n))) == []
    assert errors == ["broken"]


def test_report_merges_runs(tmp_path):
    def rec(provider, ms, status="ok", run="a"):
        return {"run": run, "kernel": "softmax", "kind": cases.MEMORY, "shape": "x=8, y=256", "dtype": "f32",
                "provider": provider,
                "status": status, "ms": ms, "bytes": 16384, "device": "GPU X", "gbps": 1.0, "pct_copy": 50.0,
                "error": None if status == "ok" else "boom", "schedule": "s.dt" if provider == "dt" else None}
    run = {"id": "r", "device": "GPU X", "timer": "do_bench", "copy": {"gbps": 2.0}, "cublas_peak": {}}
    first = {"runs": [dict(run, id="a")], "records": [rec("dt", 2.0), rec("eager", 3.0, "error")]}
    second = {"runs": [dict(run, id="b")],
              "records": [rec("eager", 4.0, run="b"), rec("dt", 9.0, "error", run="b"), rec("liger", 8.0, run="b")]}
    superseded = {"runs": [dict(run, id="c")], "records": [rec("liger", 7.0, "error", run="c")]}
    paths = []
    for name, doc in (("a", first), ("b", second), ("c", superseded)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(doc))
    assert report.main([str(p) for p in paths] + ["--out", str(tmp_path / "out")]) == 0
    merged = json.loads((tmp_path / "out" / "gpu.json").read_text())
    assert [r["id"] for r in merged["runs"]] == ["a", "b"]  # c supplies no record any more
    by = {r["provider"]: r for r in merged["records"]}
    assert by["dt"]["ms"] == 2.0 and by["eager"]["ms"] == 4.0  # an ok record beats an error, whatever the order
    assert by["dt"]["best_baseline"] == "eager" and by["dt"]["speedup_vs_best"] == 2.0
    md = (tmp_path / "out" / "gpu.md").read_text()
    assert "dt % of same-size copy" in md
    assert "| softmax | x=8, y=256 | f32 |" in md and "| 2.00x |" in md
    assert (tmp_path / "out" / "gpu_memory_bound.png").exists()


def test_report_drops_contenders_a_later_run_of_the_row_supersedes(tmp_path):
    def rec(provider, ms, run):
        return {"run": run, "kernel": "softmax", "kind": cases.MEMORY, "shape": "x=8, y=256", "dtype": "f32",
                "provider": provider, "status": "ok", "ms": ms, "bytes": 16384, "device": "GPU X", "gbps": 1.0,
                "pct_copy": 50.0, "error": None, "schedule": "s.dt"}
    run = {"device": "GPU X", "timer": "do_bench", "copy": {"gbps": 2.0}, "cublas_peak": {}}
    old = {"runs": [dict(run, id="old", started="2026-01-01T00:00:00Z")],
           "records": [rec("dt", 2.0, "old"), rec("dt@fast_then", 1.0, "old"), rec("eager", 3.0, "old")]}
    new = {"runs": [dict(run, id="new", started="2026-02-01T00:00:00Z")],
           "records": [rec("dt", 1.5, "new"), rec("dt@another", 1.8, "new")]}
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, doc in zip(paths, (old, new)):
        path.write_text(json.dumps(doc))
    assert report.main([str(p) for p in paths] + ["--out", str(tmp_path / "out")]) == 0
    merged = json.loads((tmp_path / "out" / "gpu.json").read_text())
    assert sorted(r["provider"] for r in merged["records"]) == ["dt", "dt@another", "eager"]


@pytest.mark.parametrize("name", list(cases.KERNELS))
def test_baseline_functions_compute_the_dt_algorithm(name):
    """PyTorch's function (eager, torch.compile and the float64 reference) against dt's own
    NumPy oracle of the kernel's algorithm, on each tiny shape."""
    kernel = cases.KERNELS[name]
    prog = dt.load(kernel.program)
    assert set(prog.inputs) == set(kernel.inputs) and set(prog.scalars) == set(kernel.scalars)
    for shape in kernel.tiny:
        case = cases.Case(kernel, shape, "f32", kernel.extents(shape))
        g = torch.Generator().manual_seed(sum(shape))
        t = {n: kernel.made_inputs[n](case.extents, g, "cpu", torch.float64) if n in kernel.made_inputs
             else torch.randn(case.input_shape(n), generator=g, dtype=torch.float64) for n in kernel.inputs}
        if kernel.saved is not None:  # a backward row: what its forward saves, from the others (as measured)
            t.update(kernel.saved(t, kernel.scalars))
        want = prog.reference(sizes={d: case.extents[d] for d in kernel.dt_sizes} or None, **t, **kernel.scalars)
        got = kernel.torch_fn(**t, **kernel.scalars)
        got, want = (got, tuple(want.values())) if isinstance(got, tuple) else ((got,), (want,))
        for g_out, w_out in zip(got, want, strict=True):  # several outputs: in the program's order
            np.testing.assert_allclose(g_out.double().numpy(), w_out.numpy(), rtol=1e-9, atol=1e-9)
        assert case.out_shape in {tuple(o.shape) for o in got}  # the largest output's


def _schedule_files():
    return sorted({p for k in cases.KERNELS.values() for p in cases.candidates(k)}
                  | {cases.ROOT / row[3] for row in cases.SCHEDULES} | set(cases.TUNED_DIR.glob("*/*.dt")))


def _kernel_of(path):
    if path.parent.parent == cases.TUNED_DIR:  # DEVICE/KERNEL_EXTENTS_DTYPE.dt
        return next(k for name, k in cases.KERNELS.items()
                    if path.stem.startswith(name + "_") and path.stem[len(name) + 1].isdigit())
    table = {cases.ROOT / p: name for name, _, _, p in cases.SCHEDULES}  # e.g. examples/llm/decode_split.dt
    return next(k for k in cases.KERNELS.values() if path in cases.candidates(k) or table.get(path) == k.name)


@pytest.mark.parametrize("path", _schedule_files(),
                         ids=lambda p: f"{p.parent.name}/{p.name}" if p.parent.parent == cases.TUNED_DIR else p.name)
def test_every_schedule_is_its_kernels_algorithm(path):
    """Each .dt the table, the schedule search or --tune can pick computes its kernel's
    algorithm on the interpreter, and the Triton backend generates code for it in f32 and bf16."""
    kernel = _kernel_of(path)
    prog = dt.load(path)
    # ids, tables, 8-bit data, extents no input gives: tests/test_llm_examples.py checks those kernels
    numeric = not (kernel.made_inputs or kernel.dt_sizes)
    for shape in kernel.tiny if numeric else ():
        case = cases.Case(kernel, shape, "f32", kernel.extents(shape))
        g = torch.Generator().manual_seed(7)
        t = {n: torch.randn(case.input_shape(n), generator=g) for n in kernel.inputs}
        if kernel.saved is not None:
            t.update(kernel.saved(t, kernel.scalars))
        want = kernel.torch_fn(**{n: v.double() for n, v in t.items()}, **kernel.scalars)
        got = prog(backend="interp", **t, **kernel.scalars)
        got, want = (tuple(got.values()), want) if isinstance(want, tuple) else ((got,), (want,))
        for g_out, w_out in zip(got, want, strict=True):  # several outputs: in the program's order
            assert measure.relative_error(g_out, w_out) < 1e-5
    for dtype in ("f32", "bf16"):
        assert "@triton.jit" in prog.source("triton", dtype)


def test_schedule_table_and_overrides():
    k = cases.KERNELS["matmul"]
    skinny = cases.Case(k, (16, 4096, 4096), "f16", k.extents((16, 4096, 4096)))
    square = cases.Case(k, (4096, 4096, 4096), "f16", k.extents((4096, 4096, 4096)))
    assert cases.schedule_for(skinny, device="h100").name == "matmul_16x4096x4096_f16.dt"  # the search's winner
    odd = cases.Case(k, (16, 512, 4096), "f16", k.extents((16, 512, 4096)))  # a row never searched: the table
    assert cases.schedule_for(odd, device="h100").name == "matmul_128x128x64.dt"
    assert cases.schedule_for(square, {"matmul": "/x/y.dt"}) == Path("/x/y.dt")
    assert cases.schedule_for(skinny, {"matmul:x=16, y=4096, k=4096": "/a.dt", "matmul": "/b.dt"}) == Path("/a.dt")
    by_dtype = {"matmul:x=16, y=4096, k=4096:f16": "/c.dt", "matmul:x=16, y=4096, k=4096": "/a.dt"}
    assert cases.schedule_for(skinny, by_dtype) == Path("/c.dt")  # the most specific key wins
    bf16 = cases.Case(k, (16, 4096, 4096), "bf16", k.extents((16, 4096, 4096)))
    assert cases.schedule_for(bf16, by_dtype) == Path("/a.dt")
    for kernel, _, _, path in cases.SCHEDULES:
        assert (cases.ROOT / path).exists() and kernel in cases.KERNELS
    args = bench.parse_args(["--out", "o", "--schedule", "softmax:x=128, y=65536=examples/softmax.dt"])
    assert dict(args.schedule) == {"softmax:x=128, y=65536": str(cases.ROOT / "examples/softmax.dt")}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in (
    "softmax_safe", "layernorm", "attention", "attention_safe") else name for name in space.GENERATORS])
def test_search_space_schedules_are_legal(name):
    """A sample of every row's generated schedules parses, checks, lowers and renders to
    Triton (tune.py runs them all on the GPU)."""
    for case in cases.cases([name]):
        found = space.variants(case)
        assert found and len({n for n, _ in found}) == len(found)
        for variant, text in found[::7]:
            prog = dt.loads(text, name="variant")
            assert "@triton.jit" in prog.source("triton", case.dtype), variant


def test_tune_writes_each_rows_winner(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tune, "RESULTS", tmp_path / "results")
    case = next(c for c in cases.cases(["softmax"], ["f32"]) if c.shape == (4096, 1000))
    (fast, fast_text), (slow, slow_text) = space.variants(case)[:2]
    run = {"device": "GPU", "torch": "x", "rows": [{
        "kernel": "softmax", "shape": case.shape_text, "dtype": "f32", "bytes": 1, "flops": None, "timer": "cold",
        "variants": [{"name": slow, "ms": 0.02}, {"name": fast, "ms": 0.01}, {"name": "broken", "error": "E"}],
        "best": fast, "best_source": fast_text}]}
    path = tmp_path / "tune-x.json"
    path.write_text(json.dumps(run))
    assert tune.main(["--write", str(path)]) == 0
    written = tmp_path / "tuned" / "gpu" / "softmax_4096x1000_f32.dt"  # the folder of device "GPU"
    assert written.read_text().endswith(fast_text) and f"variant {fast}, 0.0100 ms (one timing) on GPU" in \
        written.read_text()
    table = (tmp_path / "results" / "tune.md").read_text()
    assert f"| softmax | x=4096, y=1000 | f32 | GPU | cold | 3 | 1 | {fast} | 0.0100 |  | gpu/softmax_4096x1000_f32.dt | " \
        "0.0200 |" in table
    del run["rows"][0]["timer"]  # a search from before the cold timer
    path.write_text(json.dumps(run))
    assert tune.main(["--write", str(path)]) == 0
    assert "| f32 | GPU | do_bench | 3 |" in (tmp_path / "results" / "tune.md").read_text()
    assert dt.load(written).outputs == ("_softmax",)


def test_tune_finalists_are_timed_again_alternating_and_the_lowest_median_wins():
    """The screening's fastest is not kept when alternating rounds time another finalist
    lower; variants more than 5% slower than the fastest are not finalists."""
    times = {"a": iter([9.0, 1.00, 1.00, 1.00]), "b": iter([0.90, 0.95, 0.90]), "c": iter([])}
    timed = []
    variants = [{"name": "a", "ms": 0.99}, {"name": "b", "ms": 1.02}, {"name": "c", "ms": 1.2}, {"name": "d", "error": "E"}]
    best = tune._final(variants, {"a": "a", "b": "b", "c": "c", "d": None}, rounds=3,
                       timer=lambda fn: timed.append(fn) or next(times[fn]))
    assert best["name"] == "b" and best["final_ms"] == 0.90 and best["final_ms_runs"] == [0.90, 0.95, 0.90]
    assert variants[0]["final_ms_runs"] == [1.0, 1.0, 1.0]  # its first timing (9.0) was the discarded warm-up
    assert timed == ["a", "a", "b", "a", "b", "a", "b"] and "final_ms" not in variants[2]


def test_tune_screening_checks_every_variant_then_keeps_the_fastest_of_two_rounds(monkeypatch):
    """Every variant is checked first; then the correct ones are timed back to back in two
    round-robin rounds after a discarded timing, each keeping its fastest; one that fails
    while timed is out."""
    case = next(c for c in cases.cases(["softmax"], ["f32"]) if c.shape == (4096, 1000))
    events, times = [], {"ta": iter([9.0, 1.0, 0.8]), "tc": iter([2.0, 2.5]), "te": iter([3.0, None])}

    def check(case, ident, text, check, ref, timed):
        events.append(("check", text))
        return ({"rel_err": 1.0, "error": "relative error 1"}, None) if text == "wrong" else ({"rel_err": 0.0}, text)

    def time(call):
        events.append(("time", call))
        ms = next(times[call])
        if ms is None:
            raise RuntimeError("launch failed")  # te's second timing
        return ms

    monkeypatch.setattr(tune, "_check", check)
    found = [("a", "ta"), ("b", "wrong"), ("c", "tc"), ("d", "td"), ("e", "te")]
    records, calls = tune._screen(case, found, {tune._ident(case, "d"): "compile error"}, {}, None, {}, time)
    assert events == [("check", "ta"), ("check", "wrong"), ("check", "tc"), ("check", "te")] + [
        ("time", t) for t in ("ta", "ta", "tc", "te", "ta", "tc", "te")]
    assert records == [{"name": "a", "rel_err": 0.0, "ms_runs": [1.0, 0.8], "ms": 0.8},
                       {"name": "b", "rel_err": 1.0, "error": "relative error 1"},
                       {"name": "c", "rel_err": 0.0, "ms_runs": [2.0, 2.5], "ms": 2.0},
                       {"name": "d", "error": "compile error"}, {"name": "e", "rel_err": 0.0, "error": "RuntimeError: launch failed"}]
    assert calls == {"a": "ta", "c": "tc"}


def test_tune_writes_the_finalists_winner(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tune, "RESULTS", tmp_path / "results")
    case = next(c for c in cases.cases(["softmax"], ["f32"]) if c.shape == (4096, 1000))
    (first, first_text), (second, second_text) = space.variants(case)[:2]
    run = {"device": "GPU", "torch": "x", "rows": [{
        "kernel": "softmax", "shape": case.shape_text, "dtype": "f32", "bytes": 1, "flops": None,
        "variants": [{"name": first, "ms": 0.010, "final_ms": 0.012, "final_ms_runs": [0.012] * 3},
                     {"name": second, "ms": 0.0105, "final_ms": 0.011, "final_ms_runs": [0.011] * 3}],
        "best": second, "best_source": second_text}]}
    path = tmp_path / "tune-x.json"
    path.write_text(json.dumps(run))
    assert tune.main(["--write", str(path)]) == 0
    written = (tmp_path / "tuned" / "gpu" / "softmax_4096x1000_f32.dt").read_text()
    assert written.endswith(second_text)
    assert f"variant {second}, 0.0110 ms (the median of 3 rounds alternating 2 finalists) on GPU" in written
    assert f"| {second} | 0.0110 | 2 | gpu/softmax_4096x1000_f32.dt | 0.0100 |" in (tmp_path / "results" / "tune.md").read_text()


@pytest.mark.slow
def test_gpu_verification_runs_on_the_cpu_interpreter(tmp_path):
    """verify_triton.py --tiny takes the GPU verification's code paths (torch float64 formula
    at talk-like sizes, dt's NumPy reference at odd sizes, the standalone module) under
    Triton's interpreter."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(GPU_DIR / "verify_triton.py"), "--tiny", "--out", str(tmp_path),
                           "--only", "attention_onepass,dyt"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((tmp_path / "verify_triton.json").read_text())["results"]
    assert {(r["case"], r["dtype"]) for r in results} == {
        (f"{name}/{sizes}", dtype) for name in ("attention_onepass", "dyt") for sizes in ("talk", "odd")
        for dtype in ("f16", "f32", "bf16")}
    assert all(r["status"] == "ok" and r["standalone"] == "same bits" for r in results), results


def test_tune_takes_at_most_six_finalists_and_drops_one_that_fails():
    def time(fn):
        if fn == "v1":
            raise RuntimeError("launch failed")
        return {"v0": 2.0, "v2": 1.5}.get(fn, 3.0)
    variants = [{"name": f"v{i}", "ms": 1.0 + i / 1000} for i in range(8)]
    best = tune._final(variants, {v["name"]: v["name"] for v in variants}, rounds=2, timer=time)
    assert best["name"] == "v2" and variants[1]["final_error"] == "RuntimeError: launch failed"
    assert [v["name"] for v in variants if "final_ms" in v] == ["v0", "v2", "v3", "v4", "v5"]  # v6, v7: beyond six


def test_tune_falls_back_to_a_schedule_that_has_not_failed_when_every_finalist_fails():
    def time(fn):
        raise RuntimeError("launch failed")
    variants = [{"name": "a", "ms": 1.0}, {"name": "b", "ms": 1.02}, {"name": "c", "ms": 1.5}, {"name": "d", "error": "E"}]
    best = tune._final(variants, {v["name"]: v["name"] for v in variants}, rounds=2, timer=time)
    assert best["name"] == "c" and variants[0]["final_error"] == variants[1]["final_error"] == "RuntimeError: launch failed"
    assert tune._final(variants[:2], {"a": "a", "b": "b"}, rounds=2, timer=time) is None  # no schedule left


def test_tune_rounds_must_be_positive():
    with pytest.raises(SystemExit):
        tune.main(["--out", "x", "--rounds", "0"])


def test_long_rows_search_statistics_walks_wider_than_the_output_walk():
    """At 128x65536 the space offers statistics tiles 2 and 4 times the output tile (at most
    32768), one-pass or not for layernorm; the generated kernel walks the row in both widths."""
    pytest.importorskip("triton")
    case = next(c for c in cases.cases(["layernorm"], ["f32"]) if c.shape == (128, 65536))
    found = dict(space.variants(case))
    widened = sorted(name for name in found if "_statistics" in name)
    assert "tiled16384_statistics32768_w32_onepass" in widened and "tiled8192_statistics16384_w16" in widened
    for name in widened:
        output, statistics = map(int, re.match(r"tiled(\d+)_statistics(\d+)_", name).groups())
        assert output < statistics <= 32768
    assert len(widened) == 20  # (4096: 8192, 16384; 8192: 16384, 32768; 16384: 32768) x 16, 32 warps x one-pass
    source = dt.loads(found["tiled16384_statistics32768_w32_onepass"], "widened").source("triton", "f32")
    # the statistics' walk (its whole tiles, then its last, cut one), then the output's tiles
    assert re.search(r"for y_iter in range\(0, y_SIZE // 32768 \* 32768, 32768\):", source)
    assert re.search(r"for y_iter_3 in range\(0, y_SIZE, 16384\):", source)


def test_wide_rows_search_statistics_walks_up_to_the_whole_row():
    """At 4096 and 8192 wide the space offers statistics tiles 2 and 4 times the output tile of
    1024-4096, up to the whole row in one tile, one-pass or not for layernorm; at 4096x1000 rows
    are whole tiles and nothing is widened."""
    pytest.importorskip("triton")
    for shape, count in (((4096, 8192), 26), ((4096, 4096), 14)):
        case = next(c for c in cases.cases(["layernorm"], ["f32"]) if c.shape == shape)
        found = dict(space.variants(case))
        widened = [name for name in found if "_statistics" in name]
        assert len(widened) == count
        for name in widened:
            output, statistics, warps = map(int, re.match(r"tiled(\d+)_statistics(\d+)_w(\d+)", name).groups())
            assert output < shape[1] and output < statistics <= shape[1]
            assert statistics // (32 * warps) <= 64 and 4 <= output // (32 * warps) <= 32
    case = next(c for c in cases.cases(["layernorm"], ["f32"]) if c.shape == (4096, 8192))
    source = dt.loads(dict(space.variants(case))["tiled4096_statistics8192_w16_onepass"], "whole").source("triton", "f32")
    assert re.search(r"for y_iter in range\(0, y_SIZE // 8192 \* 8192, 8192\):", source)
    assert re.search(r"for y_iter_3 in range\(0, y_SIZE, 4096\):", source)
    narrow = next(c for c in cases.cases(["layernorm"], ["f32"]) if c.shape == (4096, 1000))
    assert not any("_statistics" in name for name, _ in space.variants(narrow))
    for shape, one_pass in (((4096, 4096), 7), ((4096, 8192), 13)):  # softmax_safe: its max and sum in one walk too
        case = next(c for c in cases.cases(["softmax_safe"], ["bf16"]) if c.shape == shape)
        found = dict(space.variants(case))
        widened = [name for name in found if "_statistics" in name and name.endswith("_onepass")]
        assert len(widened) == one_pass and all("_sum.compute_with(_max, y);" in found[name] for name in widened)


def test_repeated_match_options_select_the_rows_matching_any_of_them(tmp_path, capsys):
    rows = cases.cases(["add", "relu"])
    chosen = cases.matching(rows, ["add [x=4096, y=8192] bf16", "relu [x=128,"])
    assert [c.title for c in chosen] == ["add [x=4096, y=8192] bf16", "relu [x=128, y=65536] f32",
                                         "relu [x=128, y=65536] bf16"]
    assert cases.matching(rows, None) == rows
    assert bench.main(["--dry-run", "--out", str(tmp_path), "--list", "--kernels", "add,relu", "--match", "add [x=8,",
                       "--match", "relu [x=5, y=100] bf16"]) == 0
    listed = [line.split("  ")[0].strip() for line in capsys.readouterr().out.splitlines() if "[" in line]
    assert listed == ["add [x=8, y=256] f32", "add [x=8, y=256] bf16", "relu [x=5, y=100] bf16"]


def test_contenders_are_timed_in_the_rounds_of_the_rows_they_name(tmp_path):
    """--contender adds a dt@FILE provider beside dt on the rows its key names, timed in the
    same rounds, with its own speed-up over the fastest baseline."""
    other = cases.ROOT / "benchmarks/gpu/schedules/relu_1024.dt"
    doc, _ = _run(tmp_path, "--kernels", "add,relu", "--dtypes", "f32", "--providers", "dt,eager", "--repeats", "2",
                  "--contender", f"add:x=8, y=256={cases.ROOT / 'benchmarks/gpu/schedules/add_1024.dt'}",
                  "--contender", f"relu={other}", "--no-plots")
    providers = {(r["kernel"], r["shape"]): [p["provider"] for p in doc["records"] if render.case_key(p) ==
                                             render.case_key(r)] for r in doc["records"]}
    assert providers[("add", "x=8, y=256")] == ["dt", "dt@add_1024", "eager"]
    assert providers[("add", "x=5, y=100")] == ["dt", "eager"]  # the key names the other add row only
    assert all(p == ["dt", "dt@relu_1024", "eager"] for (k, _), p in providers.items() if k == "relu")
    contender = next(r for r in doc["records"] if r["provider"] == "dt@relu_1024")
    assert contender["schedule"].endswith("relu_1024.dt") and len(contender["ms_runs"]) == 2
    assert contender["best_baseline"] == "eager" and contender["speedup_vs_best"] > 0


def test_a_contender_key_with_a_dtype_names_that_dtype_only(tmp_path):
    doc, _ = _run(tmp_path, "--kernels", "add", "--dtypes", "f32,bf16", "--providers", "dt,eager", "--match",
                  "add [x=8, y=256]", "--contender",
                  f"add:x=8, y=256:bf16={cases.ROOT / 'benchmarks/gpu/schedules/add_1024.dt'}", "--no-plots")
    assert {(r["dtype"], r["provider"]) for r in doc["records"]} == {
        ("f32", "dt"), ("f32", "eager"), ("bf16", "dt"), ("bf16", "dt@add_1024"), ("bf16", "eager")}


@pytest.mark.parametrize("argv, message", [
    (["--contender", "add:x=8,y=256=benchmarks/gpu/schedules/add_1024.dt"], "names none of the selected rows"),
    (["--contender", "add:x=8, y=256:f64=benchmarks/gpu/schedules/add_1024.dt"], "names none of the selected rows"),
    (["--schedule", "relu=benchmarks/gpu/schedules/relu_1024.dt"], "names none of the selected rows"),
    (["--contender", "add=benchmarks/gpu/schedules/add_1024.dt", "--tune"], "leave out --tune"),
    (["--contender", "add=benchmarks/gpu/schedules/add_1024.dt", "--providers", "eager"], "include dt"),
    (["--contender", "add=benchmarks/gpu/schedules/add_1024.dt", "--contender",
      "add:x=8, y=256=benchmarks/gpu/schedules/add_1024.dt"], "have the same name"),
    (["--contender", "add:x=8, y=256=benchmarks/gpu/schedules/add_1024.dt", "--match", "add [x=5,"],
     "names none of the selected rows"),  # the row it names is left out by --match
    (["--schedule", "add=benchmarks/gpu/schedules/add_1024.dt", "--tune"], "leave out --tune"),
    (["--schedule", "add=benchmarks/gpu/schedules/add_1024.dt", "--providers", "eager"], "include dt"),
])
def test_contenders_and_overrides_that_would_be_ignored_are_refused(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        bench.main(["--dry-run", "--out", str(tmp_path), "--kernels", "add", "--dtypes", "f32", *argv])


def test_a_contender_file_must_exist(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--dry-run", "--out", str(tmp_path), "--kernels", "add", "--contender", "add=no/such.dt"])
    assert "no such file: no/such.dt" in capsys.readouterr().err


def _run_record(run, provider, ms, speedup, low, high, pct=99.0, shape="x=4096, y=8192"):
    schedule = f"benchmarks/gpu/schedules/tuned/{provider.removeprefix('dt@')}.dt"
    return {"run": run, "device": "GPU", "timer": "cold", "kernel": "add", "shape": shape, "dtype": "bf16",
            "provider": provider, "schedule": schedule, "ms": ms,
            "ms_runs": [ms] * 3, "pct_copy_same": pct, "best_baseline": "max-autotune", "speedup_vs_best": speedup,
            "speedup_range": [low, high]}


def test_run_to_run_counts_each_runs_outcome_and_the_outcome_of_most_runs():
    import run_to_run
    assert run_to_run.outcome({"speedup_range": [1.001, 1.01]}) == "faster"
    assert run_to_run.outcome({"speedup_range": [0.99, 1.0]}) == "tie"  # a range reaching 1.00 is a tie
    assert run_to_run.outcome({"speedup_range": [0.98, 0.999]}) == "slower"
    assert run_to_run.outcome({"speedup_range": [1.0, 1.01]}) == "tie"
    assert run_to_run.outcome({"speedup_range": None, "speedup_vs_best": 0.99}) == "slower"  # one round
    assert run_to_run.most_runs(["slower", "slower", "tie"]) == "slower"
    assert run_to_run.most_runs(["slower", "faster", "tie", "tie"]) == "tie"  # none has more than half
    assert run_to_run.most_runs(["slower", "faster", "faster", "slower"]) == "tie"
    first, second, third = "z@2026-01-01T00:00:00Z", "a@2026-01-02T00:00:00Z", "m@2026-01-03T00:00:00Z"
    records = [_run_record(second, "dt", 0.97, 0.99, 0.98, 0.995),
               _run_record(first, "dt", 1.0, 1.0, 0.99, 1.01),
               _run_record(second, "dt@x1", 0.98, 1.01, 1.005, 1.02),
               _run_record(first, "dt@x1", 0.99, 1.0, 0.99, 1.01, pct=97.0),
               _run_record(third, "dt@x1", 0.5, 1.1, 1.05, 1.15)]  # dt failed in that run
    dt, contender = run_to_run.summary(records)
    assert dt["speedups"] == [1.0, 0.99] and dt["outcomes"] == ["tie", "slower"]  # in the runs' start order
    assert dt["most"] == "tie" and dt["faster_than_dt"] == "" and dt["schedule"] == "dt"
    assert contender["median"] == 1.01 and contender["pct_ceiling"] == [97.0, 99.0, 99.0]
    assert contender["faster_than_dt"] == "1 of 2"  # below dt in its own run only (0.99 < 1.0, not 0.98 < 0.97)


def test_run_to_run_reports_every_row_and_provider_over_the_runs(tmp_path):
    import run_to_run
    runs = []
    for i, (dt_speedup, low, high) in enumerate([(0.99, 0.98, 0.995), (0.995, 0.99, 0.998), (1.0, 0.99, 1.01)]):
        path = tmp_path / f"gpu-r{i}.json"
        records = [_run_record(f"r{i}@2026-01-0{i + 1}T00:00:00Z", "dt", 1.0, dt_speedup, low, high),
                   _run_record(f"r{i}@2026-01-0{i + 1}T00:00:00Z", "dt@x1", 0.99, 1.0, 0.99, 1.01),
                   dict(_run_record(f"r{i}@2026-01-0{i + 1}T00:00:00Z", "max-autotune", 0.99, None, 0, 0),
                        speedup_vs_best=None, speedup_range=None)]
        path.write_text(json.dumps({"records": records}))
        runs.append(str(path))
    assert run_to_run.main(["--out", str(tmp_path / "out"), "--name", "rr", *runs]) == 0
    report = (tmp_path / "out" / "rr.md").read_text()
    assert "from 3 `bench.py` runs on GPU" in report
    assert ("| add | x=4096, y=8192 | bf16 | dt | dt | 0.990 / 0.995 / 1.000 | 0.995x | 1 tie, 2 slower | "
            "torch.compile max-autotune | 99.0% (99.0-99.0) | slower |  |") in report
    assert "| dt@x1 | x1 | 1.000 / 1.000 / 1.000 | 1.000x | 3 tie |" in report and "| tie | 3 of 3 |" in report
    assert "| dt | 1 | 0 | 0 | 1 | 0 | 0 | 0 |" in report  # slower in most runs, not in every run
    assert "| dt@ contenders | 1 | 0 | 1 | 0 | 0 | 1 | 0 |" in report
    saved = json.loads((tmp_path / "out" / "rr.json").read_text())["records"]
    assert len(saved) == 9 and {r["provider"] for r in saved} == {"dt", "dt@x1", "max-autotune"}  # every record kept
    assert "| max-autotune |" not in report  # the report's rows are dt's and its contenders'


def test_run_to_run_reports_a_matmul_rows_percentage_of_cublas(tmp_path):
    import run_to_run
    path = tmp_path / "gpu-r.json"
    path.write_text(json.dumps({"records": [dict(_run_record("r@2026-01-01T00:00:00Z", "dt", 1.0, 0.98, 0.95, 1.03),
                                                 kernel="matmul", pct_copy_same=None, pct_cublas=100.4)]}))
    assert run_to_run.main(["--out", str(tmp_path), "--name", "mm", str(path)]) == 0
    assert "| 0.980x | 1 tie | torch.compile max-autotune | 100.4% (100.4-100.4) | tie |" in (tmp_path / "mm.md").read_text()


def test_tune_choose_makes_another_schedule_the_rows_file_until_the_row_is_searched_again(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tune, "RESULTS", tmp_path / "results")
    case = next(c for c in cases.cases(["add"], ["bf16"]) if c.shape == (4096, 8192))
    variants = dict(space.variants(case))
    picked, chosen = "x1_y1024_w4_rowmajor", "x1_y512_w4_rowmajor"
    row = {"kernel": "add", "shape": case.shape_text, "dtype": "bf16", "bytes": 1, "flops": None, "timer": "cold",
           "variants": [{"name": picked, "ms": 0.0720, "final_ms": 0.0719, "final_ms_runs": [0.0719] * 3},
                        {"name": "x2_y512_w8_rowmajor", "ms": 0.0722}],
           "best": picked, "best_source": variants[picked]}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "tune.json").write_text(json.dumps({"runs": [{"device": "GPU"}], "rows": [
        dict(row, device="GPU")]}))
    with pytest.raises(SystemExit, match="no benchmark row is titled 'add \\[x=1, y=1\\] bf16'"):
        tune.main(["--choose", "add [x=1, y=1] bf16", chosen, "E"])
    with pytest.raises(SystemExit, match="space.py has no schedule 'nope'"):
        tune.main(["--choose", "add [x=4096, y=8192] bf16", "nope", "E"])
    with pytest.raises(SystemExit, match="has no search of relu \\[x=4096, y=8192\\] bf16"):
        tune.main(["--choose", "relu [x=4096, y=8192] bf16", chosen, "E"])
    with pytest.raises(SystemExit, match="is already the search's pick"):
        tune.main(["--choose", "add [x=4096, y=8192] bf16", picked, "E"])
    doc = json.loads((tmp_path / "results" / "tune.json").read_text())
    doc["rows"][0]["variants"].append({"name": "x1_y2048_w8_rowmajor", "error": "compile error"})
    (tmp_path / "results" / "tune.json").write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="failed in the search .* \\(compile error\\)"):
        tune.main(["--choose", "add [x=4096, y=8192] bf16", "x1_y2048_w8_rowmajor", "E"])

    assert tune.main(["--choose", "add [x=4096, y=8192] bf16", chosen, "it won the run-off (results/r.md)"]) == 0
    assert tune.main(["--choose", "add [x=4096, y=8192] bf16", chosen, "it won | the run-off (results/r.md)"]) == 0
    assert "it won \\| the run-off" in (tmp_path / "results" / "tune.md").read_text()  # the table stays whole
    assert tune.main(["--choose", "add [x=4096, y=8192] bf16", chosen, "it won the run-off (results/r.md)"]) == 0
    written = (tmp_path / "tuned" / "gpu" / "add_4096x8192_bf16.dt").read_text()
    assert written.endswith(variants[chosen])
    header = " ".join(line[2:] for line in written.splitlines() if line.startswith("# "))
    assert (f"variant {chosen} of benchmarks/gpu/space.py, chosen over the search's pick ({picked}, "
            "benchmarks/gpu/tune.py) on GPU: it won the run-off (results/r.md).") in header
    assert all(len(line) <= 100 for line in written.splitlines() if line.startswith("# "))
    assert dt.load(tmp_path / "tuned" / "gpu" / "add_4096x8192_bf16.dt").outputs == ("add_out",)
    table = (tmp_path / "results" / "tune.md").read_text()
    assert f"| {chosen}, chosen over {picked} (it won the run-off (results/r.md)) |  | 1 |" in table
    merged = json.loads((tmp_path / "results" / "tune.json").read_text())
    assert merged["rows"][0]["chosen"] == {"name": chosen, "source": variants[chosen],
                                           "evidence": "it won the run-off (results/r.md)"}

    assert tune.main(["--write", str(tmp_path / "results" / "tune.json")]) == 0  # kept by a later --write
    assert (tmp_path / "tuned" / "gpu" / "add_4096x8192_bf16.dt").read_text().endswith(variants[chosen])
    search = tmp_path / "tune-new.json"  # a new search of the row replaces the choice
    search.write_text(json.dumps({"device": "GPU", "rows": [row]}))
    assert tune.main(["--write", str(tmp_path / "results" / "tune.json"), str(search)]) == 0
    assert (tmp_path / "tuned" / "gpu" / "add_4096x8192_bf16.dt").read_text().endswith(variants[picked])


def test_the_search_space_drops_schedules_dt_calls_slow():
    """A 64x256 fp32 accumulator in 2 warps (256 registers a thread) is not tried; its 4-warp
    sibling is."""
    case = next(c for c in cases.cases(["2mm_outer"]) if c.shape == (128, 256, 32, 32) and c.dtype == "f16")
    everything = dict(space.variants(case, prune=False))
    kept = dict(space.variants(case))
    assert "m64_nall_w2_s1" in everything and "m64_nall_w2_s1" not in kept
    assert space.cliffs(case, everything["m64_nall_w2_s1"]) == {"registers"}
    assert "m64_nall_w4_s1" in kept and space.cliffs(case, kept["m64_nall_w4_s1"]) == set()
    assert set(kept) < set(everything)
