"""Would one-pass statistics (Welford) bring layernorm 128x65536 to 85% of the same-size copy?

A measurement, not a DT feature. dt's layernorm walks each row three times (the mean, the
variance around it, the output); the later passes are served mostly by L2 (the eviction
hints). Computing the mean and the variance in one pass leaves two. Before adding a
variance reduction to DT, this times by hand, one program per row as dt runs it:

- Chan per tile: each tile's mean and sum of squared deviations, merged into the row's
  running ones with Chan's formula (stable; two cross-lane sums per tile);
- per-lane Welford: every lane keeps its own count, mean and M2, updated element by
  element, merged once after the loop (stable; no cross-lane work in the loop);
- per-lane sum and sum of squares: variance = E[x^2] - E[x]^2 (the cheapest update, but
  it cancels catastrophically when the mean is large against the spread: the inputs here
  have mean 3 to show it).

next to dt's tuned schedule and a copy that moves the same bytes.

    python benchmarks/gpu/layernorm_onepass.py --out DIR

writes DIR/layernorm_onepass.json and DIR/layernorm_onepass.md (committed in benchmarks/results/).
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
from cases import ROOT, cases, schedule_for  # noqa: E402
from memory_hints import tuned_variant  # noqa: E402

import dt  # noqa: E402

ROWS, WIDTH = 128, 65536
EPS = 1e-5
MEAN = 3.0


def tuned_row(dtype: str, device: torch.device) -> tuple:
    """The benchmark's layernorm row at ROWS x WIDTH in `dtype`: its case, its inputs (A, W,
    Bias), their float64 layer norm, and the calls to time so far: dt's tuned schedule, by name."""
    case = next(c for c in cases(["layernorm"], dtypes=[dtype]) if c.shape == (ROWS, WIDTH))
    t = measure.case_inputs(case, device, seed=1)
    x, w, b = t["A"], t["W"], t["Bias"]
    ref = torch.nn.functional.layer_norm(x.double(), (WIDTH,), w.double(), b.double(), EPS)
    tuned = schedule_for(case)
    program = dt.load(tuned)
    calls = {f"dt, tuned ({tuned_variant(tuned)})": lambda: program(backend="triton", A=x, W=w, Bias=b, eps=EPS)}
    return case, (x, w, b), ref, calls


def row_study(doc: str, name: str, markdown, records_for, argv=None) -> int:
    """Run a study of the layernorm row at ROWS x WIDTH: its command line from `doc` (--out,
    --rounds 3, --dtypes), then for each dtype records_for(dtype, device, timer, rounds) with the
    cold timer, all written as NAME.json and NAME.md (`markdown`)."""
    args = measure.study_parser(doc, rounds=3, dtypes=True).parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("cold")
    records = []
    for dtype in args.dtypes:
        records += records_for(dtype, device, timer, args.rounds)
        measure.empty_cache(device)
    measure.write_study(args.out, name, device, records, markdown)
    return 0


@triton.jit
def _output_pass(x_ptr, w_ptr, b_ptr, out_ptr, row, mean, rstd, WIDTH: tl.constexpr, TILE: tl.constexpr):
    for start in range(0, WIDTH, TILE):
        offsets = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * WIDTH + offsets, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + offsets).to(tl.float32)
        b = tl.load(b_ptr + offsets).to(tl.float32)
        tl.store(out_ptr + row * WIDTH + offsets, ((x - mean) * rstd * w + b).to(out_ptr.dtype.element_ty))


@triton.jit
def chan_update(mean, m2, count, x, TILE: tl.constexpr):
    """The running mean, sum of squared deviations and count, merged with one tile's (Chan)."""
    tile_mean = tl.sum(x, 0) / TILE
    deviation = x - tile_mean
    total = count + TILE
    delta = tile_mean - mean
    return (mean + delta * (TILE / total), m2 + tl.sum(deviation * deviation, 0) + delta * delta * (count * TILE / total),
            total)


@triton.jit
def chan_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, WIDTH: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    mean = 0.0
    m2 = 0.0
    count = 0.0
    for start in range(0, WIDTH, TILE):
        offsets = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * WIDTH + offsets, eviction_policy="evict_last").to(tl.float32)
        mean, m2, count = chan_update(mean, m2, count, x, TILE)
    _output_pass(x_ptr, w_ptr, b_ptr, out_ptr, row, mean, tl.rsqrt(m2 / WIDTH + eps), WIDTH, TILE)


@triton.jit
def _merge(mean_a, m2_a, count_a, mean_b, m2_b, count_b):
    count = count_a + count_b
    weight_b = tl.where(count == 0, 0.0, count_b / count)
    delta = mean_b - mean_a
    return mean_a + delta * weight_b, m2_a + m2_b + delta * delta * count_a * weight_b, count


@triton.jit
def lane_welford_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, WIDTH: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    mean = tl.zeros([TILE], tl.float32)
    m2 = tl.zeros([TILE], tl.float32)
    count = tl.zeros([TILE], tl.float32)
    for start in range(0, WIDTH, TILE):
        offsets = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * WIDTH + offsets, eviction_policy="evict_last").to(tl.float32)
        count += 1.0
        delta = x - mean
        mean += delta / count
        m2 += delta * (x - mean)
    row_mean, row_m2, _ = tl.reduce((mean, m2, count), 0, _merge)
    _output_pass(x_ptr, w_ptr, b_ptr, out_ptr, row, row_mean, tl.rsqrt(row_m2 / WIDTH + eps), WIDTH, TILE)


@triton.jit
def lane_sum_of_squares_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, WIDTH: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    total = tl.zeros([TILE], tl.float32)
    squares = tl.zeros([TILE], tl.float32)
    for start in range(0, WIDTH, TILE):
        offsets = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * WIDTH + offsets, eviction_policy="evict_last").to(tl.float32)
        total += x
        squares += x * x
    mean = tl.sum(total, 0) / WIDTH
    variance = tl.sum(squares, 0) / WIDTH - mean * mean
    _output_pass(x_ptr, w_ptr, b_ptr, out_ptr, row, mean, tl.rsqrt(variance + eps), WIDTH, TILE)


VARIANTS = (("two passes, Chan per tile", chan_kernel), ("two passes, per-lane Welford", lane_welford_kernel),
            ("two passes, per-lane sum and sum of squares", lane_sum_of_squares_kernel))


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    records = []
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        generator = measure.generator(device, 7)
        x = (measure.random_tensor((ROWS, WIDTH), torch.float32, device, generator) + MEAN).to(dtype)
        w = measure.random_tensor((WIDTH,), dtype, device, generator)
        b = measure.random_tensor((WIDTH,), dtype, device, generator)
        ref = torch.nn.functional.layer_norm(x.double(), (WIDTH,), w.double(), b.double(), EPS)
        moved = (2 * x.numel() + 2 * WIDTH) * x.element_size()
        copy = measure.copy_bandwidth(timer, device, moved)
        out = torch.empty_like(x)
        tuned = ROOT / f"benchmarks/gpu/schedules/tuned/layernorm_{ROWS}x{WIDTH}_{dtype_name}.dt"
        program = dt.load(str(tuned))
        calls = [(f"dt, {tuned.stem} (three passes)", lambda: program(backend="triton", A=x, W=w, Bias=b, eps=EPS))]
        for name, kernel in VARIANTS:
            for tile in (4096, 8192, 16384):
                for warps in (8, 16, 32):
                    def call(kernel=kernel, tile=tile, warps=warps):
                        kernel[(ROWS,)](x, w, b, out, EPS, WIDTH, tile, num_warps=warps)
                    calls.append((f"{name}, tile {tile}, {warps} warps", call))
        for name, call in calls:
            result = call()
            measure.synchronize(device)
            err = measure.relative_error(result if result is not None else out, ref)
            ms = timer(call)
            records.append(dict(dtype=dtype_name, variant=name, **measure.against_copy(moved, ms, copy), rel_err=err,
                                copy_same_ms=copy["ms"]))
            print(f"layernorm {dtype_name} {name}: {ms:.4f} ms, {records[-1]['pct_copy_same']:.0f}% of same-size "
                  f"copy, err {err:.1e}", flush=True)
    measure.write_study(args.out, "layernorm_onepass", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# One-pass layernorm statistics at 128x65536: a measurement", "",
             measure.provenance(run, "layernorm_onepass.py")
             + " (its docstring describes the variants). Times are "
             "`triton.testing.do_bench` medians (L2 flushed before each run); % of same-size copy compares with "
             "a device-to-device copy moving the kernel's bytes, timed in the same run. Inputs have mean "
             f"{MEAN:g} and unit spread; rel. error is against a float64 layer norm.", ""]
    for dtype in ("f32", "bf16"):
        rows = [r for r in records if r["dtype"] == dtype]
        if not rows:
            continue
        best = {}
        for r in rows:
            family = r["variant"].split(",")[0] if r["variant"].startswith("dt") else r["variant"].rsplit(", tile", 1)[0]
            if family not in best or r["ms"] < best[family]["ms"]:
                best[family] = r
        head = ["variant", "ms", "% of same-size copy", "rel. error"]

        def cells(r):
            return [r["variant"], f"{r['ms']:.4f}", f"{r['pct_copy_same']:.0f}%", f"{r['rel_err']:.1e}"]

        lines += [f"## {dtype}", "", f"Same-size copy: {rows[0]['copy_same_ms']:.4f} ms.", "", "Best of each:", ""]
        lines += render.markdown_table(head, map(cells, sorted(best.values(), key=lambda r: r["ms"])))
        lines += ["", "Every variant:", ""] + render.markdown_table(head, map(cells, rows))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
