"""GPU benchmark of dt's Triton kernels against PyTorch eager, torch.compile (default and
max-autotune-no-cudagraphs), Liger Kernel and SDPA, for the kernels and shapes of issue 7.

For every row (kernel, shape, dtype) and provider: check the output against a float64
PyTorch reference first, then time with do_bench's method (25 ms warm-up, 100 ms repetition,
median): memory-bound rows on a cold L2 for every run (measure.cold_bench), compute-bound rows
with do_bench as is (measure.row_timer; --timer). Writes DIR/gpu-TAG.json
(after every row), DIR/gpu-TAG.md, DIR/gpu-TAG-memory.png, DIR/gpu-TAG-matmul.png and
DIR/gpu-TAG.log (tracebacks).

    python benchmarks/gpu/bench.py --out DIR [--kernels softmax,dyt] [--providers dt,eager]
        [--dtypes bf16] [--match TEXT ...] [--quick] [--tune] [--schedule KERNEL[:SHAPE[:DTYPE]]=PATH ...]
        [--contender KERNEL[:SHAPE[:DTYPE]]=PATH ...] [--budget 480] [--tag NAME] [--list] [--no-plots]
        [--device-slug h200]

The `dt` provider runs each row's tuned schedule of this device (schedules/tuned/<slug>/, the slug of
torch.cuda.get_device_name(): h100, h200; --device-slug names another), else another device's of the
same architecture, else cases.py's table (cases.schedule_choice); each record says which file ran
(`schedule`) and why (`schedule_origin`: tuned, fallback, table, ...).

Without a CUDA device (or with --dry-run) it runs the same logic on the CPU, on tiny shapes,
with dt's interpreter and time.perf_counter. The method and the commands for a GPU machine
are in docs/performance.md.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import traceback
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # this folder's modules, and dt from the checkout if not installed

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import devices  # noqa: E402
import measure  # noqa: E402
import render  # noqa: E402
from cases import (CANDIDATE, DTYPES, KERNELS, MATMUL, MEMORY, ROOT, Case, candidates, cases,  # noqa: E402
                   matching, schedule_choice, schedule_keys)

ALL_PROVIDERS = ("dt", "eager", "compile", "max-autotune", "liger", "sdpa")
REFERENCE_F64_BYTES = 8 << 30
DRY_RUN_PROVIDERS = ("dt", "eager", "liger", "sdpa")  # torch.compile on the CPU needs a C++ toolchain: ask for it


class Skip(Exception):
    """A provider that cannot run here (not installed, needs a GPU): a 'skipped' row."""


class ContextLost(Exception):
    """The CUDA context is unusable (e.g. after an illegal memory access): stop the run."""


@dataclass
class Provider:
    name: str
    # build(case, ctx) -> make; make(tensors) -> the zero-argument callable that is checked and timed.
    # build runs once per row (loading, compiling wrappers); make prepares anything outside the timing.
    build: Callable
    schedule: Path | None = None  # the file a dt provider runs (None: the row's, cases.schedule_choice)
    origin: str = CANDIDATE       # why it runs that file (a record's schedule_origin), when `schedule` is given


class Context:
    def __init__(self, args, device: torch.device, dry: bool):
        self.device, self.dry = device, dry
        self.dt_backend = args.dt_backend or ("interp" if dry else "triton")
        self.overrides = dict(args.schedule or [])
        # whose tuned schedules the dt provider runs: --device-slug's, else this device's (the CPU's in a dry run)
        override = getattr(args, "device_slug", None)
        self.tuned = devices.current(override) if override or not dry else devices.Device("cpu")
        self.contenders = args.contender or []
        self.programs: dict[Path, object] = {}
        self._liger = None

    def program(self, path: Path):
        if path not in self.programs:
            import dt
            self.programs[path] = dt.load(path)
        return self.programs[path]

    def schedule(self, case: Case):
        """The row's schedule for the dt provider and why (cases.ScheduleChoice)."""
        return schedule_choice(case, self.overrides, self.tuned)

    def liger(self):
        """liger_kernel.transformers.functional, imported once; Skip when it cannot run here."""
        if self.dry or self.device.type != "cuda":
            raise Skip("Liger's kernels need a CUDA GPU")
        if self._liger is None:
            try:
                import liger_kernel.transformers.functional as lf
                self._liger = lf
            except Exception as e:  # not installed, or broken against this torch/triton
                self._liger = Skip(f"liger_kernel not importable: {type(e).__name__}: {e}")
        if isinstance(self._liger, Skip):
            raise self._liger
        return self._liger


# ----------------------------------------------------------------------- providers
def _dt(schedule: Path | None):
    def build(case: Case, ctx: Context):
        path = schedule or ctx.schedule(case).path
        prog = ctx.program(path)
        scalars, backend = case.kernel.scalars, ctx.dt_backend
        sizes = {d: case.extents[d] for d in case.kernel.dt_sizes} or None
        return lambda t: (lambda: prog(backend=backend, sizes=sizes, **t, **scalars))
    return build


def _saved(case: Case, t: dict) -> dict:
    """The row's tensors and what autograd's forward would have saved for a baseline (a backward
    row's Kernel.torch_saved), made here, outside the timing."""
    saved = case.kernel.torch_saved
    return {**t, **saved(t, case.kernel.scalars)} if saved else t


def _eager(case: Case, ctx: Context):
    fn, scalars = case.kernel.torch_fn, case.kernel.scalars

    def make(t):
        t = _saved(case, t)
        return lambda: fn(**t, **scalars)
    return make


def _compiled(mode: str | None):
    def build(case: Case, ctx: Context):
        # A fresh Dynamo state for every row: each shape compiles once, statically, as in a
        # program that only ever sees that shape (no automatic-dynamic recompilation).
        torch._dynamo.reset()
        compiled = torch.compile(case.kernel.torch_fn, mode=mode)
        scalars = case.kernel.scalars

        def make(t):
            t = _saved(case, t)
            return lambda: compiled(**t, **scalars)
        return make
    return build


def _liger(case: Case, ctx: Context):
    lf = ctx.liger()
    return lambda t: case.kernel.liger(lf, _saved(case, t), case.kernel.scalars)


def _sdpa(case: Case, ctx: Context):
    if callable(case.kernel.sdpa):  # the kernel's own call (inputs prepared outside the timing)
        return lambda t: case.kernel.sdpa(_saved(case, t), case.extents, case.kernel.scalars)

    def make(t):
        m, n = case.out_shape
        q = t["A"][None, None]
        k = t["B"].t().contiguous()[None, None]  # SDPA takes K as (l x k): transposed outside the timing
        v = t["C"][None, None]
        return lambda: F.scaled_dot_product_attention(q, k, v).view(m, n)
    return make


BUILDERS = {"dt": _dt(None), "eager": _eager, "compile": _compiled(None),
            "max-autotune": _compiled("max-autotune-no-cudagraphs"), "liger": _liger, "sdpa": _sdpa}


def providers_for(case: Case, names: list[str], tune: bool, contenders=()) -> list[Provider]:
    """The row's providers, in `names`' order; with `tune` every DT schedule of the kernel
    instead of dt's, else dt followed by the `contenders` ((key, path) pairs, as --schedule's)
    that name the row."""
    out = []
    for name in names:
        if name == "dt" and tune:
            out += [Provider(f"dt@{p.stem}", _dt(p), p) for p in candidates(case.kernel)]
        elif name == "dt":
            out.append(Provider(name, BUILDERS[name]))
            out += [Provider(f"dt@{Path(path).stem}", _dt(Path(path)), Path(path)) for key, path in contenders
                    if key in schedule_keys(case)]
        elif name == "liger" and case.kernel.liger is None or name == "sdpa" and not case.kernel.sdpa:
            continue  # the library has no such op
        else:
            out.append(Provider(name, BUILDERS[name]))
    return out


# ----------------------------------------------------------------------- one row
def run_case(case: Case, providers: list[Provider], ctx: Context, timer: measure.Timer, copy_gbps: float,
             repeats: int, base: dict, log, records: list[dict], timing_held=contextlib.nullcontext):
    """Check, then time, each provider on one row, appending a record per provider. The rounds
    also time the row's ceiling: a memory-bound row's a copy of its bytes, a matmul-like row's
    its products in cuBLAS. `timing_held()` is entered around the rounds alone (dt.tune.timing.gpu_held:
    searches sharing the GPU wait for the timing, not for compiles and checks)."""
    device, dtype = ctx.device, DTYPES[case.dtype]
    seed = zlib.crc32(case.title.encode())
    check_inputs = measure.case_inputs(case, device, seed)
    # The reference computes in float64, or in float32 where float64 copies of the inputs, and what
    # the reference holds besides (Kernel.reference_bytes), would pass REFERENCE_F64_BYTES: decode
    # over 32k keys; attention at 16k, whose float64 SDPA (its math backend) holds all the scores
    floats = sum(t.numel() for t in check_inputs.values() if t.is_floating_point())
    held = floats + (case.kernel.reference_bytes(case.extents) // 8 if case.kernel.reference_bytes else 0)
    wide = torch.float64 if held * 8 <= REFERENCE_F64_BYTES else torch.float32
    ref = case.kernel.torch_fn(**{n: t.to(wide) if t.is_floating_point() else t for n, t in check_inputs.items()},
                               **case.kernel.scalars)
    time_inputs = measure.case_inputs(case, device, seed + 1)  # fresh data for the timing runs
    ceiling = measure.SAME_SIZE_COPY if case.kernel.kind == MEMORY else measure.CUBLAS
    ceiling_error, ceiling_runs, copy_bytes = None, [], None
    timed = []  # (record, timing function) of each provider that ran and was checked
    checked = None  # what the rounds time, set once every provider is checked (None: the row stopped before)
    first = len(records)
    try:
        for p in providers:
            rec = _record(base, case, p.name, "error", None, ms_runs=[], copy_gbps=copy_gbps, cublas_ms=None,
                          tol=measure.TOLERANCE[case.dtype], rel_err=None)
            records.append(rec)
            try:
                started = time.perf_counter()
                make = p.build(case, ctx)
                if p.name == "dt" or p.name.startswith("dt@"):
                    chosen = ctx.schedule(case) if p.schedule is None else None
                    rec.update(schedule=str(_relative(chosen.path if chosen else p.schedule)),
                               schedule_origin=chosen.origin if chosen else p.origin)
                measure.poison_allocator(case.out_shape, dtype, device)
                out = make(check_inputs)()  # the first call compiles (outside the timing)
                measure.synchronize(device)
                rec["first_call_s"] = round(time.perf_counter() - started, 2)  # set-up, compile, one run
                err = measure.relative_error(out, ref)
                del out
                rec["rel_err"] = err
                rec["status"] = "ok" if err <= rec["tol"] else "wrong"  # NaN fails
                if rec["status"] == "wrong":
                    rec["error"] = f"relative error {err:.3g} > {rec['tol']:g}"
                timed.append((rec, make(time_inputs)))
            except Skip as e:
                rec.update(status="skipped", error=str(e))
            except Exception as e:  # any failure of one provider is a row of the results, not the end of the run
                _failed(rec, e, case, p.name, device, log)
        # Round-robin rounds after one discarded timing (measure.round_robin): a drift reaches
        # every provider, and the ceiling, alike.
        checked = {i: fn for i, (rec, fn) in enumerate(timed) if rec["status"] in ("ok", "wrong")}
        if checked:
            try:  # made after the providers' compilations, which it would otherwise hold memory through
                if ceiling == measure.SAME_SIZE_COPY:
                    checked[ceiling], copy_bytes = measure.copy_call(device, case.bytes)
                else:
                    checked[ceiling] = measure.cublas_call(device, case.gemm_shapes, dtype)
            except Exception as e:  # optional: the row goes on without its percentage of the ceiling
                ceiling_error = measure.short_error(e)
                _log_failure(e, case, ceiling, device, log)

        def failed(i, e):
            nonlocal ceiling_error
            if i == ceiling:
                ceiling_error = measure.short_error(e)
                _log_failure(e, case, i, device, log)
            else:
                _failed(timed[i][0], e, case, timed[i][0]["provider"], device, log)

        with timing_held():
            for i, ms in measure.round_robin(timer, checked, repeats, on_error=failed):
                (ceiling_runs if i == ceiling else timed[i][0]["ms_runs"]).append(ms)
    finally:  # also when the CUDA context is lost: no record is left checked but untimed
        error_field = "copy_same_error" if ceiling == measure.SAME_SIZE_COPY else "cublas_error"
        if ceiling_error:
            fields = {error_field: ceiling_error}
        elif ceiling_runs and ceiling == measure.SAME_SIZE_COPY:
            fields = {"copy_same_ms_runs": ceiling_runs,
                      "copy_same_gbps": copy_bytes / statistics.median(ceiling_runs) / 1e6}
        elif ceiling_runs:
            fields = {"cublas_ms_runs": ceiling_runs, "cublas_ms": statistics.median(ceiling_runs)}
        else:  # the ceiling is timed only in rounds with a provider
            fields = {error_field: "not timed: every provider failed or was skipped" if checked == {}
                      else "not timed: the row stopped before its timing"}
        for rec in records[first:]:
            rec.update(fields)
        for rec, _ in timed:
            if rec["status"] not in ("ok", "wrong"):
                continue
            if rec["ms_runs"]:
                rec["ms"] = statistics.median(rec["ms_runs"])
                _throughput(rec, case)
            else:
                rec.update(status="error", error="not timed: the row stopped before its timing")
        for rec in records[first:]:
            _print_record(rec)


def _failed(rec: dict, e: Exception, case: Case, provider: str, device, log):
    rec.update(status="error", error=measure.short_error(e))
    _log_failure(e, case, provider, device, log)


def _log_failure(e: Exception, case: Case, name: str, device, log):
    """Log what `name` (a provider, or the row's ceiling: the same-size copy or cuBLAS) raised on
    this row; ContextLost if the CUDA context went with it."""
    log.write(f"--- {case.title} / {name}\n{traceback.format_exc()}\n")
    log.flush()
    if not measure.cuda_usable(device):
        raise ContextLost(f"{case.title} / {name}: {measure.short_error(e)}") from e
    measure.empty_cache(device)  # e.g. after an out-of-memory error


def _record(base: dict, case: Case, provider: str, status: str, error: str | None, **fields) -> dict:
    return dict(base, kernel=case.kernel.name, kind=case.kernel.kind, shape=case.shape_text, dims=dict(case.extents),
                dtype=case.dtype, provider=provider, status=status, error=error, ms=None, bytes=case.bytes,
                flops=case.flops, **fields)


def _relative(path: Path) -> Path:
    path = Path(path).resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _throughput(rec: dict, case: Case):
    ms = rec["ms"]
    rec["gbps"] = case.bytes / ms / 1e6
    rec["pct_copy"] = 100 * rec["gbps"] / rec["copy_gbps"] if rec["copy_gbps"] else None
    rec["pct_copy_same"] = 100 * rec["gbps"] / rec["copy_same_gbps"] if rec.get("copy_same_gbps") else None
    if case.flops:
        rec["tflops"] = case.flops / ms / 1e9
        rec["pct_cublas"] = 100 * rec["cublas_ms"] / ms if rec["cublas_ms"] else None


def _print_record(r: dict):
    if r["status"] in ("ok", "wrong"):
        rate = (f"{r['tflops']:8.1f} TFLOP/s ({r['pct_cublas'] or 0:4.0f}% cuBLAS)" if r.get("tflops")
                else f"{r['gbps']:8.0f} GB/s ({r['pct_copy'] or 0:4.0f}% copy, "
                     f"{r.get('pct_copy_same') or 0:4.0f}% same-size copy)")
        print(f"    {r['provider']:<24} {r['ms']:10.4f} ms  {rate}  err {r['rel_err']:.1e}  {r['status']}",
              flush=True)
    else:
        print(f"    {r['provider']:<24} {r['status']}: {r['error']}", flush=True)


# ----------------------------------------------------------------------- the run
def _schedule_arg(text: str) -> tuple[str, str]:
    key, sep, path = text.rpartition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected KERNEL=PATH, 'KERNEL:SHAPE=PATH' or 'KERNEL:SHAPE:DTYPE=PATH'")
    p = Path(path)
    resolved = p.resolve() if p.exists() else ROOT / p  # relative to here, else to the repository
    if not resolved.exists():
        raise argparse.ArgumentTypeError(f"no such file: {path}")
    return key, str(resolved)


def _check_schedule_keys(args, rows: list[Case], provider_names: list[str]):
    """Refuse --schedule and --contender options that would be ignored or ambiguous: a key that
    names none of the selected rows, either option without dt or with --tune, two contenders of
    one row named after the same file."""
    keys = {key for c in rows for key in schedule_keys(c)}
    for option, given in (("--schedule", args.schedule or []), ("--contender", args.contender or [])):
        if given and (args.tune or "dt" not in provider_names):
            raise SystemExit(f"{option} sets what the dt provider runs: include dt in --providers, and leave out "
                             "--tune (which replaces dt with every candidate file)")
        for key, _ in given:
            if key not in keys:
                raise SystemExit(f"{option} {key}=...: names none of the selected rows; give a kernel "
                                 f"('add'), a kernel and a shape as the titles spell it ('add:x=4096, y=8192'), "
                                 f"or those and a dtype ('add:x=4096, y=8192:bf16')")
    for c in rows:
        names = [Path(path).stem for key, path in args.contender or [] if key in schedule_keys(c)]
        if len(set(names)) < len(names):
            raise SystemExit(f"two --contender files for {c.title} have the same name, and each is the provider "
                             "dt@<file name>: rename one")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--kernels", type=measure.list_arg(list(KERNELS)), help="comma-separated (default: all)")
    p.add_argument("--providers", type=measure.list_arg(ALL_PROVIDERS),
                   help=f"comma-separated (default: all on a GPU, {','.join(DRY_RUN_PROVIDERS)} in a dry run)")
    p.add_argument("--dtypes", type=measure.list_arg(list(DTYPES)), help="comma-separated (default: each kernel's)")
    p.add_argument("--match", action="append",
                   help="only rows whose title ('softmax [x=128, y=65536] f32') contains this "
                        "(repeatable: any of them)")
    p.add_argument("--quick", action="store_true", help="only each kernel's headline shape")
    p.add_argument("--tune", action="store_true",
                   help="time every DT schedule of each kernel (provider dt@<file>) instead of the table's")
    p.add_argument("--schedule", action="append", type=_schedule_arg, metavar="KERNEL[:SHAPE[:DTYPE]]=PATH",
                   help="run this .dt file for the dt provider instead of the table's (repeatable)")
    p.add_argument("--contender", action="append", type=_schedule_arg, metavar="KERNEL[:SHAPE[:DTYPE]]=PATH",
                   help="also time this .dt file on the rows it names, as provider dt@<file name>, in the same "
                        "rounds as dt (repeatable)")
    p.add_argument("--timer", choices=("auto", "cold", "do_bench", "cudagraph"), default="auto",
                   help="auto: cold for memory-bound rows, do_bench for compute-bound ones (default); cold: "
                        "do_bench's method with every run on a cold L2; do_bench: triton.testing.do_bench "
                        "as is; cudagraph: do_bench_cudagraph, no L2 flush")
    p.add_argument("--repeats", type=measure.positive_int, default=1,
                   help="rounds of timings, each timing every provider once (after one discarded timing "
                        "of the first); the median is reported")
    p.add_argument("--budget", type=float, default=0, help="seconds; start no new row after this (0: none)")
    p.add_argument("--tag", default="run", help="names the output files gpu-TAG.*")
    p.add_argument("--dt-backend", help="dt backend (default: triton on a GPU, interp in a dry run)")
    p.add_argument("--dry-run", action="store_true", help="run on the CPU on tiny shapes (the default without CUDA)")
    p.add_argument("--list", action="store_true", help="print the rows and the DT schedule of each, then exit")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (report.py draws them from the JSON)")
    p.add_argument("--device-slug", type=devices.slug_arg, metavar="SLUG",
                   help="run the tuned schedules of this device (schedules/tuned/SLUG/, e.g. h200; else those of "
                        "another device of its architecture) instead of this GPU's (default: the slug of "
                        "torch.cuda.get_device_name(); in a dry run none)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    dry = args.dry_run or not torch.cuda.is_available()
    if dry and not args.dry_run:
        print("no CUDA device: dry run on the CPU (tiny shapes, dt's interpreter, perf_counter)", flush=True)
    if not dry:
        return _main(args, False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny CPU ops wait ~20 ms on a busy thread pool; one thread keeps dry runs quick
    try:
        return _main(args, True)
    finally:
        torch.set_num_threads(threads)


def _main(args, dry: bool) -> int:
    device = torch.device("cpu" if dry else "cuda")
    provider_names = args.providers or list(DRY_RUN_PROVIDERS if dry else ALL_PROVIDERS)
    rows = cases(args.kernels or list(KERNELS), args.dtypes, args.quick, tiny=dry)
    rows = matching(rows, args.match)
    _check_schedule_keys(args, rows, provider_names)
    ctx = Context(args, device, dry)
    if args.list:
        print(f"tuned schedules of {ctx.tuned.slug} ({ctx.tuned.arch or 'architecture unknown'})", flush=True)
        for c in rows:
            names = [p.name for p in providers_for(c, provider_names, args.tune, ctx.contenders)]
            choice = ctx.schedule(c)
            print(f"{c.title:<48} {_relative(choice.path)} ({choice.origin})  [{', '.join(names)}]")
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"gpu-{args.tag}.json", out / f"gpu-{args.tag}.md"
    timer_text = "cpu" if dry else "cold (memory-bound rows), do_bench (compute-bound)" if args.timer == "auto" \
        else args.timer
    started = datetime.now(timezone.utc)
    run = dict(measure.device_description(device), id=f"{args.tag}@{started:%Y-%m-%dT%H:%M:%SZ}",
               started=started.isoformat(timespec="seconds"), command=" ".join(sys.argv), dry_run=dry,
               timer=timer_text, dt_backend=ctx.dt_backend, liger=_liger_version(ctx, provider_names),
               device_slug=ctx.tuned.slug, device_arch=ctx.tuned.arch)
    print(f"{run['device']} | torch {run['torch']} | triton {run['triton']} | timer {timer_text} | "
          f"tuned schedules of {ctx.tuned.slug} | {len(rows)} rows x {provider_names}", flush=True)
    try:
        run["copy"] = measure.copy_bandwidth(row_timer(args.timer, dry, None, 0), device)
        print(f"copy bandwidth: {run['copy']['gbps']:.0f} GB/s (read + write)", flush=True)
    except Exception as e:  # the rows still run, without % of copy
        run["copy"] = {"error": measure.short_error(e)}
        print(f"copy bandwidth not measured: {measure.short_error(e)}", flush=True)
    run["cublas_peak"] = {}
    for d in sorted({c.dtype for c in rows if c.kernel.kind == MATMUL}):
        try:
            peak_timer = row_timer(args.timer, dry, 1.0, 0)  # the 8192^3 product is compute-bound
            peak = run["cublas_peak"][d] = measure.cublas_peak(device, DTYPES[d], peak_timer)
            print(f"cuBLAS {d} {peak['shape']}: {peak['tflops']:.1f} TFLOP/s", flush=True)
        except Exception as e:  # a context only: the per-row cuBLAS times are what % of cuBLAS uses
            print(f"cuBLAS {d} peak not measured: {measure.short_error(e)}", flush=True)

    run_fields = {"run": run["id"], "device": run["device"]}
    records: list[dict] = []
    lost = None
    t0 = time.monotonic()
    with open(out / f"gpu-{args.tag}.log", "a") as log:
        for i, case in enumerate(rows):
            providers = providers_for(case, provider_names, args.tune, ctx.contenders)
            timer = row_timer(args.timer, dry, case.flops, case.bytes)
            base = dict(run_fields, timer=timer.mode)
            reason = None
            if lost:
                reason = f"not run: the CUDA context was lost ({lost})"
            elif args.budget and time.monotonic() - t0 > args.budget:
                reason = f"not run: time budget of {args.budget:g} s reached"
            if reason:
                records += [_record(base, case, p.name, "skipped", reason) for p in providers]
                continue
            start = time.monotonic()
            print(f"[{i + 1}/{len(rows)}] {case.title}", flush=True)
            try:
                run_case(case, providers, ctx, timer, run["copy"].get("gbps"), args.repeats, base, log, records)
            except ContextLost as e:
                lost = str(e)
                print(f"CUDA context lost at {lost}; the remaining rows are skipped", flush=True)
            except Exception as e:  # the row's own set-up (inputs, reference) failed
                log.write(f"--- {case.title}\n{traceback.format_exc()}\n")
                key = (case.kernel.name, case.shape_text, case.dtype)
                have = {r["provider"] for r in records if render.case_key(r) == key}  # those it reached
                records += [_record(base, case, p.name, "error", f"row set-up failed: {measure.short_error(e)}")
                            for p in providers if p.name not in have]
                print(f"    row set-up failed: {measure.short_error(e)}", flush=True)
                if not measure.cuda_usable(device):
                    lost = f"{case.title} (set-up): {measure.short_error(e)}"
            if not lost:
                measure.empty_cache(device)
            print(f"    ({time.monotonic() - start:.1f} s; {time.monotonic() - t0:.0f} s in all)", flush=True)
            run["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            render.write_json(json_path, [run], render.annotate(records))

    run["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    records = render.annotate(records)
    render.write_json(json_path, [run], records)
    md = render.markdown([run], records)
    md_path.write_text(md)
    if not args.no_plots:
        try:
            render.plot([run], records, out / f"gpu-{args.tag}-memory.png", out / f"gpu-{args.tag}-matmul.png")
        except Exception as e:  # the numbers are saved; a plotting problem must not lose them
            print(f"plotting failed: {measure.short_error(e)}", flush=True)
    print("\n".join(line for line in md.split("## Every measurement")[0].splitlines() if line.startswith("|")))
    print(f"wrote {json_path}, {md_path}", flush=True)
    return 3 if lost else 0


def row_timer(mode: str, dry: bool, flops: float | None, nbytes: int) -> measure.Timer:
    """The Timer of a row doing `flops` and moving `nbytes` under `--timer mode`
    (measure.row_timer), perf_counter in a dry run."""
    return measure.Timer("cpu") if dry else measure.row_timer(mode, flops, nbytes)


def _liger_version(ctx: Context, names) -> str | None:
    if "liger" not in names or ctx.dry:
        return None
    from importlib import metadata
    try:
        return metadata.version("liger_kernel")
    except metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())
