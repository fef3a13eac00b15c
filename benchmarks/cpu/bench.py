"""CPU benchmark of dt's `numba` backend against PyTorch eager, torch.compile (Inductor), SDPA
and NumPy (OpenBLAS running the kernel it picks for this CPU), with the same semantics and
the same output handling on both sides; every row measured in several fresh processes, its
providers timed side by side in each. The method, the command for a full run and how to read
the report are in docs/numba.md ("The CPU benchmark").

    python benchmarks/cpu/bench.py --out DIR [--kernels softmax_safe,matmul]
        [--providers dt,eager,compile,numpy,sdpa] [--match TEXT ...] [--processes 3] [--rounds 5]
        [--seconds 0.25] [--quick] [--no-first-call] [--list]

Writes DIR/cpu.json ({"runs": [run], "records": [...]}, the GPU harness's shape; rewritten
after every pass over the rows), DIR/cpu.md, and DIR/cpu.log (the measuring processes'
tracebacks). --quick runs each kernel's tiny row with short timings: a check of the harness.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cpu_rows  # noqa: E402  (first: it puts the GPU harness's modules on the path)
import cpu_machine  # noqa: E402
import cpu_report  # noqa: E402
import measure  # noqa: E402
import render  # noqa: E402
from cases import matching  # noqa: E402
from cpu_first_call import first_call_times  # noqa: E402

WORKER_TIMEOUT_S = 1800  # a measuring process that runs longer is stopped and its row marked failed
FIRST_CALL_EXTENT = 64   # the first-call runs use extents of at most this


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (cpu.json, cpu.md, cpu.log)")
    p.add_argument("--kernels", type=measure.list_arg(list(cpu_rows.KERNEL_ROWS)), help="comma-separated (default: all)")
    p.add_argument("--providers", type=measure.list_arg(cpu_rows.PROVIDERS), default=list(cpu_rows.PROVIDERS),
                   help="comma-separated (default: all; sdpa runs on attention rows only)")
    p.add_argument("--match", action="append",
                   help="only rows whose title ('softmax_safe [x=128, y=65536] f32') contains this (repeatable)")
    p.add_argument("--processes", type=measure.positive_int, default=3,
                   help="fresh processes measuring each row (default 3)")
    p.add_argument("--rounds", type=measure.positive_int, help="round-robin rounds in each process (default 5; "
                                                                 "2 with --quick)")
    p.add_argument("--seconds", type=_positive_seconds, help="seconds of back-to-back runs per timing (default 0.25; 0.01 with "
                                                 "--quick)")
    p.add_argument("--quick", action="store_true", help="each kernel's tiny row, short timings: a check of the harness")
    p.add_argument("--no-first-call", action="store_true", help="skip the first-call latency of each DT file")
    p.add_argument("--list", action="store_true", help="print the rows, their providers and output, then exit")
    return p.parse_args(argv)


def _positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, not {text}")
    return value


def timing(args) -> dict:
    """How each process times its row: rounds, seconds and runs per timing, the pause before it."""
    quick = args.quick
    rounds = args.rounds if args.rounds is not None else (2 if quick else 5)
    seconds = args.seconds if args.seconds is not None else (0.01 if quick else 0.25)
    return {"rounds": rounds, "seconds": seconds,
            "min_runs": 2 if quick else 3, "pause": 0.0 if quick else 0.2}


def probe(env: dict) -> dict:
    """cpu_machine.libraries() of a process started with `env`."""
    child = subprocess.run([sys.executable, str(HERE / "cpu_machine.py")], env=env, capture_output=True, text=True,
                           check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def measure_in_process(case, providers: list[str], how: dict, env: dict, log) -> dict:
    """One fresh process's results for the row (cpu_measure.py), or {"failed": why}."""
    spec = dict(how, kernel=case.kernel.name, shape=list(case.shape), dtype=case.dtype, providers=providers)
    try:
        child = subprocess.run([sys.executable, str(HERE / "cpu_measure.py"), json.dumps(spec)], env=env,
                               capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"failed": f"the measuring process ran over {WORKER_TIMEOUT_S} s"}
    if child.stderr:
        log.write(child.stderr)
        log.flush()
    lines = child.stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"the measuring process exited with status {child.returncode}: {last}"[:300]}
    return json.loads(lines[-1])


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = matching(cpu_rows.rows(args.kernels or list(cpu_rows.KERNEL_ROWS), args.quick), args.match)
    providers = {c.title: cpu_rows.providers(c, args.providers) for c in rows}
    if args.list:
        for c in rows:
            names = providers[c.title]
            dts = [cpu_rows.relative(cpu_rows.schedule(c, p)) for p in names if render.is_dt(p)]
            print(f"{c.title:<52} {cpu_rows.output_mode(names):<12} {', '.join(names)}  {' '.join(dts)}")
        return 0
    how = timing(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_machine.cpu()
    started = _now()
    run = dict(id=f"cpu@{started}", started=started, command=" ".join(["python", *sys.argv]) if argv is None
               else "python benchmarks/cpu/bench.py " + " ".join(argv), device=cpu_machine.cpu_text(cpu), cpu=cpu,
               quick=args.quick, processes=args.processes, **how,
               timer=f"{args.processes} processes x {how['rounds']} round-robin rounds of back-to-back runs "
                     f"(at least {how['seconds']} s and {how['min_runs']} runs)")
    records: list[dict] = []

    def write():
        render.write_json(out / "cpu.json", [run], records)
        (out / "cpu.md").write_text(cpu_report.markdown(run, records))

    with tempfile.TemporaryDirectory(prefix="dt-cpu-bench-") as caches:
        env = cpu_machine.measuring_env(os.environ, Path(caches))
        run["libraries"] = probe(env)
        run["numpy_blas"] = cpu_machine.numpy_blas(run["libraries"])
        forced = {k: os.environ[k] for k in cpu_machine.OPENBLAS_OVERRIDES if k in os.environ}
        run["openblas_forced"] = None
        if forced:
            run["openblas_forced"] = {"env": forced, "architecture": (cpu_machine.numpy_blas(probe(dict(os.environ)))
                                                                       or {}).get("architecture")}
        blas = run["numpy_blas"] or {}
        forced_text = (f" (the environment forces {run['openblas_forced']['architecture']}: unset for the measuring "
                       "processes)" if forced else "")
        print(f"{run['device']}\nNumPy: {blas.get('internal_api')} {blas.get('architecture')} kernel, "
              f"{blas.get('num_threads')} threads{forced_text}", flush=True)
        results = {c.title: [] for c in rows}
        base = {"run": run["id"], "device": run["device"], "timer": run["timer"]}
        t0 = time.monotonic()
        with open(out / "cpu.log", "a") as log:
            for i in range(args.processes):
                for case in rows:
                    res = measure_in_process(case, args.providers, how, env, log)
                    results[case.title].append(res)
                    print(f"[process {i + 1}/{args.processes}] {case.title}: {_summary(res)} "
                          f"({time.monotonic() - t0:.0f} s)", flush=True)
                records = [r for c in rows for r in cpu_report.row_records(base, c, providers[c.title],
                                                                           results[c.title])]
                run["finished"] = _now()
                write()
        if not args.no_first_call:
            run["first_call"] = []
            for path, sizes in _dt_files(rows, providers).items():
                times = first_call_times(path, sizes, env)
                run["first_call"].append(dict(file=cpu_rows.relative(path), **times))
                print(f"first call {run['first_call'][-1]}", flush=True)
    run["finished"] = _now()
    write()
    md = (out / "cpu.md").read_text()
    print("\n".join(line for line in md.split("## What each provider runs")[0].splitlines() if line.startswith("|")))
    print(f"wrote {out / 'cpu.json'}, {out / 'cpu.md'}", flush=True)
    return 0


def _dt_files(rows, providers) -> dict[Path, dict]:
    """Each DT file the rows run, with extents of its first row capped at FIRST_CALL_EXTENT."""
    files = {}
    for c in rows:
        for p in providers[c.title]:
            if render.is_dt(p):
                files.setdefault(cpu_rows.schedule(c, p), {d: min(n, FIRST_CALL_EXTENT) for d, n in c.extents.items()})
    return files


def _summary(res: dict) -> str:
    if "failed" in res:
        return res["failed"]
    parts = []
    for name, r in res["providers"].items():
        ok = r["status"] == "ok" and r["ms_rounds"]
        parts.append(f"{name} {statistics.median(r['ms_rounds']):.3g} ms" if ok else f"{name} {r['status']}")
    return ", ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
