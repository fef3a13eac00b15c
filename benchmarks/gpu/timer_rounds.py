"""How far apart are a row's rounds under each timer? A summary of benchmark runs.

The cold timer (`measure.cold_bench`) exists for memory-bound rows: lines an earlier kernel
kept in L2 would otherwise serve part of their bytes. Before every run it waits for the GPU
to go idle and spins, so a long compute-bound kernel starts each run from an idle GPU. This
reads `bench.py` runs of the same rows made with different timers on one machine and
reports, per row, provider and run, the rounds' median and their spread (slowest round over
fastest), and dt's speed-up over the best baseline.

    # on the GPU machine, alternating the timers (the committed report: six runs, about 3 minutes)
    i=0; for t in auto cold do_bench auto cold do_bench; do i=$((i+1))
        python3 benchmarks/gpu/bench.py --out /tmp/runs/$i-$t --tag mm --timer $t --kernels matmul,mmsigmoid \\
            --providers dt,eager,compile,max-autotune --repeats 3 --no-plots
        cp /tmp/runs/$i-$t/gpu-mm.json $OUT/$i-$t.json
    done
    # anywhere
    python benchmarks/gpu/timer_rounds.py --out benchmarks/results OUT/1-auto.json OUT/2-cold.json ...

writes OUT/timer_rounds.json (the runs' records, trimmed) and OUT/timer_rounds.md.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402

FIELDS = ("run", "device", "timer", "kernel", "shape", "dtype", "flops", "bytes", "provider", "ms", "ms_runs",
          "speedup_vs_best", "speedup_range")


def spread(ms_runs: list[float]) -> float:
    """The slowest round over the fastest."""
    return max(ms_runs) / min(ms_runs)


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__)
    parser.add_argument("runs", nargs="+", help="gpu-TAG.json files written by bench.py")
    args = parser.parse_args(argv)
    records = [{f: r.get(f) for f in FIELDS} for path in args.runs
               for r in json.loads(Path(path).read_text())["records"] if r.get("ms_runs")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "timer_rounds.json").write_text(json.dumps({"records": records}, indent=1) + "\n")
    (out / "timer_rounds.md").write_text(markdown(records))
    return 0


def bound_of(record: dict) -> str:
    """What limits the row, as the benchmark's default timer decides (measure.row_timer)."""
    compute = measure.row_timer("auto", record["flops"], record["bytes"]).mode == "do_bench"
    return "compute-bound" if compute else "memory-bound"


def markdown(records: list[dict]) -> str:
    devices = sorted({r["device"] for r in records})
    lines = ["# Round-to-round spread under each timer", "",
             f"Produced by `benchmarks/gpu/timer_rounds.py` from `bench.py` runs on {'; '.join(devices)} (its "
             "docstring has the commands). Each cell: the median of the row's rounds in ms, and in brackets the "
             "spread, the slowest round over the fastest. Runs are listed in the order they started; a run with "
             "`--timer auto` times each row with the timer named.", ""]
    runs = sorted({r["run"] for r in records}, key=lambda run: run.split("@")[1])
    spreads: dict[tuple, list[float]] = {}
    for (kernel, shape, dtype), rows in measure.by_row(records, "kernel", "shape", "dtype").items():
        providers = list(dict.fromkeys(r["provider"] for r in rows))
        by_key = {(r["run"], r["provider"]): r for r in rows}
        bound = bound_of(rows[0])
        table = []
        for run in runs:
            timed = [by_key[run, provider] for provider in providers if (run, provider) in by_key]
            if not timed:
                continue
            cells = [f"{run} ({timed[0]['timer']})"]
            for provider in providers:
                r = by_key.get((run, provider))
                cells.append(f"{r['ms']:.4f} ({spread(r['ms_runs']):.3f})" if r else "")
            for r in timed:
                spreads.setdefault((bound, r["timer"]), []).append(spread(r["ms_runs"]))
            dt = by_key.get((run, "dt"))
            cells.append(f"{dt['speedup_vs_best']:.2f}x" if dt and dt.get("speedup_vs_best") else "")
            table.append(cells)
        lines += [f"## {kernel} {shape}, {dtype} ({bound})", ""]
        lines += render.markdown_table(["run (timer)", *providers, "dt speed-up"], table)
        lines.append("")
    lines += ["## Over every row and provider", ""]
    lines += render.markdown_table(["rows", "timer", "rows x providers x runs", "median spread", "largest spread"],
                                   [[bound, timer, str(len(s)), f"{statistics.median(s):.3f}", f"{max(s):.3f}"]
                                    for (bound, timer), s in sorted(spreads.items())])
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
