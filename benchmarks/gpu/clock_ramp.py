"""Does the SM clock ramp up after the GPU idles?

A measurement of the harness's ground, not a DT feature. The schedule search and the
benchmark ranked whole-row softmax kernels 10-17% slow when they were timed first, while tiled
kernels timed later were not (docs/performance.md, "Lines kept in L2 through the flush"); a
clock ramping up after idle was the first explanation. This idles the GPU for a while, then
launches one kernel back to back for a few seconds, timing each batch of launches with CUDA
events and reading the SM clock (NVML) after each batch: whole-row and tiled dt schedules of
softmax_safe bf16 at 4096x4096, and a copy of twice the row's bytes (its source is as large as
the bytes the row moves). The launches come from Python, without a filled queue or an L2
flush, so the clock readings are the result; the batch times are only indicative.

    python benchmarks/gpu/clock_ramp.py --out DIR

writes DIR/clock_ramp.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
import space  # noqa: E402
from cases import cases  # noqa: E402

import dt  # noqa: E402

IDLE_S = (0.5, 2.0, 5.0)
RUN_S = 3.0
BATCH = 20  # launches per timed batch
MARKS_S = (0.05, 0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0)


def sm_clock_mhz(device: torch.device) -> int | None:
    try:
        return int(torch.cuda.clock_rate(device))
    except Exception:  # NVML missing: the times alone still show the ramp
        return None


def ramp(call, idle_s: float, device: torch.device) -> list[dict]:
    """After `idle_s` seconds of idle, batches of back-to-back launches for RUN_S seconds: each
    batch's start (seconds after the first launch), mean µs per launch and the SM clock."""
    torch.cuda.synchronize(device)
    time.sleep(idle_s)
    batches, start = [], time.perf_counter()
    while time.perf_counter() - start < RUN_S:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        at = time.perf_counter() - start
        begin.record()
        for _ in range(BATCH):
            call()
        end.record()
        end.synchronize()
        batches.append({"t_s": at, "us": 1e3 * begin.elapsed_time(end) / BATCH, "sm_mhz": sm_clock_mhz(device)})
    return batches


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    case = next(c for c in cases(["softmax_safe"], dtypes=["bf16"]) if c.shape == (4096, 4096))
    t = measure.case_inputs(case, device, seed=1)
    searched = dict(space.variants(case))
    calls = {}
    for name in ("rows1_w2", "tiled2048_w8"):
        program = dt.loads(searched[name], f"softmax_safe_{name}")
        calls[f"dt {name}"] = lambda program=program: program(backend="triton", **t)
    src = torch.empty(case.bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    calls["copy_ (twice the row's bytes)"] = lambda: dst.copy_(src)
    for call in calls.values():
        call()
    records = []
    for idle_s in IDLE_S:
        for name, call in calls.items():
            batches = ramp(call, idle_s, device)
            steady = statistics.median(b["us"] for b in batches if b["t_s"] >= RUN_S - 1.0)
            records.append(dict(shape=case.shape_text, dtype=case.dtype, variant=name, idle_s=idle_s,
                                steady_us=steady, batches=batches))
            print(name, idle_s, f"steady {steady:.2f} us; first {batches[0]['us']:.2f} us "
                  f"at {batches[0]['sm_mhz']} MHz", flush=True)
    measure.write_study(args.out, "clock_ramp", device, records, markdown)
    return 0


def _at(batches: list[dict], mark: float) -> dict:
    """The first batch that started at or after `mark` seconds."""
    return next((b for b in batches if b["t_s"] >= mark), batches[-1])


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Kernel speed and SM clock after idle: a measurement", "",
             measure.provenance(run, "clock_ramp.py")
             + f". After the idle named, each kernel is launched back to back for {RUN_S:.0f} s; each cell is "
             f"the batch ({BATCH} launches, CUDA events) that started at that many seconds: its time per "
             "launch relative to the steady time (the median of the last second), and the SM clock read "
             "through NVML after it.", ""]
    def batch(b: dict, steady_us: float) -> str:
        return f"{b['us'] / steady_us:.2f}x, {b['sm_mhz']} MHz"

    lines += render.markdown_table(
        ["kernel", "idle", "steady µs", "first batch"] + [f"{m:g} s" for m in MARKS_S],
        ([r["variant"], f"{r['idle_s']:g} s", f"{r['steady_us']:.2f}", batch(r["batches"][0], r["steady_us"])]
         + [batch(_at(r["batches"], m), r["steady_us"]) for m in MARKS_S] for r in records))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
