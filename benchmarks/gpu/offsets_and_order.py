"""Would 32-bit offsets or row-major program order close the last percents on the memory-bound rows?

A measurement, not a DT feature. Of the memory-bound rows of `gpu.md`, a dozen run 1-3%
behind the best baseline while at 97-100% of a copy of the same size. Two differences from
Inductor's kernels could explain it:

- **64-bit offsets.** dt's program id is int64 (as in the talk), so every lane's address is
  computed in 64-bit integers; Inductor indexes in int32 when the tensors are small enough.
  The variant drops the `.to(tl.int64)` widenings from the generated code (every offset
  here fits in 31 bits).
- **Program order.** dt's default walks block-rows fastest (`map(y, x)` for `f[x, y]`, the
  talk's order), so consecutive programs of a 2-D blocking touch rows far apart; Inductor's
  flat kernels walk memory in order. The variant adds `map(x, y)` to the element-wise
  schedules that block both dimensions.

Each row's tuned schedule (`schedules/tuned/`) runs as generated and as each variant; every
variant's output must equal the generated code's bit for bit; then the variants are timed in
alternation, several rounds, each launch through the same generated launcher.

    python benchmarks/gpu/offsets_and_order.py --out DIR [--rounds 3] [--kernels ...]

writes DIR/offsets_and_order.json and .md (committed in benchmarks/results/). Without a GPU it
runs the tiny rows on Triton's interpreter (`TRITON_INTERPRET=1`) as a dry run.
"""
from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
from cases import MEMORY, cases, schedule_for  # noqa: E402
from space import ELEMENTWISE, SCHEDULE_LINE  # noqa: E402

import dt  # noqa: E402
from dt.backends.pysource import load_module  # noqa: E402

KERNELS = ("relu", "add", "swish", "dyt", "softmax", "layernorm", "rmsnorm")
BASE, INT32, ROW_MAJOR, BOTH = "as generated", "32-bit offsets", "row-major programs", "both"


def launcher(text: str, dtype: str, int32: bool, label: str):
    """The generated launcher of a DT program, its source edited to 32-bit offsets if asked,
    and the names of its inputs and scalars in call order."""
    from dt.backends import triton as triton_backend
    module = triton_backend.create().module(dt.loads(text).pipeline(dtype))
    source = module.source.replace(".to(tl.int64)", "") if int32 else module.source
    namespace = load_module(source, label, {"__name__": f"offsets_and_order_{label}"})
    return namespace[module.function], module.inputs, module.scalars


def row_major(text: str, out: str) -> str | None:
    """The schedule with `map(x, y)` before its first schedule line, if it blocks y (else
    there is one block per row and the order is already memory order)."""
    if not re.search(rf"{out}\.block\([^)]*\by:", text):
        return None
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if SCHEDULE_LINE.match(line))
    return "".join(lines[:first] + [f"{out}.map(x, y);\n"] + lines[first:])


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__, rounds=3)
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    timer = measure.Timer("do_bench" if gpu else "cpu")
    records = []
    for case in cases(args.kernels, tiny=not gpu):
        if case.kernel.kind != MEMORY or (case.kernel.name not in ELEMENTWISE and case.extents["y"] < 8192):
            continue  # row-wise kernels: the long rows only (4096x1000 and 4096x4096 rows are like 4096x8192)
        path = schedule_for(case)
        text = path.read_text()
        texts = {BASE: (text, False), INT32: (text, True)}
        mapped = row_major(text, ELEMENTWISE[case.kernel.name][0]) if case.kernel.name in ELEMENTWISE else None
        if mapped:
            texts.update({ROW_MAJOR: (mapped, False), BOTH: (mapped, True)})
        tensors = measure.case_inputs(case, device, seed=1)
        scalars = case.kernel.scalars
        calls, outputs = {}, {}
        for name, (variant_text, int32) in texts.items():
            fn, inputs, scalar_names = launcher(variant_text, case.dtype, int32, f"{path.stem}_{len(calls)}")
            call = (lambda fn=fn, inputs=inputs, scalar_names=scalar_names:
                    fn(*[tensors[n] for n in inputs], *[scalars[s] for s in scalar_names]))
            calls[name], outputs[name] = call, call()
        for name, out in outputs.items():
            if not torch.equal(out, outputs[BASE]):
                raise AssertionError(f"{case.title}: {name} differs from the generated code's output")
        times, _, same_size = measure.rounds_with_copy(timer, device, calls, case.bytes, args.rounds)
        for name, ms in times.items():
            ratios = [base / t for base, t in zip(times[BASE], ms)]
            records.append(dict(kernel=case.kernel.name, shape=case.shape_text, dtype=case.dtype, schedule=path.stem,
                                variant=name, ms=statistics.median(ms), rounds_ms=ms,
                                speedup=statistics.median(ratios), speedup_min=min(ratios), speedup_max=max(ratios),
                                pct_copy_same=100 * case.bytes / statistics.median(ms) / 1e6 / same_size))
            print(records[-1], flush=True)
    measure.write_study(args.out, "offsets_and_order", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    variants = (INT32, ROW_MAJOR, BOTH)
    lines = ["# 32-bit offsets and row-major program order on the memory-bound rows: a measurement", "",
             measure.provenance(run, "offsets_and_order.py")
             + " (its docstring describes the variants). Each row's tuned "
             "schedule, as generated and as each variant, timed in alternation; times are medians over the "
             "rounds of `triton.testing.do_bench` medians; speed-up = generated time / variant time, the median "
             "over the rounds and its range; — where the schedule has one block per row.", ""]
    rows: dict[tuple, dict] = {}
    for r in records:
        rows.setdefault((r["kernel"], r["shape"], r["dtype"]), {})[r["variant"]] = r
    table = []
    for (kernel, shape, dtype), by_variant in rows.items():
        base = by_variant[BASE]
        table.append([kernel, shape, dtype, f"{base['ms']:.5f}", f"{base['pct_copy_same']:.0f}%"] + [
            f"{by_variant[v]['speedup']:.3f}x ({by_variant[v]['speedup_min']:.2f}-{by_variant[v]['speedup_max']:.2f})"
            if v in by_variant else "—" for v in variants])
    lines += render.markdown_table(["kernel", "shape", "dtype", "generated ms", "% of same-size copy"]
                                   + [f"{v} speed-up" for v in variants], table)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
