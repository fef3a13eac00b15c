"""Would statistics in a kernel of their own bring layernorm 128x65536 to 85% of the copy?

A measurement, not a DT feature. In dt's one-kernel layernorm each of the 128 programs owns a
row and is alone on its SM: its statistics walk reads the row from HBM, its output walk reads
the row, the weight and the bias from L2 and writes the row. The output walk moves 1 MB
through each SM's connection to L2 (3 reads and a write of 256 KB in f32), as much as the
whole kernel's HBM traffic per SM, on 128 of the 132 SMs. Here, by hand:

- a statistics kernel: `splits` programs per row, each with Chan's per-tile statistics of
  its part of the row (`tile` lanes, `warps` warps), written as partial (mean, M2) pairs;
  its loads keep their lines in L2 (`evict_last`) or not (`plain`);
- an output kernel in 2-D blocks (`rows` x `columns`, 8 warps): each program merges the
  partial statistics of its rows, loads the weight and the bias once for all of them, reads
  the input (from L2 when it survived) and writes the output;

next to dt's tuned one-kernel schedule and a copy that moves the same bytes, all timed with
the cold timer in alternation.

    python benchmarks/gpu/layernorm_two_kernels.py --out DIR [--rounds 3]

writes DIR/layernorm_two_kernels.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
from layernorm_onepass import EPS, ROWS, chan_update, row_study, tuned_row  # noqa: E402

STATISTICS = ((1, 16384, 32), (4, 4096, 8), (8, 2048, 8), (8, 4096, 16))  # (splits, tile, warps)
OUTPUT_BLOCKS = ((1, 2048), (2, 2048), (4, 1024), (4, 2048), (8, 1024), (16, 512))  # (rows, columns)


@triton.jit
def statistics_kernel(x_ptr, partial_ptr, WIDTH: tl.constexpr, SPLITS: tl.constexpr, PART: tl.constexpr,
                      TILE: tl.constexpr, EVICTION: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    lanes = tl.arange(0, TILE)
    mean = 0.0
    m2 = 0.0
    count = 0.0
    for start in range(0, PART, TILE):
        x = tl.load(x_ptr + row * WIDTH + split * PART + start + lanes, eviction_policy=EVICTION).to(tl.float32)
        mean, m2, count = chan_update(mean, m2, count, x, TILE)
    tl.store(partial_ptr + (row * SPLITS + split) * 2, mean)
    tl.store(partial_ptr + (row * SPLITS + split) * 2 + 1, m2)


@triton.jit
def output_kernel(x_ptr, w_ptr, b_ptr, partial_ptr, out_ptr, eps, WIDTH: tl.constexpr, SPLITS: tl.constexpr,
                  PART: tl.constexpr, ROWS: tl.constexpr, COLUMNS: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    columns = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
    # equal parts: the row's mean is the parts' mean, its M2 theirs plus the parts' spread
    part_means = tl.load(partial_ptr + (rows[:, None] * SPLITS + tl.arange(0, SPLITS)[None, :]) * 2)
    part_m2 = tl.load(partial_ptr + (rows[:, None] * SPLITS + tl.arange(0, SPLITS)[None, :]) * 2 + 1)
    mean = tl.sum(part_means, 1) / SPLITS
    spread = part_means - mean[:, None]
    m2 = tl.sum(part_m2, 1) + tl.sum(spread * spread, 1) * PART
    rstd = tl.rsqrt(m2 / WIDTH + eps)
    w = tl.load(w_ptr + columns).to(tl.float32)
    b = tl.load(b_ptr + columns).to(tl.float32)
    at = rows[:, None] * WIDTH + columns[None, :]
    x = tl.load(x_ptr + at, eviction_policy="evict_first").to(tl.float32)
    y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(out_ptr + at, y.to(out_ptr.dtype.element_ty))


def two_kernels(x, w, b, out, partial, splits, tile, warps, eviction, rows, columns):
    height, width = x.shape
    statistics_kernel[(height, splits)](x, partial, width, splits, width // splits, tile, eviction, num_warps=warps)
    output_kernel[(height // rows, width // columns)](x, w, b, partial, out, EPS, width, splits, width // splits,
                                                      rows, columns, num_warps=8)
    return out


def main(argv=None) -> int:
    return row_study(__doc__, "layernorm_two_kernels", markdown, records, argv)


def records(dtype: str, device: torch.device, timer: measure.Timer, rounds: int) -> list[dict]:
    case, (x, w, b), ref, calls = tuned_row(dtype, device)
    for splits, tile, warps in STATISTICS:
        partial = torch.empty((ROWS, splits, 2), dtype=torch.float32, device=device)
        for eviction, hint in (("evict_last", "evict_last"), ("", "plain")):
            for rows, columns in OUTPUT_BLOCKS:
                out = torch.full_like(x, float("nan"))  # what a kernel leaves unwritten fails the check
                name = f"statistics {splits} x {tile} lanes, {warps} warps, {hint}; output {rows} x {columns}"
                calls[name] = (lambda partial=partial, out=out, s=(splits, tile, warps, eviction, rows, columns):
                               two_kernels(x, w, b, out, partial, *s))
    measure.check_calls(calls, ref, dtype, f"layernorm {dtype}")
    return measure.timed_variants(timer, device, case, calls, rounds, kernel="layernorm")


def markdown(run: dict, records: list[dict]) -> str:
    return "\n".join(["# Layernorm statistics in a kernel of their own: a measurement", "",
                      measure.provenance(run, "layernorm_two_kernels.py")
                      + " (its docstring describes the kernels). Layernorm at 128x65536, timed in alternation with "
                      "the cold timer (`measure.cold_bench`); times are medians over the rounds; % of same-size copy "
                      "compares with a copy moving the row's bytes, timed after the rounds.", "",
                      *render.variant_tables(records, "layernorm")])


if __name__ == "__main__":
    sys.exit(main())
