"""The CPU benchmark's records and report: a row's per-process results (cpu_measure.py) become
one record per provider, in the GPU harness's record shape (benchmarks/gpu/bench.py), with
medians over processes, their spread, and dt's speed-up measured side by side in each
process; then the Markdown report."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cpu_rows  # noqa: E402  (first: it puts the GPU harness's modules on the path)
import measure  # noqa: E402
import render  # noqa: E402

from cases import MATMUL, MEMORY, Case  # noqa: E402

LABELS = {"dt": "dt", "eager": "PyTorch eager", "compile": "torch.compile", "numpy": "NumPy", "sdpa": "SDPA"}
STATUS_RANK = render.STATUS_RANK


def _median(values):
    return statistics.median(values) if values else None


def row_records(base: dict, case: Case, providers: list[str], processes: list[dict]) -> list[dict]:
    """One record per provider of a row from its processes' results (cpu_measure.measure_row's,
    or {"failed": why} for a process that died). Lists ending in `_runs` hold one value per
    process, None where that process timed nothing for the provider; `ms` is their median and
    `ms_spread` their range."""
    def per_process(p):
        return [proc["providers"][p] if "providers" in proc else
                {"status": "error", "error": proc["failed"], "rel_err": None, "first_call_s": None, "ms_rounds": []}
                for proc in processes]

    copy_runs = [_median(proc.get("copy_same_ms_rounds")) for proc in processes]
    copy_ms = _median([ms for ms in copy_runs if ms is not None])
    copy_bytes = next((proc["copy_same_bytes"] for proc in processes if proc.get("copy_same_bytes")), None)
    mode = next((proc["output"] for proc in processes if "output" in proc), cpu_rows.output_mode(providers))
    k = cpu_rows.KERNEL_ROWS[case.kernel.name]
    records = []
    for p in providers:
        results = per_process(p)
        worst = max(results, key=lambda r: STATUS_RANK[r["status"]])
        runs = [_median(r["ms_rounds"]) for r in results]
        timed = [ms for ms in runs if ms is not None]
        errors = [r["rel_err"] for r in results if r["rel_err"] is not None]
        status, error = worst["status"], worst["error"]
        if status == "ok" and not timed:
            status, error = "error", "not timed"
        rec = dict(base, kernel=case.kernel.name, kind=case.kernel.kind, shape=case.shape_text, dims=dict(case.extents),
                   dtype=case.dtype, provider=p, status=status, error=error, ms=_median(timed), bytes=case.bytes,
                   flops=case.flops, ms_runs=runs, ms_spread=[min(timed), max(timed)] if timed else None,
                   ms_rounds=[r["ms_rounds"] for r in results], output=mode,
                   call=k.calls.get(p.split("@")[0], cpu_rows.COMMON_CALLS.get(p.split("@")[0])),
                   tol=measure.TOLERANCE[case.dtype], rel_err=max(errors) if errors else None,
                   first_call_s_runs=[r["first_call_s"] for r in results])
        if render.is_dt(p):
            rec["schedule"] = cpu_rows.relative(cpu_rows.schedule(case, p))
        if case.kernel.kind == MEMORY:
            rec["copy_same_ms_runs"] = copy_runs
            rec["copy_same_gbps"] = copy_bytes / copy_ms / 1e6 if copy_ms and copy_bytes else None
        if rec["ms"]:
            rec["gbps"] = case.bytes / rec["ms"] / 1e6
            if rec.get("copy_same_gbps"):
                rec["pct_copy_same"] = 100 * rec["gbps"] / rec["copy_same_gbps"]
            if case.flops:
                rec["tflops"] = case.flops / rec["ms"] / 1e9
        records.append(rec)
    return annotate(records)


def annotate(records: list[dict]) -> list[dict]:
    """Each correct dt record's speed-up over its row's fastest correct baseline (the lowest
    median): the ratio of the two in each process, where both were timed in the same rounds
    (`speedup_runs`), their median (`speedup_vs_best`) and range (`speedup_range`)."""
    rows: dict[tuple, list[dict]] = {}
    for r in records:
        rows.setdefault(render.case_key(r), []).append(r)
    for row in rows.values():
        baselines = [r for r in row if not render.is_dt(r["provider"]) and r["status"] == "ok" and r["ms"]]
        if not baselines:
            continue
        best = min(baselines, key=lambda r: r["ms"])
        for r in row:
            if render.is_dt(r["provider"]) and r["status"] == "ok" and r["ms"]:
                ratios = [b / d for b, d in zip(best["ms_runs"], r["ms_runs"]) if b is not None and d is not None]
                if ratios:
                    r.update(best_baseline=best["provider"], speedup_runs=ratios, speedup_vs_best=_median(ratios),
                             speedup_range=[min(ratios), max(ratios)])
    return records


# ----------------------------------------------------------------------- Markdown
def _num(x, fmt="{:.3g}") -> str:
    return "" if x is None else fmt.format(x)


def _ms(r: dict | None) -> str:
    """A provider's cell: its median ms and the range of its per-process medians."""
    if r is None:
        return "—"
    if r["status"] != "ok":
        return r["status"]
    low, high = r["ms_spread"]
    return f"{r['ms']:.3g} ({low:.3g}-{high:.3g})" if low != high else f"{r['ms']:.3g}"


def _speedup(r: dict) -> str:
    if "speedup_vs_best" not in r:
        return ""
    return "{:.2f}x ({:.2f}-{:.2f})".format(r["speedup_vs_best"], *r["speedup_range"])


def _rows(records: list[dict], kind: str) -> dict[tuple, list[dict]]:
    grouped: dict[tuple, list[dict]] = {}
    for r in records:
        if r["kind"] == kind:
            grouped.setdefault(render.case_key(r), []).append(r)
    return grouped


def _best_dt(row: list[dict]) -> dict | None:
    dts = [r for r in row if render.is_dt(r["provider"])]
    ok = [r for r in dts if r["status"] == "ok" and r["ms"]]
    return min(ok, key=lambda r: r["ms"]) if ok else (dts[0] if dts else None)


def _summary(records: list[dict], kind: str) -> list[str]:
    rows = _rows(records, kind)
    if not rows:
        return []
    baselines = [p for p in ("eager", "compile", "numpy", "sdpa") if any(r["provider"] == p for r in records
                                                                       if r["kind"] == kind)]
    head = ["kernel", "shape", "output", "dt schedule", "dt ms"]
    head += ["dt GB/s", "dt % of same-size copy"] if kind == MEMORY else ["dt GFLOP/s"]
    head += [f"{LABELS[p]} ms" for p in baselines] + ["best baseline", "dt speed-up"]
    table = []
    for (kernel, shape, _), row in rows.items():
        dt = _best_dt(row) or {}
        by = {r["provider"]: r for r in row}
        ok = dt if dt.get("status") == "ok" else {}
        schedule = Path(dt["schedule"]).name if dt.get("schedule") else ""
        cells = [kernel, shape, row[0]["output"], schedule, _ms(dt or None)]
        if kind == MEMORY:
            cells += [_num(ok.get("gbps"), "{:.1f}"), _num(ok.get("pct_copy_same"), "{:.0f}%")]
        else:
            cells.append(_num(ok["tflops"] * 1e3 if ok.get("tflops") else None, "{:.1f}"))
        cells += [_ms(by.get(p)) for p in baselines]
        best = ok.get("best_baseline")
        cells += [LABELS.get(best, best or ""), _speedup(ok)]
        table.append(cells)
    return render.markdown_table(head, table)


def _calls(records: list[dict]) -> list[str]:
    seen, table = set(), []
    for r in records:
        key = (r["kernel"], r["provider"].split("@")[0])
        if key not in seen and key[1] not in cpu_rows.COMMON_CALLS:
            seen.add(key)
            table.append([r["kernel"], LABELS[key[1]], r["call"].replace("|", "\\|")])
    return render.markdown_table(["kernel", "provider", "what is timed"], table)


def _detail(records: list[dict]) -> list[str]:
    head = ["kernel", "shape", "provider", "status", "ms", "ms per process", "rel. error", "first call (s) per process",
            "schedule / error"]
    table = []
    for row in list(_rows(records, MEMORY).values()) + list(_rows(records, MATMUL).values()):
        for r in row:
            note = r.get("error") or r.get("schedule") or ""
            table.append([r["kernel"], r["shape"], r["provider"], r["status"], _num(r["ms"], "{:.4g}"),
                          " / ".join(_num(ms, "{:.4g}") or "—" for ms in r["ms_runs"]), _num(r["rel_err"], "{:.1e}"),
                          " / ".join(_num(s, "{:.2f}") or "—" for s in r["first_call_s_runs"]),
                          note.replace("|", "\\|").replace("\n", " ")])
    return render.markdown_table(head, table)


def _libraries(run: dict) -> str:
    libs, blas = run["libraries"], run["numpy_blas"] or {}
    forced = run.get("openblas_forced")
    forced_text = (f" This machine's environment sets {', '.join(f'{k}={v}' for k, v in forced['env'].items())}, "
                   f"under which OpenBLAS runs its {forced['architecture']} kernel: the measuring processes ran "
                   f"without it." if forced else "")
    return (f"dt's `numba` backend (numba {libs['numba']}, {libs['numba_threads']} threads); PyTorch {libs['torch']} "
            f"({libs['torch_threads']} threads, BLAS {libs['torch_blas']}, vector code {libs['torch_cpu_capability']}, "
            f"Inductor for torch.compile); NumPy {libs['numpy']} with {blas.get('internal_api', 'an unknown BLAS')} "
            f"{blas.get('version') or ''} running its **{blas.get('architecture')}** kernel on "
            f"{blas.get('num_threads')} threads, the kernel OpenBLAS chose for this CPU (OPENBLAS_CORETYPE and "
            f"OPENBLAS_L2_SIZE unset; NumPy's element-wise functions run on one thread).{forced_text} "
            f"Python {libs['python']}.")


def markdown(run: dict, records: list[dict]) -> str:
    cpu = run["cpu"]
    out = ["# dt `numba` backend: CPU benchmark", "",
           f"Produced by `{run['command']}`; the method is in `docs/numba.md` (\"The CPU benchmark\").", "",
           f"**CPU:** {cpu['model']} (family/model {cpu['family_model']}), {cpu['cores']} cores; vector ISA "
           f"**{cpu['vector_isa']}** ({' '.join(cpu['isa_flags'])}); caches {', '.join(cpu['caches']) or 'unknown'}.",
           "", f"**Software:** {_libraries(run)}", "",
           f"**Method:** every row in {run['processes']} fresh process{'es' if run['processes'] > 1 else ''} (a "
           "row's processes spread over the run); in each, every provider's output checked against a float64 "
           f"reference, then {run['rounds']} round-robin rounds timing each provider as a block of back-to-back "
           f"runs (at least {run['seconds']} s and {run['min_runs']} runs, after a {run['pause']} s pause and one "
           "untimed run) and taking its median. "
           "Times are the median over processes of each process's median, in ms (lower is better), with the range "
           "of the per-process medians in brackets. dt speed-up = the fastest baseline's time / dt's, taken in each "
           "process from the same rounds; its median over processes, (min-max) after it: a range that spans 1.00 "
           "is a tie. Output: *preallocated* rows pass every provider the same output array (`out=`), "
           "*allocated* rows let every provider allocate its output on every call (one provider has no `out=`). "
           "% of same-size copy: dt's GB/s (each input read once, the output written once) over a copy of the "
           "row's bytes by PyTorch (all threads), timed in the row's rounds; neither counts the destination lines "
           "a write first reads into the cache, a larger share of a copy's traffic than of a kernel that reads "
           "more than it writes, so such a kernel can pass 100%.", ""]
    if run["quick"]:
        out += ["**Quick run (tiny shapes, short timings): a check of the harness, not a measurement.**", ""]
    for kind, title in ((MEMORY, "Memory-bound rows"), (MATMUL, "Matmul-like rows")):
        table = _summary(records, kind)
        if table:
            out += [f"## {title}", ""] + table + [""]
    out += ["## What each provider runs", "",
            f"dt: {cpu_rows.COMMON_CALLS['dt']}; torch.compile: {cpu_rows.COMMON_CALLS['compile']}.", ""]
    out += _calls(records) + [""]
    if run.get("first_call"):
        out += ["## First call of each DT file", "",
                "A fresh process's first call (dt's code generation, Numba's compilation or loading, a run at "
                "extents of at most 64) with an empty cache, then in a new process with that cache. Both exclude "
                "Numba's own start-up in a process (import and initialisation: "
                f"{statistics.median(r['numba_start_s'] for r in run['first_call']):.2f} s here, median).", ""]
        out += render.markdown_table(["DT file", "empty cache (s)", "cached (s)"],
                                     [[f"`{r['file']}`", f"{r['empty_cache_s']:.2f}", f"{r['cached_s']:.2f}"]
                                      for r in run["first_call"]]) + [""]
    out += ["## Every measurement", ""] + _detail(records) + [""]
    return "\n".join(out)
