"""Schedule search on the GPU: for each row of the benchmark, generate DT schedules over a
space of blockings, tiles, program orders, warps and stages (`space.py`), compile them all
in parallel worker processes, check each against the float64 reference, screen the correct
ones in two round-robin rounds, time the finalists again, and report the fastest per row.

    python3 benchmarks/gpu/tune.py --out DIR [--kernels K,...] [--dtypes D,...] [--match TEXT]
        [--workers N] [--budget SECONDS] [--device-slug SLUG]

Writes DIR/tune-TAG.json: per row, every variant's time or error and, for the fastest, its
DT source; and the device it ran on (its name, and the slug its winners are filed under:
devices.slug of the name, h100, h200, or --device-slug's). Then, on any machine,

    python benchmarks/gpu/tune.py --write benchmarks/results/tune.json DIR1/tune-elementwise.json ...

writes each row's winner to benchmarks/gpu/schedules/tuned/SLUG/KERNEL_SHAPE_DTYPE.dt, the
folder of the device the row was searched on (the file the benchmark's `dt` provider runs
for that row on that device, and on another of its architecture that has none of its own; see
cases.schedule_choice), merges the runs into benchmarks/results/tune.json (a row per device,
kernel, shape and dtype) and summarises them in benchmarks/results/tune.md. Where
the search's winner and another schedule are within its noise, a measurement that tells them
apart (run_to_run.py over bench.py --contender runs) settles it:

    python benchmarks/gpu/tune.py --choose 'add [x=4096, y=8192] bf16' x1_y512_w4_rowmajor \\
        "in 8 fresh processes it ran faster than the search's pick in each (run_to_run.py)"

records that schedule of space.py as the row's winner in tune.json, with the evidence, and
writes the schedules again (--device-slug SLUG says whose row, where several devices searched
it); a later --write keeps it until a new search of the row. Times are
medians of the benchmark's timer for the row (measure.row_timer: memory-bound rows on a cold L2
for every run, compute-bound ones with do_bench as is) with a shorter repetition (10 ms
warm-up, 40 ms), enough to screen schedules (each keeps the faster of
its two screening timings); the finalists (within 5% of the fastest) are timed again in
alternating rounds, and bench.py then measures the chosen ones the benchmark's way.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import textwrap
import time
import traceback
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import devices  # noqa: E402
import measure  # noqa: E402
import space  # noqa: E402
from cases import KERNELS, ROOT, TUNED_DIR, cases, matching, tuned_name  # noqa: E402

FINALISTS, FINALISTS_WITHIN = 6, 1.05
SCREENING_ROUNDS = 2

RESULTS = ROOT / "benchmarks" / "results"


def _ident(case, name: str) -> str:
    """A variant's id: also its program's name, the same in the workers and the timing process
    (so that Triton's disk cache, keyed by the generated source, finds each compiled kernel)."""
    return f"{case.kernel.name}/{case.shape_text}/{case.dtype}/{name}"


def _compile(job):
    """Worker: load one variant and call it once on the row's shapes (Triton compiles and
    caches it on disk, where the timing process finds it). Returns (job id, error or None)."""
    ident, text, kernel, shape, dtype = job
    try:
        import dt
        case = next(c for c in cases([kernel], [dtype]) if c.shape == shape)
        prog = dt.loads(text, name=ident.replace("/", "_"))
        prog(backend="triton", **measure.case_inputs(case, "cuda", 0), **case.kernel.scalars)
        torch.cuda.synchronize()
        return ident, None
    except Exception as e:  # a variant that does not compile or run is a result, not a crash
        return ident, measure.short_error(e)


def _check(case, ident: str, text: str, check: dict, ref, timed: dict):
    """One variant's record (its relative error, or why it failed) and, when it is correct, the
    call to time on the timing inputs."""
    import dt
    try:
        prog = dt.loads(text, name=ident.replace("/", "_"))
        err = measure.relative_error(prog(backend="triton", **check, **case.kernel.scalars), ref)
        if not err <= measure.TOLERANCE[case.dtype]:
            return {"rel_err": err, "error": f"relative error {err:.3g}"}, None
        return {"rel_err": err}, lambda: prog(backend="triton", **timed, **case.kernel.scalars)
    except Exception as e:
        return {"error": measure.short_error(e)}, None


def _timer(case) -> measure.Timer:
    """The benchmark's timer for the row (bench.py's default, measure.row_timer), with a shorter
    repetition."""
    return measure.row_timer("auto", case.flops, case.bytes, warmup=10, rep=40)


def _final(variants: list[dict], calls: dict, rounds: int, timer) -> dict:
    """The winner among the variants timed within FINALISTS_WITHIN of the fastest (at most
    FINALISTS, by their screening timing): each is timed again in `rounds` round-robin rounds
    (measure.round_robin), and the lowest median wins: one screening timing can rank schedules
    a few percent apart wrongly. A finalist
    that fails now drops out with its error recorded."""
    best = min(v["ms"] for v in variants if "ms" in v)
    finalists = {v["name"]: v for v in sorted((v for v in variants if "ms" in v and v["ms"] <= best * FINALISTS_WITHIN),
                                              key=lambda v: v["ms"])[:FINALISTS]}

    def failed(name, e):
        finalists[name]["final_error"] = measure.short_error(e)

    for name, ms in measure.round_robin(timer, {name: calls[name] for name in finalists}, rounds, on_error=failed):
        finalists[name].setdefault("final_ms_runs", []).append(ms)
    timed = [v for v in finalists.values() if "final_ms_runs" in v]
    for v in timed:
        v["final_ms"] = statistics.median(v["final_ms_runs"])
    if timed:
        return min(timed, key=lambda v: v["final_ms"])
    # every finalist failed when timed again: the fastest schedule that has not failed, if any
    return min((v for v in variants if "ms" in v and "final_error" not in v), key=lambda v: v["ms"], default=None)


def _screen(case, found, errors: dict, check: dict, ref, timed: dict, timer) -> tuple[list[dict], dict]:
    """Every variant's record and the calls of those that passed the check: all are loaded and
    checked first, then timed back to back in SCREENING_ROUNDS round-robin rounds
    (measure.round_robin), and each keeps its fastest timing."""
    records, calls = [], {}
    for name, text in found:
        ident = _ident(case, name)
        record, call = ({"error": errors[ident]}, None) if ident in errors else _check(case, ident, text, check, ref,
                                                                                        timed)
        records.append({"name": name, **record})
        if call is not None:
            calls[name] = call
    by_name = {r["name"]: r for r in records}

    def failed(name, e):
        by_name[name].pop("ms_runs", None)
        by_name[name]["error"] = measure.short_error(e)

    for name, ms in measure.round_robin(timer, calls, SCREENING_ROUNDS, on_error=failed):
        by_name[name].setdefault("ms_runs", []).append(ms)
    for record in records:
        if "ms_runs" in record:
            record["ms"] = min(record["ms_runs"])
    return records, {name: call for name, call in calls.items() if "ms" in by_name[name]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="output directory (searching)")
    p.add_argument("--write", nargs="+", metavar="JSON", help="write the winners of these runs (no GPU work)")
    p.add_argument("--choose", nargs=3, metavar=("ROW", "VARIANT", "EVIDENCE"),
                   help="make VARIANT, a schedule of space.py, the winner of ROW ('add [x=4096, y=8192] bf16') in "
                        "benchmarks/results/tune.json, citing EVIDENCE, and write the schedules (no GPU work)")
    p.add_argument("--tag", default="run")
    p.add_argument("--kernels", default=",".join(KERNELS))
    p.add_argument("--dtypes")
    p.add_argument("--match", action="append", help="only rows whose title contains this (repeatable: any of them)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--budget", type=float, default=0, help="seconds; start no new row after this (0: none)")
    p.add_argument("--rounds", type=measure.positive_int, default=3, help="round-robin rounds timing each row's finalists")
    p.add_argument("--device-slug", type=devices.slug_arg, metavar="SLUG",
                   help="searching: file the winners under schedules/tuned/SLUG/ (default: the slug of "
                        "torch.cuda.get_device_name(), h100, h200); --choose: the device whose row it is")
    args = p.parse_args(argv)
    if args.write:
        if args.device_slug:
            p.error("--write files each row under the device it was searched on: leave out --device-slug")
        return write(args.write)
    if args.choose:
        return choose(*args.choose, device_slug=args.device_slug)
    if not args.out:
        p.error("--out is required to search")
    device = devices.current(args.device_slug)
    print(f"the winners go to {TUNED_DIR.relative_to(ROOT) / device.slug}/ ({device.arch or 'architecture unknown'})",
          flush=True)
    rows = cases(args.kernels.split(","), args.dtypes.split(",") if args.dtypes else None)
    rows = matching(rows, args.match)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    variants = [space.variants(case) for case in rows]
    jobs = [(_ident(case, name), text, case.kernel.name, case.shape, case.dtype)
            for case, found in zip(rows, variants) for name, text in found]
    pruned = sum(len(space.variants(case, prune=False)) for case in rows) - len(jobs)
    print(f"{len(rows)} rows, {len(jobs)} variants ({pruned} pruned by dt's performance warnings); compiling on "
          f"{args.workers} workers", flush=True)
    errors = {}
    with ProcessPoolExecutor(args.workers, mp_context=torch.multiprocessing.get_context("spawn")) as pool:
        for future in as_completed([pool.submit(_compile, j) for j in jobs]):
            ident, error = future.result()
            if error:
                errors[ident] = error
    print(f"compiled in {time.monotonic() - t0:.0f} s; {len(errors)} variants failed", flush=True)

    results = []
    for case, found in zip(rows, variants):
        if args.budget and time.monotonic() - t0 > args.budget:
            print(f"budget reached before {case.title}", flush=True)
            break
        seed = zlib.crc32(case.title.encode())
        check = measure.case_inputs(case, "cuda", seed)
        ref = case.kernel.torch_fn(**{n: t.double() for n, t in check.items()}, **case.kernel.scalars)
        timed = measure.case_inputs(case, "cuda", seed + 1)
        timer = _timer(case)
        screened, calls = _screen(case, found, errors, check, ref, timed, timer)
        row = {"kernel": case.kernel.name, "shape": case.shape_text, "dtype": case.dtype, "bytes": case.bytes,
               "flops": case.flops, "timer": timer.mode, "variants": screened}
        timed_ok = [v for v in row["variants"] if "ms" in v]
        best = _final(row["variants"], calls, args.rounds, timer) if timed_ok else None
        if best:
            row["best"] = best["name"]
            row["best_source"] = dict(found)[best["name"]]
            print(f"{case.title}: best {best['name']} {best.get('final_ms', best['ms']):.4f} ms of {len(timed_ok)} "
                  f"({len(row['variants']) - len(timed_ok)} failed)", flush=True)
        else:
            print(f"{case.title}: no variant ran", flush=True)
        results.append(row)
        (out / f"tune-{args.tag}.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "device_slug": device.slug, "device_arch": device.arch,
             "torch": torch.__version__, "rows": results}, indent=1))
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


def _num(ms: float | None) -> str:
    return "" if ms is None else f"{ms:.4f}"


def row_slug(row: dict) -> str:
    """The slug of the device a row of tune.json was searched on: recorded (searches since
    schedules are filed per device), else the slug of its device's name."""
    return row.get("device_slug") or devices.slug(row.get("device") or "")


def choose(title: str, variant: str, evidence: str, device_slug: str | None = None) -> int:
    """Record `variant` as the winner of the row titled `title` (of the device `device_slug`;
    None: the only device that searched it) in the merged tune.json, with the evidence that it
    is faster than the search's pick, and write the schedules again."""
    case = next((c for c in cases(list(KERNELS)) if c.title == title), None)
    if case is None:
        raise SystemExit(f"no benchmark row is titled {title!r} (titles as bench.py --list prints them)")
    source = dict(space.variants(case)).get(variant)
    if source is None:
        raise SystemExit(f"space.py has no schedule {variant!r} for {title}")
    merged = RESULTS / "tune.json"
    doc = json.loads(merged.read_text())
    found = [r for r in doc["rows"] if (r["kernel"], r["shape"], r["dtype"]) ==
             (case.kernel.name, case.shape_text, case.dtype) and device_slug in (None, row_slug(r))]
    if len(found) > 1:
        raise SystemExit(f"{title} was searched on {', '.join(sorted(row_slug(r) for r in found))}: "
                         "say whose row with --device-slug")
    row = found[0] if found else None
    if row is None or row.get("best") is None:
        on = f" on {device_slug}" if device_slug else ""
        raise SystemExit(f"{merged} has no search of {title}{on} with a winner: search it first (--out, --match)")
    if variant == row["best"]:
        raise SystemExit(f"{variant} is already the search's pick for {title}")
    failed = next((v["error"] for v in row["variants"] if v["name"] == variant and "error" in v), None)
    if failed:
        raise SystemExit(f"{variant} failed in the search of {title} ({failed}): choose a schedule that ran")
    row["chosen"] = {"name": variant, "source": source, "evidence": evidence}
    merged.write_text(json.dumps(doc, indent=1) + "\n")
    return write([merged])


def _kept_allows(before: str | None, text: str) -> str:
    """`text`, or the file it replaces where that is `text` with `# allow: CODE -- why` lines added
    (a performance warning accepted by hand for this schedule, dt.lint): they stay while it does."""
    if before is not None and "".join(line for line in before.splitlines(keepends=True)
                                      if not line.startswith("# allow:")) == text:
        return before
    return text


def write(paths) -> int:
    """Each row's winner as a .dt file, the merged runs as JSON, and a markdown summary."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    # Later runs win, per device; a merged tune.json (its rows carry their device) may be given too.
    rows = {}
    for run in runs:
        for r in run["rows"]:
            row = {"device": run.get("device"), **({"device_slug": run["device_slug"]} if run.get("device_slug")
                                                    else {}), **r}
            rows[(row_slug(row), r["kernel"], r["shape"], r["dtype"])] = row
    previous = {}  # what each file held: its `# allow:` lines stay while its schedule does
    for slug in {key[0] for key in rows}:  # the folders of the devices these runs searched on, written afresh
        (TUNED_DIR / slug).mkdir(parents=True, exist_ok=True)
        for old in (TUNED_DIR / slug).glob("*.dt"):
            previous[old] = old.read_text()
            old.unlink()
    lines = ["# Schedule search results", "",
             "Produced by `benchmarks/gpu/tune.py` (method in `docs/performance.md`): every schedule of "
             "`benchmarks/gpu/space.py` for each row, checked against the float64 reference and screened with "
             "the benchmark's timer for the row (10 ms warm-up, 40 ms repetition, median) in two "
             "round-robin rounds, each keeping its faster timing: `cold` (every run on a cold L2) for memory-bound "
             "rows, `do_bench` (`triton.testing.do_bench` as is) for compute-bound ones (docs/performance.md, "
             "\"A timer for each row\"; memory-bound rows of timer `do_bench` were searched before the cold "
             "timer, with a flush that leaves the lines a kernel read with evict_last); the schedules within 5% of the "
             "fastest (at most six, the finalists) are timed again in alternating rounds, and the lowest median "
             "wins (rows without finalists are from runs before that). The winner of each row is "
             "`benchmarks/gpu/schedules/tuned/<file>`, in the folder of the device it was searched on "
             "(`h100/`, `h200/`; on another device of the same architecture the benchmark runs it where that "
             "device has no file of its own); the benchmark (`bench.py`) measures it again the "
             "benchmark's way, and where another schedule measured faster there (`tune.py --choose`), that one is the "
             "row's file, the evidence named (its `ms` is blank when the row's search, older than the schedule, "
             "did not try it). The others' median is of their screening times.", "",
             "| kernel | shape | dtype | device | timer | tried | failed | best | ms | finalists | file | median of the others ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    written = 0
    for (slug, kernel, shape, dtype), r in sorted(rows.items()):
        # finalists (timed again, alternating) by their medians first, then the others
        timed = sorted((v for v in r["variants"] if "ms" in v), key=lambda v: (v.get("final_ms", math.inf), v["ms"]))
        failed = len(r["variants"]) - len(timed)
        timer = r.get("timer", "do_bench")  # searches before the cold timer carry no timer
        best = next((v for v in timed if v["name"] == r.get("best")), None)
        if best is None:  # no schedule ran, or every one that did failed when timed again
            lines.append(f"| {kernel} | {shape} | {dtype} | {r['device']} | {timer} | {len(r['variants'])} | {failed} | — "
                         "| | | | |")
            continue
        path = TUNED_DIR / slug / tuned_name(kernel, shape, dtype)
        finalists = sum("final_ms" in v for v in timed)
        best_ms = best.get("final_ms", best["ms"])
        if "chosen" not in r:
            screenings = len(best.get("ms_runs", [best["ms"]]))
            how = (f"the median of {len(best['final_ms_runs'])} rounds alternating {finalists} finalists" if finalists
                   else "one timing" if screenings == 1 else f"the fastest of {screenings} timings")
            header = (f"# {kernel} [{shape}] {dtype}: the fastest of {len(timed)} schedules that ran "
                      f"(benchmarks/gpu/tune.py),\n# variant {best['name']}, {best_ms:.4f} ms ({how}) on {r['device']}.\n")
            source, winner = r["best_source"], f"{best['name']} | {best_ms:.4f}"
        else:  # another schedule, measured faster than the search's pick (tune.py --choose)
            chosen = r["chosen"]
            header = textwrap.fill(f"{kernel} [{shape}] {dtype}: variant {chosen['name']} of benchmarks/gpu/space.py, "
                                   f"chosen over the search's pick ({best['name']}, benchmarks/gpu/tune.py) on "
                                   f"{r['device']}: {chosen['evidence']}.", 100, initial_indent="# ",
                                   subsequent_indent="# ", break_on_hyphens=False) + "\n"
            source = chosen["source"]
            searched = next((v for v in timed if v["name"] == chosen["name"]), {})
            evidence = chosen["evidence"].replace("|", "\\|")
            winner = (f"{chosen['name']}, chosen over {best['name']} ({evidence}) | "
                      + _num(searched.get("final_ms", searched.get("ms"))))
        path.write_text(_kept_allows(previous.get(path), header + source))
        written += 1
        others = [v["ms"] for v in timed if v is not best]
        median = sorted(others)[len(others) // 2] if others else None
        lines.append(f"| {kernel} | {shape} | {dtype} | {r['device']} | {timer} | {len(r['variants'])} | {failed} | "
                     f"{winner} | {finalists or ''} | {slug}/{path.name} | {_num(median)} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tune.json").write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k != "rows"}
                                                            for run in runs for r in run.get("runs", [run])],
                                                   "rows": list(rows.values())}, indent=1) + "\n")
    (RESULTS / "tune.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {written} schedules to {', '.join(str(TUNED_DIR / s) for s in sorted({k[0] for k in rows}))}, "
          f"{RESULTS / 'tune.md'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
