"""Is dt faster, tied or slower on a row from one process to the next? A summary of several
benchmark runs of the same rows.

One bench.py run times a row in a few round-robin rounds, so its speed-up range covers what
moves between rounds, not what moves between processes: where the tensors land in memory,
the clocks, and torch.compile, which compiles and tunes its kernels again in every process
that starts with an empty Inductor cache. This reads several bench.py runs of the same rows,
each in its own process with its own Inductor cache, and reports per row and dt schedule (the
`dt` provider, and any `dt@<file name>` of bench.py's --contender) its speed-up over the fastest
baseline in each run, how many runs found it faster, tied or slower (the run's range above,
spanning or below 1.00), the outcome of most runs and, for a contender, in how many runs its
median was below dt's (a run-off between schedules; tune.py --choose records the winner).

    # on the GPU machine: five processes, each with an empty Inductor cache
    RUNS=$(mktemp -d)
    for i in 1 2 3 4 5; do
        TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python3 benchmarks/gpu/bench.py --out $RUNS --tag r$i \\
            --kernels add --providers dt,eager,compile,max-autotune --repeats 5 --no-plots
    done
    # anywhere with torch installed, from the checkout (measure imports dt's cold timer)
    python benchmarks/gpu/run_to_run.py --out $RUNS --name run_to_run_add $RUNS/gpu-r*.json

writes OUT/NAME.json (every record of the runs, trimmed to the fields the report reads) and OUT/NAME.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# this folder's modules, and dt (measure's cold timer) from the checkout if it is not installed
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
import measure  # noqa: E402
import render  # noqa: E402

FIELDS = ("run", "device", "timer", "kernel", "shape", "dtype", "provider", "status", "schedule", "schedule_origin",
          "ms", "ms_runs", "pct_copy_same", "pct_cublas", "best_baseline", "speedup_vs_best", "speedup_range")
OUTCOMES = ("faster", "tie", "slower")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--name", default="run_to_run", help="names the output files NAME.json and NAME.md")
    parser.add_argument("runs", nargs="+", help="gpu-TAG.json files written by bench.py, one per process")
    args = parser.parse_args(argv)
    records = [{f: r.get(f) for f in FIELDS} for path in args.runs
               for r in json.loads(Path(path).read_text())["records"]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps({"records": records}, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(markdown(records, args.name))
    return 0


def _started(run: str) -> str:
    """A bench.py run id's start time ('TAG@2026-11-21T19:26:46Z'), by which runs are ordered."""
    return run.rpartition("@")[2]


def outcome(record: dict) -> str:
    """'faster', 'tie' or 'slower': where the run's speed-up range lies against 1.00 (the
    speed-up itself for a row timed in one round)."""
    low, high = record.get("speedup_range") or [record["speedup_vs_best"]] * 2
    return "faster" if low > 1 else "slower" if high < 1 else "tie"


def most_runs(outcomes: list[str]) -> str:
    """The outcome of more than half the runs; a tie where none has that many."""
    return next((o for o in OUTCOMES if outcomes.count(o) * 2 > len(outcomes)), "tie")


def summary(records: list[dict]) -> list[dict]:
    """Per row, dt provider and schedule file: its runs' speed-ups and outcomes (in the runs'
    order), their median, the median % of the row's ceiling, the outcome of most runs and, for a
    contender, in how many runs it was faster than `dt` (its median below dt's in the same run).
    A schedule file edited between runs is not told apart: summarise runs of one commit."""
    records = [r for r in records if render.is_dt(r["provider"]) and r.get("speedup_vs_best")]
    dt_ms = {(r["kernel"], r["shape"], r["dtype"], r["run"]): r["ms"] for r in records if r["provider"] == "dt"}
    rows = []
    for (kernel, shape, dtype, provider, schedule), runs in measure.by_row(records, "kernel", "shape", "dtype",
                                                                           "provider", "schedule").items():
        runs = sorted(runs, key=lambda r: _started(r["run"]))
        outcomes = [outcome(r) for r in runs]
        ceiling = [pct for r in runs if (pct := r.get("pct_copy_same") or r.get("pct_cublas"))]
        paired = [(r["ms"], dt_ms[kernel, shape, dtype, r["run"]]) for r in runs
                  if provider != "dt" and (kernel, shape, dtype, r["run"]) in dt_ms]
        rows.append(dict(kernel=kernel, shape=shape, dtype=dtype, provider=provider,
                         schedule=render.schedule_label(runs[0]),
                         speedups=[r["speedup_vs_best"] for r in runs], outcomes=outcomes,
                         baselines=[r["best_baseline"] for r in runs],
                         median=statistics.median(r["speedup_vs_best"] for r in runs),
                         pct_ceiling=ceiling, most=most_runs(outcomes),
                         faster_than_dt=f"{sum(ms < dt for ms, dt in paired)} of {len(paired)}" if paired else ""))
    return rows


def markdown(records: list[dict], name: str) -> str:
    devices = sorted({r["device"] for r in records})
    runs = sorted({r["run"] for r in records}, key=_started)
    rows = summary(records)
    lines = [f"# dt against the fastest baseline, run after run ({name})", "",
             f"Produced by `benchmarks/gpu/run_to_run.py` from {len(runs)} `bench.py` runs on {'; '.join(devices)}, "
             "each made in its own process with an empty Inductor cache (the commands of the script's docstring), "
             f"so torch.compile compiled and tuned its kernels anew in each (runs: {', '.join(runs)}). Per row and dt schedule: the speed-up over the fastest "
             "baseline of each run (that baseline's median over dt's), in the runs' order; a run counts as "
             "faster or slower when the speed-up's range over its rounds lies wholly above or below 1.00, "
             "else as a tie; `most runs` is the outcome of more than half the runs (a tie where none has "
             "that many: a tie, or no majority), and for a contender (`dt@<file name>`, bench.py --contender) "
             "the last column counts the runs where its median was below dt's. The ceiling is the same-size copy "
             "for memory-bound rows and cuBLAS at the row's products for matmul-like ones, both timed in the "
             "row's rounds. The JSON keeps every provider's record of every run.", ""]
    table = []
    for r in rows:
        counts = ", ".join(f"{r['outcomes'].count(o)} {o}" for o in OUTCOMES if o in r["outcomes"])
        ceiling = (f"{statistics.median(r['pct_ceiling']):.1f}% ({min(r['pct_ceiling']):.1f}-"
                   f"{max(r['pct_ceiling']):.1f})" if r["pct_ceiling"] else "")
        baselines = ", ".join(render.PROVIDERS.get(b, (b,))[0] for b in dict.fromkeys(r["baselines"]))
        table.append([r["kernel"], r["shape"], r["dtype"], r["provider"], r["schedule"],
                      " / ".join(f"{s:.3f}" for s in r["speedups"]), f"{r['median']:.3f}x", counts, baselines, ceiling,
                      r["most"], r["faster_than_dt"]])
    lines += render.markdown_table(["kernel", "shape", "dtype", "provider", "schedule", "speed-up in each run",
                                    "median", "runs", "fastest baseline", "% of ceiling (range)",
                                    "most runs", "runs faster than dt"], table)
    lines += ["", "## Over every row", ""]
    counts = [[provider, str(len(group))] + [str(sum(r["most"] == o for r in group)) for o in OUTCOMES]
              + [str(sum(set(r["outcomes"]) == {o} for r in group)) for o in OUTCOMES]
              for provider, group in _by_provider_kind(rows).items()]
    lines += render.markdown_table(["provider", "rows"] + [f"{o} in most runs" for o in OUTCOMES]
                                   + [f"{o} in every run" for o in OUTCOMES], counts)
    lines.append("")
    return "\n".join(lines)


def _by_provider_kind(rows: list[dict]) -> dict[str, list[dict]]:
    """The summary rows of `dt` and of the contenders (`dt@...`, together)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault("dt" if r["provider"] == "dt" else "dt@ contenders", []).append(r)
    return groups


if __name__ == "__main__":
    sys.exit(main())
