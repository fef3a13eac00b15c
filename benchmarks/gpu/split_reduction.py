"""Would splitting a row's reduction across programs make dt's 128x65536 rows faster?

A measurement, not a DT feature: before adding a schedule primitive that splits reductions
across programs, this times by hand the two ways Triton code could do it, next to dt's
tuned schedules (one program per row) and a copy that moves the same bytes:

- two kernels: the first reduces each chunk of a row to a partial sum, the second combines a
  row's partials and writes its chunk, reading the input a second time (from L2 if it stayed);
- cooperative: one kernel; each program keeps its chunk in registers, publishes its partial,
  waits at a per-row arrival counter until every chunk of its row has arrived, then combines
  the partials in a fixed order (the same bits every run) and writes. Programs take their row
  and chunk from a ticket counter in the order they start, so a program only ever waits for
  programs already running: it cannot deadlock while a row's chunks fit on the GPU at once.
  The counters reset themselves, so the workspace is zeroed once.

Softmax needs one such barrier per row, layernorm two (mean, then variance).

    python benchmarks/gpu/split_reduction.py --out DIR

writes DIR/split_reduction.json and DIR/split_reduction.md (committed in benchmarks/results/).
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
from cases import ROOT  # noqa: E402

import dt  # noqa: E402

ROWS, WIDTH = 128, 65536
EPS = 1e-5


@triton.jit
def partial_sums_kernel(x_ptr, partial_ptr, WIDTH: tl.constexpr, CHUNK: tl.constexpr, TILE: tl.constexpr,
                        CHUNKS: tl.constexpr):
    row, chunk = tl.program_id(0) // CHUNKS, tl.program_id(0) % CHUNKS
    accumulator = tl.zeros([TILE], tl.float32)
    for start in range(0, CHUNK, TILE):
        offsets = chunk * CHUNK + start + tl.arange(0, TILE)
        accumulator += tl.exp(tl.load(x_ptr + row * WIDTH + offsets).to(tl.float32))
    tl.store(partial_ptr + row * CHUNKS + chunk, tl.sum(accumulator, 0))


@triton.jit
def normalize_kernel(x_ptr, partial_ptr, out_ptr, WIDTH: tl.constexpr, CHUNK: tl.constexpr, TILE: tl.constexpr,
                     CHUNKS: tl.constexpr):
    row, chunk = tl.program_id(0) // CHUNKS, tl.program_id(0) % CHUNKS
    total = tl.sum(tl.load(partial_ptr + row * CHUNKS + tl.arange(0, CHUNKS)), 0)
    for start in range(0, CHUNK, TILE):
        offsets = chunk * CHUNK + start + tl.arange(0, TILE)
        tile = tl.exp(tl.load(x_ptr + row * WIDTH + offsets).to(tl.float32)) / total
        tl.store(out_ptr + row * WIDTH + offsets, tile.to(out_ptr.dtype.element_ty))


@triton.jit
def _row_total(partial_ptr, arrived_ptr, value, row, chunk, barrier: tl.constexpr, CHUNKS: tl.constexpr,
               ROWS: tl.constexpr):
    """Publish this chunk's partial, wait for the row's other chunks, sum the row's partials."""
    slots = partial_ptr + barrier * ROWS * CHUNKS + row * CHUNKS
    tl.store(slots + chunk, value)
    tl.atomic_add(arrived_ptr, 1, sem="release")
    arrived = tl.atomic_add(arrived_ptr, 0, sem="acquire")
    while arrived < (barrier + 1) * CHUNKS:
        arrived = tl.atomic_add(arrived_ptr, 0, sem="acquire")
    return tl.sum(tl.load(slots + tl.arange(0, CHUNKS), volatile=True), 0)


@triton.jit
def _ticket(sync_ptr, CHUNKS: tl.constexpr, ROWS: tl.constexpr):
    ticket = tl.atomic_add(sync_ptr, 1)
    if ticket == ROWS * CHUNKS - 1:  # every ticket is taken: reset for the next launch
        tl.atomic_xchg(sync_ptr, 0)
    return ticket // CHUNKS, ticket % CHUNKS


@triton.jit
def _leave(sync_ptr, row, CHUNKS: tl.constexpr, ROWS: tl.constexpr):
    departed = tl.atomic_add(sync_ptr + 1 + ROWS + row, 1)
    if departed == CHUNKS - 1:  # the row's last program out resets its counters
        tl.atomic_xchg(sync_ptr + 1 + row, 0)
        tl.atomic_xchg(sync_ptr + 1 + ROWS + row, 0)


@triton.jit
def cooperative_softmax_kernel(x_ptr, out_ptr, partial_ptr, sync_ptr, WIDTH: tl.constexpr, CHUNK: tl.constexpr,
                               CHUNKS: tl.constexpr, ROWS: tl.constexpr):
    row, chunk = _ticket(sync_ptr, CHUNKS, ROWS)
    offsets = chunk * CHUNK + tl.arange(0, CHUNK)
    tile = tl.exp(tl.load(x_ptr + row * WIDTH + offsets).to(tl.float32))
    total = _row_total(partial_ptr, sync_ptr + 1 + row, tl.sum(tile, 0), row, chunk, 0, CHUNKS, ROWS)
    tl.store(out_ptr + row * WIDTH + offsets, (tile / total).to(out_ptr.dtype.element_ty))
    _leave(sync_ptr, row, CHUNKS, ROWS)


@triton.jit
def cooperative_layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, partial_ptr, sync_ptr, WIDTH: tl.constexpr,
                                 CHUNK: tl.constexpr, CHUNKS: tl.constexpr, ROWS: tl.constexpr, EPS: tl.constexpr):
    row, chunk = _ticket(sync_ptr, CHUNKS, ROWS)
    offsets = chunk * CHUNK + tl.arange(0, CHUNK)
    tile = tl.load(x_ptr + row * WIDTH + offsets).to(tl.float32)
    mean = _row_total(partial_ptr, sync_ptr + 1 + row, tl.sum(tile, 0), row, chunk, 0, CHUNKS, ROWS) / WIDTH
    centred = tile - mean
    variance = _row_total(partial_ptr, sync_ptr + 1 + row, tl.sum(centred * centred, 0), row, chunk, 1, CHUNKS,
                          ROWS) / WIDTH
    w = tl.load(w_ptr + offsets).to(tl.float32)
    b = tl.load(b_ptr + offsets).to(tl.float32)
    tl.store(out_ptr + row * WIDTH + offsets, (centred * tl.rsqrt(variance + EPS) * w + b).to(out_ptr.dtype.element_ty))
    _leave(sync_ptr, row, CHUNKS, ROWS)


def variants(kernel: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor):
    """(name, call) for each hand-written variant of `kernel`."""
    found = []
    if kernel == "softmax":
        for chunk in (4096, 8192):
            for warps in (4, 8):
                partials = torch.empty(ROWS, WIDTH // chunk, device=x.device)

                def two(chunk=chunk, warps=warps, partials=partials):
                    grid = (ROWS * (WIDTH // chunk),)
                    partial_sums_kernel[grid](x, partials, WIDTH, chunk, 4096, WIDTH // chunk, num_warps=warps)
                    normalize_kernel[grid](x, partials, out, WIDTH, chunk, 4096, WIDTH // chunk, num_warps=warps)
                found.append((f"two kernels, chunk {chunk}, {warps} warps", two))
    for chunk in (4096, 8192, 16384, 32768):
        for warps in (8, 16):
            chunks = WIDTH // chunk
            partials = torch.empty(2, ROWS, chunks, device=x.device)
            sync = torch.zeros(1 + 2 * ROWS, device=x.device, dtype=torch.int32)

            def cooperative(chunk=chunk, warps=warps, chunks=chunks, partials=partials, sync=sync):
                if kernel == "softmax":
                    cooperative_softmax_kernel[(ROWS * chunks,)](x, out, partials, sync, WIDTH, chunk, chunks, ROWS,
                                                                 num_warps=warps)
                else:
                    cooperative_layernorm_kernel[(ROWS * chunks,)](x, w, b, out, partials, sync, WIDTH, chunk, chunks,
                                                                   ROWS, EPS, num_warps=warps)
            found.append((f"cooperative, chunk {chunk}, {warps} warps", cooperative))
    return found


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    records = []
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        generator = measure.generator(device, 7)
        x = measure.random_tensor((ROWS, WIDTH), dtype, device, generator)
        w = measure.random_tensor((WIDTH,), dtype, device, generator)
        b = measure.random_tensor((WIDTH,), dtype, device, generator)
        copy = measure.copy_bandwidth(timer, device, 2 * x.numel() * x.element_size())
        for kernel in ("softmax", "layernorm"):
            if kernel == "softmax":
                ref = torch.softmax(x.double(), dim=1)
                args_dt = {"A": x}
            else:
                ref = torch.nn.functional.layer_norm(x.double(), (WIDTH,), w.double(), b.double(), EPS)
                args_dt = {"A": x, "W": w, "Bias": b, "eps": EPS}
            moved = (2 * x.numel() + (0 if kernel == "softmax" else 2 * WIDTH)) * x.element_size()
            out = torch.empty_like(x)
            tuned = ROOT / f"benchmarks/gpu/schedules/tuned/{kernel}_{ROWS}x{WIDTH}_{dtype_name}.dt"
            program = dt.load(str(tuned))
            calls = [(f"dt, {tuned.stem} (one program per row)", lambda: program(backend="triton", **args_dt))]
            calls += variants(kernel, x, w, b, out)
            for name, call in calls:
                result = call()
                measure.synchronize(device)
                got = result if result is not None else out
                err = measure.relative_error(got, ref)
                first = got.clone()
                ms = timer(call)
                again = call()
                measure.synchronize(device)
                same = bool(torch.equal(first, again if again is not None else out))
                records.append(dict(kernel=kernel, dtype=dtype_name, variant=name,
                                    **measure.against_copy(moved, ms, copy), rel_err=err,
                                    same_bits_again=same, copy_same_ms=copy["ms"]))
                print(f"{kernel} {dtype_name} {name}: {ms:.4f} ms, {records[-1]['pct_copy_same']:.0f}% of same-size "
                      f"copy, err {err:.1e}, same bits again: {same}", flush=True)
    measure.write_study(args.out, "split_reduction", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Split reductions across programs at 128x65536: a measurement", "",
             measure.provenance(run, "split_reduction.py")
             + " (its docstring describes the variants). Times are "
             "`triton.testing.do_bench` medians (L2 flushed before each run); % of same-size copy compares with "
             "a device-to-device copy moving the kernel's bytes, timed in the same run.", ""]
    for kernel in ("softmax", "layernorm"):
        for dtype in ("f32", "bf16"):
            rows = [r for r in records if r["kernel"] == kernel and r["dtype"] == dtype]
            if not rows:
                continue
            lines += [f"## {kernel} {dtype}", "", f"Same-size copy: {rows[0]['copy_same_ms']:.4f} ms.", ""]
            lines += render.markdown_table(
                ["variant", "ms", "% of same-size copy", "rel. error", "same bits on a second call"],
                ([r["variant"], f"{r['ms']:.4f}", f"{r['pct_copy_same']:.0f}%", f"{r['rel_err']:.1e}",
                  "yes" if r["same_bits_again"] else "no"] for r in rows))
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
