"""The conformance runner: plans runs from the catalogue, executes each on a backend stage by
stage, classifies the outcome, and reports.

A run is one case under one schedule, at one set of sizes, in one dtype. It ends as
  pass         every output within tolerance of the case's reference
  fail         an output is off (max abs/rel error, first mismatching index, got/want),
               missing, or of the wrong shape or dtype
  error        a stage raised: 'lower' (parse, check, lowering to the scheduled IR),
               'compile' (backend.compile), 'run' (the compiled pipeline), or 'reference'
               / 'runner' (the catalogue's reference or the runner: a bug in the suite)
  unsupported  the backend's Capabilities lack the dtype or one of the DT ops used
  skip, xfail, xpass   decided by a vendor expectations file (dt.conformance.vendor)

Used by `dt conformance` (run_command) and by the pytest plugin (dt/conformance/conftest.py).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Iterable

import numpy as np

import dt
from dt import backends
from dt.conformance.case import Case
from dt.conformance.catalogue import CATALOGUE
from dt.conformance.vendor import Entry, Expectations, VendorFileError
from dt.conformance.vendor import load as load_expectations
from dt.dtypes import NAMES as DTYPES
from dt.dtypes import is_integer
from dt.errors import DTBackendError, DTError
from dt.ir import algorithm as A
from dt.ir.naming import size_name
from dt.arrays import to_numpy, to_torch
from dt.testing import compare, numpy_dtype

STATUSES = ("pass", "fail", "error", "unsupported", "skip", "xfail", "xpass")
EXECUTED = ("pass", "fail", "error", "xfail", "xpass")  # the backend computed something
FAILING = ("fail", "error")


# ---------------------------------------------------------------- planning


@dataclass(frozen=True)
class Run:
    case: Case
    schedule: str
    sizes: tuple[tuple[str, int], ...]
    dtype: str

    @property
    def id(self) -> str:
        return f"{self.case.name}/{self.schedule}/{self.dtype}/{','.join(f'{d}={n}' for d, n in self.sizes)}"

    @property
    def extents(self) -> dict[str, int]:
        return dict(self.sizes)


def plan(cases: Iterable[Case] = CATALOGUE, *, ops: Iterable[str] | None = None,
         dtypes: Iterable[str] | None = None, full: bool = False) -> list[Run]:
    """Every run of `cases` whose name or summary row matches one of the glob patterns in `ops`
    (comma-separated lists allowed; none: all), in one of `dtypes` (none: all)."""
    patterns = [p.strip() for spec in ops or () for p in spec.split(",") if p.strip()]
    wanted = set(dtypes) if dtypes else None
    runs = []
    for case in cases:
        if patterns and not any(fnmatchcase(case.name, p) or fnmatchcase(case.row, p) for p in patterns):
            continue
        for schedule in case.schedules:
            for dtype in case.dtypes:
                if wanted is None or dtype in wanted:
                    runs.extend(Run(case, schedule, tuple(s.items()), dtype) for s in case.size_sets(full))
    return runs


# ---------------------------------------------------------------- results


@dataclass
class Result:
    run: Run
    status: str
    message: str = ""
    stage: str | None = None  # for errors
    output: str | None = None  # the first failing output
    max_abs: float | None = None
    max_rel: float | None = None
    first_bad: tuple[int, ...] | None = None
    got: float | None = None
    want: float | None = None
    reason: str | None = None  # the vendor file's reason, for skip / xfail / xpass
    vendor_entry: str | None = None  # which entry of the vendor file decided it
    traceback: str = ""
    seconds: float = 0.0

    def describe(self) -> str:
        head = f"{self.status.upper()} {self.run.id}"
        if self.stage:
            head += f" (stage {self.stage})"
        text = f"{head}: {self.message}" if self.message else head
        if self.reason:
            text += f"\n  vendor reason: {self.reason}"
        return text

    def as_dict(self) -> dict:
        return {"id": self.run.id, "case": self.run.case.name, "op": self.run.case.row, "schedule": self.run.schedule,
                "dtype": self.run.dtype, "sizes": self.run.extents, "status": self.status, "stage": self.stage,
                "message": self.message, "output": self.output, "max_abs": self.max_abs, "max_rel": self.max_rel,
                "first_bad": list(self.first_bad) if self.first_bad is not None else None, "got": self.got,
                "want": self.want, "reason": self.reason, "vendor_entry": self.vendor_entry,
                "traceback": self.traceback, "seconds": round(self.seconds, 6)}


def _exception_text(e: BaseException) -> str:
    return e.render() if isinstance(e, DTError) else f"{type(e).__name__}: {e}"


def _error(run: Run, stage: str, e: BaseException) -> Result:
    return Result(run, "error", _exception_text(e), stage=stage,
                  traceback="".join(traceback.format_exception(type(e), e, e.__traceback__)))


# ---------------------------------------------------------------- backends


def has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidiactl")


def prepare_environment():
    """Without a GPU, Triton runs kernels through its interpreter, which must be switched on
    before anything imports triton."""
    if not has_cuda():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def load_backend(backend=None):
    """The backend to certify: a Backend object as is, or the backend of that name, else of
    $DT_BACKEND, else interp. Raises DTBackendError (with the reason) when it does not load, or
    when it loads but runs on no device here (Triton without torch generates code only)."""
    prepare_environment()
    if backend is None or isinstance(backend, str):
        backend = backends.get(backend or os.environ.get("DT_BACKEND") or "interp")
    if not backend.capabilities.devices:
        why = backend.capabilities.notes.get("mode", "it lists no device")
        raise DTBackendError(f"backend '{backend.name}' cannot run kernels here ({why}), so it cannot be certified",
                             None, "run the suite where the backend runs: for triton, with torch and triton "
                                   "installed, on a CUDA GPU or under TRITON_INTERPRET=1")
    return backend


def required_ops(prog) -> set[str]:
    """The Capabilities op names (dt.ir.ops.DT_OPS) a checked program uses."""
    ops = set()
    for f in prog.checked.funcs.values():
        for e in A.walk(f.expr):
            if isinstance(e, (A.Unary, A.Binary)):
                ops.add(e.op)
            elif isinstance(e, A.Where):
                ops.add("where")
            elif isinstance(e, A.Reduce):
                ops.add("rdot" if e.op == "dot" else f"r{e.op}")
            elif isinstance(e, A.Scan):
                ops.add(f"cum{e.op}")
    return ops


class Runner:
    """Runs planned runs on one backend object, caching each program and compiled pipeline."""

    def __init__(self, backend, expectations: Expectations | None = None):
        self.backend = backend
        self.expectations = expectations or Expectations()
        self._programs: dict[tuple[str, str], object] = {}  # (case, schedule) -> Program | exception
        self._compiled: dict[tuple[str, str, str], tuple] = {}  # + dtype -> (pipeline, fn) | (stage, exception)

    def run(self, run: Run) -> Result:
        entry = self.expectations.lookup(run)
        if entry is not None and entry.kind == "skip":
            return Result(run, "skip", "skipped by the vendor file", reason=entry.reason, vendor_entry=entry.where)
        start = time.perf_counter()
        try:
            result = self._execute(run)
        except Exception as e:  # a bug in the suite itself: still one result, never a crash
            result = _error(run, "runner", e)
        result.seconds = time.perf_counter() - start
        return _apply_xfail(result, entry)

    # -------------------------------------------------------- stages
    def _program(self, run: Run):
        key = (run.case.name, run.schedule)
        if key not in self._programs:
            try:
                self._programs[key] = dt.loads(run.case.source(run.schedule), name=f"conformance_{run.case.name}",
                                               file=f"<conformance {run.case.name}[{run.schedule}]>")
            except Exception as e:
                self._programs[key] = e
        return self._programs[key]

    def _unsupported(self, prog, dtype: str, case: Case) -> str | None:
        caps = self.backend.capabilities
        for wanted in (dtype, *case.input_dtypes.values()):
            if wanted not in caps.dtypes:
                return f"the backend does not support dtype {wanted} (it supports {', '.join(sorted(caps.dtypes))})"
        missing = sorted(required_ops(prog) - set(caps.ops))
        if missing:
            return f"the backend does not support op(s) {', '.join(missing)}"
        return None

    def _compile(self, run: Run, prog):
        key = (run.case.name, run.schedule, run.dtype)
        if key not in self._compiled:
            try:
                pipeline = prog.pipeline({n: run.case.input_dtypes.get(n, "i64" if n in prog.checked.index_inputs
                                                                       else run.dtype) for n in prog.inputs})
            except Exception as e:
                self._compiled[key] = ("lower", e)
            else:
                try:
                    self._compiled[key] = (pipeline, self.backend.compile(pipeline))
                except Exception as e:
                    self._compiled[key] = ("compile", e)
        return self._compiled[key]

    def _execute(self, run: Run) -> Result:
        prog = self._program(run)
        if isinstance(prog, Exception):
            return _error(run, "lower", prog)
        why = self._unsupported(prog, run.dtype, run.case)
        if why:
            return Result(run, "unsupported", why)
        first, second = self._compile(run, prog)
        if isinstance(second, Exception):
            return _error(run, first, second)
        pipeline, compiled = first, second
        tensors, scalars, values = self._inputs(run, pipeline)
        try:
            want = run.case.expected(values, tuple(t.name for t in pipeline.outputs))
        except Exception as e:
            return _error(run, "reference", e)
        extents = pipeline.with_chunks(run.extents)
        sizes = {size_name(d): extents[d] for d in pipeline.sizes}
        try:
            outs = compiled(self._to_backend(tensors), scalars, sizes)
            outs = {n: np.asarray(to_numpy(o)) for n, o in outs.items()}
        except Exception as e:
            return _error(run, "run", e)
        return self._check(run, pipeline, outs, want)

    def _inputs(self, run: Run, pipeline):
        """Seeded inputs: the same for every schedule of a case, so schedules are comparable."""
        rng = np.random.default_rng(zlib.crc32(f"{run.case.name}/{run.sizes}/{run.dtype}".encode()))
        extents = run.extents
        tensors = {t.name: run.case.draw(t.name, rng, tuple(extents[d] for d in t.dims)).astype(numpy_dtype(t.dtype))
                   for t in pipeline.inputs}
        scalars = {s: run.case.draw(s, rng, (), scalar=True) for s in pipeline.scalars}
        values = {**extents, **scalars, **{n: a.astype(np.float64) for n, a in tensors.items()}}
        return tensors, scalars, values

    def _to_backend(self, tensors: dict) -> dict:
        caps = self.backend.capabilities
        if caps.array != "torch":
            return tensors
        import torch
        if "cuda" in caps.devices and torch.cuda.is_available():
            device = "cuda"
        elif "cpu" in caps.devices:
            device = "cpu"
        else:
            raise RuntimeError(f"the backend runs on {', '.join(caps.devices)}, and none of them is here")
        return {n: to_torch(a).to(device) for n, a in tensors.items()}

    def _check(self, run: Run, pipeline, outs: dict, want: dict) -> Result:
        rtol, atol = run.case.tolerance(run.dtype)
        worst = Result(run, "pass", max_abs=0.0, max_rel=0.0)
        for spec in pipeline.outputs:
            if spec.name not in outs:
                return Result(run, "fail", f"{spec.name}: not returned (the backend returned {sorted(outs)})",
                              output=spec.name)
            got, ref = outs[spec.name], want[spec.name]
            if got.shape != ref.shape:
                return Result(run, "fail", f"{spec.name}: shape {got.shape}, want {ref.shape}", output=spec.name)
            if got.dtype != numpy_dtype(spec.dtype):
                return Result(run, "fail", f"{spec.name}: dtype {got.dtype}, want {numpy_dtype(spec.dtype)} "
                              f"({spec.dtype})", output=spec.name)
            exact = is_integer(spec.dtype)  # integer outputs agree exactly
            c = compare(got, ref, spec.dtype, 0.0 if exact else rtol, 0.0 if exact else atol)
            if not c.ok:
                return Result(run, "fail", f"{spec.name}: {c} (rtol {rtol:g}, atol {atol:g} x max|want|)",
                              output=spec.name, max_abs=c.max_abs, max_rel=c.max_rel, first_bad=c.first_bad,
                              got=c.got, want=c.want)
            worst.max_abs, worst.max_rel = max(worst.max_abs, c.max_abs), max(worst.max_rel, c.max_rel)
        return worst


def _apply_xfail(result: Result, entry: Entry | None) -> Result:
    if entry is None or entry.kind != "xfail" or result.status not in ("pass",) + FAILING:
        return result
    result.reason, result.vendor_entry = entry.reason, entry.where
    result.status = "xfail" if result.status in FAILING else "xpass"
    return result


# ---------------------------------------------------------------- summaries and reports


def totals(results: Iterable[dict]) -> Counter:
    return Counter(r["status"] for r in results)


def summary_table(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the op x dtype table: each cell counts statuses ('9 pass', '2 FAIL')."""
    dtypes = [d for d in DTYPES if any(r["dtype"] == d for r in results)]
    cells: dict[tuple[str, str], Counter] = {}
    rows: list[str] = []
    for r in results:
        if r["op"] not in rows:
            rows.append(r["op"])
        cells.setdefault((r["op"], r["dtype"]), Counter())[r["status"]] += 1
    body = [[op] + [_cell(cells.get((op, d))) for d in dtypes] for op in rows]
    return ["op"] + dtypes, body


def _cell(counts: Counter | None) -> str:
    if not counts:
        return "-"
    return " · ".join(f"{counts[s]} {s.upper() if s in FAILING else s}" for s in STATUSES if counts[s])


def totals_line(backend: str, results: list[dict], seconds: float | None = None) -> str:
    t = totals(results)
    text = f"backend {backend}: {len(results)} runs: " + ", ".join(f"{t[s]} {s}" for s in STATUSES if t[s])
    return text + (f" in {seconds:.1f} s" if seconds is not None else "")


def markdown(backend: str, results: list[dict], warnings: list[str], seconds: float | None = None) -> str:
    header, rows = summary_table(results)
    lines = [f"# dt conformance: backend `{backend}`", "", totals_line(backend, results, seconds), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    problems = [r for r in results if r["status"] in FAILING + ("xpass",)]
    if problems:
        lines += ["", "## Failures, errors and unexpected passes", ""]
        for r in problems:
            where = f" (stage {r['stage']})" if r["stage"] else ""
            lines.append(f"- **{r['status'].upper()}** `{r['id']}`{where}:")
            lines += ["", "  ```", *("  " + m for m in (r["message"] or r["reason"] or "").splitlines()), "  ```", ""]
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


def write_report(path: str | Path, backend, results: list[dict], warnings: list[str], seconds: float,
                 options: dict) -> None:
    path = Path(path)
    if path.suffix == ".md":
        path.write_text(markdown(backend.name, results, warnings, seconds))
        return
    caps = backend.capabilities
    data = {"backend": backend.name,
            "capabilities": {"dtypes": sorted(caps.dtypes), "ops": sorted(caps.ops), "array": caps.array,
                             "devices": list(caps.devices)},
            "options": options, "seconds": round(seconds, 3), "totals": dict(totals(results)),
            "warnings": warnings, "results": results}
    path.write_text(json.dumps(data, indent=1) + "\n")


def text(backend: str, results: list[dict], warnings: list[str], seconds: float | None = None) -> str:
    """What `dt conformance` prints: the op x dtype table, every problem in full, the warnings,
    and the totals last. Plain text, the same whatever is installed."""
    header, rows = summary_table(results)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = [f"dt conformance: backend {backend}", ""]
    lines += ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |"
              for row in [header, ["-" * w for w in widths], *rows]]
    lines.append("")
    for r in results:
        if r["status"] in FAILING + ("xpass",):
            where = f" (stage {r['stage']})" if r["stage"] else ""
            lines.append(f"{r['status'].upper()} {r['id']}{where}:")
            lines += ["  " + m for m in (r["message"] or f"vendor reason: {r['reason']}").splitlines()]
    lines += [f"warning: {w}" for w in warnings]
    lines.append(totals_line(backend, results, seconds))
    return "\n".join(lines) + "\n"


def print_summary(backend: str, results: list[dict], warnings: list[str], seconds: float | None = None,
                  file=None) -> None:
    (file or sys.stdout).write(text(backend, results, warnings, seconds))


def vendor_warnings(expectations: Expectations, results: list[dict]) -> list[str]:
    """Entries matching no run of the whole catalogue (any dtype, small or full sizes), and
    xfail entries whose executed runs all passed."""
    everything = plan(CATALOGUE) + plan(CATALOGUE, full=True)
    warnings = [f"{e} matches no case of the catalogue; check its spelling" for e in expectations.unmatched(everything)]
    for e in expectations.entries:
        if e.kind != "xfail":
            continue
        decided = [r for r in results if r["vendor_entry"] == e.where]
        passed = [r for r in decided if r["status"] == "xpass"]
        if passed:
            warnings.append(f"{e}: {len(passed)} of {len(decided)} expected failures passed (XPASS), e.g. "
                            f"{passed[0]['id']}; narrow or remove the entry")
    return warnings


def zero_ran_message(backend: str, results: list[dict]) -> str | None:
    if any(r["status"] in EXECUTED for r in results):
        return None
    t = totals(results)
    return (f"NO CONFORMANCE CASE RAN on backend {backend}: {len(results)} run(s) planned, "
            + (", ".join(f"{t[s]} {s}" for s in STATUSES if t[s]) or "none selected")
            + "; nothing was certified")


# ---------------------------------------------------------------- the command


def run_command(*, backend=None, ops: list[str] | None = None, dtypes: list[str] | None = None,
                full: bool = False, report: str | None = None, vendor: str | None = None,
                list_only: bool = False, out=None, err=None) -> int:
    """`dt conformance` (`backend`: a name or a Backend object): 0 when every executed run
    passed (or failed as the vendor file expects);
    1 on any failure or error, or when no run executed at all; 2 on bad arguments or a backend
    that does not load."""
    out, err = out or sys.stdout, err or sys.stderr
    if report and Path(report).suffix not in (".json", ".md"):
        print(f"dt conformance: --report writes FILE.json or FILE.md, not {report!r}", file=err)
        return 2
    try:
        expectations = load_expectations(vendor) if vendor else Expectations()
    except VendorFileError as e:
        print(f"dt conformance: {e}", file=err)
        return 2
    runs = plan(CATALOGUE, ops=ops, dtypes=dtypes, full=full)
    if not runs:
        chosen = " ".join([f"--ops {o}" for o in ops or []] + ([f"--dtypes {' '.join(dtypes)}"] if dtypes else []))
        print(f"dt conformance: FAILED: no case matches {chosen}; zero cases ran", file=err)
        return 1
    if list_only:
        for r in runs:
            print(r.id, file=out)
        return 0
    try:
        backend_obj = load_backend(backend)
    except DTBackendError as e:
        print(e.render(), file=err)
        for name, why in backends.failures().items():
            print(f"dt conformance: backend '{name}' failed to load: {why}", file=err)
        return 2
    runner = Runner(backend_obj, expectations)
    start = time.perf_counter()
    results = [runner.run(r).as_dict() for r in _progress(runs, backend_obj.name, err)]
    seconds = time.perf_counter() - start
    warnings = vendor_warnings(expectations, results)
    print_summary(backend_obj.name, results, warnings, seconds, file=out)
    if report:
        write_report(report, backend_obj, results, warnings, seconds,
                     {"ops": ops, "dtypes": dtypes, "full": full, "vendor": vendor})
        print(f"wrote {report}", file=out)
    zero = zero_ran_message(backend_obj.name, results)
    if zero:
        print(f"dt conformance: FAILED: {zero}", file=err)
        return 1
    failing = sum(r["status"] in FAILING for r in results)
    if failing:
        print(f"dt conformance: FAILED: {failing} run(s) failed or errored on backend {backend_obj.name}", file=err)
        return 1
    return 0


def _progress(runs: list[Run], backend: str, err):
    """The runs, with a progress bar on an interactive terminal (a --full GPU run takes a while)."""
    if not getattr(err, "isatty", lambda: False)():
        yield from runs
        return
    try:
        from rich.progress import track
    except ImportError:
        yield from runs
        return
    from rich.console import Console
    yield from track(runs, description=f"conformance on {backend}", transient=True, console=Console(file=err))
