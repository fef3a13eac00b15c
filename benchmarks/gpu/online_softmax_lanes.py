"""Would a lane-by-lane online softmax make the one-walk safe softmax win at 128x65536?

A measurement, not a DT feature. dt lowers `_sum.compute_with(_max, y)` (docs/language.md,
the online softmax) to a per-tile update: each step reduces its tile across the program's
lanes for the max, then again for the shifted sum. The search took that one-walk schedule for
one of eight softmax_safe rows. The lane accumulators that serve dt's plain sums
(docs/triton.md) would keep a running max and a rescaled sum per lane instead, merged once
after the loop, at the cost of a second exp per element. This times, one program per row:

- per tile: dt's update, written by hand (what dt generates for the one-walk schedule);
- per lane: every lane keeps its own max and sum, merged after the loop;
- dt's tuned softmax_safe schedule for the row (`schedules/tuned/`);

each followed by the output pass, next to a copy that moves the same bytes.

    python benchmarks/gpu/online_softmax_lanes.py --out DIR

writes DIR/online_softmax_lanes.json and .md (committed in benchmarks/results/).
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
from cases import cases, schedule_for  # noqa: E402

import dt  # noqa: E402

ROWS, WIDTH = 128, 65536
CONFIGS = ((8192, 16), (16384, 16), (16384, 32), (32768, 32))  # (tile, warps)


@triton.jit
def _output_pass(x_ptr, out_ptr, row, row_max, row_sum, WIDTH: tl.constexpr, TILE: tl.constexpr):
    for start in range(0, WIDTH, TILE):
        offsets = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * WIDTH + offsets, eviction_policy="evict_first").to(tl.float32)
        tl.store(out_ptr + row * WIDTH + offsets, (tl.exp(x - row_max) / row_sum).to(out_ptr.dtype.element_ty))


@triton.jit
def per_tile_kernel(x_ptr, out_ptr, WIDTH: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    running_max = -float("inf")
    running_sum = 0.0
    for start in range(0, WIDTH, TILE):
        offsets = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * WIDTH + offsets, eviction_policy="evict_last").to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(x, 0))
        shift = tl.where(new_max == -float("inf"), 0.0, new_max)
        running_sum = running_sum * tl.exp(running_max - shift) + tl.sum(tl.exp(x - shift), 0)
        running_max = new_max
    _output_pass(x_ptr, out_ptr, row, running_max, running_sum, WIDTH, TILE)


@triton.jit
def per_lane_kernel(x_ptr, out_ptr, WIDTH: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lane_max = tl.full([TILE], -float("inf"), tl.float32)
    lane_sum = tl.zeros([TILE], tl.float32)
    for start in range(0, WIDTH, TILE):
        offsets = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * WIDTH + offsets, eviction_policy="evict_last").to(tl.float32)
        new_max = tl.maximum(lane_max, x)
        shift = tl.where(new_max == -float("inf"), 0.0, new_max)
        lane_sum = lane_sum * tl.exp(lane_max - shift) + tl.exp(x - shift)
        lane_max = new_max
    row_max = tl.max(lane_max, 0)
    row_shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    row_sum = tl.sum(lane_sum * tl.exp(lane_max - row_shift), 0)
    _output_pass(x_ptr, out_ptr, row, row_max, row_sum, WIDTH, TILE)


VARIANTS = (("per tile (dt's one-walk update)", per_tile_kernel), ("per lane", per_lane_kernel))


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    records = []
    for case in cases(["softmax_safe"]):
        if case.shape != (ROWS, WIDTH):
            continue
        x = measure.case_inputs(case, device, seed=1)["A"] * 8  # logits whose exp overflows unshifted in bf16
        ref = torch.softmax(x.double(), dim=-1)
        copy = measure.copy_bandwidth(timer, device, case.bytes)
        program = dt.load(schedule_for(case))
        calls = {f"dt, {schedule_for(case).stem}": lambda: program(backend="triton", A=x)}
        out = torch.empty_like(x)

        def launcher(kernel, tile, warps):
            def call():
                kernel[(ROWS,)](x, out, WIDTH, tile, num_warps=warps)
                return out
            return call
        for name, kernel in VARIANTS:
            for tile, warps in CONFIGS:
                calls[f"{name}, tile {tile}, {warps} warps"] = launcher(kernel, tile, warps)
        for name, call in calls.items():
            err = measure.relative_error(call(), ref)
            ms = sorted(timer(call) for _ in range(3))[1]
            records.append(dict(dtype=case.dtype, variant=name, rel_err=err, **measure.against_copy(case.bytes, ms, copy)))
            print(records[-1], flush=True)
    measure.write_study(args.out, "online_softmax_lanes", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# The online softmax per tile or per lane at 128x65536: a measurement", "",
             measure.provenance(run, "online_softmax_lanes.py")
             + " (its docstring describes the variants). Times are the middle "
             "of three `triton.testing.do_bench` medians; % of same-size copy compares with a device-to-device copy "
             "moving the kernel's bytes; rel. error is against a float64 softmax of logits 8 times standard normal.",
             ""]
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        lines += [f"## {dtype}", ""]
        lines += render.markdown_table(["variant", "ms", "% of same-size copy", "rel. error"],
                                       ([r["variant"], f"{r['ms']:.4f}", f"{r['pct_copy_same']:.0f}%", f"{r['rel_err']:.1e}"]
                                        for r in sorted((r for r in records if r["dtype"] == dtype), key=lambda r: r["ms"])))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
