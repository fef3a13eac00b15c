"""GPU verification of dt's Triton backend: every example at the talk's sizes and at sizes
that divide no block or tile, in f32, f16 and bf16, checked against a reference; the
standalone module generated for each case run too (it must give the same bits); the f32
tf32 dot option; and the extra programs of tests/test_triton_backend.py (every function,
reductions, small and padded dots, ...) on the GPU.

    python benchmarks/gpu/verify_triton.py --out DIR [--budget SECONDS] [--only NAME,...]

Writes DIR/verify_triton.json (rewritten after every case), DIR/verify_triton.md,
DIR/verify_triton.log (tracebacks) and DIR/modules/*.py (the generated modules it ran), and
prints a summary table. Exit status 0 when no case failed or crashed; a case dt refuses with
a DTError (e.g. attention_talk.dt, the talk's schedule, in f32 at the talk's size needs more
shared memory than an H100 has) is reported as 'refused' with dt's message.

References: dt's NumPy reference (float64) at the small sizes; at the talk's sizes, where it
would be too slow, the same algorithm written with torch in float64 on the GPU (checked
against dt's reference at the small sizes, so a wrong formula shows up as a failure there).

Without a GPU, `TRITON_INTERPRET=1 ... --tiny` runs the same logic on tiny sizes on the CPU.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # dt from this checkout when it is not installed

import torch  # noqa: E402
import triton  # noqa: E402

import dt  # noqa: E402
from dt.backends import triton as triton_backend  # noqa: E402
from dt.backends.base import BackendUnavailable  # noqa: E402
from dt.arrays import to_torch  # noqa: E402
from dt.testing import compare, random_inputs  # noqa: E402

DTYPES = ("f16", "f32", "bf16")  # f16 first: the talk's matmul numbers are f16
TALK = {  # the talk's sizes (evaluation section)
    "dyt": [dict(x=128, y=65536)],
    "2mm_outer": [dict(m=512, n=1024, k=32, l=32)],
    "2mm_inner": [dict(m=1024, n=1024, k=64, l=64)],
    "attention": [dict(m=1024, l=1024, k=64, n=64)],
    "attention_talk": [dict(m=1024, l=1024, k=64, n=64)],
    "attention_onepass": [dict(m=1024, l=1024, k=64, n=64)],
    "matmul": [dict(x=512, y=512, k=512), dict(x=4096, y=4096, k=4096, dtypes=("f16",))],
    "mmsigmoid": [dict(x=512, y=512, k=512)],
    "softmax": [dict(x=1024, y=4096)],
    "layernorm": [dict(x=2048, y=4096)],
    "add": [dict(x=4096, y=4096)],
    "relu": [dict(x=4096, y=4096)],
    "swish": [dict(x=4096, y=4096)],
}
ODD = {  # sizes no block, tile or group divides, small enough for dt's NumPy reference
    "dyt": dict(x=7, y=5003), "2mm_outer": dict(m=100, n=130, k=33, l=20),
    "2mm_inner": dict(m=100, n=130, k=33, l=70), "attention": dict(m=100, l=333, k=48, n=70),
    "attention_talk": dict(m=100, l=333, k=48, n=70), "attention_onepass": dict(m=100, l=333, k=48, n=70),
    "matmul": dict(x=333, y=257, k=77), "mmsigmoid": dict(x=130, y=257, k=77),
    "softmax": dict(x=129, y=1000), "layernorm": dict(x=33, y=3001), "add": dict(x=77, y=1000),
    "relu": dict(x=77, y=999), "swish": dict(x=33, y=3001),
}
TINY_TALK = {  # --tiny: the talk-size code path (torch float64 reference) at CPU-friendly sizes
    "dyt": dict(x=2, y=2048), "2mm_outer": dict(m=16, n=64, k=32, l=32), "2mm_inner": dict(m=64, n=64, k=32, l=32),
    "attention": dict(m=16, l=64, k=16, n=64), "attention_talk": dict(m=16, l=64, k=16, n=64),
    "attention_onepass": dict(m=16, l=64, k=16, n=64), "matmul": dict(x=128, y=128, k=32),
    "mmsigmoid": dict(x=128, y=128, k=32), "softmax": dict(x=4, y=1024), "layernorm": dict(x=2, y=2048),
    "add": dict(x=2, y=512), "relu": dict(x=2, y=256), "swish": dict(x=2, y=1024),
}
TINY_ODD = {
    "dyt": dict(x=2, y=2100), "2mm_outer": dict(m=20, n=70, k=7, l=20), "2mm_inner": dict(m=20, n=65, k=33, l=40),
    "attention": dict(m=20, l=37, k=20, n=20), "attention_talk": dict(m=20, l=37, k=20, n=20),
    "attention_onepass": dict(m=20, l=37, k=20, n=20), "matmul": dict(x=130, y=7, k=33), "mmsigmoid": dict(x=33, y=20, k=40),
    "softmax": dict(x=7, y=600), "layernorm": dict(x=3, y=1100), "add": dict(x=3, y=300), "relu": dict(x=3, y=200),
    "swish": dict(x=2, y=1100),
}
TF32_TOLERANCE = (5e-3, 5e-3)  # tf32 keeps 10 mantissa bits of each dot operand


def _softmax_rows(e):
    return e / e.sum(dim=1, keepdim=True)


# The examples' algorithms in torch, evaluated in float64 (inputs are upcast first).
FORMULAS = {
    "add": lambda A, B, alpha: alpha * (A + B),
    "relu": lambda A: torch.clamp(A, min=0.0),
    "swish": lambda A, beta: A * torch.sigmoid(beta * A),
    "dyt": lambda A, gamma, beta, alpha: gamma[None, :] * torch.tanh(alpha * A) + beta[None, :],
    "softmax": lambda A: _softmax_rows(torch.exp(A)),
    "layernorm": lambda A, W, Bias, eps: (A - A.mean(1, keepdim=True)) * torch.rsqrt(
        ((A - A.mean(1, keepdim=True)) ** 2).mean(1, keepdim=True) + eps) * W[None, :] + Bias[None, :],
    "matmul": lambda A, B: A @ B,
    "mmsigmoid": lambda A, B: torch.sigmoid(A @ B),
    "2mm_outer": lambda A, B, C: (A @ B) @ C,
    "2mm_inner": lambda A, B, C: (A @ B) @ C,
    "attention": lambda A, B, C: _softmax_rows(torch.exp(A @ B / A.shape[1] ** 0.5)) @ C,
}
FORMULAS["attention_talk"] = FORMULAS["attention_onepass"] = FORMULAS["attention"]


@dataclass
class Result:
    case: str
    program: str
    sizes: dict
    dtype: str
    reference: str  # 'numpy' (dt's reference) or 'torch-f64'
    status: str = "skipped"  # ok | FAIL | ERROR | refused (a DTError, shown) | skipped
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""
    standalone: str = ""  # 'same bits' | 'differs' | error text
    first_call_s: float | None = None  # includes Triton's compile
    ms: float | None = None  # steady-state time of the dt call (talk sizes, GPU only)
    formula_check: str = ""  # small sizes: torch formula vs dt's reference
    replay: str = ""  # a repeat call with other values, replayed, vs the launcher on those values
    replay_out: str = ""  # the same writing into given outputs (out=): all of them, then the first only
    notes: list = field(default_factory=list)


class Verifier:
    def __init__(self, out: Path, device: str, budget: float, timing: bool):
        self.out = out
        self.device = device
        self.budget = budget
        self.timing = timing
        self.start = time.monotonic()
        self.results: list[Result] = []
        self.context_lost = False
        (out / "modules").mkdir(parents=True, exist_ok=True)
        self.log = open(out / "verify_triton.log", "w")

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    # ------------------------------------------------------------ one case
    def run(self, case: str, prog, source_name: str, sizes: dict, dtype: str, reference: str,
            f32_dot: str | None = None, tolerance: tuple | None = None):
        r = Result(case, source_name, {k: v for k, v in sizes.items()}, dtype, reference)
        self.results.append(r)
        if self.context_lost:
            r.detail = "CUDA context lost earlier in the run"
            return r
        if time.monotonic() - self.start > self.budget:
            r.detail = f"time budget of {self.budget:.0f} s spent"
            return r
        print(f"[{time.monotonic() - self.start:6.1f}s] {case} {dtype} {sizes}", flush=True)
        try:
            self._run(r, prog, sizes, dtype, reference, tolerance)
        except dt.DTError as e:  # dt refused the case with a clear error (e.g. a schedule too big for the GPU)
            r.status, r.detail = "refused", e.render()[:2000]
        except Exception as e:  # one case's failure is a row of the report; the run goes on
            r.status, r.detail = "ERROR", f"{type(e).__name__}: {e}"[:2000]
            self.log.write(f"==== {case} {dtype} {sizes}\n{traceback.format_exc()}\n")
            self.log.flush()
            if "CUDA error" in str(e) or "illegal memory access" in str(e):
                self.context_lost = True
        self.write()
        return r

    def _run(self, r: Result, prog, sizes, dtype, reference, tolerance):
        extra = {d: n for d, n in sizes.items() if d not in prog.input_dims} or None
        args = random_inputs(prog, sizes, dtype, seed=0)
        tensors = {n: to_torch(a).to(self.device) if hasattr(a, "shape") else a for n, a in args.items()}
        start = time.perf_counter()
        out = prog(backend="triton", sizes=extra, **tensors)
        self.sync()
        r.first_call_s = round(time.perf_counter() - start, 3)
        outs = out if isinstance(out, dict) else {prog.outputs[0]: out}
        if reference == "numpy":
            ref = prog.reference(sizes=extra, **args)
            refs = ref if isinstance(ref, dict) else {prog.outputs[0]: ref}
            formula = FORMULAS.get(r.program)
            if formula is not None:
                want = formula(**{n: v.double() if hasattr(v, "double") else v for n, v in tensors.items()})
                c = compare(want, refs[prog.outputs[0]], "f64", rtol=1e-9, atol=1e-9)
                r.formula_check = "agrees" if c.ok else f"DISAGREES: {c}"
        else:
            want = FORMULAS[r.program](**{n: v.double() if hasattr(v, "double") else v for n, v in tensors.items()})
            refs = {prog.outputs[0]: want}
        failures, worst_abs, worst_rel = [], 0.0, 0.0
        for name in prog.outputs:
            rtol, atol = tolerance if tolerance else (None, None)
            c = compare(outs[name], refs[name], dtype, rtol=rtol, atol=atol)
            worst_abs, worst_rel = max(worst_abs, c.max_abs), max(worst_rel, c.max_rel)
            if not c.ok:
                failures.append(f"{name}: {c}")
        r.max_abs, r.max_rel = worst_abs, worst_rel
        r.status = "FAIL" if failures or r.formula_check.startswith("DISAGREES") else "ok"
        r.detail = "; ".join(failures)
        r.standalone = self.standalone(r, prog, tensors, extra, dtype, outs)
        if r.standalone != "same bits" or r.replay not in ("same bits", "") or \
                (r.replay_out and not r.replay_out.startswith("same bits")):
            r.status = "FAIL"
        if self.timing and reference == "torch-f64" and self.device == "cuda":
            fn = lambda: prog(backend="triton", sizes=extra, **tensors)  # noqa: E731
            r.ms = round(triton.testing.do_bench(fn, warmup=10, rep=50), 4)

    def standalone(self, r: Result, prog, tensors, extra, dtype, outs) -> str:
        """Import the generated module from a file and run it: it must give dt's bits."""
        try:
            generated = dt.backends.get("triton").module(prog.pipeline(dtype))
            path = self.out / "modules" / f"{r.case.replace('/', '_')}_{dtype}.py"
            path.write_text(generated.source)
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            function = getattr(module, generated.function)
            got = function(**tensors, **(extra or {}))
            self.sync()
            gots = got if isinstance(got, dict) else {prog.outputs[0]: got}
            same = all(_same_bits(_cpu(gots[n]), _cpu(outs[n])) for n in prog.outputs)
            r.replay, r.replay_out = self.replay(prog, function, extra, r.sizes, dtype)
            return "same bits" if same else "differs"
        except Exception as e:
            self.log.write(f"==== standalone {r.case} {dtype}\n{traceback.format_exc()}\n")
            return f"{type(e).__name__}: {e}"[:500]

    def replay(self, prog, launcher, extra, sizes, dtype) -> tuple[str, str]:
        """A repeat call with other values (the backend replays the first call's launches,
        dt/backends/triton/replay.py) must give the bits the generated launcher gives; so must
        calls writing into given outputs (out=), each set recorded by its first call and
        replayed by its second: 'same bits' where the second was replayed, 'same bits, not
        replayed' where it went through the launcher (Triton's interpreter)."""
        args = random_inputs(prog, sizes, dtype, seed=1)
        tensors = {n: to_torch(a).to(self.device) if hasattr(a, "shape") else a for n, a in args.items()}
        replayed = prog(backend="triton", sizes=extra, **tensors)
        launched = launcher(**tensors, **(extra or {}))
        self.sync()
        replayed = replayed if isinstance(replayed, dict) else {prog.outputs[0]: replayed}
        launched = launched if isinstance(launched, dict) else {prog.outputs[0]: launched}
        same = all(_same_bits(_cpu(replayed[n]), _cpu(launched[n])) for n in prog.outputs)
        given_sets = [prog.outputs] + ([prog.outputs[:1]] if len(prog.outputs) > 1 else [])
        same_given, all_replayed = True, True
        for names in given_sets:
            before = _replayed_keys(prog)
            for _ in range(2):  # the first call records, the second replays
                outs = {n: torch.full_like(launched[n], float("nan") if launched[n].is_floating_point() else -1)
                        for n in names}
                got = prog(backend="triton", sizes=extra, out=outs, **tensors)
                self.sync()
                got = got if isinstance(got, dict) else {prog.outputs[0]: got}
                same_given &= all(got[n] is outs[n] for n in names) and \
                    all(_same_bits(_cpu(got[n]), _cpu(launched[n])) for n in prog.outputs)
            all_replayed &= bool(_replayed_keys(prog) - before)
        given = "differs" if not same_given else "same bits" if all_replayed else "same bits, not replayed"
        return "same bits" if same else "differs", given

    # ------------------------------------------------------------ report
    def write(self):
        doc = {"device": describe_device(self.device), "torch": torch.__version__, "triton": triton.__version__,
               "python": platform.python_version(), "elapsed_s": round(time.monotonic() - self.start, 1),
               "budget_s": self.budget, "results": [asdict(r) for r in self.results]}
        (self.out / "verify_triton.json").write_text(json.dumps(doc, indent=1) + "\n")
        (self.out / "verify_triton.md").write_text(markdown(doc))


def _replayed_keys(prog) -> set:
    """The keys of the calls the program's Triton pipelines replay (dt/backends/triton/replay.py)."""
    return {key for run in prog._compiled.values() if getattr(run, "replays", None) is not None
            for key, function in run.replays.functions.items() if function is not None}


def _cpu(x):
    """A torch CPU tensor of x (dt returns NumPy arrays when no input was a torch tensor)."""
    return x.cpu() if isinstance(x, torch.Tensor) else to_torch(x)


def _same_bits(a, b) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_int = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


def describe_device(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))})"
    return "CPU through Triton's interpreter"


STATUSES = ("ok", "FAIL", "ERROR", "refused", "skipped")


def summary(counts: dict) -> str:
    return (f"{counts['ok']} ok, {counts['FAIL']} failed, {counts['ERROR']} errors, {counts['refused']} refused "
            f"by dt with an error message, {counts['skipped']} skipped")


def _fmt(x, spec):
    return "" if x is None else format(x, spec)


def table(results: list[dict]) -> list[str]:
    lines = ["| case | dtype | sizes | ref | status | max abs err | max rel err | standalone | replay | replay out= "
             "| first call s | ms |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sizes = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        lines.append(f"| {r['case']} | {r['dtype']} | {sizes} | {r['reference']} | {r['status']} | "
                     f"{_fmt(r['max_abs'], '.3g')} | {_fmt(r['max_rel'], '.3g')} | {r['standalone']} | {r.get('replay', '')} | "
                     f"{r.get('replay_out', '')} | "
                     f"{_fmt(r['first_call_s'], '.2f')} | {_fmt(r['ms'], '.4f')} |")
    return lines


def markdown(doc: dict) -> str:
    results = doc["results"]
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    lines = ["# dt Triton backend: GPU verification", "",
             f"Device: {doc['device']}; torch {doc['torch']}, triton {doc['triton']}, Python {doc['python']}; "
             f"{doc['elapsed_s']} s of a {doc['budget_s']:.0f} s budget.", "",
             f"**{summary(counts)}** "
             f"of {len(results)} cases. Tolerances: dt.testing.TOLERANCES per dtype (tf32 rows: "
             f"rtol {TF32_TOLERANCE[0]}, atol {TF32_TOLERANCE[1]} of the largest |reference|). "
             "'standalone' runs the generated module imported from its file; it must reproduce dt's "
             "output bit for bit; 'replay' is a repeat call on other values (dt replays the first call's "
             "launches), which must give the generated launcher's bits; 'replay out=' the same writing into "
             "given outputs (all, then the first of several), the second call of each replayed. "
             "'ms' is triton.testing.do_bench's median of the dt call (talk sizes).", ""]
    lines += table(results)
    bad = [r for r in results if r["status"] not in ("ok",) or r["formula_check"].startswith("DISAGREES")]
    if bad:
        lines += ["", "## Not ok", ""]
        for r in bad:
            lines.append(f"- {r['case']} {r['dtype']} {r['sizes']}: {r['status']} {r['detail']} "
                         f"{r['formula_check'] if r['formula_check'].startswith('DIS') else ''}".rstrip())
    return "\n".join(lines) + "\n"


def extra_programs() -> dict:
    """The test suite's PROGRAMS table (source, extents), read without importing the tests."""
    tree = ast.parse((ROOT / "tests" / "test_triton_backend.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PROGRAMS":
            return ast.literal_eval(node.value)
    raise LookupError("tests/test_triton_backend.py has no PROGRAMS table")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the report")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; later cases are skipped (default 420)")
    parser.add_argument("--only", help="comma-separated examples (and extra programs) to run")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (CPU check of this script)")
    parser.add_argument("--no-timing", action="store_true", help="skip the do_bench timings")
    args = parser.parse_args(argv)
    try:
        device = triton_backend.device()
    except BackendUnavailable as e:
        parser.error(f"{e}: run on a GPU machine (or TRITON_INTERPRET=1 with --tiny to check the script)")
    only = set(args.only.split(",")) if args.only else None
    v = Verifier(args.out, device, args.budget, not args.no_timing)
    talk = {n: [TINY_TALK[n]] for n in TINY_TALK} if args.tiny else TALK
    odd = TINY_ODD if args.tiny else ODD
    programs = {n: dt.load(ROOT / "examples" / f"{n}.dt") for n in TALK if not only or n in only}

    for dtype in DTYPES:
        for name, prog in programs.items():
            for sizes in talk[name]:
                sizes = dict(sizes)
                if dtype in sizes.pop("dtypes", DTYPES):
                    v.run(f"{name}/talk", prog, name, sizes, dtype, "torch-f64")
            v.run(f"{name}/odd", prog, name, odd[name], dtype, "numpy")
    if "matmul" in programs:  # the f32 dot on TensorFloat-32 units, as DT_TRITON_F32_DOT=tf32 selects
        os.environ["DT_TRITON_F32_DOT"] = "tf32"
        try:
            prog = dt.load(ROOT / "examples" / "matmul.dt")  # a new Program: compiled with tf32
            sizes = talk["matmul"][0]
            v.run("matmul/talk/tf32", prog, "matmul", sizes, "f32", "torch-f64", tolerance=TF32_TOLERANCE)
        finally:
            del os.environ["DT_TRITON_F32_DOT"]
    for name, (source, sizes) in extra_programs().items():
        if only and name not in only:
            continue
        prog = dt.loads(source, name if name != "names" else "triton")
        for dtype in ("f32", "bf16"):
            v.run(f"program/{name}", prog, name, sizes, dtype, "numpy")

    v.write()
    v.log.close()
    results = [asdict(r) for r in v.results]
    print()
    print("\n".join(table(results)))
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    print(f"\n{summary(counts)} in {time.monotonic() - v.start:.0f} s; report in {args.out / 'verify_triton.md'}")
    return 0 if counts["FAIL"] == counts["ERROR"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
