"""How close can Triton itself get to cuBLAS on a 4096^3 matmul on this GPU?

A measurement behind DT's launch hints: with pointer loads dt's matmul reached 93-95% of
cuBLAS at 4096^3. This times hand-written Triton matmuls of the same tile shapes several ways:
pointer loads (what dt generates without hints), TMA tensor descriptors, persistent programs
over pointers (the loop over a program's tiles flattened into the k loop or not), persistent
programs over TMA (the same two ways; with descriptors made on the host and flattened, what
`persistent()` and `tma()` generate), and persistent TMA with Triton's warp specialization.

    python benchmarks/gpu/matmul_ceiling.py --out DIR [--rounds N]

writes DIR/matmul_ceiling.json and DIR/matmul_ceiling.md (committed in benchmarks/results/).
"""
import argparse
import statistics
import sys
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402


@triton.jit
def _tile(pid, nm, nn, G: tl.constexpr):
    """Program pid's (row, column) tile, in groups of G tile rows (the L2-friendly order)."""
    first = pid // (G * nn) * G
    size = min(nm - first, G)
    return first + (pid % (G * nn)) % size, (pid % (G * nn)) // size


@triton.jit
def _pointer_tile(A, B, C, pm, pn, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr):
    """C's (pm, pn) tile through masked pointer loads and stores."""
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_pointers(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
    pm, pn = _tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), G)
    _pointer_tile(A, B, C, pm, pn, M, N, K, BM, BN, BK)


@triton.jit
def matmul_pointers_persistent(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
                               BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr, SMS: tl.constexpr,
                               FLAT: tl.constexpr):
    nm, nn = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), nm * nn, SMS, flatten=FLAT):
        pm, pn = _tile(tile, nm, nn, G)
        _pointer_tile(A, B, C, pm, pn, M, N, K, BM, BN, BK)


@triton.jit
def _tma_tile(a_desc, b_desc, c_desc, pm, pn, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C's (pm, pn) tile, its operands loaded and the result stored through TMA descriptors."""
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([pm * BM, k]), b_desc.load([k, pn * BN]), acc)
    c_desc.store([pm * BM, pn * BN], acc.to(c_desc.dtype))


@triton.jit
def matmul_tma(a_desc, b_desc, c_desc, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
    pm, pn = _tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), G)
    _tma_tile(a_desc, b_desc, c_desc, pm, pn, K, BM, BN, BK)


@triton.jit
def matmul_tma_persistent(a_desc, b_desc, c_desc, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr, SMS: tl.constexpr,
                          FLAT: tl.constexpr, WS: tl.constexpr):
    nm, nn = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), nm * nn, SMS, flatten=FLAT, warp_specialize=WS):
        pm, pn = _tile(tile, nm, nn, G)
        _tma_tile(a_desc, b_desc, c_desc, pm, pn, K, BM, BN, BK)


CONFIGS = [(128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (256, 128, 64, 8, 3)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3, help="each times every variant once (default 3)")
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    records = []
    M = N = K = 4096
    for dtype_name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        generator = measure.generator(device, 3)
        a = measure.random_tensor((M, K), dtype, device, generator)
        b = measure.random_tensor((K, N), dtype, device, generator)
        c = torch.empty(M, N, device=device, dtype=dtype)
        ref = a.double() @ b.double()
        calls = {"cuBLAS (torch.matmul)": lambda: torch.matmul(a, b)}
        for BM, BN, BK, warps, stages in CONFIGS:
            grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
            options = dict(num_warps=warps, num_stages=stages)
            # Host-made descriptors, as dt's launchers make them.
            boxes = [TensorDescriptor.from_tensor(t, box) for t, box in ((a, [BM, BK]), (b, [BK, BN]), (c, [BM, BN]))]
            tag = f"{BM}x{BN}x{BK}, {warps} warps, {stages} stages"
            calls.update({
                f"pointers, {tag}": partial(matmul_pointers[grid], a, b, c, M, N, K, BM, BN, BK, 8, **options),
                f"TMA, {tag}": partial(matmul_tma[grid], *boxes, M, N, K, BM, BN, BK, 8, **options),
                f"persistent pointers, {tag}": partial(matmul_pointers_persistent[(sms,)], a, b, c, M, N, K, BM, BN,
                                                       BK, 8, sms, False, **options),
                f"persistent pointers, flattened, {tag}": partial(matmul_pointers_persistent[(sms,)], a, b, c, M, N,
                                                                  K, BM, BN, BK, 8, sms, True, **options),
                f"persistent TMA, {tag}": partial(matmul_tma_persistent[(sms,)], *boxes, M, N, K, BM, BN, BK, 8, sms,
                                                  False, False, **options),
                f"persistent TMA, flattened, {tag}": partial(matmul_tma_persistent[(sms,)], *boxes, M, N, K, BM, BN,
                                                             BK, 8, sms, True, False, **options),
                f"persistent TMA, flattened, warp-specialized, {tag}": partial(
                    matmul_tma_persistent[(sms,)], *boxes, M, N, K, BM, BN, BK, 8, sms, True, True, **options)})
        found, runs = {}, {}
        for name, call in calls.items():
            record = found[name] = dict(dtype=dtype_name, variant=name)
            try:
                out = call()
                measure.synchronize(device)
                record["rel_err"] = measure.relative_error(out if name.startswith("cuBLAS") else c, ref)
                runs[name] = call
            except Exception as e:  # e.g. a tile that needs more shared memory than the GPU has
                record["error"] = measure.short_error(e)
        times = timer.rounds(runs, args.rounds)
        cublas = statistics.median(times["cuBLAS (torch.matmul)"])
        for name, record in found.items():
            if name in times:
                record.update(ms=statistics.median(times[name]), rounds=times[name])
                record["pct_cublas"] = 100 * cublas / record["ms"]
            records.append(record)
            print(record, flush=True)
    measure.write_study(args.out, "matmul_ceiling", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Triton's own ceiling on a 4096^3 matmul: a measurement", "",
             measure.provenance(run, "matmul_ceiling.py")
             + " (its docstring describes the variants). Times are "
             f"`triton.testing.do_bench` medians, then the median of {len(records[0]['rounds'])} round-robin rounds "
             "(each timing every variant once); % of cuBLAS is torch.matmul's time over the variant's, timed in the "
             "same rounds.", ""]
    for dtype_name in ("f16", "bf16"):
        lines += [f"## {dtype_name}", "", "| variant | ms | % of cuBLAS | rel. error |", "|---|---|---|---|"]
        for r in records:
            if r["dtype"] == dtype_name:
                lines.append(f"| {r['variant']} | " + (f"{r['ms']:.4f} | {r['pct_cublas']:.0f}% | "
                             f"{r.get('rel_err', 0):.1e} |" if "ms" in r else f"{r['error']} | | |"))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
