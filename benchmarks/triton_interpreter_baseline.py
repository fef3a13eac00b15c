"""Baseline: Triton's CPU interpreter on two hand-written Triton kernels.

Times idiomatic Triton kernels (f32 matmul 512^3, row softmax 1024x4096)
run through Triton's interpreter (TRITON_INTERPRET=1) on torch CPU tensors,
so dt's CPU numbers have a reference point.

Usage:
    python benchmarks/triton_interpreter_baseline.py [--repeats N] [--json PATH]
"""

import os

# The interpreter is selected when triton is imported, so this must come first.
os.environ["TRITON_INTERPRET"] = "1"
# The interpreter runs each tl.dot as a tiny numpy matmul (128x32 @ 32x128);
# multi-threaded OpenBLAS only adds thread hand-off cost there, and on small
# VMs makes timings several times slower and very noisy. Must be set before
# numpy loads; export OPENBLAS_NUM_THREADS yourself to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from dt.backends.triton.interpreter_fix import apply as apply_interpreter_fixes  # noqa: E402

PROVIDER = "triton-interpreter"


# Triton 3.6's interpreter cannot use a runtime kernel argument as a range() bound with
# NumPy >= 2.4 (triton-lang/triton#9171); dt's backend carries upstream's fix (#9172).
apply_interpreter_fixes()

MATMUL_M = MATMUL_N = MATMUL_K = 512
SOFTMAX_ROWS, SOFTMAX_COLS = 1024, 4096


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Grouped ordering: consecutive programs walk down GROUP_M block-rows
    # before moving right, so tiles of B are reused while still in cache.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_remaining = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_remaining), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_remaining) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc, mask=c_mask)


@triton.jit
def softmax_kernel(
    out_ptr, in_ptr,
    n_rows, n_cols,
    stride_in_row, stride_out_row,
    BLOCK_X: tl.constexpr, BLOCK_Y: tl.constexpr,
):
    # softmax[x, y] = exp(A[x, y]) / sum_y exp(A[x, y])  (no max subtraction)
    rows = tl.program_id(axis=0) * BLOCK_X + tl.arange(0, BLOCK_X)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_Y)
    in_rows = in_ptr + rows[:, None] * stride_in_row
    out_rows = out_ptr + rows[:, None] * stride_out_row

    # Pass 1: per-row sum of exp over column tiles.
    acc = tl.zeros((BLOCK_X, BLOCK_Y), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_Y):
        c = start + cols
        mask = row_mask[:, None] & (c[None, :] < n_cols)
        # Padding with -inf makes exp() contribute exactly 0 to the sum.
        x = tl.load(in_rows + c[None, :], mask=mask, other=float("-inf"))
        acc += tl.exp(x)
    denom = tl.sum(acc, axis=1)

    # Pass 2: normalise and write out.
    for start in range(0, n_cols, BLOCK_Y):
        c = start + cols
        mask = row_mask[:, None] & (c[None, :] < n_cols)
        x = tl.load(in_rows + c[None, :], mask=mask, other=0.0)
        tl.store(out_rows + c[None, :], tl.exp(x) / denom[:, None], mask=mask)


# ---------------------------------------------------------------------------
# Launchers (importable by other benchmark code)
# ---------------------------------------------------------------------------


def run_matmul(a, b, *, block_m=128, block_n=128, block_k=32, group_m=8):
    """C = A @ B for 2-D float32 torch tensors, via the Triton matmul kernel."""
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0]
    assert a.dtype == b.dtype == torch.float32
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
    )
    return c


def run_softmax(a, *, block_x=4, block_y=512):
    """Row softmax (without max subtraction) of a 2-D float32 torch tensor."""
    assert a.ndim == 2 and a.dtype == torch.float32
    # Kernel assumes unit column stride.
    a = a.contiguous()
    n_rows, n_cols = a.shape
    out = torch.empty_like(a)
    grid = (triton.cdiv(n_rows, block_x),)
    # Rows past the end (when n_rows % block_x != 0) have sum 0 and compute
    # 1/0 in lanes that are masked off at the store; numpy would warn about it.
    with np.errstate(divide="ignore", invalid="ignore"):
        softmax_kernel[grid](
            out, a,
            n_rows, n_cols,
            a.stride(0), out.stride(0),
            BLOCK_X=block_x, BLOCK_Y=block_y,
        )
    return out


# ---------------------------------------------------------------------------
# Correctness checks
# ---------------------------------------------------------------------------


def check_matmul(a, b, c):
    ref = torch.matmul(a.double(), b.double())
    err = (c.double() - ref).abs().max().item()
    tol = 1e-4 * ref.abs().max().item()
    if not err <= tol:
        raise AssertionError(f"matmul mismatch: max abs err {err:.3e} > tol {tol:.3e}")


def check_softmax(a, out):
    ref = torch.exp(a) / torch.exp(a).sum(dim=1, keepdim=True)
    if not torch.allclose(out, ref, rtol=1e-4, atol=1e-5):
        err = (out - ref).abs().max().item()
        raise AssertionError(f"softmax mismatch: max abs err {err:.3e}")


# ---------------------------------------------------------------------------
# Timing / reporting
# ---------------------------------------------------------------------------


def cpu_description():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return f"{model}, {cores} cores"


def time_ms(fn, repeats):
    """One warm-up call (also triggers kernel setup), then median of `repeats` calls."""
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", "-n", type=int, default=3,
                        help="timed calls per kernel after one warm-up (default: 3)")
    parser.add_argument("--json", metavar="PATH", help="write results as a JSON list")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    torch.manual_seed(0)
    a = torch.randn(MATMUL_M, MATMUL_K, dtype=torch.float32)
    b = torch.randn(MATMUL_K, MATMUL_N, dtype=torch.float32)
    x = torch.randn(SOFTMAX_ROWS, SOFTMAX_COLS, dtype=torch.float32)

    check_matmul(a, b, run_matmul(a, b))
    check_softmax(x, run_softmax(x))

    device = cpu_description()
    cases = [
        ("matmul", f"{MATMUL_M}x{MATMUL_N}x{MATMUL_K}", lambda: run_matmul(a, b)),
        ("softmax", f"{SOFTMAX_ROWS}x{SOFTMAX_COLS}", lambda: run_softmax(x)),
    ]
    records = []
    for kernel, shape, fn in cases:
        ms = time_ms(fn, args.repeats)
        records.append({
            "kernel": kernel,
            "shape": shape,
            "dtype": "f32",
            "provider": PROVIDER,
            "ms": ms,
            "device": device,
        })

    print(f"device: {device}   OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}   "
          f"(median of {args.repeats} after 1 warm-up)")
    print(f"{'kernel':<10}{'shape':<14}{'dtype':<7}{'provider':<22}{'ms':>12}")
    for r in records:
        print(f"{r['kernel']:<10}{r['shape']:<14}{r['dtype']:<7}{r['provider']:<22}{r['ms']:>12.2f}")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
            f.write("\n")
    return records


if __name__ == "__main__":
    main()
