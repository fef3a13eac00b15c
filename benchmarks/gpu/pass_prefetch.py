"""Would loading each tile before the previous one is reduced bring layernorm 128x65536 to 85%?

A measurement, not a DT feature (yet). At 128x65536 each of the 128 programs owns a row and
is alone on its SM. dt's generated walk loads a tile, waits for it, reduces it across the
program's warps, and only then asks for the next tile; between the statistics walk and the
output walk it also reduces the row before the output walk's first load. With one program
per SM nothing else hides those waits. Here, by hand, one program per row as dt runs it,
layernorm with Chan's per-tile statistics (two walks, the second served by L2):

- `loads in order`: the generated structure (layernorm_onepass.chan_kernel);
- `next tile in flight`: every walk keeps the next tile's loads in flight while it reduces
  or writes the current one (registers hold two tiles);
- `next tile in flight, across walks`: the same, and the output walk's first tiles (the row,
  the weight and the bias) are asked for before the statistics walk reduces its last tile.

next to dt's tuned schedule and a copy that moves the same bytes. The hand-written kernels
run with `num_stages=1`, so that Triton's own loop pipelining does not mix in; the report
says whether the PTX of each has `cp.async` (asynchronous copies into shared memory).

    python benchmarks/gpu/pass_prefetch.py --out DIR [--rounds 3]

writes DIR/pass_prefetch.json and .md (committed in benchmarks/results/).
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
from layernorm_onepass import EPS, ROWS, WIDTH, chan_kernel, chan_update, row_study, tuned_row  # noqa: E402

TILINGS = ((4096, 8), (4096, 16), (8192, 16), (8192, 32), (16384, 32))  # (tile, warps)


@triton.jit
def _normalize(out_ptr, at, x, w, b, mean, rstd):
    y = (x.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
    tl.store(out_ptr + at, y.to(out_ptr.dtype.element_ty))


@triton.jit
def in_flight_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, WIDTH: tl.constexpr, TILE: tl.constexpr,
                     ACROSS: tl.constexpr):
    row_start = tl.program_id(0).to(tl.int64) * WIDTH
    lanes = tl.arange(0, TILE)
    x_next = tl.load(x_ptr + row_start + lanes, eviction_policy="evict_last")
    mean = 0.0
    m2 = 0.0
    count = 0.0
    for start in range(TILE, WIDTH, TILE):
        x = x_next
        x_next = tl.load(x_ptr + row_start + start + lanes, eviction_policy="evict_last")
        mean, m2, count = chan_update(mean, m2, count, x.to(tl.float32), TILE)
    x = x_next
    if ACROSS:
        x_next = tl.load(x_ptr + row_start + lanes, eviction_policy="evict_first")
        w_next = tl.load(w_ptr + lanes)
        b_next = tl.load(b_ptr + lanes)
        mean, m2, count = chan_update(mean, m2, count, x.to(tl.float32), TILE)
    else:
        mean, m2, count = chan_update(mean, m2, count, x.to(tl.float32), TILE)
        x_next = tl.load(x_ptr + row_start + lanes, eviction_policy="evict_first")
        w_next = tl.load(w_ptr + lanes)
        b_next = tl.load(b_ptr + lanes)
    rstd = tl.rsqrt(m2 / WIDTH + eps)
    for start in range(TILE, WIDTH, TILE):
        x = x_next
        w = w_next
        b = b_next
        x_next = tl.load(x_ptr + row_start + start + lanes, eviction_policy="evict_first")
        w_next = tl.load(w_ptr + start + lanes)
        b_next = tl.load(b_ptr + start + lanes)
        _normalize(out_ptr, row_start + start - TILE + lanes, x, w, b, mean, rstd)
    _normalize(out_ptr, row_start + WIDTH - TILE + lanes, x_next, w_next, b_next, mean, rstd)


STRUCTURES = (("loads in order", chan_kernel, {}),
              ("next tile in flight", in_flight_kernel, {"ACROSS": False}),
              ("next tile in flight, across walks", in_flight_kernel, {"ACROSS": True}))


def main(argv=None) -> int:
    return row_study(__doc__, "pass_prefetch", markdown, records, argv)


def records(dtype: str, device: torch.device, timer: measure.Timer, rounds: int) -> list[dict]:
    case, (x, w, b), ref, calls = tuned_row(dtype, device)
    out = torch.empty_like(x)
    async_copies = {}
    for structure, kernel, constants in STRUCTURES:
        for tile, warps in TILINGS:
            def call(kernel=kernel, tile=tile, warps=warps, constants=constants):
                return kernel[(ROWS,)](x, w, b, out, EPS, WIDTH, tile, **constants, num_warps=warps, num_stages=1)
            name = f"{structure}, tile {tile}, {warps} warps"
            async_copies[name] = "cp.async" in call().asm["ptx"]
            calls[name] = call
    measure.check_calls(calls, ref, dtype, f"layernorm {dtype}", out)
    return [dict(record, cp_async=async_copies.get(record["variant"]))
            for record in measure.timed_variants(timer, device, case, calls, rounds, kernel="layernorm")]


def markdown(run: dict, records: list[dict]) -> str:
    return "\n".join(["# The next tile in flight while the current one is reduced: a measurement", "",
                      measure.provenance(run, "pass_prefetch.py")
                      + " (its docstring describes the structures). Layernorm at 128x65536, one program per row, "
                      "timed in alternation with the cold timer (`measure.cold_bench`); times are medians over the "
                      "rounds; % of same-size copy compares with a copy moving the row's bytes, timed after the "
                      "rounds. `cp.async` says whether Triton turned the kernel's loads into asynchronous copies.",
                      "", *render.variant_tables(records, "layernorm", {"cp.async": lambda r: {
                          True: "yes", False: "no", None: ""}[r["cp_async"]]})])


if __name__ == "__main__":
    sys.exit(main())
