"""Results of one or several runs: merging, the derived speed-ups, the markdown tables and
the plots (one grid PNG for the memory-bound kernels, one for the matmul-like ones)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from cases import KERNELS, MATMUL, MEMORY

PROVIDERS = {  # name -> (label, colour); the order is the plots' and tables' order
    "dt": ("DT", "#d62728"),
    "eager": ("PyTorch eager", "#1f77b4"),
    "compile": ("torch.compile", "#ff7f0e"),
    "max-autotune": ("torch.compile max-autotune", "#2ca02c"),
    "liger": ("Liger Kernel", "#9467bd"),
    "sdpa": ("SDPA", "#8c564b"),
}
TUNED_COLOUR = "#f4a582"  # dt@<schedule> candidates (--tune)
STATUS_RANK = {"ok": 0, "wrong": 1, "error": 2, "skipped": 3}


def is_dt(provider: str) -> bool:
    return provider == "dt" or provider.startswith("dt@")


def provider_order(provider: str) -> tuple:
    base = "dt" if is_dt(provider) else provider
    return (list(PROVIDERS).index(base) if base in PROVIDERS else len(PROVIDERS), provider != base, provider)


def case_key(r: dict) -> tuple:
    return (r["kernel"], r["shape"], r["dtype"])


# ----------------------------------------------------------------------- merging, derived fields
def load(path) -> dict:
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or "records" not in doc:
        raise ValueError(f"{path}: not a results file of benchmarks/gpu/bench.py (no 'records')")
    return doc


def merge(docs: list[dict]) -> tuple[list[dict], list[dict]]:
    """The runs that still supply a record, and one record per (kernel, shape, dtype,
    provider): the best status wins (ok over wrong over error over skipped), and among
    equals the later file."""
    runs, chosen, order = [], {}, []
    for doc in docs:
        runs += doc.get("runs", [])
        for r in doc["records"]:
            key = case_key(r) + (r["provider"],)
            if key not in chosen:
                order.append(key)
                chosen[key] = r
            elif STATUS_RANK[r["status"]] <= STATUS_RANK[chosen[key]["status"]]:
                chosen[key] = r
    records = annotate(_without_stale_contenders([chosen[k] for k in order], runs))
    used = {r.get("run") for r in records}
    return [run for run in runs if run["id"] in used], records


def _without_stale_contenders(records: list[dict], runs: list[dict]) -> list[dict]:
    """The records but the contenders (dt@name) of a row from runs before the latest run that
    timed dt on that row: they timed schedules that row no longer runs, beside older baselines."""
    started = {run["id"]: run.get("started", "") for run in runs}
    latest: dict[tuple, str] = {}
    for r in records:
        if is_dt(r["provider"]):
            latest[case_key(r)] = max(latest.get(case_key(r), ""), started.get(r.get("run"), ""))
    return [r for r in records if not (r["provider"].startswith("dt@") and r.get("run") in started
                                       and started[r["run"]] < latest[case_key(r)])]


def annotate(records: list[dict]) -> list[dict]:
    """Add to each dt record its speed-up over the fastest correct baseline of its row."""
    by_case: dict[tuple, list[dict]] = {}
    for r in records:
        by_case.setdefault(case_key(r), []).append(r)
        r.pop("speedup_vs_best", None)
        r.pop("best_baseline", None)
        r.pop("speedup_range", None)
    for rows in by_case.values():
        baselines = [r for r in rows if not is_dt(r["provider"]) and r["status"] == "ok" and r.get("ms")]
        if not baselines:
            continue
        best = min(baselines, key=lambda r: r["ms"])
        for r in rows:
            if is_dt(r["provider"]) and r["status"] == "ok" and r.get("ms"):
                r["best_baseline"] = best["provider"]
                r["speedup_vs_best"] = best["ms"] / r["ms"]
                if len(r.get("ms_runs") or ()) > 1 and len(best.get("ms_runs") or ()) > 1 \
                        and r.get("run") == best.get("run"):  # rounds of one run, not of two sessions
                    # from the baseline's fastest round against dt's slowest to the other way round
                    r["speedup_range"] = [min(best["ms_runs"]) / max(r["ms_runs"]),
                                          max(best["ms_runs"]) / min(r["ms_runs"])]
    return records


def write_json(path: Path, runs: list[dict], records: list[dict]):
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"runs": runs, "records": records}, indent=1) + "\n")
    os.replace(tmp, path)  # a run killed mid-write leaves the previous complete file


# ----------------------------------------------------------------------- markdown
def markdown_table(head: list[str], rows) -> list[str]:
    """A markdown table's lines: the header, its rule, and a line per row of cells."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(row) + " |" for row in rows]


def _num(x, fmt="{:.4g}") -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _cell(r: dict | None) -> str:
    if r is None:
        return "—"
    return _num(r["ms"]) if r["status"] == "ok" else r["status"]


def schedule_label(r: dict) -> str:
    """A dt record's schedule as the summary names it: the file's name without .dt, after its device's
    folder for a tuned one ('h100/softmax_safe_4096x4096_bf16'), and '(fallback)' where the file is
    another device's (no tuned schedule of this device for the row; records without `schedule_origin`
    are from runs before tuned schedules were filed per device)."""
    if not r.get("schedule"):
        return ""
    path = Path(r["schedule"])
    name = f"{path.parent.name}/{path.stem}" if path.parent.parent.name == "tuned" else path.stem
    return name + _fallback_note(r)


def _fallback_note(r: dict) -> str:
    return " (fallback)" if r.get("schedule_origin") == "fallback" else ""


def _best_dt(rows: list[dict]) -> dict | None:
    dts = [r for r in rows if is_dt(r["provider"])]
    ok = [r for r in dts if r["status"] == "ok" and r.get("ms")]
    if ok:
        return min(ok, key=lambda r: r["ms"])
    return min(dts, key=lambda r: STATUS_RANK[r["status"]]) if dts else None


def _cases(records, kind) -> list[tuple[tuple, list[dict]]]:
    grouped: dict[tuple, list[dict]] = {}
    for r in records:
        if r["kind"] == kind:
            grouped.setdefault(case_key(r), []).append(r)
    names = list(KERNELS)

    def order(kv):  # the catalogue's kernel and dtype order; shapes stay in the order they were run
        kernel, _, dtype = kv[0]
        k = KERNELS.get(kernel)
        return (names.index(kernel) if k else len(names), k.dtypes.index(dtype) if k and dtype in k.dtypes else 9)
    return sorted(grouped.items(), key=order)


def _summary(records: list[dict], kind: str) -> list[str]:
    cases = _cases(records, kind)
    if not cases:
        return []
    baselines = sorted({r["provider"] for _, rows in cases for r in rows if not is_dt(r["provider"])},
                       key=provider_order)
    if kind == MEMORY:
        head = ["kernel", "shape", "dtype", "MB moved", "dt ms", "dt GB/s", "dt % of copy", "dt % of same-size copy"]
    else:
        head = ["kernel", "shape", "dtype", "GFLOP", "dt ms", "dt TFLOP/s", "dt % of cuBLAS", "dt GB/s"]
    head += ["dt schedule"] + [f"{PROVIDERS.get(p, (p,))[0]} ms" for p in baselines]
    head += (["cuBLAS ms"] if kind == MATMUL else []) + ["best baseline", "dt speed-up"]
    table = []
    for (kernel, shape, dtype), rows in cases:
        dt = _best_dt(rows)
        by_provider = {r["provider"]: r for r in rows}
        ok = dt if dt is not None and dt["status"] == "ok" else {}  # dt's figures, when it has any
        cells = [kernel, shape, dtype]
        if kind == MEMORY:
            cells += [_num(rows[0]["bytes"] / 1e6, "{:.1f}"), _cell(dt), _num(ok.get("gbps"), "{:.0f}"),
                      _num(ok.get("pct_copy"), "{:.0f}%"), _num(ok.get("pct_copy_same"), "{:.1f}%")]
        else:
            cells += [_num((rows[0].get("flops") or 0) / 1e9, "{:.2f}"), _cell(dt), _num(ok.get("tflops"), "{:.1f}"),
                      _num(ok.get("pct_cublas"), "{:.0f}%"), _num(ok.get("gbps"), "{:.0f}")]
        cells.append(schedule_label(dt) if dt else "")
        cells += [_cell(by_provider.get(p)) for p in baselines]
        if kind == MATMUL:
            cells.append(_num(next((r["cublas_ms"] for r in rows if r.get("cublas_ms")), None)))
        best = ok.get("best_baseline")
        speedup = _num(ok.get("speedup_vs_best"), "{:.2f}x")
        if ok.get("speedup_range"):
            speedup += " ({:.2f}-{:.2f})".format(*ok["speedup_range"])
        cells += [PROVIDERS.get(best, (best,))[0] if best else "", speedup]
        table.append(cells)
    return markdown_table(head, table)


def _detail(records: list[dict]) -> list[str]:
    head = ["kernel", "shape", "dtype", "provider", "status", "ms", "GB/s", "% of copy", "TFLOP/s", "% of cuBLAS",
            "rel. error", "schedule / error"]
    table = []
    for _, rows in _cases(records, MEMORY) + _cases(records, MATMUL):
        for r in sorted(rows, key=lambda r: provider_order(r["provider"])):
            note = r.get("error") or (str(r["schedule"]) + _fallback_note(r) if r.get("schedule") else "")
            table.append([
                r["kernel"], r["shape"], r["dtype"], r["provider"], r["status"], _num(r.get("ms")),
                _num(r.get("gbps"), "{:.0f}"), _num(r.get("pct_copy"), "{:.0f}%"), _num(r.get("tflops"), "{:.1f}"),
                _num(r.get("pct_cublas"), "{:.0f}%"), _num(r.get("rel_err"), "{:.1e}"),
                note.replace("|", "\\|").replace("\n", " ")])
    return markdown_table(head, table)


def _runs_table(runs: list[dict]) -> list[str]:
    table = []
    for run in runs:
        peaks = ", ".join(f"{d} {_num(p['tflops'], '{:.0f}')} ({p['shape']})"
                          for d, p in sorted(run.get("cublas_peak", {}).items()))
        copy = run.get("copy") or {}
        table.append([run["id"], run["device"], run.get("torch", ""), run.get("triton") or "", run.get("liger") or "",
                      run["timer"], _num(copy.get("gbps"), "{:.0f}"), peaks])
    return markdown_table(["run", "device", "torch", "triton", "liger", "timer", "copy GB/s", "cuBLAS peak TFLOP/s"],
                          table)


def markdown(runs: list[dict], records: list[dict]) -> str:
    devices = sorted({run["device"] for run in runs})
    out = ["# dt on the GPU: the kernels of issues 7 and 27", "",
           "Produced by `benchmarks/gpu/bench.py` (merged by `benchmarks/gpu/report.py`); the method is in "
           "`docs/performance.md`. Times are medians in milliseconds (lower is better). Every provider's "
           "output was first compared with a float64 PyTorch reference (`rel. error` = ||out - ref|| / ||ref||); "
           "`wrong` rows failed that check and count for nothing. GB/s counts the fewest bytes the kernel must "
           "move (each input read once, the output written once); % of copy compares it with a large (1 GiB) "
           "device-to-device copy timed in the same run, the device's sustained bandwidth; % of same-size copy "
           "compares it with a copy that moves the row's bytes, the ceiling at that size (a copy of a few tens "
           "of MB pays launch, ramp-up and tail too), timed in the row's own rounds (in runs before that, once "
           "per run: records without `copy_same_ms_runs`). TFLOP/s counts the matrix products' 2*M*N*K; % of "
           "cuBLAS is torch.matmul at the same products, shapes and dtype, timed in the row's own rounds (in runs "
           "before that, once at the row's start: records without `cublas_ms_runs`). dt speed-up = fastest correct "
           "baseline's time / dt's time; where the row was timed in several rounds (each timing every "
           "provider once), the range after it runs from that baseline's fastest round over dt's slowest "
           "to its slowest over dt's fastest, so a range that spans 1.00 is a tie within run-to-run noise.", ""]
    if len(devices) > 1:
        out += [f"**Warning:** these results come from {len(devices)} different devices "
                f"({'; '.join(devices)}); compare rows only within one device.", ""]
    out += ["## Runs", ""] + _runs_table(runs) + [""]
    for kind, title in ((MEMORY, "Memory-bound kernels"), (MATMUL, "Matmul-like kernels")):
        table = _summary(records, kind)
        if table:
            out += [f"## {title}", ""] + table + [""]
    notes = [f"- **{k}**: {KERNELS[k].notes}" for k in KERNELS
             if KERNELS[k].notes and any(r["kernel"] == k for r in records)]
    if notes:
        out += ["## Notes on the baselines", ""] + notes + [""]
    out += ["## Every measurement", ""] + _detail(records) + [""]
    return "\n".join(out)


# ----------------------------------------------------------------------- plots
def plot(runs: list[dict], records: list[dict], memory_png: Path, matmul_png: Path) -> list[Path]:
    """One grid of bar charts per kind: one panel per row (kernel, shape, dtype), one bar per
    provider, as the talk's 'dyt [x=128, y=65536]' charts. Returns the files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devices = "; ".join(sorted({run["device"] for run in runs}))
    written = []
    for kind, path in ((MEMORY, memory_png), (MATMUL, matmul_png)):
        cases = _cases(records, kind)
        if not cases:
            continue
        ncols = min(6, len(cases))
        nrows = math.ceil(len(cases) / ncols)
        height = 2.9 * nrows + 1.3
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, height), squeeze=False)
        # fixed margins: constrained/tight layout take tens of seconds on grids of ~50 panels
        fig.subplots_adjust(left=0.05, right=0.99, bottom=1.2 / height, top=1 - 0.9 / height, wspace=0.3,
                            hspace=0.65)
        for ax in axes.flat[len(cases):]:
            ax.set_visible(False)
        for ax, ((kernel, shape, dtype), rows) in zip(axes.flat, cases):
            rows = sorted((r for r in rows if r["status"] != "skipped"), key=lambda r: provider_order(r["provider"]))
            names = [r["provider"] for r in rows]
            heights = [r["ms"] if r["status"] == "ok" and r.get("ms") else 0.0 for r in rows]
            colours = [PROVIDERS[p][1] if p in PROVIDERS else TUNED_COLOUR for p in names]
            ax.bar(range(len(rows)), heights, color=colours)
            top = max(heights, default=0.0) or 1.0
            for i, (r, h) in enumerate(zip(rows, heights)):
                label = f"{h:.3g}" if r["status"] == "ok" else r["status"]
                ax.text(i, h + top * 0.02, label, rotation=90 if r["status"] != "ok" else 0, ha="center",
                        va="bottom", fontsize=6)
            ax.set_ylim(0, top * 1.15)
            ax.set_xticks(range(len(rows)))
            ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
            ax.set_title(f"{kernel} [{shape}] {dtype}", fontsize=8)
            ax.set_ylabel("ms", fontsize=7)
            ax.tick_params(axis="y", labelsize=7)
        fig.suptitle(f"{'Memory-bound' if kind == MEMORY else 'Matmul-like'} kernels, median time per provider "
                     f"(lower is better) - {devices}", fontsize=10, y=1 - 0.3 / height)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
