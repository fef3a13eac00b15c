"""The debugging state in force: breakpoints, traces, sanitizer checks and launch order, set
through the dt.debug API or the environment. The environment is read at every program call,
like DT_BACKEND:

    DT_BREAK=softmax.dt:10@pid=3;_sum     breakpoints, separated by ';' or ','
    DT_SANITIZE=1                         every sanitizer (or a list: bounds,uninit,race,nan;
                                          0, off, false, no or empty: none)
    DT_SHUFFLE=7                          run program instances in an order shuffled with seed 7

A variable whose value sets nothing (DT_SANITIZE=0, DT_BREAK=';') turns nothing on: programs
keep their default backend.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from dt import env
from dt.debug.breakpoints import Breakpoint, parse_list
from dt.debug.errors import DTDebugError, DTDebugWarning

CHECKS = ("bounds", "uninit", "race", "nan")

_breakpoints: list[Breakpoint] = []
_traces: list = []
_contexts: list[tuple[frozenset[str], int | None]] = []  # active sanitize()/shuffle() contexts
_env_breaks: tuple[str, list[Breakpoint]] = ("", [])
# (id of a pipeline, its size arguments) -> (the pipeline, its performance warnings on a GPU)
_schedule_warnings: dict[tuple, tuple] = {}
KEPT_WARNINGS = 64
live_sessions: list = []  # the runs in progress (a stop can set breakpoints that apply to them)


@dataclass(frozen=True)
class Config:
    breakpoints: tuple[Breakpoint, ...]
    traces: tuple
    checks: frozenset[str]
    shuffle: int | None


def current() -> Config | None:
    """The state in force now; None when no debugging feature is on (the plain, fast path)."""
    env_break, env_sanitize, env_shuffle = env.read("DT_BREAK"), env.read("DT_SANITIZE"), env.read("DT_SHUFFLE")
    if not (_breakpoints or _traces or _contexts or env_break or env_sanitize or env_shuffle):
        return None
    checks = set(parse_checks(env_sanitize, "DT_SANITIZE"))
    shuffle = None
    if env_shuffle:
        try:
            shuffle = int(env_shuffle)
        except ValueError:
            raise DTDebugError(f"DT_SHUFFLE must be an integer seed, got {env_shuffle!r}", None) from None
    for context_checks, seed in _contexts:
        checks |= context_checks
        shuffle = seed if seed is not None else shuffle
    breakpoints = tuple(_breakpoints) + tuple(_env_breakpoints(env_break))
    if not (breakpoints or _traces or checks or shuffle is not None):  # DT_SANITIZE=0, DT_BREAK=';': all off
        return None
    return Config(breakpoints, tuple(_traces), frozenset(checks), shuffle)


def warn_if_ignored(backend: str, program: str):
    """Warn when debugging features are on but a call of `program` runs on `backend`: only the
    interpreter debugs, so elsewhere they would do nothing, silently (once per program,
    backend and state, as Python shows a warning once per message)."""
    state = current()
    if state is None or backend == "interp":
        return
    what = []
    if state.breakpoints:
        env_break = env.read("DT_BREAK")
        origins = ([f"DT_BREAK={env_break}"] if _env_breakpoints(env_break) else []) + \
            (["dt.debug.break_at"] if _breakpoints else [])
        what.append(f"breakpoints ({', '.join(origins)})")
    if state.traces:
        what.append("traces")
    if state.checks:
        what.append(f"sanitizers ({', '.join(c for c in CHECKS if c in state.checks)})")
    if state.shuffle is not None:
        what.append(f"shuffled launch orders (seed {state.shuffle})")
    warnings.warn(f"{' and '.join(what)} are set, but program '{program}' runs on backend '{backend}', where they do "
                  f"nothing: only the interpreter debugs; run it on the interpreter (backend='interp', or "
                  f"DT_BACKEND=interp, or name no backend)", DTDebugWarning, stacklevel=2)


def parse_checks(text, source: str = "sanitize") -> tuple[str, ...]:
    """'1', 'all', True -> every check; '', '0', False -> none; else names separated by ','."""
    if text is True or (isinstance(text, str) and text.strip().lower() in ("1", "all", "true", "yes", "on")):
        return CHECKS
    if text is False or text is None or (isinstance(text, str) and text.strip().lower() in ("", "0", "false",
                                                                                                "no", "off")):
        return ()
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise DTDebugError(f"{source}: unknown sanitizer {', '.join(map(repr, unknown))}", None,
                           f"the sanitizers are {', '.join(CHECKS)} (or 1 for all)")
    return tuple(names)


def _env_breakpoints(text: str) -> list[Breakpoint]:
    global _env_breaks
    if text != _env_breaks[0]:  # parsed once per value, so hit counts survive between calls
        _env_breaks = (text, parse_list(text) if text else [])
    return _env_breaks[1]


def add_breakpoint(bp: Breakpoint) -> Breakpoint:
    _breakpoints.append(bp)
    try:
        _changed()
    except DTDebugError:  # it names nothing in a program now running: refuse it there and then
        _breakpoints.remove(bp)
        _changed()
        raise
    return bp


def remove_breakpoint(bp: Breakpoint):
    if bp in _breakpoints:
        _breakpoints.remove(bp)
    _changed()


def clear_breakpoints():
    _breakpoints.clear()
    _changed()


def _changed():
    for session in live_sessions:
        session.breakpoints_changed(tuple(_breakpoints) + tuple(_env_breaks[1]))


def breakpoints() -> list[Breakpoint]:
    return list(_breakpoints) + _env_breakpoints(env.read("DT_BREAK"))


def record_warnings(pipeline, sizes: dict, found):
    """The performance warnings a GPU would give this pipeline at these size arguments, for the
    debugger to show at the statements they concern."""
    _schedule_warnings[(id(pipeline), tuple(sorted(sizes.items())))] = (pipeline, tuple(found))
    while len(_schedule_warnings) > KEPT_WARNINGS:  # the oldest go: they keep their pipelines alive
        del _schedule_warnings[next(iter(_schedule_warnings))]


def recorded_warnings(pipeline, sizes: dict) -> tuple:
    held = _schedule_warnings.get((id(pipeline), tuple(sorted(sizes.items()))))
    return held[1] if held is not None and held[0] is pipeline else ()


def push_context(entry: tuple[frozenset[str], int | None]):
    _contexts.append(entry)


def pop_context(entry: tuple[frozenset[str], int | None]):
    _contexts.remove(entry)


def add_trace(trace):
    _traces.append(trace)


def remove_trace(trace):
    if trace in _traces:
        _traces.remove(trace)
