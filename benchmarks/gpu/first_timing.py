"""What makes whole-row kernels time slow at first?

A measurement of the harness's ground, not a DT feature. In the schedule search, whole-row
schedules (a row's load, reductions and store in one program) screened 5-17% slower in their
first round-robin round than in the second, while tiled schedules timed between them did not
move. A rising SM clock was ruled out (clock_ramp.py), and so was time: timing the first
schedule for 1.5 s first changed nothing.

This replays the search's steps for one row (softmax_safe bf16 at 4096x4096) in a fresh
process per scenario: the inputs and the float64 reference, the check of a whole-row and a
tiled schedule, then timings of the whole-row one (`triton.testing.do_bench` as the search
called it), something else in between, and the whole-row one again. Each scenario names what
runs in between; the one that makes the second timings fast points at the cause: the lines the
tiled schedule reads with `evict_last` stay in L2 through do_bench's flush (docs/performance.md,
"Lines kept in L2 through the flush"). Steps named "reset" time with measure.cold_bench, which
demotes those lines before each run. Every timing records where the kernel's output and
do_bench's L2-flush buffer lie, and NVML's SM and memory clocks and performance state after it.

    python benchmarks/gpu/first_timing.py --out DIR [--repeats 2]

writes DIR/first_timing.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
import space  # noqa: E402
from cases import cases  # noqa: E402

from dt.backends.pysource import load_module  # noqa: E402

WHOLE_ROW, TILED = "rows2_w4", "tiled2048_w8"
TIMINGS = 5  # timings per timed step

# scenario: (whether the search's check runs first, the steps: what each times or does)
SCENARIOS = {
    "tiled timed between": (True, ("whole", "tiled", "whole")),
    "nothing between": (True, ("whole", "whole")),
    "2 s of sleep between": (True, ("whole", "sleep", "whole")),
    "tiled launched 2000 times between": (True, ("whole", "tiled launches", "whole")),
    "copy timed between": (True, ("whole", "copy", "whole")),
    "allocator emptied between": (True, ("whole", "empty_cache", "whole")),
    "tiled timed first": (True, ("tiled", "whole", "whole")),
    "no check first": (False, ("whole", "tiled", "whole")),
    "cuBLAS matmul launched between": (True, ("whole", "matmul", "whole")),
    "whole-row set to prefer shared memory between": (True, ("whole", "carveout 100", "whole")),
    "whole-row set to prefer L1 after the tiled one": (True, ("tiled", "whole", "carveout 0", "whole")),
    "tiled without its eviction hints launched between": (True, ("whole", "tiled unhinted launches", "whole")),
    "inputs read with evict_last between": (True, ("whole", "evict_last reads", "whole")),
    "persisting L2 lines reset after the tiled one": (True, ("tiled", "whole", "reset persisting", "whole")),
    "timed with persisting lines reset before each run": (True, ("tiled", "whole", "whole reset", "tiled reset",
                                                                 "whole reset")),
}
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9  # cuda.h: percent of the L1/shared memory for shared


def _nvml():
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    except Exception:  # NVML missing: the times alone still answer
        return None, None


def _clocks(nvml, handle) -> dict:
    if nvml is None:
        return {}
    return {"sm_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "pstate": nvml.nvmlDeviceGetPerformanceState(handle)}


def scenario(name: str) -> list[dict]:
    """Runs one scenario in this process; returns one record per timing or step."""
    import triton.testing

    import dt
    check_first, steps = SCENARIOS[name]
    device = torch.device("cuda")
    nvml, handle = _nvml()
    case = next(c for c in cases(["softmax_safe"], dtypes=["bf16"]) if c.shape == (4096, 4096))
    searched = dict(space.variants(case))
    programs = {label: dt.loads(searched[variant], f"softmax_safe_{variant}")
                for label, variant in (("whole", WHOLE_ROW), ("tiled", TILED))}
    check = measure.case_inputs(case, device, 1)
    timed = measure.case_inputs(case, device, 2)
    kernels = {}
    if check_first:  # what tune.py does before timing: a float64 reference, each schedule checked
        ref = case.kernel.torch_fn(**{n: t.double() for n, t in check.items()}, **case.kernel.scalars)
    for label, program in programs.items():
        before = _compiled_kernels()
        if check_first:
            assert measure.relative_error(program(backend="triton", **check), ref) <= measure.TOLERANCE["bf16"]
        else:  # compiled (from Triton's disk cache) without the check's allocations
            program(backend="triton", **timed)
        [kernels[label]] = [k for k in _compiled_kernels() if id(k) not in {id(b) for b in before}]
    torch.cuda.synchronize()

    places = {}
    driver = triton.runtime.driver.active
    empty_cache_for_benchmark = driver.get_empty_cache_for_benchmark

    def flush_buffer():
        cache = empty_cache_for_benchmark()
        places["flush"] = cache.data_ptr()
        return cache

    driver.get_empty_cache_for_benchmark = flush_buffer

    def call(label):
        def run():
            out = programs[label](backend="triton", **timed)
            places["out"] = out.data_ptr()
        return run

    src = measure.random_tensor((case.bytes // 8,), torch.float32, device, measure.generator(device, 3))
    dst = torch.empty_like(src)
    calls = {"whole": call("whole"), "tiled": call("tiled"), "copy": lambda: dst.copy_(src)}
    records = []
    for position, step in enumerate(steps):
        label, _, rest = step.partition(" ")
        if label in calls and rest in ("", "reset"):  # a timed step ("whole", or "whole reset": cold)
            for i in range(TIMINGS):
                ms = (measure.cold_bench(calls[label], warmup=10, rep=40) if rest else
                      float(triton.testing.do_bench(calls[label], warmup=10, rep=40, return_mode="median")))
                records.append(dict(scenario=name, position=position, step=step, timing=i, ms=ms,
                                    out_ptr=places.get("out"), flush_ptr=places.get("flush"),
                                    reserved_mib=torch.cuda.memory_reserved() >> 20, **_clocks(nvml, handle)))
            continue
        start = time.perf_counter()
        if step == "sleep":
            time.sleep(2.0)
        elif step == "tiled launches":
            for _ in range(2000):
                calls["tiled"]()
            torch.cuda.synchronize()
        elif step == "empty_cache":
            torch.cuda.empty_cache()
        elif step == "matmul":
            a = torch.randn(4096, 4096, device=device, dtype=torch.float16)
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
        elif step.startswith("carveout"):
            _set_carveout(kernels["whole"], int(step.split()[1]))
        elif step == "tiled unhinted launches":
            source = programs["tiled"].source("triton", "bf16")
            launcher = load_module(measure.without_eviction_hints(source), "tiled_unhinted")[programs["tiled"].pipeline("bf16").name]
            for _ in range(2000):
                launcher(**timed)
            torch.cuda.synchronize()
        elif step == "evict_last reads":
            for tensor in timed.values():
                flat = tensor.reshape(-1)
                sink = torch.empty(triton.cdiv(flat.numel(), 4096), device=device)
                for _ in range(200):
                    _read_evict_last[(sink.numel(),)](flat, sink, flat.numel(), BLOCK=4096)
            torch.cuda.synchronize()
        elif step == "reset persisting":
            measure.reset_persisting_l2()
        records.append(dict(scenario=name, position=position, step=step, seconds=time.perf_counter() - start,
                            reserved_mib=torch.cuda.memory_reserved() >> 20, **_clocks(nvml, handle)))
    records.append(dict(scenario=name, kernels={label: _describe(k) for label, k in kernels.items()}))
    return records


@triton.jit
def _read_evict_last(src_ptr, sink_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tile = tl.load(src_ptr + offsets, mask=offsets < N, other=0.0, eviction_policy="evict_last")
    tl.store(sink_ptr + tl.program_id(0), tl.sum(tile.to(tl.float32)))


def _compiled_kernels() -> list:
    """Every Triton kernel compiled in this process so far (CompiledKernel objects)."""
    import gc

    from triton.compiler.compiler import CompiledKernel
    return [o for o in gc.get_objects() if isinstance(o, CompiledKernel)]


def _describe(kernel) -> dict:
    return {"name": kernel.name, "shared_bytes": kernel.metadata.shared, "num_warps": kernel.metadata.num_warps,
            "registers": kernel.n_regs, "spills": kernel.n_spills}


def _set_carveout(kernel, percent: int):
    """cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT): the share of the SM's L1/shared
    memory the kernel prefers as shared memory (a hint the driver follows at its launches)."""
    import ctypes
    status = measure.libcuda().cuFuncSetAttribute(ctypes.c_void_p(kernel.function),
                                                   CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                                   ctypes.c_int(percent))
    assert status == 0, f"cuFuncSetAttribute returned {status}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out")
    parser.add_argument("--repeats", type=measure.positive_int, default=2, help="fresh processes per scenario")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scenario:  # a child: one scenario in a fresh process
        Path(args.json).write_text(json.dumps(scenario(args.scenario)))
        return 0
    if not args.out:
        parser.error("--out is required")
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in SCENARIOS:
                path = Path(tmp) / "scenario.json"
                subprocess.run([sys.executable, __file__, "--scenario", name, "--json", str(path)], check=True)
                found = json.loads(path.read_text())
                for r in found:
                    r["repeat"] = repeat
                records += found
                print(name, [round(r["ms"] * 1e3, 1) for r in found if "ms" in r], flush=True)
    measure.write_study(args.out, "first_timing", torch.device("cuda"), records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Whole-row kernels timed first: a measurement", "",
             measure.provenance(run, "first_timing.py")
             + f". Each scenario runs in a fresh process: softmax_safe bf16 4096x4096's inputs, then (unless "
             f"named) its float64 reference and the check of the whole-row schedule `{WHOLE_ROW}` and the tiled "
             f"`{TILED}`, as the search does; then its steps in order. A timed step is {TIMINGS} calls of "
             "`triton.testing.do_bench` (10 ms warm-up, 40 ms, median, L2 flushed before each run), or of "
             "`measure.cold_bench` for steps named 'reset' (every kept L2 line demoted before each run's flush); "
             "each cell gives their times in µs, one process per line.", ""]
    described = next((r["kernels"] for r in records if "kernels" in r), {})
    for label, k in described.items():
        lines.append(f"- {label}: Triton kernel `{k['name']}`, {k['num_warps']} warps, {k['registers']} registers per "
                     f"thread, {k['shared_bytes']} bytes of shared memory, {k['spills']} spills")
    lines.append("")
    for (name,), found in measure.by_row([r for r in records if "position" in r], "scenario").items():
        steps = SCENARIOS[name][1]
        processes = measure.by_row(found, "repeat")
        table = []
        for (repeat,), mine in processes.items():
            cells = [str(repeat + 1)]
            for position in range(len(steps)):
                timed = [r for r in mine if r["position"] == position]
                cells.append(", ".join(f"{r['ms'] * 1e3:.1f}" for r in timed if "ms" in r)
                             or "; ".join(f"{r['seconds']:.2f} s" for r in timed))
            table.append(cells)
        lines += [f"## {name}", ""]
        lines += render.markdown_table(["process"] + [f"{i + 1}. {s}" for i, s in enumerate(steps)], table)
        processes = processes.values()
        outs = max(len({r["out_ptr"] for r in mine if r.get("step") == "whole"}) for mine in processes)
        flushes = max(len({r["flush_ptr"] for r in mine if "flush_ptr" in r}) for mine in processes)
        clocks = {(r.get("sm_mhz"), r.get("mem_mhz"), r.get("pstate")) for r in found if "ms" in r}
        lines += ["", f"In each process the whole-row outputs lay at {outs} address(es) and the flush buffers at "
                  f"{flushes}; (SM MHz, memory MHz, P-state) read: {sorted(clocks, key=str)}.", ""]
    whole = [r for r in records if r.get("step") == "whole"]
    if whole:
        lines.append(f"Every whole-row timing: median {statistics.median(r['ms'] for r in whole) * 1e3:.1f} µs.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
