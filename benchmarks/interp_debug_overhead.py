"""What debugging costs on dt's interpreter: every example, plain vs. with breakpoints set but
never hit (the goal: within 2x of plain), and, for reference, with tracing and sanitizers.

Configurations, each timed as the median of N runs after a warm-up, the configurations taking
turns run by run so that the load of a shared machine spreads over all of them alike; the time
is the process's CPU time (time.process_time), less disturbed by other processes than wall time:
- plain:        no dt.debug feature active (the plain generated code)
- bp, not hit:  a breakpoint on the output Func for a program id that never runs (the
                instrumented code; no hook is ever called)
- bp, cond:     a breakpoint on the output Func whose tile condition never holds (the hook is
                called at every tile of the Func and evaluates the condition)
- trace:        dt.debug.trace of the output Func (every tile copied)
- sanitize:     dt.debug.sanitize(), every check

Usage: python benchmarks/interp_debug_overhead.py [--repeats N] [--out benchmarks/results]
Prints a table and appends it to benchmarks/results/interp_debug_overhead.md.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # steadier timings of the matmul examples

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dt  # noqa: E402
from dt.testing import random_inputs  # noqa: E402

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"

# Sizes at which the plain interpreter takes tens to hundreds of milliseconds.
SIZES = {
    "add": dict(x=256, y=4096),
    "relu": dict(x=512, y=1024),
    "swish": dict(x=128, y=4096),
    "dyt": dict(x=64, y=8192),
    "softmax": dict(x=256, y=4096),
    "layernorm": dict(x=256, y=4096),
    "matmul": dict(x=512, y=512, k=512),
    "mmsigmoid": dict(x=512, y=512, k=256),
    "2mm_outer": dict(m=256, n=512, k=32, l=32),
    "2mm_inner": dict(m=256, n=256, k=64, l=64),
    "attention": dict(m=256, l=512, k=64, n=64),
}


def timed_ms(fn) -> float:
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) * 1e3


def configurations(prog, extents):
    out = prog.outputs[0]
    dim = prog.checked.funcs[out].dims[0]
    return {
        "plain": lambda: (),
        "bp, not hit": lambda: (dt.debug.break_at(func=out, pid=10 ** 9),),
        "bp, cond": lambda: (dt.debug.break_at(func=out, when={dim: extents[dim] + 1}),),
        "trace": lambda: (dt.debug.trace(out),),
        "sanitize": lambda: (dt.debug.sanitize(),),
    }


def cpu_description() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    for var in ("DT_BREAK", "DT_SANITIZE", "DT_SHUFFLE"):
        os.environ.pop(var, None)
    names = None
    rows, not_hit = [], []
    for example, extents in SIZES.items():
        prog = dt.load(EXAMPLES / f"{example}.dt")
        inputs = random_inputs(prog, extents, "f32", seed=0)
        expected = prog(backend="interp", **inputs)
        configs = configurations(prog, extents)
        samples = {name: [] for name in configs}
        for r in range(args.repeats + 1):
            for name, make in configs.items():
                with ExitStack() as stack:
                    for context in make():
                        stack.enter_context(context)
                    if r == 0:  # the warm-up: compiles, and checks that debugging never changes results
                        np.testing.assert_array_equal(prog(backend="interp", **inputs), expected)
                    else:
                        samples[name].append(timed_ms(lambda: prog(backend="interp", **inputs)))
        times = {name: statistics.median(s) for name, s in samples.items()}
        names = list(times)
        shape = "x".join(f"{d}{n}" for d, n in extents.items())
        plain = times["plain"]
        not_hit.append(times["bp, not hit"] / plain)
        cells = [f"{plain:.1f}"] + [f"{times[n]:.1f} ({times[n] / plain:.2f}x)" for n in names[1:]]
        rows.append(f"| {example} | {shape} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    header = ["example", "extents", "plain (ms)"] + [f"{n} (ms)" for n in names[1:]]
    table = [f"| {' | '.join(header)} |", "|" + "---|" * len(header)] + rows
    summary = (f"breakpoints set but not hit: {min(not_hit):.2f}x to {max(not_hit):.2f}x of plain "
               f"(median {statistics.median(not_hit):.2f}x; goal: within 2x)")
    print(summary)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "interp_debug_overhead.md"
    new = not path.exists()
    with open(path, "a") as f:
        if new:
            f.write("# The interpreter's speed under dt.debug\n\n"
                    "Produced by `python benchmarks/interp_debug_overhead.py`; each run appends a section. f32, "
                    "seeded inputs, median CPU time of the repeats after a warm-up (configurations taking turns), "
                    "`OPENBLAS_NUM_THREADS=1`. Ratios are to the plain run; every configuration's output is "
                    "checked equal to the plain output.\n")
        f.write(f"\n## {datetime.date.today().isoformat()}: {cpu_description()}, Python "
                f"{platform.python_version()}, NumPy {np.__version__}, {args.repeats} repeats\n\n")
        f.write("\n".join(table) + "\n\n" + summary + "\n")
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
