"""Would row tiles kept in flight by Triton's pipeliner, through TMA or not, bring layernorm 128x65536 to 85%?

A measurement, not a DT feature. At 128x65536 each of the 128 programs owns a row and is
alone on its SM, so the SM's own loads in flight set its share of the bandwidth. Triton's
software pipeliner only pipelines a loop without `tl.dot` when the loop asks for it
(`tl.range(..., num_stages=n)`); the kernel's `num_stages` launch option leaves such loops
alone (a first version of this study passed it and got neither `cp.async` nor any change
with the stage count). With the per-loop stages, `num_stages - 1` tiles are in flight into
shared memory ahead of the tile being reduced. Here, by hand, one program per row as dt runs
it, layernorm with Chan's per-tile statistics (two walks, the second served by L2):

- `TMA`: every tile is a [1, tile] box moved by a tensor descriptor (Triton splits boxes
  wider than 256): the row in the statistics walk; the row, the weight and the bias in the
  output walk, whose result is stored through a descriptor;
- `pointers`: pointer loads with dt's eviction hints (`evict_last` in the statistics walk,
  `evict_first` in the output walk), which the pipeliner turns into `cp.async` copies;

each with the statistics walk pipelined `stages` deep and the output walk either as deep or
not pipelined (`output 1`): three tiles a stage do not fit shared memory at every depth.
Every variant is timed once (screening), then the fastest FINALISTS and dt's tuned schedule
in alternation, all with the cold timer, next to a copy that moves the same bytes. A variant
that does not compile (too much shared memory) is reported, not timed.

    python benchmarks/gpu/layernorm_tma.py --out DIR [--rounds 3]

writes DIR/layernorm_tma.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
from layernorm_onepass import EPS, ROWS, WIDTH, chan_update, row_study, tuned_row  # noqa: E402

FINALISTS = 6
TILINGS = {"TMA": [(tile, warps) for tile in (4096, 8192, 16384) for warps in (8, 16, 32)],
           "pointers": [(tile, warps) for tile in (4096, 8192, 16384) for warps in (16, 32)]}
DEPTHS = [(stages, output) for stages in (2, 3, 4) for output in (1, stages)]  # (statistics walk, output walk)


@triton.jit
def pipelined_kernel(x_desc, w_desc, b_desc, out_desc, x_ptr, w_ptr, b_ptr, out_ptr, eps, WIDTH: tl.constexpr,
                     TILE: tl.constexpr, STAGES: tl.constexpr, OUTPUT_STAGES: tl.constexpr, TMA: tl.constexpr):
    row = tl.program_id(0)
    row_start = row.to(tl.int64) * WIDTH
    lanes = tl.arange(0, TILE)
    mean = 0.0
    m2 = 0.0
    count = 0.0
    for start in tl.range(0, WIDTH, TILE, num_stages=STAGES):
        if TMA:
            x = tl.reshape(x_desc.load([row, start]), [TILE])
        else:
            x = tl.load(x_ptr + row_start + start + lanes, eviction_policy="evict_last")
        mean, m2, count = chan_update(mean, m2, count, x.to(tl.float32), TILE)
    rstd = tl.rsqrt(m2 / WIDTH + eps)
    for start in tl.range(0, WIDTH, TILE, num_stages=OUTPUT_STAGES):
        if TMA:
            x = x_desc.load([row, start]).to(tl.float32)
            w = w_desc.load([0, start]).to(tl.float32)
            b = b_desc.load([0, start]).to(tl.float32)
            out_desc.store([row, start], ((x - mean) * rstd * w + b).to(out_desc.dtype))
        else:
            x = tl.load(x_ptr + row_start + start + lanes, eviction_policy="evict_first").to(tl.float32)
            w = tl.load(w_ptr + start + lanes).to(tl.float32)
            b = tl.load(b_ptr + start + lanes).to(tl.float32)
            tl.store(out_ptr + row_start + start + lanes, ((x - mean) * rstd * w + b).to(out_ptr.dtype.element_ty))


def variants(x, w, b, out) -> dict:
    """name -> call, for every structure, tiling and depth."""
    calls = {}
    for structure, tilings in TILINGS.items():
        for (tile, warps), (stages, output) in ((t, d) for t in tilings for d in DEPTHS):
            def call(tile=tile, warps=warps, stages=stages, output=output, tma=structure == "TMA"):
                def box(t):
                    return TensorDescriptor.from_tensor(t, [1, tile]) if tma else None
                return pipelined_kernel[(ROWS,)](box(x), box(w.view(1, WIDTH)), box(b.view(1, WIDTH)), box(out),
                                                 x, w, b, out, EPS, WIDTH, tile, stages, output, tma,
                                                 num_warps=warps)
            calls[f"{structure}, tile {tile}, {warps} warps, {stages} stages, output {output}"] = call
    return calls


def main(argv=None) -> int:
    return row_study(__doc__, "layernorm_tma", markdown, records, argv)


def records(dtype: str, device: torch.device, timer: measure.Timer, rounds: int) -> list[dict]:
    case, (x, w, b), ref, calls = tuned_row(dtype, device)
    row = dict(shape=case.shape_text, dtype=dtype, kernel="layernorm")
    out = torch.empty_like(x)
    found, copies = [], {}
    for name, call in variants(x, w, b, out).items():
        try:
            ptx = call().asm["ptx"]
        except Exception as e:  # too much shared memory for the SM, or a box Triton refuses
            found.append(dict(row, variant=name, error=measure.short_error(e)))
            print(name, measure.short_error(e), flush=True)
            continue
        copies[name] = "TMA" if "cp.async.bulk.tensor" in ptx else "cp.async" if "cp.async" in ptx else "none"
        calls[name] = call
    measure.check_calls(calls, ref, dtype, f"layernorm {dtype}", out)
    tuned = next(iter(calls))
    screened = {name: times[0] for name, times in timer.rounds(calls, 1).items() if name != tuned}
    finalists = sorted(screened, key=screened.get)[:FINALISTS]
    found += [dict(row, variant=name, screen_ms=ms, copies=copies[name]) for name, ms in screened.items()]
    final = {name: calls[name] for name in (tuned, *finalists)}
    return found + [dict(record, copies=copies.get(record["variant"]))
                    for record in measure.timed_variants(timer, device, case, final, rounds, kernel="layernorm")]


def markdown(run: dict, records: list[dict]) -> str:
    final = [r for r in records if "ms" in r]
    lines = ["# Layernorm 128x65536 with tiles kept in flight by Triton's pipeliner: a measurement", "",
             measure.provenance(run, "layernorm_tma.py")
             + " (its docstring describes the structures). One program per row; every variant timed once "
             f"(screening), then dt's tuned schedule and the {FINALISTS} fastest in alternation, all with the cold "
             "timer (`measure.cold_bench`); times are medians over the rounds; % of same-size copy compares with a "
             "copy moving the row's bytes, timed after the rounds. `copies` says how the kernel's PTX moves tiles "
             "into shared memory: `TMA` (`cp.async.bulk.tensor`), `cp.async`, or `none` (loads straight into "
             "registers).",
             "", *render.variant_tables(final, "layernorm", {"copies": lambda r: r["copies"] or ""})]
    for (shape, dtype), rows in measure.by_row([r for r in records if "ms" not in r], "shape", "dtype").items():
        rows.sort(key=lambda r: (r.get("screen_ms") is None, r.get("screen_ms")))
        lines += [f"## Screening, layernorm {shape}, {dtype}", ""]
        lines += render.markdown_table(["variant", "ms (one timing)", "copies or error"], [
            [r["variant"], f"{r['screen_ms']:.5f}" if "screen_ms" in r else "", r.get("copies") or r["error"]]
            for r in rows])
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
