"""Would walking every second pass over a row backward serve it from L1?

A measurement, not a DT feature. At 128x65536 each program owns one row (256 KB in f32)
and walks it once per pass: layernorm three times (mean, variance, output), softmax_safe three
times, softmax and rmsnorm twice. The first walk reads HBM, the later ones L2. When every walk
runs forward, the tiles a walk ends on are the ones the next walk reaches last, so whatever
the SM's L1 still holds of them is gone by then. Walking every second pass backward starts
each pass on the tiles the pass before ended on.

Per row, the tuned schedule and a few whole-SM tilings (`space.variants`) run as generated
and with every second walk of each kernel reversed; each reversed kernel must match its
forward one within the dtype's tolerance (per-lane sums add their tiles in the other order),
then everything is timed in alternation, several rounds.

    python benchmarks/gpu/walk_direction.py --out DIR [--rounds 3]

writes DIR/walk_direction.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
import space  # noqa: E402
from cases import cases, schedule_for  # noqa: E402
from memory_hints import tuned_variant, variant_name  # noqa: E402

import dt  # noqa: E402
from dt.backends.pysource import load_module  # noqa: E402
from dt.runtime import resolve_backend  # noqa: E402

KERNELS = ("layernorm", "softmax_safe", "softmax", "rmsnorm")
SHAPE = (128, 65536)
TILINGS = ("tiled8192_w32", "tiled16384_w32", "tiled32768_w32", "tiled16384_w32_onepass",
           "tiled32768_w32_onepass")
WALK = re.compile(r"^(?P<indent> *)for (?P<it>\w+) in range\(0, (?P<size>\w+), (?P<tile>\d+)\):$", re.M)


def alternate_walks(source: str) -> str:
    """`source` with every second tiled walk of each kernel run from its last tile to its first."""
    out, at = [], 0
    for kernel in re.split(r"(?=^@triton\.jit)", source, flags=re.M):
        for i, walk in enumerate(WALK.finditer(kernel)):
            if i % 2 == 1:
                indent, it, size, tile = walk["indent"], walk["it"], walk["size"], walk["tile"]
                out += [kernel[at:walk.start()],
                        f"{indent}for {it}_back in range(0, {size}, {tile}):\n"
                        f"{indent}    {it} = ({size} - 1) // {tile} * {tile} - {it}_back"]
                at = walk.end()
        out.append(kernel[at:])
        at = 0
    return "".join(out)


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__, rounds=3, dtypes=True)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    timer = measure.Timer("do_bench" if device.type == "cuda" else "cpu")
    backend = resolve_backend("triton")
    records = []
    for kernel in KERNELS:
        for dtype in args.dtypes:
            case = next(c for c in cases([kernel], dtypes=[dtype]) if c.shape == SHAPE)
            t = measure.case_inputs(case, device, seed=1)
            scalars = case.kernel.scalars
            searched = dict(space.variants(case))
            tuned = schedule_for(case)
            programs = {f"tuned ({tuned_variant(tuned)})": dt.load(tuned)}
            programs.update((name, dt.loads(searched[name], f"{kernel}_{name}"))  # the tuned one is timed once
                            for name in TILINGS if name in searched and name != variant_name(tuned))
            calls = {}
            for label, program in programs.items():
                forward = program.source(backend, dtype)
                backward = alternate_walks(forward)
                if backward == forward:
                    continue  # a single walk per pass: nothing to reverse
                stem = re.sub(r"\W", "_", f"{kernel}_{dtype}_{label}")
                launch = {direction: load_module(text, f"{stem}_{direction}")[program.pipeline(dtype).name]
                          for direction, text in (("forward", forward), ("alternating", backward))}
                expected = launch["forward"](**t, **scalars)
                got = launch["alternating"](**t, **scalars)
                error = measure.relative_error(got, expected.double())
                if not error < measure.TOLERANCE[dtype]:
                    raise AssertionError(f"{case.title} {label}: reversed walks differ ({error:.2e})")
                for direction, call in launch.items():
                    calls[f"{label}, {direction}"] = lambda call=call: call(**t, **scalars)
            records += measure.timed_variants(timer, device, case, calls, args.rounds, kernel=kernel)
            measure.empty_cache(device)
    measure.write_study(args.out, "walk_direction", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Every second walk over a row backward: a measurement", "",
             measure.provenance(run, "walk_direction.py")
             + ". Each schedule as generated (every walk forward) and with every second walk over the "
             "row reversed, timed in alternation; times are medians over the rounds of "
             "`triton.testing.do_bench` medians (L2 flushed before each run); % of same-size copy "
             "compares with a copy moving the row's bytes, timed after the rounds.", ""]
    for (kernel, shape, dtype), rows in measure.by_row(records, "kernel", "shape", "dtype").items():
        by_name = {r["variant"]: r for r in rows}
        table = []
        for name in by_name:
            if not name.endswith(", forward"):
                continue
            label = name[:-len(", forward")]
            fwd, alt = by_name[name], by_name[f"{label}, alternating"]
            table.append([label, f"{fwd['ms']:.5f}", f"{alt['ms']:.5f}",
                          f"{fwd['pct_copy_same']:.0f}% / {alt['pct_copy_same']:.0f}%", f"{fwd['ms'] / alt['ms']:.3f}x"])
        lines += [f"## {kernel} {shape}, {dtype}", ""]
        lines += render.markdown_table(["schedule", "forward ms", "alternating ms",
                                        "% of same-size copy (forward / alternating)", "alternating speed-up"], table)
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
