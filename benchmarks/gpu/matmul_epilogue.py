"""Would storing a matmul's result block in slices let it keep more tiles in flight?

A measurement behind a schedule option. dt's fastest 4096^3 matmul (persistent programs,
TMA, 128x256x64 tiles, 8 warps, 3 stages) stores each 128x256 result through a TMA
descriptor, which stages the whole block in shared memory (64 KiB in 16-bit): with it, a
fourth stage of operand tiles (48 KiB) does not fit in the H100's 227 KiB. Stored as two
128x128 or four 128x64 slices, the staging needs a half or a quarter of that. This times
hand-written persistent TMA matmuls (the loop over a program's blocks flattened into the k
loop, as dt generates them) storing in 1, 2 or 4 slices, at 3 and 4 stages, with and
without Triton's warp specialization, against cuBLAS and dt's tuned schedule, alternating.

    python benchmarks/gpu/matmul_epilogue.py --out DIR [--rounds 7]

writes DIR/matmul_epilogue.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
from cases import cases, schedule_for  # noqa: E402
from matmul_ceiling import _tile  # noqa: E402

import dt  # noqa: E402


@triton.jit
def _store_in_slices(c_desc, result, m, n, BM: tl.constexpr, BN: tl.constexpr, SLICES: tl.constexpr):
    """result (BM x BN) stored at (m, n) as SLICES column slices of BN // SLICES."""
    if SLICES == 1:
        c_desc.store([m, n], result.to(c_desc.dtype))
    else:
        left, right = tl.split(tl.permute(tl.reshape(result, (BM, 2, BN // 2)), (0, 2, 1)))
        if SLICES == 2:
            c_desc.store([m, n], left.to(c_desc.dtype))
            c_desc.store([m, n + BN // 2], right.to(c_desc.dtype))
        else:
            _store_in_slices(c_desc, left, m, n, BM, BN // 2, SLICES // 2)
            _store_in_slices(c_desc, right, m, n + BN // 2, BM, BN // 2, SLICES // 2)


@triton.jit
def matmul_tma_persistent(a_desc, b_desc, c_desc, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr,
                          SMS: tl.constexpr, SLICES: tl.constexpr, WS: tl.constexpr):
    nm, nn = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), nm * nn, SMS, flatten=True, warp_specialize=WS):
        pm, pn = _tile(tile, nm, nn, G)
        acc = tl.zeros([BM, BN], tl.float32)
        for k in range(0, K, BK):
            acc = tl.dot(a_desc.load([pm * BM, k]), b_desc.load([k, pn * BN]), acc)
        _store_in_slices(c_desc, acc, pm * BM, pn * BN, BM, BN, SLICES)


# (BM, BN, BK, warps, stages, slices)
CONFIGS = [(128, 256, 64, 8, stages, slices) for stages in (3, 4) for slices in (1, 2, 4)] + [
    (256, 128, 64, 8, stages, slices) for stages in (3, 4) for slices in (2, 4)]


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__, rounds=7)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    records = []
    for case in cases(["matmul"]):
        if case.shape != (4096, 4096, 4096):
            continue
        M, N, K = case.shape
        t = measure.case_inputs(case, device, seed=1)
        a, b = t["A"], t["B"]
        c = torch.empty(M, N, device=device, dtype=a.dtype)
        ref = a.double() @ b.double()
        program = dt.load(schedule_for(case))
        calls = {"cuBLAS (torch.matmul)": lambda: torch.matmul(a, b),
                 f"dt ({schedule_for(case).stem})": lambda: program(backend="triton", A=a, B=b)}
        errors, failed = {}, {}

        def check(name, out):
            errors[name] = measure.relative_error(out, ref)
            if not errors[name] <= measure.TOLERANCE[case.dtype]:  # NaN fails too
                raise AssertionError(f"{case.title}: {name} is wrong (relative error {errors[name]:.3g})")

        for name, call in calls.items():
            check(name, call())
        for BM, BN, BK, warps, stages, slices in CONFIGS:
            boxes = [TensorDescriptor.from_tensor(x, box) for x, box in ((a, [BM, BK]), (b, [BK, BN]),
                                                                         (c, [BM, BN // slices]))]
            for ws in (False, True):
                name = (f"{BM}x{BN}x{BK}, {stages} stages, {slices} slice{'s' if slices > 1 else ''}"
                        + (", warp-specialized" if ws else ""))

                def call(boxes=boxes, BM=BM, BN=BN, BK=BK, slices=slices, ws=ws, warps=warps, stages=stages):
                    matmul_tma_persistent[(sms,)](*boxes, M, N, K, BM, BN, BK, 8, sms, slices, ws,
                                                  num_warps=warps, num_stages=stages)
                    return c
                c.fill_(float("nan"))
                try:
                    out = call()
                except Exception as e:  # e.g. more shared memory than the GPU has
                    failed[name] = measure.short_error(e)
                    measure.empty_cache(device)
                    continue
                check(name, out)
                calls[name] = call
        times = timer.rounds(calls, args.rounds)
        cublas = times["cuBLAS (torch.matmul)"]
        for name, ms in times.items():
            records.append(dict(shape=case.shape_text, dtype=case.dtype, variant=name, rounds_ms=ms,
                                ms=statistics.median(ms), rel_err=errors[name],
                                pct_cublas=100 * statistics.median(base / v for base, v in zip(cublas, ms))))
        records += [dict(shape=case.shape_text, dtype=case.dtype, variant=name, error=error)
                    for name, error in failed.items()]
        for record in records[-len(calls) - len(failed):]:
            print(record, flush=True)
    measure.write_study(args.out, "matmul_epilogue", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# A matmul's result stored in slices: a measurement", "",
             measure.provenance(run, "matmul_epilogue.py")
             + " (its docstring describes the variants). Times are `triton.testing.do_bench` medians, then the "
             f"median over {len(records[0]['rounds_ms'])} round-robin rounds (each timing every variant once); "
             "% of cuBLAS is the median over the rounds of torch.matmul's time over the variant's in the same round, "
             "its range over the rounds in brackets. Every hand-written variant is a persistent TMA kernel "
             "with 8 warps whose loop over the program's blocks is flattened into the k loop, as dt generates it.",
             ""]
    for (shape, dtype), rows in measure.by_row(records, "shape", "dtype").items():
        lines += [f"## {shape}, {dtype}", ""]
        timed = sorted((r for r in rows if "ms" in r), key=lambda r: r["ms"])
        cublas = next(r for r in rows if r["variant"].startswith("cuBLAS"))["rounds_ms"]
        body = []
        for r in timed:
            ratios = [100 * base / v for base, v in zip(cublas, r["rounds_ms"])]
            body.append([r["variant"], f"{r['ms']:.4f}", f"{r['pct_cublas']:.1f}% ({min(ratios):.0f}-{max(ratios):.0f})",
                         f"{r['rel_err']:.1e}"])
        body += [[r["variant"], r["error"], "", ""] for r in rows if "error" in r]
        lines += render.markdown_table(["variant", "ms", "% of cuBLAS", "rel. error"], body)
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
