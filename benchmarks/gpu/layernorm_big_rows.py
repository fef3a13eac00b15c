"""Layernorm on rows too big for L2: dt's three passes against its one-pass statistics.

`variance.compute_with(mean, y)` (docs/language.md) computes the mean and the variance in one
walk over a row, so the kernel reads the row twice instead of three times. At 128x65536 the
later passes are served by L2 and the two schedules run alike (tune.json). This times both
where the rows outgrow L2 (50 MB on an H100), so every pass reads HBM: 128 rows of 2^20 and
64 rows of 2^21, one program per row, a few tile widths and warp counts.

    python benchmarks/gpu/layernorm_big_rows.py --out DIR

writes DIR/layernorm_big_rows.json and DIR/layernorm_big_rows.md (committed in benchmarks/results/).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
from cases import EXAMPLES  # noqa: E402

import dt  # noqa: E402

SHAPES = ((128, 1 << 20), (64, 1 << 21))
CONFIGS = ((16384, 16), (16384, 32), (32768, 32))  # (tile over y, warps)
EPS = 1e-5


def schedule(tile: int, warps: int, one_pass: bool) -> str:
    return ("layernorm.block(x:1);\n"
            f"layernorm.tensorize(y:{tile});\n"
            "mean.fuse_at(layernorm, x);\n"
            "variance.fuse_at(layernorm, x);\n"
            + ("variance.compute_with(mean, y);\n" if one_pass else "")
            + f"layernorm.num_warps({warps});\n"
            "layernorm.compile_to_kernel();\n")


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    algorithm = (EXAMPLES / "layernorm.dt").read_text().split("layernorm.block")[0]
    records = []
    for rows, width in SHAPES:
        for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            generator = measure.generator(device, 1)
            A = measure.random_tensor((rows, width), dtype, device, generator) + 3.0
            W = measure.random_tensor((width,), dtype, device, generator)
            Bias = measure.random_tensor((width,), dtype, device, generator)
            ref = torch.nn.functional.layer_norm(A.double(), (width,), W.double(), Bias.double(), EPS)
            moved = (2 * A.numel() + 2 * width) * A.element_size()
            copy = measure.copy_bandwidth(timer, device, moved)
            for tile, warps in CONFIGS:
                for one_pass in (False, True):
                    program = dt.loads(algorithm + schedule(tile, warps, one_pass))

                    def call(program=program):
                        return program(backend="triton", A=A, W=W, Bias=Bias, eps=EPS)
                    err = measure.relative_error(call(), ref)
                    ms = sorted(timer(call) for _ in range(3))[1]
                    records.append(dict(shape=f"{rows}x{width}", dtype=dtype_name, tile=tile, warps=warps,
                                        one_pass=one_pass, **measure.against_copy(moved, ms, copy), rel_err=err))
                    print(records[-1], flush=True)
    measure.write_study(args.out, "layernorm_big_rows", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Layernorm on rows too big for L2: three passes or one-pass statistics", "",
             measure.provenance(run, "layernorm_big_rows.py")
             + ". Times are the middle of three `triton.testing.do_bench` "
             "medians; % of same-size copy compares with a device-to-device copy moving the kernel's bytes.", ""]
    pairs: dict[tuple, dict] = {}
    for r in records:
        pairs.setdefault((r["shape"], r["dtype"], r["tile"], r["warps"]), {})[r["one_pass"]] = r
    lines += render.markdown_table(
        ["shape", "dtype", "tile", "warps", "three passes ms", "one pass ms", "one pass speed-up",
         "% of same-size copy (three / one)"],
        ([shape, dtype, str(tile), str(warps), f"{p[False]['ms']:.4f}", f"{p[True]['ms']:.4f}",
          f"{p[False]['ms'] / p[True]['ms']:.2f}x", f"{p[False]['pct_copy_same']:.0f}% / {p[True]['pct_copy_same']:.0f}%"]
         for (shape, dtype, tile, warps), p in pairs.items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
