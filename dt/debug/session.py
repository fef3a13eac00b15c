"""The object an instrumented interpreter run calls (`_dbg` in the generated code): it decides
where to stop, records traces, runs the sanitizers' checks around loads and stores, and
orders the program instances of each launch."""
from __future__ import annotations

import os
import sys
import warnings
from collections import defaultdict

import numpy as np

from dt.backends.numpy.runtime import gather, load, store
from dt.debug import config as debug_config
from dt.debug.errors import (DTNonFiniteError, DTOutOfBoundsError, DTOutOfRangeRead, DTOutOfRangeWarning,
                             DTRaceError, DTSanitizerError, DTUndefinedCast, DTUninitializedReadError)
from dt.debug.frame import Frame
from dt.debug.info import ProgramInfo, Statement
from dt.debug.trace import TileRecord
from dt.ir import scheduled as S


def valid_lanes(value, spans) -> tuple:
    """The index of `value`'s valid lanes: the first `valid` of each full-size axis; an axis of
    size 1 (a broadcast one) is kept whole."""
    return tuple(slice(0, v) if value.shape[i] == n else slice(None) for i, (_, n, v) in enumerate(spans))


def format_index(element: dict[str, int]) -> str:
    return ", ".join(f"{d}={i}" for d, i in element.items())


class Session:
    def __init__(self, info: ProgramInfo, config: debug_config.Config, sizes: dict[str, int]):
        self.info = info
        self.config = config
        self.sizes = dict(sizes)
        self.warnings = debug_config.recorded_warnings(info.pipeline, sizes)
        n = len(info.statements)
        self.on = [False] * n
        self.all_on = [True] * n
        self.checks = config.checks
        self.shadowed = bool(self.checks & {"uninit", "race"})
        self.stepping = False
        self.step_handler = None
        self.step_line = None  # (file, line) that a line step runs past
        self.pid, self.inst, self.launch_base, self.next_inst = -1, -1, 0, 0
        self.counts: dict[int, int] = {}
        self.writers: dict[str, np.ndarray] = {}  # instance that last wrote each element, -1 if none
        self.buffers: dict[str, np.ndarray] = {}
        self.reported: set[int] = set()  # statements whose read outside a tensor or cast was reported
        self._resolve(config.breakpoints)
        self.traces = config.traces
        self.run_index = {id(t): t._start_run(info.pipeline.name, self.sizes) for t in self.traces}
        self.traces_at = [[t for t in self.traces if st.target is not None and t.wants(st.target, info)]
                          for st in info.statements]
        self.finite_at = ["nan" in self.checks and _checks_finite(st) for st in info.statements]
        self.post_flags = [bool(self.traces_at[i]) or self.finite_at[i] for i in range(n)]

    # ------------------------------------------------------------ breakpoints
    def _resolve(self, breakpoints):
        self.base_on = [False] * len(self.info.statements)
        self.pid_breaks: list[tuple[frozenset[int], list[int]]] = []
        self.breaks_at: dict[int, list] = defaultdict(list)
        for bp in breakpoints:
            sids = bp.resolve(self.info)
            for s in sids:
                self.breaks_at[s].append(bp)
                if bp.pids is None:
                    self.base_on[s] = True
            if bp.pids is not None and sids:
                self.pid_breaks.append((bp.pids, sids))

    def _flags_for(self, pid: int):
        self.on[:] = self.base_on
        for pids, sids in self.pid_breaks:
            if pid in pids:
                for s in sids:
                    self.on[s] = True

    def enter(self, pid: int):
        """Called first by every program instance: the flags of its hooks."""
        self.pid = pid
        if self.stepping:
            self.on[:] = self.all_on
        else:
            self._flags_for(pid)
        return self.on, self.post_flags

    def stop(self, sid: int, scope: dict):
        """Before tile statement `sid`: stop there if stepping or a breakpoint's conditions hold."""
        st = self.info.statements[sid]
        frame, bp = None, None
        for b in self.breaks_at.get(sid, ()):
            if b.pids is not None and self.pid not in b.pids:
                continue
            if callable(b.when):
                frame = frame or Frame(self, st, scope)
                if not b.when(frame):
                    continue
            elif b.when and not b.holds(scope, st):
                continue
            bp = b
            break
        if self.stepping:
            if bp is None and self.step_line is not None and st.loc is not None \
                    and (st.loc.file, st.loc.line) == self.step_line:
                return
            handler = self.step_handler
        elif bp is None:
            return
        else:
            from dt.debug.debugger import enter_debugger  # imports pdb: only once something stops
            handler = bp.action or enter_debugger
        self.stepping = False
        if bp is not None:
            bp.hits += 1
        frame = frame or Frame(self, st, scope)
        frame.breakpoint = bp
        handler(frame)
        if frame.stepping:
            self.stepping, self.step_handler = True, handler
            self.step_line = (st.loc.file, st.loc.line) if frame.stepping == "line" and st.loc is not None else None
            self.on[:] = self.all_on
        else:
            self._flags_for(self.pid)

    def breakpoints_changed(self, breakpoints):
        """Set or cleared while this run is stopped: applies from the next statement on."""
        self._resolve(breakpoints)
        if not self.stepping:
            self._flags_for(self.pid)

    # ------------------------------------------------------------ after a statement
    def post(self, sid: int, scope: dict):
        st = self.info.statements[sid]
        value = scope[st.target.name]
        if self.finite_at[sid]:
            self._check_finite(st, value, scope)
        for trace in self.traces_at[sid]:
            if trace.pids is None or self.pid in trace.pids:
                self._record(trace, st, value, scope)

    def _spans(self, st: Statement, scope: dict):
        return [scope[a] for a in st.target.axes]

    @staticmethod
    def _element(st: Statement, lane: tuple[int, ...], scope: dict) -> dict[str, int]:
        """The element at `lane` of the statement's tile, along the tile's axes and the scalar
        axes in scope (a block of 1 along b: no tile axis, one index)."""
        at = dict(zip(st.target.axes, lane))
        return {a.dim: scope[a.name][0] + at.get(a.name, 0) for a in st.dims.values()
                if a.name in at or a.scalar}

    def _check_finite(self, st: Statement, value, scope: dict):
        value = np.asarray(value)
        if value.dtype.kind != "f":
            return
        spans = self._spans(st, scope)
        valid = value[valid_lanes(value, spans)] if value.ndim == len(spans) else value
        bad = ~np.isfinite(valid)
        if not bad.any():
            return
        lane = tuple(int(i) for i in np.argwhere(bad)[0])
        x = float(valid[lane])
        element = self._element(st, lane, scope)
        raise self._fault(DTNonFiniteError, st,
                          f"{st.target.meaning} is {x} at {format_index(element)}, a valid lane", None, element,
                          "the first NaN/Inf produced on a valid lane this run; to see the tiles it came from, "
                          "break there with DT_BREAK={place}")

    def _record(self, trace, st: Statement, value, scope: dict):
        value = np.asarray(value)
        spans = self._spans(st, scope)
        if value.ndim == len(spans):
            value = np.broadcast_to(value[valid_lanes(value, spans)], tuple(v for _, _, v in spans))
        index = {d: (s, s + v) for d, (s, _, v) in zip(st.target.dims, spans)}
        # the scalar axes in scope (a block of 1 along b): a unit axis of the record each, first
        scalar = {a.dim: (scope[a.name][0], scope[a.name][0] + 1) for a in st.dims.values()
                  if a.scalar and a.dim not in index}
        if scalar and value.ndim == len(spans):
            value, index = value.reshape((1,) * len(scalar) + value.shape), {**scalar, **index}
        iters = {f.var: scope[f.var] for f in st.loops}
        trace.records.append(TileRecord(st.target.dt_name, self.info.kernel_names[st.kernel], self.pid, iters,
                                        tuple(index), index, np.array(value), st.loc, self.run_index[id(trace)]))

    # ------------------------------------------------------------ memory
    def allocate(self, name: str, array: np.ndarray) -> np.ndarray:
        self.buffers[name] = array
        if self.shadowed:
            self.writers[name] = np.full(array.shape, -1, dtype=np.int64)
        return array

    def launch(self, kernel: int, count: int):
        """The program ids of one launch, in order or shuffled."""
        base = self.next_inst
        self.next_inst += count
        self.launch_base, self.counts[kernel] = base, count
        order = range(count) if self.config.shuffle is None else \
            np.random.default_rng([self.config.shuffle, kernel]).permutation(count).tolist()
        for pid in order:
            self.inst = base + pid
            yield pid
        for name in self.info.pipeline.kernels[kernel].writes:
            for trace in self.traces:
                if trace.wants_tensor(name, self.info):
                    trace._memory(self.run_index[id(trace)], name, self.buffers[name].copy())

    def load(self, sid: int, name: str, tensor: np.ndarray, spans, perm, dtype):
        if self.checks:
            self._check_access(sid, name, tensor, spans, "load")
        return load(tensor, spans, perm, dtype)

    def gather(self, sid: int, name: str, tensor: np.ndarray, subscripts, spans, shape, dtype):
        """A load at computed indices; the bounds sanitizer reports, once per statement, the
        valid lanes (those within their axes' limits) that read outside the tensor."""
        if "bounds" in self.checks and sid not in self.reported:
            valid = _valid_lanes(spans, shape)
            index = np.broadcast_arrays(*(np.asarray(s, dtype=np.int64) for s in subscripts), valid)[:-1]
            outside = np.zeros(shape, dtype=bool)
            for i, n in zip(index, tensor.shape):
                outside |= (i < 0) | (i >= n)
            outside &= valid
            if outside.any():
                self.reported.add(sid)
                lane = tuple(np.argwhere(outside)[0])
                element = tuple(int(i[lane]) for i in index)
                st = self.info.statements[sid]
                report = DTOutOfRangeRead(
                    f"'{name}' is read at {name}[{', '.join(map(str, element))}], outside its shape "
                    f"{tuple(tensor.shape)}, on {int(outside.sum())} lane(s) (program {self.pid} of "
                    f"{self.info.kernel_of(sid)}): each reads 0", st.loc,
                    "zero padding reads there on purpose (a shifted read at an edge); an index tensor should not")
                warnings.warn(report.render(), DTOutOfRangeWarning, stacklevel=2)
        return gather(tensor, subscripts, shape, dtype)

    def cast(self, sid: int, value, spans, name: str, dtype):
        """A float converted to an integer dtype; the bounds sanitizer reports, once per statement,
        valid lanes whose value is NaN or past the dtype's range (an undefined result)."""
        value = np.asarray(value)
        if "bounds" in self.checks and sid not in self.reported:
            valid = _valid_lanes(spans, value.shape)
            limits = np.iinfo(dtype)
            with np.errstate(invalid="ignore"):
                truncated = np.trunc(value.astype(np.float64))
                bad = valid & (np.isnan(truncated) | (truncated < limits.min) | (truncated > limits.max))
            if bad.any():
                self.reported.add(sid)
                first = value[tuple(np.argwhere(bad)[0])]
                st = self.info.statements[sid]
                report = DTUndefinedCast(
                    f"{float(first):g} cannot be converted to {name} (range {limits.min}..{limits.max}), on "
                    f"{int(bad.sum())} lane(s) (program {self.pid} of {self.info.kernel_of(sid)}): the result is "
                    f"undefined", st.loc, "clamp the value first (maximum/minimum) or cast to a wider integer")
                warnings.warn(report.render(), DTOutOfRangeWarning, stacklevel=2)
        return value.astype(dtype) if value.ndim else value.astype(dtype)[()]

    def store(self, sid: int, name: str, tensor: np.ndarray, spans, value):
        if self.checks:
            self._check_access(sid, name, tensor, spans, "store")
        store(tensor, spans, value)

    def _check_access(self, sid: int, name: str, tensor: np.ndarray, spans, kind: str):
        st = self.info.statements[sid]
        verb = "reads" if kind == "load" else "writes"
        if "bounds" in self.checks:
            for axis, (start, _, valid) in enumerate(spans):
                if valid > 0 and (start < 0 or start + valid > tensor.shape[axis]):
                    index = tuple(s for s, _, _ in spans)
                    index = index[:axis] + (start if start < 0 else tensor.shape[axis],) + index[axis + 1:]
                    raise self._fault(
                        DTOutOfBoundsError, st,
                        f"{kind} of '{name}' {verb} {name}[{', '.join(map(str, index))}], outside its shape "
                        f"{tuple(tensor.shape)}, on a lane no mask covers", name, index,
                        "every lane past an extent must be masked by its axis limit: the scheduled IR that "
                        "reached the backend lacks one (a lowering or pass bug, not a fault of the DT program)")
        writer = self.writers.get(name)
        if writer is None:
            return
        region = writer[tuple(slice(s, s + v) for s, _, v in spans)]
        if kind == "load" and "uninit" in self.checks and (region < 0).any():
            index = self._first(region < 0, spans)
            raise self._fault(DTUninitializedReadError, st,
                              f"load of '{name}' reads {name}[{', '.join(map(str, index))}], which no program "
                              f"instance has written", name, index,
                              f"a kernel that writes '{name}' must run, and cover it, before this one reads it")
        others = (region >= self.launch_base) & (region != self.inst) if "race" in self.checks else None
        if others is not None and others.any():
            index = self._first(others, spans)
            other = int(region[tuple(i - s for i, (s, _, _) in zip(index, spans))]) - self.launch_base
            what = "wrote it too" if kind == "store" else "wrote it earlier"
            raise self._fault(DTRaceError, st,
                              f"{kind} of '{name}' {verb} {name}[{', '.join(map(str, index))}]; program {other} of "
                              f"the same launch {what}", name, index,
                              "program instances of one launch run in no fixed order on a GPU: each element "
                              "must have one writer, and no instance may read what another writes "
                              "(DT_SHUFFLE=<seed> shows how the result moves with the order)")
        if kind == "store":
            region[...] = self.inst

    @staticmethod
    def _first(mask: np.ndarray, spans) -> tuple[int, ...]:
        lane = np.argwhere(mask)[0]
        return tuple(int(s + i) for (s, _, _), i in zip(spans, lane))

    def _fault(self, cls, st: Statement, message: str, tensor, index, hint) -> DTSanitizerError:
        kernel = self.info.kernel_of(st.sid)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != kernel:
            frame = frame.f_back
        scope = frame.f_locals if frame is not None else {}
        iters = {f.var: scope[f.var] for f in st.loops if f.var in scope}
        count = self.counts.get(st.kernel)
        where = f"program {self.pid}{f' of {count}' if count is not None else ''} of {kernel}"
        where += "".join(f", {k}={v}" for k, v in iters.items())
        place = f"{_place(st)}@pid={self.pid}" + "".join(f"@{k}={v}" for k, v in iters.items())
        return cls(f"{message} ({where})", st.loc, kernel=kernel, pid=self.pid, tensor=tensor, index=index,
                   iters=iters, hint=hint.replace("{place}", place))


def _valid_lanes(spans, shape) -> np.ndarray:
    """Which lanes of a tile of `shape` over the axes `spans` lie within their axes' limits (a
    broadcast axis, of size 1, holds one valid lane)."""
    valid = np.ones(shape, dtype=bool)
    for axis, (_, lanes, count) in enumerate(spans):
        if shape[axis] == lanes:
            valid &= (np.arange(lanes) < count).reshape([-1 if a == axis else 1 for a in range(len(shape))])
    return valid


def _checks_finite(st: Statement) -> bool:
    """Every Assign but the ±inf initialisation of a max/min accumulator and the tiles of
    arg-reductions, which rank values as rmax compares them (-inf where a `where` masks, +inf for
    NaN, -inf for an empty or taken rank): their inputs are checked where they are loaded."""
    if st.target is None or st.node.dt_name in ("rargmax", "rargmin", "rargtopk"):
        return False
    value = st.node.value
    return not (isinstance(value, S.Full) and not np.isfinite(value.value))


def _place(st: Statement) -> str:
    loc = st.loc
    return f"{os.path.basename(loc.file)}:{loc.line}{f':{loc.col}' if loc.col else ''}" if loc else str(st.sid)

