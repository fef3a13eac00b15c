"""Merge the JSON files of several bench.py runs (one per GPU command) into
benchmarks/results/gpu.json, gpu.md and the plots gpu_memory_bound.png, gpu_matmul.png.

    python benchmarks/gpu/report.py RUN.json [RUN.json ...] [--out benchmarks/results]

One record per (kernel, shape, dtype, provider) is kept: a correct measurement over a wrong
one over an error over a skipped row, and among equals the one from the later file on the
command line. dt's speed-ups are recomputed over the merged rows.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import render  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="gpu-TAG.json files written by bench.py")
    p.add_argument("--out", default=str(HERE.parent / "results"), help="output directory")
    args = p.parse_args(argv)
    runs, records = render.merge([render.load(path) for path in args.results])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    render.write_json(out / "gpu.json", runs, records)
    (out / "gpu.md").write_text(render.markdown(runs, records))
    written = render.plot(runs, records, out / "gpu_memory_bound.png", out / "gpu_matmul.png")
    counts = {s: sum(r["status"] == s for r in records) for s in render.STATUS_RANK}
    print(f"{len(runs)} runs, {len(records)} records ({', '.join(f'{n} {s}' for s, n in counts.items() if n)}) -> "
          + ", ".join(str(x) for x in [out / "gpu.json", out / "gpu.md", *written]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
