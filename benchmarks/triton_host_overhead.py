"""Host overhead per call of dt's Triton launcher against hand-written Triton launches.

The talk's scaled addition (examples/add.dt) at a tiny shape, so that the GPU finishes each
kernel long before the host issues the next and wall time per call is host time. Calls are
issued back to back without synchronising (as in a model), then the device is synchronised.

    triton launch        add_out_kernel[grid](...) with every argument precomputed: the floor
                         (Triton's own launch cost)
    hand-written         a tutorial-style Triton kernel with a minimal wrapper (torch.empty_like,
                         grid, launch): what a user would write by hand
    dt launcher          the public function of the module dt generates (input checks, extents
                         from shapes, allocation, grid, launch)
    dt Program           prog(A=..., B=..., alpha=...): dt's runtime (argument binding, extent
                         inference, dtype dispatch) around the dt launcher, whose launches it
                         replays on repeat calls (dt/backends/triton/replay.py)
    dt Program out=      the same writing into a preallocated output (out=): its checks, and
                         the replay of a call with that output given

Usage:
    python benchmarks/triton_host_overhead.py [--calls N] [--repeats R] [--shape X Y] [--out DIR]

with --out, writes DIR/triton_host_overhead.json (committed in benchmarks/results/).

On a GPU machine run it as is. Without a GPU, TRITON_INTERPRET=1 runs it through Triton's
interpreter: the kernel then executes on the host, so the numbers only show the script works.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # dt from this checkout when it is not installed

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import dt  # noqa: E402
from dt.backends import triton as triton_backend  # noqa: E402
from dt.backends.base import BackendUnavailable  # noqa: E402
from dt.backends.pysource import load_module  # noqa: E402


@triton.jit
def hand_add_kernel(a_ptr, b_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * (a + b), mask=mask)


def hand_add(a, b, alpha):
    out = torch.empty_like(a)
    n = a.numel()
    hand_add_kernel[(triton.cdiv(n, 256),)](a, b, out, alpha, n, BLOCK=256)
    return out


def per_call_us(fn, calls: int, repeats: int, sync) -> float:
    """Median over `repeats` of the mean wall time of `calls` back-to-back calls, in µs."""
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None,
                        help="calls per sample (default 2000 on a GPU, 5 interpreted)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shape", type=int, nargs=2, default=(1, 256), metavar=("X", "Y"))
    parser.add_argument("--out", metavar="DIR", help="also write DIR/triton_host_overhead.json")
    args = parser.parse_args(argv)

    try:
        device = triton_backend.device()
    except BackendUnavailable as e:
        parser.error(f"{e}: {e.hint}")
    interpret = device == "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    calls = args.calls or (5 if interpret else 2000)

    prog = dt.load(ROOT / "examples" / "add.dt")
    pipeline = prog.pipeline("f32")
    module = dt.backends.get("triton").module(pipeline)
    generated = load_module(module.source, "add (host overhead)", {"__name__": "dt_add_overhead"})
    x, y = args.shape
    a = torch.randn(x, y, device=device)
    b = torch.randn(x, y, device=device)
    alpha = 0.5

    kernel = generated["add_out_kernel"]
    out = torch.empty_like(a)
    launch_args = (a, *a.stride(), b, *b.stride(), out, *out.stride(), alpha, x, y)
    grid = (x * triton.cdiv(y, 256),)
    launcher = generated[module.function]
    given = torch.empty_like(a)

    cases = [
        ("triton launch", lambda: kernel[grid](*launch_args)),
        ("hand-written", lambda: hand_add(a, b, alpha)),
        ("dt launcher", lambda: launcher(a, b, alpha)),
        ("dt Program", lambda: prog(backend="triton", A=a, B=b, alpha=alpha)),
        ("dt Program out=", lambda: prog(backend="triton", A=a, B=b, alpha=alpha, out=given)),
    ]
    expected = alpha * (a + b)
    for name, fn in cases[1:]:
        torch.testing.assert_close(fn(), expected, msg=f"{name} computes a different sum")
    assert cases[-1][1]() is given, "out= returned another tensor than the one given"

    results = [{"case": name, "us_per_call": per_call_us(fn, calls, args.repeats, sync)} for name, fn in cases]
    floor = results[0]["us_per_call"]
    hand = results[1]["us_per_call"]
    where = "Triton interpreter (CPU)" if interpret else torch.cuda.get_device_name()
    print(f"host time per call, add.dt at x={x}, y={y} f32 on {where} "
          f"(median of {args.repeats} x {calls} calls)")
    print(f"{'case':<16}{'us/call':>10}{'vs launch':>12}{'vs hand-written':>18}")
    for r in results:
        r["over_launch_us"] = r["us_per_call"] - floor
        r["over_hand_written_us"] = r["us_per_call"] - hand
        print(f"{r['case']:<16}{r['us_per_call']:>10.1f}{r['over_launch_us']:>+12.1f}"
              f"{r['over_hand_written_us']:>+18.1f}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        record = {"device": where, "shape": [x, y], "calls": calls, "repeats": args.repeats, "results": results}
        (out / "triton_host_overhead.json").write_text(json.dumps(record, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
