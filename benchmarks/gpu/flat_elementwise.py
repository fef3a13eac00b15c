"""Would a flat (1-D) walk make dt's element-wise kernels faster on rows of odd width?

A measurement, not a DT feature. dt's element-wise kernels walk 2-D blocks: at 4096x1000, a
tile spanning a row is padded to 1024 lanes and masked, and blocks of 512 columns leave a
second, shorter block per row. Inductor flattens a contiguous element-wise kernel into one
index over all 4096000 elements, which 1024-lane blocks divide. This times dt's tuned `add`
against hand-written flat Triton kernels of the same arithmetic (several block sizes and
warp counts) and torch.compile max-autotune (Inductor's own flat kernel, its block size
searched), alternating, at an odd width and at 4096x4096 and 4096x8192, cold (each run after
an L2 flush, as bench.py times memory-bound rows).

    python benchmarks/gpu/flat_elementwise.py --out DIR [--rounds 5]

writes DIR/flat_elementwise.json and .md (committed in benchmarks/results/).
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

SHAPES = ((4096, 1000), (4096, 4096), (4096, 8192))
MAX_AUTOTUNE = "torch.compile max-autotune"
CONFIGS = [(block, warps) for block in (512, 1024, 2048, 4096) for warps in (2, 4, 8) if block // (32 * warps) >= 2]


@triton.jit
def flat_add(a_ptr, b_ptr, out_ptr, alpha, N: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (alpha * (a + b)).to(out_ptr.dtype.element_ty), mask=mask)


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__, rounds=5)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("cold")
    records = []
    for case in cases(["add"]):
        if case.shape not in SHAPES:
            continue
        t = measure.case_inputs(case, device, seed=1)
        alpha = case.kernel.scalars["alpha"]
        program = dt.load(schedule_for(case))
        calls = {f"dt ({schedule_for(case).stem})": lambda: program(backend="triton", **t, alpha=alpha)}
        expected = next(iter(calls.values()))()
        torch._dynamo.reset()  # each shape compiles once, statically, as in bench.py
        compiled = torch.compile(case.kernel.torch_fn, mode="max-autotune-no-cudagraphs")
        calls[MAX_AUTOTUNE] = lambda: compiled(**t, alpha=alpha)
        if measure.relative_error(calls[MAX_AUTOTUNE](), expected.double()) > measure.TOLERANCE[case.dtype]:
            raise AssertionError(f"{case.title}: max-autotune's output differs from dt's")
        out = torch.empty_like(t["A"])
        n = t["A"].numel()
        for block, warps in CONFIGS:
            calls[f"flat, {block} lanes, {warps} warps"] = (
                lambda block=block, warps=warps: flat_add[(triton.cdiv(n, block),)](
                    t["A"], t["B"], out, alpha, n, block, num_warps=warps))
            calls[f"flat, {block} lanes, {warps} warps"]()
            if not torch.equal(out, expected):
                raise AssertionError(f"{case.title}: the flat kernel ({block}, {warps}) differs from dt's")
        records += measure.timed_variants(timer, device, case, calls, args.rounds)
    measure.write_study(args.out, "flat_elementwise", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# A flat walk for element-wise kernels: a measurement", "",
             measure.provenance(run, "flat_elementwise.py")
             + ". `add` (alpha * (A + B)): dt's tuned schedule and hand-written "
             "flat Triton kernels and torch.compile max-autotune, timed in alternation with a device-to-device copy "
             "moving the kernel's bytes; times are medians over the rounds of cold medians (do_bench's method, every "
             "run after an L2 flush); % of same-size copy compares with that copy. Every flat kernel's output "
             "equals dt's bit for bit, max-autotune's is within the benchmark's tolerance of it.", ""]
    for (shape, dtype), rows in measure.by_row(records, "shape", "dtype").items():
        dt_ms = rows[0]["ms"]
        lines += [f"## {shape}, {dtype}", ""]
        lines += render.markdown_table(["variant", "ms", "% of same-size copy", "speed-up over dt"],
                                       ([r["variant"], f"{r['ms']:.5f}", f"{r['pct_copy_same']:.1f}%",
                                         f"{dt_ms / r['ms']:.3f}x"] for r in sorted(rows, key=lambda r: r["ms"])))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
