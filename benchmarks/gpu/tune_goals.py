"""Issue 31's goals: `dt tune` against the schedule the benchmark commits for a row of
benchmarks/results/gpu.md (SAMPLE: tuned from that program with the statements dt tune chooses
removed, so its algorithm and fusion are kept and its blocks, tiles, program order, warps,
stages and launch hints are the tuner's), and against the best baseline on shapes outside that
table (OUTSIDE: tuned from the kernel's example, as a user would start). For each row: tune within the budget
(prog.tune, cache off), write the fastest as DT text (DIR/schedules/<device>/, laid out as
benchmarks/gpu/schedules/tuned/ is: the device's slug, h100 or h200 or --device-slug's, then the
row's file name), then check and time it beside the committed schedule (the one bench.py runs on
this device: cases.schedule_choice) and the baselines with the benchmark's own row method
(bench.run_case: the float64 reference, the row's timer, round-robin rounds). Writes
DIR/tune-goals-TAG.json (the benchmark's records plus each search's), after every row, and each
search's report (dt.tune.report: its schedules' times plotted) in DIR/reports/.

    python benchmarks/gpu/tune_goals.py --out DIR [--rows sample|outside] [--budget 60] [--shard 0/2]
        [--match TEXT ...] [--tag NAME] [--device-slug SLUG]
    python benchmarks/gpu/tune_goals.py --summarize DIR|FILE.json ...   (the markdown table)

On a machine of several GPUs, one process per GPU (CUDA_VISIBLE_DEVICES=i, --shard i/n) takes
every n-th row; processes sharing a GPU time one at a time (dt.tune.timing.gpu_held). Without
CUDA it runs a dry run on the interpreter at tiny shapes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import torch  # noqa: E402

import bench  # noqa: E402
import devices  # noqa: E402
import measure  # noqa: E402
from cases import KERNELS, Case, tuned_name  # noqa: E402

# Rows of gpu.md: every kernel of the talk's table and six of the LLM ones, both dtypes, the long
# rows (128x65536), the unusual ones (4096x1000, a 16-row product, 2mm's short reductions).
SAMPLE = [("add", (4096, 8192), "bf16"), ("relu", (4096, 1000), "f32"), ("swish", (128, 65536), "bf16"),
          ("dyt", (4096, 4096), "f32"), ("softmax", (128, 65536), "f32"), ("softmax_safe", (4096, 1000), "bf16"),
          ("layernorm", (128, 65536), "bf16"), ("rmsnorm", (4096, 4096), "f32"),
          ("matmul", (4096, 4096, 4096), "bf16"), ("matmul", (16, 4096, 4096), "f16"),
          ("mmsigmoid", (4096, 4096, 4096), "f16"), ("2mm_inner", (1024, 1024, 64, 64), "bf16"),
          ("2mm_outer", (512, 1024, 32, 32), "f16"), ("attention_safe", (4096, 4096, 64, 64), "bf16"),
          ("attention", (1024, 1024, 64, 64), "f16"), ("add_rmsnorm", (2000, 3584), "bf16"),
          ("cumsum", (4096, 8192), "f32"), ("argmax", (256, 50257), "bf16"),
          ("batched_matmul", (32, 1024, 1024, 1024), "bf16"), ("cross_entropy", (4096, 128256), "bf16")]
# New shapes of the same kernels: LLM widths (Llama's 128256 vocabulary, 14336 and 11008 MLPs,
# Qwen's 3584, Mistral's 5120) and sizes that are no powers of two.
OUTSIDE = [("softmax_safe", (4096, 128256), "bf16"), ("rmsnorm", (8192, 5120), "bf16"),
           ("layernorm", (16384, 1536), "bf16"), ("swish", (8192, 11008), "bf16"),
           ("matmul", (4096, 4096, 14336), "bf16"), ("matmul", (3000, 5000, 2000), "f16"),
           ("add_rmsnorm", (8192, 5120), "bf16"), ("cumsum", (2048, 3000), "f32"),
           # the LLM kernels at shapes of other models: Qwen's 151,936 vocabulary, 3000-token
           # sequences, a 1000-token SwiGLU, a decode step over 4000 cached tokens
           ("causal_mha", (2, 32, 3000, 3000, 128, 128), "bf16"),
           ("gqa_attention", (4, 32, 8, 2048, 2048, 128, 128), "bf16"), ("swiglu", (1000, 14336), "bf16"),
           ("rope", (2, 3000, 32, 8, 128), "bf16"), ("cross_entropy", (2048, 151936), "bf16"),
           ("argmax", (512, 151936), "bf16"), ("layernorm_stats", (8192, 2048), "bf16"),
           ("decode", (16, 32, 4000, 128, 128), "bf16")]
BASELINES = ("eager", "compile", "liger", "sdpa")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="output directory")
    p.add_argument("--rows", choices=("sample", "outside"), default="sample")
    p.add_argument("--budget", type=float, default=60, help="seconds of search a row (default 60)")
    p.add_argument("--shard", default="0/1", help="i/n: every n-th row from the i-th")
    p.add_argument("--match", action="append", help="only rows whose title contains this (repeatable)")
    p.add_argument("--repeats", type=int, default=5, help="round-robin rounds of the comparison")
    p.add_argument("--workers", type=int, help="processes compiling ahead (default: dt tune's)")
    p.add_argument("--tag", default="run")
    p.add_argument("--device-slug", type=devices.slug_arg, metavar="SLUG",
                   help="compare with this device's committed schedules and file the results under "
                        "DIR/schedules/SLUG/ (default: the slug of torch.cuda.get_device_name(), h100, h200)")
    p.add_argument("--summarize", nargs="+", metavar="PATH",
                   help="print the markdown table of these runs (directories, or a file of several)")
    return p.parse_args(argv)


def program_sizes(prog, case: Case) -> dict[str, int]:
    """The row's extents by the program's names: an input's axis that the row names and no
    dimension of the program spans (gqa_attention's kh) is the program's K_axis1 (and V_axis1)."""
    sizes = {d: n for d, n in case.extents.items() if d in prog.checked.dim_kinds}
    for name, axes in case.kernel.inputs.items():
        for row_dim, dim in zip(axes, prog.checked.input_axes.get(name, ())):
            sizes.setdefault(dim, case.extents[row_dim])
    return sizes


def rows(which: str, shard: str, patterns) -> list[Case]:
    i, n = (int(x) for x in shard.split("/"))
    chosen = []
    for name, shape, dtype in SAMPLE if which == "sample" else OUTSIDE:
        kernel = KERNELS[name]
        case = Case(kernel, shape, dtype, kernel.extents(shape))
        if not patterns or any(p in case.title for p in patterns):
            chosen.append(case)
    return chosen[i::n]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    import dt
    from dt.tune import report, timing
    from dt.tune.space import without_shaping
    dry = not torch.cuda.is_available()
    device = torch.device("cpu" if dry else "cuda")
    backend = "interp" if dry else "triton"
    out = Path(args.out)
    ctx = bench.Context(SimpleNamespace(dt_backend=backend, schedule=None, contender=None,
                                        device_slug=args.device_slug), device, dry)
    (out / "schedules" / ctx.tuned.slug).mkdir(parents=True, exist_ok=True)
    run = dict(measure.device_description(device), tag=args.tag, rows=args.rows, budget=args.budget,
               device_slug=ctx.tuned.slug, device_arch=ctx.tuned.arch)
    records, searches = [], []
    path = out / f"tune-goals-{args.tag}.json"
    with open(out / f"tune-goals-{args.tag}.log", "a") as log:
        for case in rows(args.rows, args.shard, args.match):
            if dry:  # the tiny shapes of a dry run
                case = Case(case.kernel, case.kernel.tiny[0], case.dtype, case.kernel.extents(case.kernel.tiny[0]))
            print(f"{case.title}: tuning for {args.budget:g} s", flush=True)
            begin = time.monotonic()
            chosen = ctx.schedule(case)  # the schedule bench.py runs for the row on this device
            if args.rows == "sample":  # the committed program's algorithm and fusion, its tiling left to dt tune
                committed = dt.load(chosen.path)
                prog = dt.loads(without_shaping(committed.ast, committed.checked.kernel_roots), name=committed.name)
            else:  # a new shape: the kernel's example as a user would start
                prog = dt.load(case.kernel.program)
            result = prog.tune(program_sizes(prog, case), case.dtype, backend, args.budget, cache=False,
                               workers=args.workers, scalars=case.kernel.scalars)
            tuned = out / "schedules" / ctx.tuned.slug / tuned_name(case.kernel.name, case.shape_text, case.dtype)
            searched = sum(t.candidate.name != "as written" for t in result.timed)
            report.write(result, out / "reports" / tuned.stem)
            tuned.write_text(f"# Tuned by `dt tune` for {case.shape_text} ({case.dtype}) on {result.device} in "
                             f"{args.budget:g} s: {searched} of {searched + result.untried + len(result.failed)} "
                             f"schedules timed, {len(result.failed)} failed.\n" + result.best.text)
            searches.append(dict(kernel=case.kernel.name, shape=case.shape_text, dtype=case.dtype,
                                 seconds=round(time.monotonic() - begin, 1), timed=searched,
                                 failed=len(result.failed), untried=result.untried, space=result.summary,
                                 best=result.best.name, best_ms=result.timed[0].ms, schedule=str(tuned),
                                 as_written_ms=result.baselines.get("as written")))
            print(result.table(3), flush=True)
            providers = [bench.Provider("dt", bench._dt(chosen.path), chosen.path, chosen.origin),
                         bench.Provider("dt-tune", bench._dt(tuned), tuned)]
            if args.rows == "outside":
                providers += [p for p in bench.providers_for(case, list(BASELINES), False) if not dry or
                              p.name != "compile"]
            timer = bench.row_timer("auto", dry, case.flops, case.bytes)
            bench.run_case(case, providers, ctx, timer, None, args.repeats, dict(run=args.tag, timer=timer.mode),
                           log, records, timing_held=contextlib.nullcontext if dry else timing.gpu_held)
            measure.empty_cache(device)
            path.write_text(json.dumps(dict(run=run, searches=searches, records=records), indent=1, default=str))
    print(f"wrote {path}")
    return 0


def summarize(dirs: list[str]) -> str:
    """The markdown table: each row's search, the tuned schedule's time against the committed
    one (sample rows) or the fastest baseline (outside rows)."""
    lines, devices = [], set()
    for data in _runs(dirs):
        devices.add(data["run"]["device"])
        by_row: dict[tuple, dict[str, dict]] = {}
        for r in data["records"]:
            by_row.setdefault((r["kernel"], r["shape"], r["dtype"]), {})[r["provider"]] = r
        for s in data["searches"]:
            lines.append(_line(data["run"], s, by_row.get((s["kernel"], s["shape"], s["dtype"]), {})))
    header = ["| rows, budget | kernel | shape | dtype | searched (timed / failed / untried) | s | dt tune ms | "
              "against | its ms | ratio | dt tune's schedule |", "|" + "---|" * 11]
    return (f"Device: {', '.join(sorted(devices))}\n\n" + "\n".join(header + sorted(lines)))


def _runs(paths: list[str]):
    """Each run's record: from the tune-goals-*.json files of a directory, or a file of several
    (benchmarks/results/tune_goals.json)."""
    for path in map(Path, paths):
        for f in sorted(path.glob("tune-goals-*.json")) if path.is_dir() else [path]:
            data = json.loads(f.read_text())
            yield from data if isinstance(data, list) else [data]


def _line(run: dict, s: dict, got: dict) -> str:
    tuned = got.get("dt-tune", {})
    if run["rows"] == "sample":
        against = {"committed": got.get("dt", {})}
    else:
        against = {name: r for name, r in got.items() if name in BASELINES and r.get("status") == "ok"}
    name, other = min(against.items(), key=lambda kv: kv[1].get("ms") or float("inf"), default=("-", {}))
    ratio = tuned["ms"] / other["ms"] if tuned.get("ms") and other.get("ms") else None
    return (f"| {run['rows']}, {run['budget']:g} s | {s['kernel']} | {s['shape']} | {s['dtype']} | "
            f"{s['timed']} / {s['failed']} / "
            f"{s['untried']} | {s['seconds']:.0f} | {_ms(tuned)} | {name} | {_ms(other)} | "
            f"{f'{ratio:.3f}' if ratio else '-'} | `{s['best']}` |")


def _ms(r: dict) -> str:
    return f"{r['ms']:.4f}" if r.get("ms") else r.get("status", "-")


if __name__ == "__main__":
    sys.exit(main())
