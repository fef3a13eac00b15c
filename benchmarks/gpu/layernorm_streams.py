"""Where does layernorm 128x65536 lose against rmsnorm? Each stream of the output walk, timed.

A measurement, not a DT feature. At 128x65536 dt's rmsnorm reached about 90% of the
same-size copy in f32 and dt's layernorm about 82% (before this study), with the same structure: one program
per row, a statistics walk over the row, then an output walk that reads the row again (from
L2), reads the weight (and the bias) and writes the row. Layernorm's output walk reads one
stream more, and its 128 programs read the weight and the bias, shared by every row, at
about the same moment. Here, by hand (Chan's statistics), the same kernel, one program per
row, with the output walk's streams taken away one at a time, and ways of making the shared
streams cheaper:

- `layernorm`: (x - mean) * rstd * w + b;
- `no bias`: (x - mean) * rstd * w;
- `no weight, no bias`: (x - mean) * rstd;
- `rmsnorm`: the sum of squares only, then x * rstd * w (dt's rmsnorm, by hand);
- `weight and bias evict_last`: layernorm with the shared streams kept in L2;
- `staggered`: layernorm whose output walk starts at tile (row mod tiles) and wraps, so
  that the programs read different parts of the weight and the bias at any moment;

each at 8192-, 16384- and 32768-wide tiles, 16 and 32 warps, and layernorm also with its
statistics walk in wider tiles than its output walk (fewer streams, so more of the row in
flight in the same registers). Then the weight and the bias loaded once for several rows:
2 or 4 whole rows a program (64 or 32 programs), or 1, 2 or 4 rows a program with each row
split across 2 or 4 programs that exchange their statistics through global memory and an
arrival counter (a cooperative kernel, as in `split_reduction.py`; 1 row a program shares
nothing and shows what the exchange costs). Everything is timed in
alternation with the cold timer, next to dt's tuned layernorm and rmsnorm, and every
variant is first checked against its own float64 reference (the cooperative ones also for
the same bits on a second launch). The report gives each hand-written kernel's registers a
thread and spills.

    python benchmarks/gpu/layernorm_streams.py --out DIR [--rounds 3]

writes DIR/layernorm_streams.json and .md (committed in benchmarks/results/).
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
from layernorm_onepass import EPS, ROWS, WIDTH, chan_update, row_study, tuned_row  # noqa: E402
from memory_hints import tuned_variant  # noqa: E402

import dt  # noqa: E402

TILINGS = [(tile, tile, warps) for tile in (8192, 16384, 32768) for warps in (16, 32)]
# (statistics tile, output tile, warps): the output walk holds three streams, the statistics walk one
OUTPUT_TILINGS = [(tile, output_tile, warps) for tile in (16384, 32768) for output_tile in (4096, 8192, 16384)
                  for warps in (16, 32) if output_tile < tile]
RMS_EPS = 1e-6  # the benchmark's rmsnorm eps


@triton.jit
def streams_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, WIDTH: tl.constexpr, TILE: tl.constexpr,
                   OUTPUT_TILE: tl.constexpr, MEAN: tl.constexpr, WEIGHT: tl.constexpr, BIAS: tl.constexpr,
                   SHARED_POLICY: tl.constexpr, STAGGER: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_start = row * WIDTH
    lanes = tl.arange(0, TILE)
    mean = 0.0
    m2 = 0.0
    count = 0.0
    squares = tl.zeros([TILE], tl.float32)
    for start in range(0, WIDTH, TILE):
        x = tl.load(x_ptr + row_start + start + lanes, eviction_policy="evict_last").to(tl.float32)
        if MEAN:
            mean, m2, count = chan_update(mean, m2, count, x, TILE)
        else:
            squares += x * x
    if MEAN:
        rstd = tl.rsqrt(m2 / WIDTH + eps)
    else:
        rstd = tl.rsqrt(tl.sum(squares, 0) / WIDTH + eps)
    tiles: tl.constexpr = WIDTH // OUTPUT_TILE
    first = (row % tiles) if STAGGER else 0
    for step in range(0, tiles):
        offsets = ((first + step) % tiles) * OUTPUT_TILE + tl.arange(0, OUTPUT_TILE)
        y = tl.load(x_ptr + row_start + offsets, eviction_policy="evict_first").to(tl.float32)
        if MEAN:
            y = (y - mean) * rstd
        else:
            y = y * rstd
        if WEIGHT:
            y = y * tl.load(w_ptr + offsets, eviction_policy=SHARED_POLICY).to(tl.float32)
        if BIAS:
            y = y + tl.load(b_ptr + offsets, eviction_policy=SHARED_POLICY).to(tl.float32)
        tl.store(out_ptr + row_start + offsets, y.to(out_ptr.dtype.element_ty))


@triton.jit
def _chan_rows(mean, m2, count, x, TILE: tl.constexpr):
    """Chan's update of per-row running statistics with a [rows, TILE] tile."""
    tile_mean = tl.sum(x, 1) / TILE
    deviation = x - tile_mean[:, None]
    total = count + TILE
    delta = tile_mean - mean
    return mean + delta * (TILE / total), m2 + tl.sum(deviation * deviation, 1) + delta * delta * (count * TILE / total), total


@triton.jit
def shared_rows_kernel(x_ptr, w_ptr, b_ptr, out_ptr, slots_ptr, sync_ptr, eps, WIDTH: tl.constexpr,
                       TILE: tl.constexpr, GROUP_ROWS: tl.constexpr, CHUNKS: tl.constexpr, GROUPS: tl.constexpr):
    """GROUP_ROWS rows a program, the weight and the bias loaded once for all of them; with
    CHUNKS > 1 a group's row is split across CHUNKS programs that exchange their statistics
    (programs take groups and chunks in the order they start, so none waits for one that
    has not started)."""
    if CHUNKS > 1:
        ticket = tl.atomic_add(sync_ptr, 1)
        if ticket == GROUPS * CHUNKS - 1:  # every ticket taken: reset for the next launch
            tl.atomic_xchg(sync_ptr, 0)
        group = ticket // CHUNKS
        chunk = ticket % CHUNKS
    else:
        group = tl.program_id(0)
        chunk = 0
    CHUNK: tl.constexpr = WIDTH // CHUNKS
    rows = group.to(tl.int64) * GROUP_ROWS + tl.arange(0, GROUP_ROWS)
    lanes = tl.arange(0, TILE)
    row_starts = rows[:, None] * WIDTH + chunk * CHUNK
    mean = tl.zeros([GROUP_ROWS], tl.float32)
    m2 = tl.zeros([GROUP_ROWS], tl.float32)
    count = 0.0
    for start in range(0, CHUNK, TILE):
        x = tl.load(x_ptr + row_starts + start + lanes[None, :], eviction_policy="evict_last").to(tl.float32)
        mean, m2, count = _chan_rows(mean, m2, count, x, TILE)
    if CHUNKS > 1:
        group_rows = tl.arange(0, GROUP_ROWS)
        slots = slots_ptr + group * (2 * CHUNKS * GROUP_ROWS)
        tl.store(slots + chunk * GROUP_ROWS + group_rows, mean)
        tl.store(slots + (CHUNKS + chunk) * GROUP_ROWS + group_rows, m2)
        tl.debug_barrier()  # every lane's slot stores before the release below
        arrived_ptr = sync_ptr + 1 + group
        tl.atomic_add(arrived_ptr, 1, sem="release")
        arrived = tl.atomic_add(arrived_ptr, 0, sem="acquire")
        while arrived < CHUNKS:
            arrived = tl.atomic_add(arrived_ptr, 0, sem="acquire")
        chunks = tl.arange(0, CHUNKS)
        means = tl.load(slots + chunks[:, None] * GROUP_ROWS + group_rows[None, :], volatile=True)
        m2s = tl.load(slots + (CHUNKS + chunks[:, None]) * GROUP_ROWS + group_rows[None, :], volatile=True)
        mean = tl.sum(means, 0) / CHUNKS
        spread = means - mean[None, :]
        m2 = tl.sum(m2s, 0) + CHUNK * tl.sum(spread * spread, 0)
        departed = tl.atomic_add(sync_ptr + 1 + GROUPS + group, 1)
        if departed == CHUNKS - 1:  # the group's last program out resets its counters
            tl.atomic_xchg(arrived_ptr, 0)
            tl.atomic_xchg(sync_ptr + 1 + GROUPS + group, 0)
    rstd = tl.rsqrt(m2 / WIDTH + eps)
    for start in range(0, CHUNK, TILE):
        offsets = chunk * CHUNK + start + lanes
        y = tl.load(x_ptr + row_starts + start + lanes[None, :], eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + offsets).to(tl.float32)
        b = tl.load(b_ptr + offsets).to(tl.float32)
        y = (y - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(out_ptr + row_starts + start + lanes[None, :], y.to(out_ptr.dtype.element_ty))


# (rows a program, programs a row) -> [(tile width, warps)]
SHARED = {(2, 1): [(8192, 16), (8192, 32), (16384, 32)],
          (4, 1): [(4096, 16), (4096, 32), (8192, 32)],
          (1, 2): [(16384, 16), (16384, 32)],
          (2, 2): [(8192, 16), (8192, 32), (16384, 32)],
          (4, 4): [(4096, 16), (4096, 32), (8192, 32)],
          (2, 4): [(4096, 16), (8192, 16)]}


# name -> (mean, weight, bias, the weight's and bias's eviction policy, stagger)
STRUCTURES = {"layernorm": (True, True, True, "", False),
              "no bias": (True, True, False, "", False),
              "no weight, no bias": (True, False, False, "", False),
              "rmsnorm": (False, True, False, "", False),
              "weight and bias evict_last": (True, True, True, "evict_last", False),
              "staggered": (True, True, True, "", True)}


def reference(x, w, b, structure: str, width: int = WIDTH) -> torch.Tensor:
    """What a structure computes, in float64."""
    mean, weight, bias, _, _ = STRUCTURES[structure]
    x = x.double()
    if mean:
        y = torch.nn.functional.layer_norm(x, (width,), eps=EPS)
    else:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return y * (w.double() if weight else 1) + (b.double() if bias else 0)


def main(argv=None) -> int:
    return row_study(__doc__, "layernorm_streams", markdown, records, argv)


def records(dtype: str, device: torch.device, timer: measure.Timer, rounds: int) -> list[dict]:
    case, (x, w, b), ref, calls = tuned_row(dtype, device)
    measure.check_calls(calls, ref, dtype, f"layernorm {dtype}")
    rms_case = next(c for c in cases(["rmsnorm"], dtypes=[dtype]) if c.shape == (ROWS, WIDTH))
    rms_schedule = schedule_for(rms_case)
    rms_program = dt.load(rms_schedule)
    rms_call = {f"dt rmsnorm, tuned ({tuned_variant(rms_schedule)})":
                lambda: rms_program(backend="triton", A=x, W=w, eps=RMS_EPS)}
    measure.check_calls(rms_call, reference(x, w, b, "rmsnorm"), dtype, f"rmsnorm {dtype}")
    calls.update(rms_call)
    out = torch.empty_like(x)
    for structure, flags in STRUCTURES.items():
        eps = EPS if flags[0] else RMS_EPS
        variants = {}
        for tile, output_tile, warps in TILINGS + (OUTPUT_TILINGS if structure == "layernorm" else []):
            def call(tile=tile, output_tile=output_tile, warps=warps, flags=flags, eps=eps):
                return streams_kernel[(ROWS,)](x, w, b, out, eps, WIDTH, tile, output_tile, *flags, num_warps=warps)
            variants[f"{structure}, tile {tile}" + (f", output tile {output_tile}" if output_tile != tile else "")
                     + f", {warps} warps"] = call
        measure.check_calls(variants, reference(x, w, b, structure), dtype, f"{structure} {dtype}", out)
        calls.update(variants)
    variants = {}
    for (group_rows, chunks), tilings in SHARED.items():
        groups = ROWS // group_rows
        slots = torch.empty(groups * 2 * chunks * group_rows, device=device)
        sync = torch.zeros(1 + 2 * groups, device=device, dtype=torch.int32)
        for tile, warps in tilings:
            def call(tile=tile, warps=warps, group_rows=group_rows, chunks=chunks, groups=groups, slots=slots,
                     sync=sync):
                return shared_rows_kernel[(groups * chunks,)](x, w, b, out, slots, sync, EPS, WIDTH, tile, group_rows,
                                                       chunks, groups, num_warps=warps)
            name = (f"{group_rows} row{'s' * (group_rows > 1)} a program, {chunks} program{'s' * (chunks > 1)} a row "
                    f"({groups * chunks} programs), tile {group_rows}x{tile}, {warps} warps")
            variants[name] = call
            # the counters reset themselves: launched again on poisoned slots and output, the same bits
            results = []
            for _ in range(2):
                slots.fill_(float("nan"))
                out.fill_(float("nan"))
                call()
                measure.synchronize(device)
                assert int(sync.count_nonzero()) == 0, f"{name}: counters left set"
                results.append(out.clone())
            assert torch.equal(*results), name
    measure.check_calls(variants, ref, dtype, f"shared rows {dtype}", out)
    calls.update(variants)
    registers = {}
    for name, call in calls.items():  # each hand-written kernel's registers a thread and spills
        compiled = call()
        if not isinstance(compiled, torch.Tensor):
            registers[name] = dict(registers=compiled.n_regs, spills=compiled.n_spills)
    return [dict(record, **registers.get(record["variant"], {}))
            for record in measure.timed_variants(timer, device, case, calls, rounds, kernel="layernorm")]


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Layernorm 128x65536 against rmsnorm: each stream of the output walk, timed", "",
             measure.provenance(run, "layernorm_streams.py")
             + " (its docstring describes the variants). Every variant timed in alternation "
             "with the cold timer (`measure.cold_bench`); times are medians over the rounds; % of same-size copy "
             "compares with a copy moving layernorm's bytes (the variants without a bias or a weight move up to "
             "0.5 MB less of the 67 MB), timed after the rounds.", ""]
    return "\n".join(lines + render.variant_tables(records, "layernorm", {
        "registers a thread": lambda r: str(r.get("registers", "")), "spills": lambda r: str(r.get("spills", ""))}))


if __name__ == "__main__":
    sys.exit(main())
