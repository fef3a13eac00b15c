"""How close can Triton itself get to cuBLAS on a 4096^3 matmul on this GPU?

A measurement, not a DT feature: dt's matmul reaches 93-95% of cuBLAS at 4096^3. This times
hand-written Triton matmuls of the same tile shapes four ways: pointer loads (what dt
generates), TMA tensor descriptors, persistent programs over TMA, and persistent programs
with Triton's warp specialization. If none beats the pointer version, the gap to cuBLAS is
Triton's, not a schedule primitive DT lacks.

    python benchmarks/gpu/matmul_ceiling.py --out DIR

writes DIR/matmul_ceiling.json and DIR/matmul_ceiling.md (committed in benchmarks/results/).
"""
import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402


def _allocate(size: int, alignment: int, stream):
    """Scratch memory for the tensor descriptors the kernels create on the device."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


@triton.jit
def _tile(pid, nm, nn, G: tl.constexpr):
    """Program pid's (row, column) tile, in groups of G tile rows (the L2-friendly order)."""
    first = pid // (G * nn) * G
    size = min(nm - first, G)
    return first + (pid % (G * nn)) % size, (pid % (G * nn)) // size


@triton.jit
def matmul_pointers(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
    pm, pn = _tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), G)
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
def _tma_tile(A, B, C, pm, pn, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr):
    """C's (pm, pn) tile, its operands loaded and the result stored through TMA descriptors."""
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([pm * BM, k]), b_desc.load([k, pn * BN]), acc)
    c_desc.store([pm * BM, pn * BN], acc.to(C.dtype.element_ty))


@triton.jit
def matmul_tma(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, G: tl.constexpr):
    pm, pn = _tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), G)
    _tma_tile(A, B, C, pm, pn, M, N, K, BM, BN, BK)


@triton.jit
def matmul_tma_persistent(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
                          BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr, SMS: tl.constexpr, WS: tl.constexpr):
    nm, nn = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), nm * nn, SMS, flatten=True, warp_specialize=WS):
        pm, pn = _tile(tile, nm, nn, G)
        _tma_tile(A, B, C, pm, pn, M, N, K, BM, BN, BK)


CONFIGS = [(128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (256, 128, 64, 8, 3)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    triton.set_allocator(_allocate)
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
        cublas = timer(lambda: torch.matmul(a, b))
        records.append(dict(dtype=dtype_name, variant="cuBLAS (torch.matmul)", ms=cublas, pct_cublas=100.0))
        for BM, BN, BK, warps, stages in CONFIGS:
            grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
            options = dict(num_warps=warps, num_stages=stages)
            variants = (
                ("pointers", lambda: matmul_pointers[grid](a, b, c, M, N, K, BM, BN, BK, 8, **options)),
                ("TMA", lambda: matmul_tma[grid](a, b, c, M, N, K, BM, BN, BK, 8, **options)),
                ("persistent TMA", lambda: matmul_tma_persistent[(sms,)](a, b, c, M, N, K, BM, BN, BK, 8, sms, False,
                                                                        **options)),
                ("persistent TMA, warp-specialized", lambda: matmul_tma_persistent[(sms,)](
                    a, b, c, M, N, K, BM, BN, BK, 8, sms, True, **options)))
            for name, call in variants:
                record = dict(dtype=dtype_name, variant=f"{name}, {BM}x{BN}x{BK}, {warps} warps, {stages} stages")
                try:
                    call()
                    measure.synchronize(device)
                    record["rel_err"] = measure.relative_error(c, ref)
                    record["ms"] = timer(call)
                    record["pct_cublas"] = 100 * cublas / record["ms"]
                except Exception as e:  # e.g. a tile that needs more shared memory than the GPU has
                    record["error"] = measure.short_error(e)
                records.append(record)
                print(record, flush=True)
    measure.write_study(args.out, "matmul_ceiling", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Triton's own ceiling on a 4096^3 matmul: a measurement", "",
             measure.provenance(run, "matmul_ceiling.py")
             + " (its docstring describes the variants). Times are "
             "`triton.testing.do_bench` medians; % of cuBLAS is torch.matmul's time over the variant's, timed in "
             "the same run.", ""]
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
