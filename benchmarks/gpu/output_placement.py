"""Does where the output lands in memory change a row-wise kernel's time?

A measurement, not a DT feature. The same whole-row softmax has timed 0.0243 ms in one
process and 0.0274 ms in another, and dt's row-wise kernels ran 5% slower after the first
round of a study while Liger's did not (benchmarks/results/memory_hints.md). Every call
allocates its output, so the caching allocator decides its address. This places the output
at chosen offsets in one pool (the input fixed), and times, alternating, at each offset:
dt's generated kernels (tuned and whole-row schedules), Liger's single-block kernel and a
Triton copy moving the same bytes. It also records each kernel's registers and spills.

    python benchmarks/gpu/output_placement.py --out DIR [--rounds 3]

writes DIR/output_placement.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
import space  # noqa: E402
from cases import cases  # noqa: E402
from memory_hints import copy_kernel, liger_single_block  # noqa: E402

import dt  # noqa: E402
from dt.backends.pysource import load_module  # noqa: E402
from dt.runtime import resolve_backend  # noqa: E402

# (shape, dtype, schedules of tune.py's space): a row walked in tiles, and whole rows
ROWS = (((4096, 4096), "bf16", ("tiled2048_w8", "rows1_w8")), ((4096, 4096), "f32", ("rows1_w2", "rows1_w8")),
        ((4096, 8192), "bf16", ("tiled4096_w16", "rows1_w16")))
OFFSETS_MB = (0, 1 / 256, 0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


class PlacedTorch:
    """The `torch` a generated launcher sees: `empty` returns the placed output."""

    def __init__(self):
        self.output = None

    def empty(self, *args, **kwargs):
        return self.output

    def __getattr__(self, name):
        return getattr(torch, name)


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__, rounds=3)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    backend = resolve_backend("triton")
    from liger_kernel.ops.softmax import _softmax_single_block_forward_kernel
    records, seen = [], set()
    for shape, dtype, schedules in ROWS:
        case = next(c for c in cases(["softmax_safe"], dtypes=[dtype]) if c.shape == shape)
        A = measure.case_inputs(case, device, seed=1)["A"]
        n = A.numel()
        pool = torch.empty(n + (32 << 20) // A.element_size() + 4096, dtype=A.dtype, device=device)
        programs = {f"dt {name}": dt.loads(dict(space.variants(case))[name], f"softmax_safe_{name}")
                    for name in schedules}
        placed = PlacedTorch()
        calls, kernels = {}, {}
        for label, prog in programs.items():
            namespace = load_module(prog.source(backend, dtype), f"{prog.name}_{dtype}")
            namespace["torch"] = placed
            calls[label] = lambda launcher=namespace[prog.pipeline(dtype).name]: launcher(A)
            kernels[label] = namespace["_softmax_kernel"]
        calls["Liger's kernel"] = lambda: liger_single_block(A, placed.output)
        kernels["Liger's kernel"] = _softmax_single_block_forward_kernel
        calls["Triton copy"] = lambda: copy_kernel[(triton.cdiv(n, 2048),)](A, placed.output, n, 2048, "", num_warps=4)
        kernels["Triton copy"] = copy_kernel
        for offset_mb in OFFSETS_MB:
            start = int(offset_mb * (1 << 20)) // A.element_size()
            placed.output = pool[start:start + n].view(shape)
            expected = None
            for label, call in calls.items():
                out = call()
                if label.startswith("dt") or label.startswith("Liger"):
                    expected = out.clone() if expected is None else expected
                    if measure.relative_error(out, expected.double()) > measure.TOLERANCE[dtype]:
                        raise AssertionError(f"{case.title}: {label} differs at offset {offset_mb} MB")
            for label, ms in timer.rounds(calls, args.rounds).items():
                records.append(dict(shape=case.shape_text, dtype=dtype, kernel=label, offset_mb=offset_mb,
                                    rounds_ms=ms, ms=statistics.median(ms)))
                print(records[-1], flush=True)
        for label, kernel in kernels.items():
            cache = kernel.device_caches[torch.cuda.current_device()][0]
            for key in [k for k in cache if (id(kernel), k) not in seen]:  # compiled for this row only
                seen.add((id(kernel), key))
                compiled = cache[key]
                records.append(dict(shape=case.shape_text, dtype=dtype, kernel=label,
                                    registers=getattr(compiled, "n_regs", None), spills=getattr(compiled, "n_spills", None)))
    measure.write_study(args.out, "output_placement", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Where the output lands: a measurement", "",
             measure.provenance(run, "output_placement.py")
             + ". softmax_safe's kernels with the output placed at each offset (MB) into one pool, the input "
             "fixed; times are medians over rounds of `triton.testing.do_bench` medians (L2 flushed before "
             "each run), in µs.", ""]
    for (shape, dtype), rows in measure.by_row(records, "shape", "dtype").items():
        timed = [r for r in rows if "ms" in r]
        labels = list(dict.fromkeys(r["kernel"] for r in timed))
        offsets = list(dict.fromkeys(r["offset_mb"] for r in timed))
        ms = {(r["kernel"], r["offset_mb"]): r["ms"] for r in timed}
        spread = [max(ms[label, o] for o in offsets) / min(ms[label, o] for o in offsets) for label in labels]
        lines += [f"## {shape}, {dtype}", ""]
        lines += render.markdown_table(["offset MB"] + labels,
                                       [[f"{o:g}"] + [f"{1000 * ms[label, o]:.2f}" for label in labels] for o in offsets]
                                       + [["slowest / fastest"] + [f"{s:.3f}" for s in spread]])
        lines += ["", "Registers and spills: " + "; ".join(
            f"{r['kernel']} {r['registers']} ({r['spills']} spilled)" for r in rows if "registers" in r), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
