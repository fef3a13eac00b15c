"""One row of the CPU benchmark, measured in this process (bench.py starts one process per row
and repetition, so that every row is measured in several fresh processes).

Every provider's first call (compilation included) is timed and its output compared with the
float64 reference; then the providers, and for a memory-bound row a copy of the row's bytes
(its ceiling), are timed side by side: `rounds` round-robin rounds (measure.round_robin, after
one discarded timing), each timing every call as a block of back-to-back runs.

    python benchmarks/cpu/cpu_measure.py SPEC_JSON   # prints the row's results as one JSON line
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
import traceback
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cpu_rows  # noqa: E402  (first: it puts the GPU harness's modules on the path)
import measure  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from cases import MEMORY, Case  # noqa: E402

CPU = torch.device("cpu")


def block_timer(seconds: float, min_runs: int, pause: float):
    """A timer for measure.round_robin: the median of back-to-back runs of a call, at least
    `min_runs` and for at least `seconds`, as a loop calling a kernel runs it; after a pause
    (so that the previous library's idle threads stop spinning) and one untimed run (which
    wakes this library's threads)."""
    def time_block(fn) -> float:
        time.sleep(pause)
        fn()
        times, start = [], time.perf_counter()
        while len(times) < min_runs or time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    return time_block


def build(case: Case, provider: str, tensors: dict, arrays: dict, out: torch.Tensor | None):
    """The zero-argument call `provider` is timed on, returning the output it computed; it
    writes into `out` (or its NumPy view) when given, else allocates its output."""
    k = cpu_rows.KERNEL_ROWS[case.kernel.name]
    scalars = case.kernel.scalars
    out_np = None if out is None else out.numpy()
    if provider == "dt" or provider.startswith("dt@"):
        import dt
        from dt import backends
        pipeline = dt.load(cpu_rows.schedule(case, provider)).pipeline(case.dtype)
        entry = backends.get("numba").entry(pipeline)
        args = ([arrays[t.name] for t in pipeline.inputs] + [scalars[n] for n in pipeline.scalars]
                + [case.extents[d] for d in pipeline.sizes])
        name = pipeline.outputs[0].name
        return lambda: entry(*args, out=out_np)[name]
    if provider == "eager":
        return k.eager(tensors, scalars, out)
    if provider == "numpy":
        return k.numpy(arrays, scalars, out_np)
    if provider == "sdpa":
        return k.sdpa(tensors)
    if provider == "compile":
        fn = case.kernel.torch_fn
        if out is None:
            compiled = torch.compile(fn)
            return lambda: compiled(**tensors, **scalars)

        def into(out, **args):
            return out.copy_(fn(**args))
        compiled_into = torch.compile(into)
        return lambda: compiled_into(out, **tensors, **scalars)
    raise ValueError(f"unknown provider {provider!r}")


def _as_tensor(result) -> torch.Tensor:
    return torch.from_numpy(result) if isinstance(result, np.ndarray) else result


def _shares(result, out: torch.Tensor) -> bool:
    return _as_tensor(result).data_ptr() == out.data_ptr()


def measure_row(case: Case, provider_names: list[str], rounds: int, seconds: float, min_runs: int,
                pause: float) -> dict:
    """Check, then time side by side, each provider of one row; the row's results by provider."""
    mode = cpu_rows.output_mode(provider_names)
    seed = zlib.crc32(case.title.encode())
    tensors = measure.case_inputs(case, CPU, seed)
    arrays = {n: t.numpy() for n, t in tensors.items()}  # the same memory
    ref = case.kernel.torch_fn(**{n: t.double() for n, t in tensors.items()}, **case.kernel.scalars)
    out = torch.empty(case.out_shape) if mode == cpu_rows.PREALLOCATED else None
    tol = measure.TOLERANCE[case.dtype]
    results = {p: {"status": "error", "error": None, "rel_err": None, "first_call_s": None, "ms_rounds": []}
               for p in provider_names}
    calls = {}
    for p in provider_names:
        res = results[p]
        try:
            if out is not None:
                out.fill_(math.nan)  # what a provider leaves unwritten fails the check
            start = time.perf_counter()
            call = build(case, p, tensors, arrays, out)
            got = call()
            res["first_call_s"] = time.perf_counter() - start
            if out is not None and not _shares(got, out):
                raise RuntimeError("did not write into the preallocated output")
            err = measure.relative_error(_as_tensor(got), ref)
            res.update(rel_err=err, status="ok" if err <= tol else "wrong")  # NaN fails
            if res["status"] == "wrong":
                res["error"] = f"relative error {err:.3g} > {tol:g}"
            calls[p] = call
        except Exception as e:  # one provider failing is a result of the row, not the end of it
            res.update(status="error", error=measure.short_error(e))
            print(f"--- {case.title} / {p}\n{traceback.format_exc()}", file=sys.stderr, flush=True)
    copy_rounds, copy_bytes = [], None
    if calls and case.kernel.kind == MEMORY:
        calls[measure.SAME_SIZE_COPY], copy_bytes = measure.copy_call(CPU, case.bytes)

    def failed(name, e):
        print(f"--- {case.title} / {name} (timing)\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        if name in results:
            results[name].update(status="error", error=measure.short_error(e))

    for name, ms in measure.round_robin(block_timer(seconds, min_runs, pause), calls, rounds, on_error=failed):
        (copy_rounds if name == measure.SAME_SIZE_COPY else results[name]["ms_rounds"]).append(ms)
    return {"output": mode, "providers": results, "copy_same_ms_rounds": copy_rounds, "copy_same_bytes": copy_bytes}


def main(argv=None) -> int:
    spec = json.loads((argv or sys.argv[1:])[0])
    kernel, shape = cpu_rows.KERNEL_ROWS[spec["kernel"]].kernel, tuple(spec["shape"])
    case = Case(kernel, shape, spec["dtype"], kernel.extents(shape))
    names = cpu_rows.providers(case, spec["providers"])
    result = measure_row(case, names, spec["rounds"], spec["seconds"], spec["min_runs"], spec["pause"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
