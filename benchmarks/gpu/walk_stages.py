"""Would a stage count per walk bring layernorm 128x65536 past 85%?

A measurement, not a DT feature. DT's `num_stages` is the kernel's: every walk of a
row-wise kernel is pipelined as deep, or none is (docs/triton.md, "Stages"), and pipelining
every walk lost on every 128x65536 row. Hand-written, pipelining only the statistics walk
was 0.9% faster in bf16 (benchmarks/results/layernorm_tma.md), before the statistics walks
had tiles of their own. Here dt's tuned layernorm schedules, as generated, run with Triton's
pipeliner asked for on some walks only (`tl.range(..., num_stages=n)` on those loops): the
statistics walks (each, or the first), or the output walk; each variant must match the
unedited kernel within the dtype's tolerance, then all are timed in alternation with the
cold timer.

    python benchmarks/gpu/walk_stages.py --out DIR [--rounds 5]

writes DIR/walk_stages.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
from cases import cases, schedule_for  # noqa: E402
from memory_hints import tuned_variant  # noqa: E402

import dt  # noqa: E402
from dt.backends.pysource import load_module  # noqa: E402
from dt.runtime import resolve_backend  # noqa: E402

SHAPE = (128, 65536)
WALK = re.compile(r"for (?P<it>\w+) in range\((?P<bounds>0, \w+, \d+)\):")
STAGES = (2, 3, 4)


def staged(source: str, walks: set[int], stages: int) -> str:
    """`source` with the tiled walks numbered in `walks` (0: the first) pipelined `stages` deep."""
    count = itertools.count()
    return WALK.sub(lambda m: (f"for {m['it']} in tl.range({m['bounds']}, num_stages={stages}):"
                               if next(count) in walks else m[0]), source)


def main(argv=None) -> int:
    args = measure.study_parser(__doc__, rounds=5, dtypes=True).parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("cold")
    backend = resolve_backend("triton")
    records = []
    for dtype in args.dtypes:
        case = next(c for c in cases(["layernorm"], dtypes=[dtype]) if c.shape == SHAPE)
        t = measure.case_inputs(case, device, seed=1)
        scalars = case.kernel.scalars
        tuned = schedule_for(case)
        program = dt.load(tuned)
        source = program.source(backend, dtype)
        walks = len(WALK.findall(source))
        statistics = set(range(walks - 1))
        choices = {"as generated": (set(), 0)}
        for stages in STAGES:
            choices[f"statistics walks, {stages} stages"] = (statistics, stages)
            if len(statistics) > 1:
                choices[f"first statistics walk, {stages} stages"] = ({0}, stages)
            choices[f"output walk, {stages} stages"] = ({walks - 1}, stages)
        launch = {name: load_module(staged(source, chosen, stages) if chosen else source,
                                    re.sub(r"\W", "_", f"layernorm_{dtype}_{name}"))[program.pipeline(dtype).name]
                  for name, (chosen, stages) in choices.items()}
        expected = launch["as generated"](**t, **scalars).double()
        calls = {}
        for name, call in launch.items():
            variant = f"{tuned_variant(tuned)}, {name}"
            try:
                got = call(**t, **scalars)
            except Exception as e:  # a pipelined walk whose buffers do not fit the SM's shared memory
                records.append(dict(shape=case.shape_text, dtype=dtype, kernel="layernorm", variant=variant,
                                    error=measure.short_error(e)))
                continue
            error = measure.relative_error(got, expected)
            if not error < measure.TOLERANCE[dtype]:
                raise AssertionError(f"{case.title} {name}: differs from the generated kernel ({error:.2e})")
            calls[variant] = lambda call=call: call(**t, **scalars)
        records += measure.timed_variants(timer, device, case, calls, args.rounds, kernel="layernorm")
        measure.empty_cache(device)
    measure.write_study(args.out, "walk_stages", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# A stage count per walk: layernorm 128x65536", "",
             measure.provenance(run, "walk_stages.py")
             + " (its docstring describes the variants). dt's tuned schedule as generated and with some walks "
             "pipelined, timed in alternation with the cold timer (`measure.cold_bench`); times are medians over "
             "the rounds; % of same-size copy compares with a copy moving the row's bytes, timed after the rounds.",
             ""]
    lines += render.variant_tables([r for r in records if "ms" in r], "layernorm")
    lines += [f"- did not run: {r['variant']} ({r['dtype']}): {r['error']}" for r in records if "error" in r]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
