"""What do the L2 lines dt's kernels keep (evict_last) cost the kernels that run after them?

A measurement. dt's cache hints (docs/triton.md, "Cache hints") read a row that a later walk
reads again with `evict_last`, and its last walk with `evict_first`. The kept lines outlive
the kernel, its `evict_first` walk and a 256 MB flush (docs/performance.md, "Lines kept in
L2 through the flush"): until other `evict_last` traffic or `cuCtxResetPersistingL2Cache`
replaces them, later kernels have that much less L2. Here, for each producer and consumer,
every kept line is demoted (measure.reset_persisting_l2) on the idle GPU, the producer runs
once, and the consumer is timed with `triton.testing.do_bench` (whose flush leaves kept
lines alone). Producers (all but `nothing` read a 128x65536 f32 row set, 32 MB, twice):

- `nothing`: no producer (the reference);
- `dt layernorm, hints` and `dt layernorm, no hints`: dt's tuned layernorm at 128x65536 f32,
  as generated and with its eviction hints removed;
- `two walks, evict_last then evict_first`: a hand-written kernel, a row sum walk that keeps
  its lines, then an output walk with `evict_first` loads, as dt's hints do;
- `... then applypriority evict_normal`: the same, the output walk also returning each line
  it read to normal priority (PTX `applypriority.global.L2::evict_normal`, once per 128-byte
  line).

Consumers: the sum of the producers' own rows (a positive control: faster where their lines
are still kept, do_bench's flush evicting the others); on tensors of their own, PyTorch
eager layer_norm and softmax at 128x65536 f32 (their second read of a row comes from L2),
torch.compile's layer_norm at the same shape, and a cuBLAS f16 matmul at 4096^3. The
producers themselves are timed too (cold timer), to price the demotion.

    python benchmarks/gpu/l2_pinning.py --out DIR [--rounds 3]

writes DIR/l2_pinning.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
from cases import schedule_for  # noqa: E402
from layernorm_onepass import EPS, ROWS, WIDTH, tuned_row  # noqa: E402

import dt  # noqa: E402
from dt.backends.pysource import load_module  # noqa: E402

TILE = 8192
LINE_BYTES = 128


@triton.jit
def two_walks_kernel(x_ptr, out_ptr, WIDTH: tl.constexpr, TILE: tl.constexpr, LINE: tl.constexpr,
                     DEMOTE: tl.constexpr):
    row_start = tl.program_id(0).to(tl.int64) * WIDTH
    lanes = tl.arange(0, TILE)
    total = tl.zeros([TILE], tl.float32)
    for start in range(0, WIDTH, TILE):
        total += tl.load(x_ptr + row_start + start + lanes, eviction_policy="evict_last")
    mean = tl.sum(total, 0) / WIDTH
    for start in range(0, WIDTH, TILE):
        at = x_ptr + row_start + start + lanes
        x = tl.load(at, eviction_policy="evict_first")
        if DEMOTE:  # the first lane of each line returns the line to normal priority
            tl.inline_asm_elementwise(
                "{ .reg .pred first; setp.ne.b32 first, $2, 0; "
                "@first applypriority.global.L2::evict_normal [$1], 128; mov.b32 $0, 0; }",
                "=r,l,r", [at, (lanes % LINE == 0).to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)
        tl.store(out_ptr + row_start + start + lanes, x - mean)


def main(argv=None) -> int:
    args = measure.study_parser(__doc__, rounds=3).parse_args(argv)
    device = torch.device("cuda")
    case, (x, w, b), ref, calls = tuned_row("f32", device)
    program = dt.load(schedule_for(case))
    unhinted = load_module(measure.without_eviction_hints(program.source("triton", "f32")),
                           "layernorm_unhinted")[program.pipeline("f32").name]
    out = torch.empty_like(x)
    line = LINE_BYTES // x.element_size()
    keep = "two walks, evict_last then evict_first"
    demote = f"{keep}, then applypriority evict_normal"
    producers = {
        "nothing": None,
        "dt layernorm, hints": next(iter(calls.values())),
        "dt layernorm, no hints": lambda: unhinted(x, w, b, EPS),
        keep: lambda: two_walks_kernel[(ROWS,)](x, out, WIDTH, TILE, line, False, num_warps=16),
        demote: lambda: two_walks_kernel[(ROWS,)](x, out, WIDTH, TILE, line, True, num_warps=16),
    }
    measure.check_calls({name: producers[name] for name in ("dt layernorm, hints", "dt layernorm, no hints")},
                        ref, "f32", "layernorm")
    measure.check_calls({name: producers[name] for name in (keep, demote)}, x.double() - x.double().mean(1, True),
                        "f32", "two walks", out)

    g = measure.generator(device, 5)

    def rand(*shape, dtype=torch.float32):
        return measure.random_tensor(shape, dtype, device, g)

    y, wy, by = rand(ROWS, WIDTH), rand(WIDTH), rand(WIDTH)
    a16, b16 = rand(4096, 4096, dtype=torch.float16), rand(4096, 4096, dtype=torch.float16)
    ln = torch.nn.functional.layer_norm
    compiled = torch.compile(lambda t: ln(t, (WIDTH,), wy, by, EPS))
    consumers = {
        "the producers' rows: eager sum": lambda: x.sum(),
        "eager layer_norm 128x65536 f32": lambda: ln(y, (WIDTH,), wy, by, EPS),
        "eager softmax 128x65536 f32": lambda: torch.softmax(y, 1),
        "torch.compile layer_norm 128x65536 f32": lambda: compiled(y),
        "cuBLAS matmul 4096^3 f16": lambda: a16 @ b16,
    }
    for call in consumers.values():
        call()
    do_bench, cold = measure.Timer("do_bench"), measure.Timer("cold")
    times = {(p, c): [] for p in producers for c in consumers}
    for _ in range(args.rounds):
        for producer, call in producers.items():
            for consumer, run in consumers.items():  # each after its own producer run: no consumer's kept lines
                measure.synchronize(device)
                measure.reset_persisting_l2()
                if call is not None:
                    call()
                    measure.synchronize(device)
                times[producer, consumer].append(do_bench(run))
    measure.synchronize(device)
    measure.reset_persisting_l2()
    own = cold.rounds({p: c for p, c in producers.items() if c is not None}, args.rounds)
    records = [dict(producer=p, consumer=c, rounds_ms=ms, ms=statistics.median(ms)) for (p, c), ms in times.items()]
    records += [dict(producer=p, consumer=None, rounds_ms=ms, ms=statistics.median(ms)) for p, ms in own.items()]
    for record in records:
        print(record, flush=True)
    measure.write_study(args.out, "l2_pinning", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    consumers = list(dict.fromkeys(r["consumer"] for r in records if r["consumer"]))
    producers = list(dict.fromkeys(r["producer"] for r in records))
    ms = {(r["producer"], r["consumer"]): r for r in records}
    rows = []
    for p in producers:
        cells = []
        for c in consumers:
            r, base = ms[p, c], ms["nothing", c]
            cells.append(f"{r['ms']:.4f} ({r['ms'] / base['ms']:.2f}x; "
                         f"{' / '.join(f'{t:.4f}' for t in r['rounds_ms'])})")
        own = ms.get((p, None))
        rows.append([p, *cells, "" if own is None else f"{own['ms']:.4f}"])
    return "\n".join(["# What kept L2 lines cost the kernels after them: a measurement", "",
                      measure.provenance(run, "l2_pinning.py")
                      + " (its docstring describes producers and consumers). Each cell: the consumer's "
                      "`triton.testing.do_bench` median in ms, timed right after the producer ran once (the kept "
                      "lines demoted before it), the ratio to the same consumer after no producer, and each "
                      "round's time; the last column is the producer's own time (cold timer, median of the "
                      "rounds).", "",
                      *render.markdown_table(["producer", *(f"{c} ms" for c in consumers), "producer ms"], rows),
                      ""])


if __name__ == "__main__":
    sys.exit(main())
