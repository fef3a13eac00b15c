"""CPU benchmark: dt's `numba` backend against PyTorch (eager) and NumPy, at mid sizes.

Every provider writes into preallocated outputs (out= arguments) where its API allows; each
kernel is checked against NumPy before it is timed. Timing: the providers of a kernel take 6
turns each, a turn being back-to-back runs for 0.25 s, with a pause between turns; the median
of each provider's runs is reported (see time_providers). dt runs
both the schedule in examples/ and, where one exists, the CPU schedule in examples/cpu/.
First-call compile time and cached-load time are measured per DT file in fresh processes.

    python benchmarks/cpu/bench.py [--quick] [--kernels softmax,matmul] [--out benchmarks/results]
        [--skip-compile-times]

Writes OUT/cpu.json (one record per kernel, shape and provider) and OUT/cpu.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # dt from this checkout even when not installed

import torch  # noqa: E402
import numpy as np  # noqa: E402

import dt  # noqa: E402
from dt import backends  # noqa: E402

EXAMPLES = ROOT / "examples"
CPU_EXAMPLES = EXAMPLES / "cpu"


@dataclass(frozen=True)
class Case:
    kernel: str  # the example's name
    shape: dict  # extents by dimension
    scalars: dict


ELEMENTWISE = ("add", "relu", "swish")
ROW = ("softmax", "layernorm", "dyt")
MATMUL = ("matmul", "2mm_outer", "2mm_inner", "attention")

CASES = [Case(k, dict(x=4096, y=4096), {"add": dict(alpha=0.5), "swish": dict(beta=1.5)}.get(k, {}))
         for k in ELEMENTWISE]
CASES += [Case(k, shape, {"layernorm": dict(eps=1e-5), "dyt": dict(alpha=0.5)}.get(k, {}))
          for k in ROW for shape in (dict(x=2048, y=4096), dict(x=128, y=65536))]
CASES += [Case("matmul", dict(x=1024, y=1024, k=1024), {}),
          Case("2mm_outer", dict(m=512, n=1024, k=32, l=32), {}),
          Case("2mm_inner", dict(m=1024, n=1024, k=64, l=64), {}),
          Case("attention", dict(m=1024, l=1024, k=64, n=64), {})]
QUICK = {"x": 256, "y": 512, "k": 64, "m": 128, "n": 128, "l": 128}


# ---------------------------------------------------------------------------- baselines
# Each takes the inputs (NumPy arrays, or torch tensors sharing their memory), the scalars and
# the preallocated output, and returns a zero-argument callable computing into that output.

def numpy_impl(kernel: str, a: dict, s: dict, out: np.ndarray):
    if kernel == "add":
        A, B = a["A"], a["B"]
        return lambda: (np.add(A, B, out=out), np.multiply(out, s["alpha"], out=out))
    if kernel == "relu":
        return lambda: np.maximum(a["A"], 0, out=out)
    if kernel == "swish":
        A, nbeta = a["A"], -s["beta"]
        return lambda: (np.multiply(A, nbeta, out=out), np.exp(out, out=out), np.add(out, 1, out=out),
                        np.divide(A, out, out=out))
    if kernel == "softmax":
        A = a["A"]
        return lambda: (np.exp(A, out=out), np.divide(out, out.sum(axis=1, keepdims=True), out=out))
    if kernel == "layernorm":
        A, W, Bias, eps = a["A"], a["W"], a["Bias"], s["eps"]
        n = A.shape[1]

        def layernorm():
            np.subtract(A, A.mean(axis=1, keepdims=True), out=out)
            var = np.einsum("ij,ij->i", out, out) / n
            np.multiply(out, (1 / np.sqrt(var + eps))[:, None], out=out)
            np.multiply(out, W, out=out)
            np.add(out, Bias, out=out)
        return layernorm
    if kernel == "dyt":
        A, gamma, beta, alpha = a["A"], a["gamma"], a["beta"], s["alpha"]
        return lambda: (np.multiply(A, alpha, out=out), np.tanh(out, out=out), np.multiply(out, gamma, out=out),
                        np.add(out, beta, out=out))
    if kernel == "matmul":
        return lambda: np.matmul(a["A"], a["B"], out=out)
    if kernel in ("2mm_outer", "2mm_inner"):
        A, B, C = a["A"], a["B"], a["C"]
        mm = np.empty((A.shape[0], B.shape[1]), np.float32)
        return lambda: (np.matmul(A, B, out=mm), np.matmul(mm, C, out=out))
    if kernel == "attention":
        A, B, C = a["A"], a["B"], a["C"]
        scores = np.empty((A.shape[0], B.shape[1]), np.float32)
        scale = np.float32(1 / math.sqrt(A.shape[1]))

        def attention():
            np.matmul(A, B, out=scores)
            np.multiply(scores, scale, out=scores)
            np.exp(scores, out=scores)
            np.divide(scores, scores.sum(axis=1, keepdims=True), out=scores)
            np.matmul(scores, C, out=out)
        return attention
    raise KeyError(kernel)


def torch_impls(kernel: str, a: dict, s: dict, out: torch.Tensor) -> dict:
    """PyTorch eager, as a user would write it: the library's op where there is one (it may
    allocate: softmax, layer_norm and SDPA take no out=), else the same steps as DT's algorithm
    written with out=. Variants by name, each returning its result; the fastest is reported."""
    t = {n: torch.from_numpy(v) for n, v in a.items()}
    if kernel == "add":
        return {"add+mul": lambda: (torch.add(t["A"], t["B"], out=out), out.mul_(s["alpha"]))[-1]}
    if kernel == "relu":
        return {"clamp_min": lambda: torch.clamp_min(t["A"], 0, out=out)}
    if kernel == "swish":
        A, beta = t["A"], s["beta"]
        return {"mul+sigmoid+mul": lambda: (torch.mul(A, beta, out=out), torch.sigmoid(out, out=out), out.mul_(A))[-1]}
    if kernel == "softmax":
        A = t["A"]
        return {"softmax": lambda: torch.softmax(A, dim=1),
                "exp+sum+div": lambda: (torch.exp(A, out=out), out.div_(out.sum(dim=1, keepdim=True)))[-1]}
    if kernel == "layernorm":
        A, W, Bias, eps = t["A"], t["W"], t["Bias"], s["eps"]
        return {"layer_norm": lambda: torch.nn.functional.layer_norm(A, (A.shape[1],), W, Bias, eps)}
    if kernel == "dyt":
        A, gamma, beta, alpha = t["A"], t["gamma"], t["beta"], s["alpha"]
        return {"mul+tanh+mul+add": lambda: (torch.mul(A, alpha, out=out), torch.tanh(out, out=out),
                                             out.mul_(gamma), out.add_(beta))[-1]}
    if kernel == "matmul":
        return {"mm": lambda: torch.mm(t["A"], t["B"], out=out)}
    if kernel in ("2mm_outer", "2mm_inner"):
        A, B, C = t["A"], t["B"], t["C"]
        mm = torch.empty((A.shape[0], B.shape[1]))
        return {"mm+mm": lambda: (torch.mm(A, B, out=mm), torch.mm(mm, C, out=out))[-1]}
    if kernel == "attention":
        A, B, C = t["A"], t["B"], t["C"]
        scores = torch.empty((A.shape[0], B.shape[1]))
        scale = 1 / math.sqrt(A.shape[1])
        Bt = B.t().contiguous()

        def steps():
            torch.mm(A, B, out=scores)
            scores.mul_(scale).exp_()
            scores.div_(scores.sum(dim=1, keepdim=True))
            return torch.mm(scores, C, out=out)
        # SDPA computes the max-subtracted softmax, which equals DT's exp / rsum on these inputs
        return {"sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(A[None], Bt[None], C[None])[0],
                "mm+exp+sum+div+mm": steps}
    raise KeyError(kernel)


def check(got, expected: np.ndarray, what: str):
    got = got.numpy() if isinstance(got, torch.Tensor) else got
    err = float(np.max(np.abs(got - expected)) / max(1e-30, float(np.max(np.abs(expected)))))
    if not err < 1e-4:
        raise AssertionError(f"{what}: error {err:.3g} (relative to the largest value) against NumPy")


# ---------------------------------------------------------------------------- timing


def run_times(fn, seconds: float, min_runs: int) -> list[float]:
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def time_providers(fns: dict, rounds: int, seconds: float, min_runs: int, pause: float) -> dict:
    """(median ms, runs) per provider over `rounds` turns, each a block of back-to-back runs of
    every provider: back to back, as a loop calling a kernel runs it (one call at a time after
    a pause made PyTorch's OpenMP threads, asleep by then, miss their cores for tens of ms on
    this shared machine); in turns, so that each provider sees the drift of the machine's
    other load; with a pause between blocks, so that one library's idle threads stop spinning
    before the next runs."""
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm-up (and, for dt, compile or load)
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(pause)
            samples[name] += run_times(fn, seconds, min_runs)
    return {name: (statistics.median(v), len(v)) for name, v in samples.items()}


# ---------------------------------------------------------------------------- compile times

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numba
from numba import njit
t1 = time.perf_counter()
njit(lambda x: x + 1)(1)  # numba's one-off initialisation in a process
t2 = time.perf_counter()
sys.path.insert(0, {root!r})
import dt
from dt.testing import random_inputs
prog = dt.load({path!r})
args = random_inputs(prog, {sizes!r}, "f32")
t3 = time.perf_counter()
prog(backend="numba", **args)
t4 = time.perf_counter()
print(json.dumps(dict(import_numba=t1 - t0, numba_init=t2 - t1, first_call=t4 - t3)))
"""


def compile_times(path: Path, sizes: dict) -> dict:
    """First call (dt codegen + numba compile + a tiny run) with an empty cache, then the same
    in a new process with the cache of the first: seconds, numba's process start-up excluded."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, DT_CACHE_DIR=cache)
        out = {}
        for label in ("compile", "cached"):
            child = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), path=str(path), sizes=sizes)],
                                   env=env, capture_output=True, text=True, check=True)
            out[label] = json.loads(child.stdout.strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------------------- report


def cpu_description() -> dict:
    """The CPU from /proc/cpuinfo and sysfs (Linux), and the libraries' thread counts."""
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        kind = (index / "type").read_text().strip()
        if kind != "Instruction":
            caches.append(f"L{(index / 'level').read_text().strip()} {(index / 'size').read_text().strip()}")
    import numba
    return {"cpu": info.get("model name", platform.processor() or "unknown"),
            "family_model": f"{info.get('cpu family', '?')}/{info.get('model', '?')}",
            "mhz": info.get("cpu MHz"), "caches": caches, "cores": os.cpu_count(),
            "simd": [f for f in ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f") if f in flags],
            "numba_threads": numba.get_num_threads(), "torch_threads": torch.get_num_threads(),
            "numba": numba.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def device_text(d: dict) -> str:
    caches = f"; caches {', '.join(d['caches'])}" if d["caches"] else ""
    return (f"{d['cpu']} (family/model {d['family_model']}, {d['mhz']} MHz), {d['cores']} cores, "
            f"{' '.join(d['simd'])}{caches}")


def schedules(kernel: str) -> dict:
    out = {"dt-numba": EXAMPLES / f"{kernel}.dt"}
    cpu = CPU_EXAMPLES / f"{kernel}.dt"
    if cpu.exists():
        out["dt-numba (cpu schedule)"] = cpu
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", help="comma-separated kernel names (default: all)")
    ap.add_argument("--quick", action="store_true", help="small shapes and short timings (a smoke test)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="directory for cpu.json and cpu.md")
    ap.add_argument("--skip-compile-times", action="store_true")
    args = ap.parse_args(argv)
    wanted = set(args.kernels.split(",")) if args.kernels else None
    cases = [c for c in CASES if wanted is None or c.kernel in wanted]
    if args.quick:
        cases = list({c.kernel: Case(c.kernel, {d: QUICK[d] for d in c.shape}, c.scalars) for c in cases}.values())
    rounds, seconds, min_runs, pause = (1, 0.05, 2, 0.0) if args.quick else (6, 0.25, 3, 0.2)
    device = cpu_description()
    print(f"# {device_text(device)}; numba {device['numba_threads']} threads, torch {device['torch_threads']}",
          flush=True)
    numba_backend = backends.get("numba")
    records, compile_rows = [], []
    rng = np.random.default_rng(0)
    for case in cases:
        progs = {name: dt.load(path) for name, path in schedules(case.kernel).items()}
        first = next(iter(progs.values()))
        inputs = {}
        for access in first._accesses:
            if access.name not in inputs:
                shape = [case.shape[d] for d in access.indices]
                inputs[access.name] = rng.standard_normal(shape, dtype=np.float32)
        out_dims = first.checked.funcs[first.outputs[0]].dims
        out_shape = tuple(case.shape[d] for d in out_dims)
        expected = np.empty(out_shape, np.float32)
        numpy_impl(case.kernel, inputs, case.scalars, expected)()
        fns = {"numpy": numpy_impl(case.kernel, inputs, case.scalars, np.empty(out_shape, np.float32))}
        variants = torch_impls(case.kernel, inputs, case.scalars, torch.empty(out_shape))
        for name, v in variants.items():
            check(v(), expected, f"{case.kernel} torch:{name}")
        fns.update({f"torch:{k}": v for k, v in variants.items()})
        for name, prog in progs.items():
            pipeline = prog.pipeline("f32")
            entry = numba_backend.entry(pipeline)
            out = np.empty(out_shape, np.float32)
            call = ([inputs[t.name] for t in pipeline.inputs] + [case.scalars[s] for s in pipeline.scalars]
                    + [case.shape[d] for d in pipeline.sizes])
            fn = (lambda entry=entry, call=call, out=out: entry(*call, out=out))
            fn()
            check(out, expected, f"{case.kernel} {name}")
            fns[name] = fn
        timed = time_providers(fns, rounds, seconds, min_runs, pause)
        torch_best = min((k for k in timed if k.startswith("torch:")), key=lambda k: timed[k][0])
        shape_text = "x".join(str(n) for n in case.shape.values())
        row = []
        for name, (ms, runs) in timed.items():
            provider = "torch" if name.startswith("torch:") else name
            if provider == "torch" and name != torch_best:
                continue
            rec = dict(kernel=case.kernel, shape=case.shape, dtype="f32", provider=provider, ms=round(ms, 4),
                       runs=runs, device=device_text(device))
            if provider == "torch":
                rec["variant"] = name.split(":", 1)[1]
            if provider.startswith("dt-numba"):
                rec["schedule"] = str(schedules(case.kernel)[provider].relative_to(ROOT))
            records.append(rec)
            row.append(f"{provider}={ms:.2f}ms")
        print(f"{case.kernel:10s} {shape_text:16s} " + "  ".join(row), flush=True)
    if not args.skip_compile_times:
        seen = []
        for case in cases:
            for name, path in schedules(case.kernel).items():
                if path in seen:
                    continue
                seen.append(path)
                small = {d: min(n, 64) for d, n in case.shape.items()}
                t = compile_times(path, small)
                compile_rows.append(dict(file=str(path.relative_to(ROOT)), compile_s=round(t["compile"]["first_call"], 3),
                                         cached_s=round(t["cached"]["first_call"], 3),
                                         numba_init_s=round(t["cached"]["numba_init"], 3)))
                print(f"compile {compile_rows[-1]}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu.json").write_text(json.dumps(dict(device=device, records=records, compile=compile_rows,
                                                  quick=args.quick), indent=1) + "\n")
    (out / "cpu.md").write_text(markdown(device, records, compile_rows, args.quick))
    print(f"wrote {out / 'cpu.json'} and {out / 'cpu.md'}")
    return 0


def markdown(device: dict, records: list, compile_rows: list, quick: bool) -> str:
    lines = ["# dt `numba` backend: CPU benchmark", "",
             f"Machine: {device_text(device)}. numba {device['numba']} with {device['numba_threads']} threads, "
             f"PyTorch {device['torch']} with {device['torch_threads']}, NumPy {device['numpy']} (one thread; "
             f"OpenBLAS for matmul). float32, outputs preallocated, median of 6 turns of back-to-back runs "
             f"(`python benchmarks/cpu/bench.py`).", ""]
    if quick:
        lines += ["**Quick run (small shapes): not representative.**", ""]
    lines += ["A shared virtual machine: other jobs run beside the benchmark, and repeated runs vary by "
              "up to a third. relu is one pass over memory in dt and in PyTorch alike, bound by the memory "
              "bandwidth: the two tie, within that noise.", ""]
    keys = []
    for r in records:
        key = (r["kernel"], json.dumps(r["shape"]))
        if key not in keys:
            keys.append(key)
    table, best = [], {}
    for kernel, shape in keys:
        rows = [r for r in records if r["kernel"] == kernel and json.dumps(r["shape"]) == shape]
        by = {r["provider"]: r for r in rows}
        base = min(by["torch"]["ms"], by["numpy"]["ms"])
        shape_text = ", ".join(f"{d}={n}" for d, n in json.loads(shape).items())
        for r in rows:
            if not r["provider"].startswith("dt-numba"):
                continue
            table.append(f"| {kernel} | {shape_text} | `{r['schedule']}` | {r['ms']:.2f} | {by['torch']['ms']:.2f} "
                         f"({by['torch']['variant']}) | {by['numpy']['ms']:.2f} | {base / r['ms']:.2f} | "
                         f"{by['torch']['ms'] / r['ms']:.2f} |")
            if (kernel, shape) not in best or r["ms"] < best[(kernel, shape)][0]:
                best[(kernel, shape)] = (r["ms"], base / r["ms"], by["torch"]["ms"] / r["ms"], r["schedule"])
    summary = []
    for (kernel, shape), (_, ratio, vs_torch, schedule) in best.items():
        shape_text = ", ".join(f"{d}={n}" for d, n in json.loads(shape).items())
        summary.append(f"| {kernel} | {shape_text} | `{schedule}` | {ratio:.2f} | {vs_torch:.2f} |")
    lines += ["Best dt schedule per kernel; ratio = time of the faster of PyTorch and NumPy / dt's time "
              "(above 1: dt is faster). Goals: at least 1 for the element-wise and row kernels, at least "
              "0.5 of PyTorch for matmul.", "",
              "| kernel | shape | best dt schedule | ratio to best | ratio to PyTorch |", "|---|---|---|---:|---:|"]
    lines += summary
    lines += ["", "Every schedule (PyTorch: the fastest of its variants, named):", "",
              "| kernel | shape | dt schedule | dt ms | PyTorch ms | NumPy ms | ratio to best | ratio to PyTorch |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += table
    if compile_rows:
        lines += ["", "Compile and load, per DT file: the first call in a fresh process with an empty cache "
                  "(dt's code generation, numba's compilation, a run at small extents), and the same in a "
                  "new process with that cache. Both exclude numba's own start-up in a process "
                  f"(about {statistics.median(r['numba_init_s'] for r in compile_rows):.2f} s here, once "
                  "per process).", "",
                  "| DT file | first call, empty cache (s) | first call, cached (s) |", "|---|---:|---:|"]
        lines += [f"| `{r['file']}` | {r['compile_s']:.2f} | {r['cached_s']:.2f} |" for r in compile_rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
