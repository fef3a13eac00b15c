"""Measuring candidates on this machine: each compiled (on a GPU by worker processes ahead of
its timing, in the order they finish), run on the search's inputs and checked against the
reference, then timed in this process. `dt.tune.cluster` measures the same way on a Ray cluster;
the search (dt.tune.search) talks to either through `submit`, `next`, `retime` and `close`.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import statistics
import sys
import time
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from dt.errors import DTError, DTScheduleError, PerformanceWarning
from dt.tune import timing
from dt.tune.dtypes import checked_for, item_bytes, of_input


TIMEOUT = 300  # seconds a compile or a measurement may take before it counts as hung
WORKERS = 16  # compile workers at most


@dataclass(frozen=True)
class Setup:
    """What a measuring process (a child, a compile worker, a Ray actor) needs to make the
    search's inputs; picklable. `scalars`: the values the user gave for the program's scalars
    (the group of grouped-query attention), the others as `random_inputs` makes them."""
    source: str
    name: str
    sizes: dict
    dtype: str | dict
    backend: str
    seed: int
    scalars: dict


@dataclass
class Outcome:
    candidate: object  # dt.tune.space.Candidate
    ms: float | None  # None: failed
    error: str = ""
    late: bool = False  # failed by running past its time limit


class Inputs:
    """The search's inputs (seeded, on the backend's device), the reference's outputs, and
    how to check and time a program on them; what every measuring process holds."""

    def __init__(self, prog, sizes: dict, dtype: str, backend: str, seed: int, scalars: dict):
        from dt.testing import random_inputs
        self.name, self.backend, self.dtype = prog.name, backend, dtype
        try:
            args = random_inputs(prog, sizes, dtype, seed=seed, scalars=scalars)
        except DTScheduleError:  # the schedule as written fails at these extents (and so as a candidate); the space may not
            args = random_inputs(prog, sizes, dtype, seed=seed, schedule=False, scalars=scalars)
        self.sizes = unbound_sizes(prog, sizes)
        self.expected = prog.reference(**args, sizes=self.sizes)
        self.args = on_device(args, backend)
        expected = self.expected if isinstance(self.expected, dict) else {"": self.expected}
        try:
            stored = {t.name: t.dtype for t in prog.pipeline(dtype).outputs}
        except DTError:  # the schedule as written does not lower (above): the inputs' tolerance
            stored = {}
        # each output's tolerance: its own dtype's where that is looser than the inputs'
        self.checked = {name: checked_for(dtype, stored.get(name or prog.outputs[0], "f32")) for name in expected}
        self.on_device = on_device(expected, backend) if on_gpu(backend) else None
        self.clock = clock(backend, prog, sizes, dtype)
        self.held = timing.gpu_held if on_gpu(backend) else contextlib.nullcontext  # a GPU's: one search at a time

    def runner(self, text: str):
        """A function running the program `text` on the inputs (the first call compiles it)."""
        from dt.runtime import loads
        prog = loads(text, name=self.name)
        return lambda: prog(backend=self.backend, schedule="written", sizes=self.sizes, **self.args)  # not $DT_SCHEDULE's

    def measure(self, candidate) -> tuple[Outcome, object, bool]:
        """(Its outcome, its runner for timing again, whether it broke the GPU context)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PerformanceWarning)  # the space was linted already
                run = self.runner(candidate.text)
                out = run()  # compiles (where no worker did): searches sharing the GPU time meanwhile
                wrong = "" if self._agrees_on_device(out) else disagreement(out, self.expected, self.checked)
                if wrong:
                    return Outcome(candidate, None, f"wrong output: {wrong}"), None, False
                return Outcome(candidate, self.timed(run)), run, False
        except (DTError, PerformanceWarning) as e:  # a backend's refusal (a tile too large here), DT_WARNINGS=error
            return Outcome(candidate, None, e.message), None, False
        except Exception as e:  # a crash of the generated code: a dt bug, said as such
            broken = not context_usable()
            what = "broke the GPU context" if broken else "raised"
            return Outcome(candidate, None, f"{what} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                                            "a dt bug: please report it with this schedule"), None, broken

    def timed(self, run) -> float:
        """run's time by the clock, holding the GPU for the timing alone: one search at a time on it."""
        with self.held():
            return self.clock(run)

    def _agrees_on_device(self, out) -> bool:
        """The outputs within the dtype's tolerance of the reference, checked where they are (a
        GPU: no copy back); False sends the check to dt.testing.compare, which says how not."""
        if self.on_device is None:
            return False
        from dt.testing import tolerance
        outs = out if isinstance(out, dict) else {"": out}
        for name, ref in self.on_device.items():
            rtol, atol = tolerance(self.checked[name])
            got, want = outs[name].float(), ref.float()
            finite = want[want.isfinite()]
            scale = max(float(finite.abs().max()), 1e-30) if finite.numel() else 1.0
            if got.shape != want.shape or not bool(((got - want).abs() <= atol * scale + rtol * want.abs())
                                                   .logical_or_(got == want).logical_or_(got.isnan() & want.isnan())
                                                   .all()):
                return False
        return True


class Local:
    """Measures on this machine; `workers` processes compile ahead (0: none). On a GPU the
    candidates run in a child process (`Child`), so that one that breaks the CUDA context
    (a misaligned address, an illegal access: a dt bug) fails alone and the search goes on."""

    def __init__(self, prog, sizes: dict, dtype: str, backend: str, seed: int, workers: int | None,
                 scalars: dict):
        gpu = on_gpu(backend)
        if workers is None:  # each runs its compiles on the GPU (a context each): a few suffice
            workers = min(max((os.cpu_count() or 2) - 2, 1), WORKERS) if gpu else 0
        caller = getattr(sys.modules.get("__main__"), "__file__", None)
        spawnable = caller is None or os.path.exists(caller)  # a spawned process imports the caller's script again
        workers = workers if spawnable else 0  # none to import (python - < script)
        setup = Setup(prog.ast.source, prog.name, sizes, dtype, backend, seed, scalars)
        self.measurer = (Child.started(setup) if gpu and spawnable else None) or InProcess(setup)
        self.setup = setup
        self.baselines = None  # an InProcess timing the baselines, made for the first
        self.pending: deque = deque()  # (candidate, compile future or None), in submission order
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=leave_interrupts_to_the_search) if workers else None
        self.depth = workers + 1 if workers else 1  # candidates kept in flight

    def submit(self, candidate):
        future = None
        if self.pool is not None:
            try:
                future = self.pool.submit(compile_once, candidate.text, self.setup)
            except BrokenProcessPool:  # workers that could not start: this process compiles the rest
                self.pool = None
        self.pending.append((candidate, future))

    def next(self) -> Outcome:
        """The next candidate whose compile finished (the oldest, without workers), measured."""
        futures = [f for _, f in self.pending if f is not None]
        if futures and not any(f.done() for f in futures):  # else the oldest: the measuring process compiles it
            wait(futures, timeout=TIMEOUT, return_when=FIRST_COMPLETED)
        ready = next((i for i, (_, f) in enumerate(self.pending) if f is None or f.done()), 0)
        candidate, _ = self.pending[ready]
        del self.pending[ready]
        return self.measurer.measure(candidate)

    def retime(self, candidate) -> float:
        if self.baselines is not None and candidate.name in self.baselines.runs:
            return self.baselines.retime(candidate)
        return self.measurer.retime(candidate)

    def time(self, name: str, fn) -> float:
        """A baseline's time: `fn(**inputs)` on the same inputs (made in this process), with the same clock."""
        self.baselines = self.baselines or InProcess(self.setup)
        return self.baselines.time(name, fn)

    def measure_now(self, candidate, timeout: float = TIMEOUT) -> Outcome:
        """Measured at once (compiled by the measuring process, not queued behind the workers),
        failed if that takes over `timeout` seconds (in a child process: none bounds this one)."""
        return self.measurer.measure(candidate, timeout)

    def abandon(self):
        """Drop what was submitted and not measured (the budget ran out), and stop the compile
        workers: what they are compiling (a wide tile can take a minute) is of no more use."""
        self.pending.clear()
        if self.pool is not None:
            _stop(self.pool)
            self.pool = None

    def close(self):
        self.abandon()
        self.measurer.close()


def _stop(pool: ProcessPoolExecutor):
    """Shut the pool down without waiting for the compiles under way: its processes killed
    (Python 3.14 says so publicly: terminate_workers)."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()


class InProcess:
    """Measures in this process."""

    def __init__(self, setup: Setup):
        from dt.runtime import loads
        self.inputs = Inputs(loads(setup.source, name=setup.name), setup.sizes, setup.dtype, setup.backend, setup.seed,
                             setup.scalars)
        self.runs: dict[str, object] = {}

    def attempt(self, candidate) -> tuple[Outcome, bool]:
        """(Its outcome, whether it broke the GPU context); a correct one is kept for retiming."""
        outcome, run, broken = self.inputs.measure(candidate)
        if run is not None:
            self.runs[candidate.name] = run
        return outcome, broken

    def measure(self, candidate, timeout: float | None = None) -> Outcome:
        return self.attempt(candidate)[0]  # unbounded: this process cannot stop a run of its own

    def retime(self, candidate) -> float:
        if candidate.name not in self.runs:
            self.measure(candidate)
        return self.inputs.timed(self.runs[candidate.name])

    def time(self, name: str, fn) -> float:
        """A baseline: `fn(**inputs)` on the same inputs, kept for retiming under its name."""
        self.runs[name] = lambda: fn(**self.inputs.args)
        return self.inputs.timed(self.runs[name])

    def close(self):
        pass


class Child:
    """Measures in a child process, started again after a candidate broke its GPU context or
    ran past TIMEOUT."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.lost = ""  # why no measuring process could be started again, if none could
        self._start()

    @classmethod
    def started(cls, setup: Setup):
        """A Child, or None where none can start (a script without `if __name__ == "__main__":`
        runs itself again in a spawned process and fails there); its own set-up error is raised."""
        try:
            return cls(setup)
        except EOFError:
            return None

    def _start(self):
        context = multiprocessing.get_context("spawn")
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, self.setup), daemon=True)
        self.process.start()
        theirs.close()
        if not self.connection.poll(TIMEOUT):  # set-up hung (the reference at these sizes, say)
            self.close()
            raise EOFError(f"the measuring process was not ready after {TIMEOUT} s")
        status, message = self.connection.recv()  # EOFError: it died before it could say
        if status == "error":
            self.close()
            raise DTError(f"the measuring process could not start: {message}", None,
                          "the same error is raised by prog.reference with these sizes and dtype")

    def _ask(self, request: tuple, timeout: float = TIMEOUT):
        """(The reply, or None; why there is none; whether it ran past `timeout`)."""
        if self.lost:
            return None, self.lost, False
        why, late = "", False
        try:
            self.connection.send(request)
            if self.connection.poll(timeout):
                reply, broken = self.connection.recv()
            else:
                reply, broken, why, late = None, True, f"it ran for more than {timeout:g} s", True
        except (EOFError, OSError):  # it died (a crash no exception caught)
            self.process.join(5)
            reply, broken, why = None, True, f"the measuring process died (exit code {self.process.exitcode})"
        if broken:
            self.close()
            try:
                self._start()
            except (EOFError, DTError) as e:  # the candidates left fail with this, not the search
                self.lost = f"no measuring process could be started again ({e})"
        return reply, why, late

    def measure(self, candidate, timeout: float = TIMEOUT) -> Outcome:
        reply, why, late = self._ask(("measure", candidate), timeout)
        return reply if reply is not None else Outcome(
            candidate, None, f"{why}; a dt bug: please report it with this schedule", late)

    def retime(self, candidate) -> float:
        reply, why, _ = self._ask(("retime", candidate))
        if reply is None:
            raise DTError(f"timing {candidate.name!r} again failed: {why}", None,
                          "a dt bug: please report it with this schedule")
        return reply

    def close(self):
        self.connection.close()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


def leave_interrupts_to_the_search():
    """In a worker or the measuring child: Ctrl-C on a terminal reaches the whole process group,
    and the search (the parent) stops them itself, keeping its best so far (docs/tuning.md)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve(connection, setup: Setup):
    """The child: say it is ready (or why not), then measure what the parent sends until it
    closes the pipe or a candidate breaks the GPU context (the reply says so, and it ends)."""
    leave_interrupts_to_the_search()
    try:
        measurer = InProcess(setup)
    except DTError as e:
        connection.send(("error", e.message))
        return
    connection.send(("ready", ""))
    while True:
        try:
            op, candidate = connection.recv()
            if op == "measure":
                outcome, broken = measurer.attempt(candidate)
                connection.send((outcome, broken))
                if broken:
                    return
            else:
                connection.send((measurer.retime(candidate), False))
        except (EOFError, BrokenPipeError):  # the search closed the pipe: it ended, or gave up on this measurement
            return


def compile_once(text: str, setup: Setup):
    """Worker: run the candidate once on zeros (and the scalars given, which a compiler may
    specialise on), so that its compiled kernels are on disk (the backend's cache, under the same
    program name, where the timing process finds them)."""
    from dt.runtime import loads
    try:
        prog = loads(text, name=setup.name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PerformanceWarning)  # the space was linted already
            prog(backend=setup.backend, schedule="written", sizes=unbound_sizes(prog, setup.sizes),
                 **zero_inputs(prog, setup.sizes, setup.dtype, setup.scalars))
    except (DTError, PerformanceWarning):
        pass  # the timing process reports it


def unbound_sizes(prog, sizes: dict) -> dict | None:
    """The extents of `sizes` that no input gives and the program needs (the rows of an embedding
    table its gradient writes, E_axis0): what a call passes as sizes=."""
    return {d: sizes[d] for d in prog.unbound_dims if d in sizes} or None


def zero_inputs(prog, sizes: dict, dtype: str | dict[str, str], scalars: dict | None = None) -> dict:
    """Inputs of the right shapes and dtypes (`dtype`: one name, or one per input), all zeros: what
    a compile needs (no values; zeros are valid indices), at once even for a vocabulary's logits;
    the `scalars` given, the others 1."""
    import numpy as np
    from dt.testing import numpy_dtype
    extents = prog._extents({}, sizes, "sizes")
    indexed = prog.checked.index_inputs
    args = {}
    for access in prog._accesses:
        shape = [extents[d] for d in prog.checked.input_axes[access.name]]
        kind = "i64" if access.name in indexed else of_input(dtype, access.name)
        args[access.name] = np.zeros(shape, numpy_dtype(kind))
    return {**args, **{s: 1 if s in prog.checked.index_scalars else 1.0 for s in prog.scalars}, **(scalars or {})}


def on_device(args: dict, backend: str) -> dict:
    """The inputs where the backend runs: on the GPU for triton there, else as they are."""
    if not on_gpu(backend):
        return args
    from dt.arrays import to_torch
    return {n: to_torch(a).cuda() if hasattr(a, "shape") else a for n, a in args.items()}


def disagreement(out, expected, checked: dict[str, str]) -> str:
    """'' where every output agrees with the reference within the tolerance of its dtype in
    `checked` (by name; '' for a single output), else how one does not."""
    from dt.testing import compare
    outs, refs = (out, expected) if isinstance(out, dict) else ({"": out}, {"": expected})
    for name, ref in refs.items():
        check = compare(outs[name].cpu() if hasattr(outs[name], "cpu") else outs[name], ref, checked[name])
        if not check.ok:
            return f"{name} {check}".strip()
    return ""


def clock(backend: str, prog=None, sizes: dict | None = None, dtype: str | dict[str, str] = "f32"):
    """The median time of a call in milliseconds, as dt's benchmark times its rows (dt.tune.timing):
    on a GPU a memory-bound program on a cold L2 for every run, a compute-bound one (its matrix
    products doing 200 FLOPs a byte or more) with Triton's do_bench; elsewhere wall time over
    repeated calls."""
    if on_gpu(backend):
        from triton.testing import do_bench
        if prog is not None and not timing.compute_bound(prog, prog._extents({}, sizes, "sizes"),
                                                         item_bytes(dtype)):
            try:
                timing.reset_persisting_l2()  # the driver call the cold timer needs
                return lambda fn: timing.cold_bench(fn, warmup=25, rep=100)
            except RuntimeError:
                pass
        return lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median")

    def wall(fn):
        fn()
        runs, begin = [], time.perf_counter()
        while len(runs) < 5 or (time.perf_counter() - begin < 0.2 and len(runs) < 50):
            start = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - start) * 1e3)
        return statistics.median(runs)
    return wall


def context_usable() -> bool:
    """False where the CUDA context can no longer run anything (a sticky error)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def on_gpu(backend: str) -> bool:
    """Whether `backend` runs its kernels on a CUDA GPU here (triton with one; not its interpreter)."""
    from dt import backends
    try:
        return getattr(backends.get(backend), "device", None) == "cuda"
    except DTError:  # not installed here: nothing of it runs anywhere
        return False


def device(backend: str) -> str:
    if on_gpu(backend):
        import torch
        return torch.cuda.get_device_name()
    import platform
    return f"CPU ({platform.machine()}, {backend})"
