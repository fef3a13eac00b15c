"""dt's NumPy interpreter against Triton's interpreter (TRITON_INTERPRET=1) on the same
kernels, schedules and sizes: the talk's matmul at 512x512x512 and softmax at 1024x4096.

Both run the same program instances, tiles and loop order on the CPU; the goal is for dt's
interpreter to be at least 10x faster, so that debugging real sizes is interactive.

Usage: python benchmarks/interp_speed.py [--repeats N] [--out benchmarks/results]
"""
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (by the baseline module)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the same BLAS setting for both interpreters

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import triton_interpreter_baseline as baseline  # noqa: E402

import dt  # noqa: E402
from dt.testing import assert_close  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    s = torch.randn(1024, 4096)
    matmul = dt.load(HERE.parent / "examples" / "matmul.dt")
    softmax = dt.load(HERE.parent / "examples" / "softmax.dt")
    an, bn, sn = a.numpy(), b.numpy(), s.numpy()
    cases = [
        ("matmul", "512x512x512", lambda: matmul(A=an, B=bn, backend="interp"),
         lambda: baseline.run_matmul(a, b), lambda out: assert_close(out, an.astype(np.float64) @ bn, "f32")),
        ("softmax", "1024x4096", lambda: softmax(A=sn, backend="interp"),
         lambda: baseline.run_softmax(s), lambda out: assert_close(out, torch.softmax(s.double(), 1).numpy(), "f32")),
    ]
    device = baseline.cpu_description()
    records, rows = [], []
    for kernel, shape, run_dt, run_triton, check in cases:
        check(run_dt())
        dt_ms = baseline.time_ms(run_dt, args.repeats)
        run_triton()
        triton_ms = baseline.time_ms(run_triton, args.repeats)
        for provider, ms in (("dt-interp", dt_ms), ("triton-interpreter", triton_ms)):
            records.append({"kernel": kernel, "shape": shape, "dtype": "f32", "provider": provider, "ms": ms,
                            "device": device})
        rows.append(f"| {kernel} | {shape} | {dt_ms:.1f} | {triton_ms:.1f} | {triton_ms / dt_ms:.1f}x |")
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "interp.json").write_text(json.dumps(records, indent=2) + "\n")
    table = "\n".join(["| kernel | shape | dt interp (ms) | Triton interpreter (ms) | dt speed-up |",
                       "|---|---|---|---|---|"] + rows)
    (out / "interp.md").write_text(
        "# dt's interpreter vs Triton's interpreter\n\n"
        f"Device: {device}. f32, the talk's schedules (`examples/matmul.dt`, `examples/softmax.dt`) and the "
        "equivalent hand-written Triton kernels (`benchmarks/triton_interpreter_baseline.py`), median of "
        f"{args.repeats} runs after a warm-up, `OPENBLAS_NUM_THREADS=1` for both. Produced by "
        "`python benchmarks/interp_speed.py`.\n\n" + table + "\n")
    print(table)


if __name__ == "__main__":
    main()
