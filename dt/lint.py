"""Performance warnings at run time: the context a program's lint runs in, the warnings a
program's source allows, how DT_WARNINGS and the `warnings` filters control them, and the
warning for kernels compiled again for every new shape.

    DT_WARNINGS=error    raise the first performance warning as an exception
    DT_WARNINGS=ignore   say nothing
    (unset)              warn, once per program and shape, through `warnings`

A program allows a warning it has measured and accepts with a comment line in its source:
`# allow: recomputed -- the 2mm inner fusion trades FLOPs for one kernel` (a code, then why).
"""
from __future__ import annotations

import re
import sys
import warnings

from dt import env
from dt.errors import DTBackendError, DTExtentError, DTInputError, PerformanceWarning
from dt.ir.check.program import CheckedProgram
from dt.ir.lint import RULES, Context
from dt.ir.lint import lint as lint_pipeline

ENV = "DT_WARNINGS"
MODES = ("error", "ignore", "default")
ALLOW = re.compile(r"^[ \t]*#[ \t]*allow:[ \t]*([a-z-]+)[ \t]+--[ \t]*(\S.*)$", re.MULTILINE)
# distinct shapes after which a program whose kernels compile per shape is warned about it
RECOMPILES = 8


def all_codes(backend_obj=None) -> set[str]:
    """Every warning code: dt's rules', `recompiles`, and those of a backend's rules and compiled facts."""
    rules = {**RULES, **getattr(backend_obj, "lint_rules", {})}
    compiled = set(getattr(backend_obj, "compiled_codes", ()))
    return {c for r in rules.values() for c in r.codes} | {"recompiles"} | compiled


def allowed(source: str) -> dict[str, str]:
    """The warnings a program's source allows: code -> the reason given."""
    return {m.group(1): m.group(2).strip() for m in ALLOW.finditer(source)}


def context(checked: CheckedProgram, extents: dict[str, int], machine: str) -> Context:
    schedule = {(f, p): loc for f, s in checked.schedules.items() for p, loc in s.locs.items()}
    sms = multiprocessors_here() if machine == "gpu" else None
    return Context(extents=dict(extents), machine=machine, schedule=schedule, fused=dict(checked.fused),
                   allowed=frozenset(allowed(checked.program.source)), **({"multiprocessors": sms} if sms else {}))


def multiprocessors_here() -> int | None:
    """The multiprocessors of the GPU torch uses here, where torch is imported and sees one
    (else the lint assumes an H100's)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def mode() -> str:
    value = env.read(ENV).lower() or "default"
    if value not in MODES:
        raise DTInputError(f"{ENV}={value!r} is not a mode dt knows", None,
                           f"set {ENV} to error or ignore, or unset it")
    return value


def emit(found: list[PerformanceWarning], stacklevel: int):
    """Report warnings as DT_WARNINGS says: through `warnings` (its filters apply), raised, or not at all."""
    how = mode()
    if how == "ignore":
        return
    for w in found:
        if how == "error":
            raise w
        warnings.warn(w, stacklevel=stacklevel)


def static_warnings(prog, backend_obj, pipeline, extents: dict[str, int]) -> list[PerformanceWarning]:
    """The warnings of the scheduled IR and of the backend's rules."""
    return lint_pipeline(pipeline, context(prog.checked, extents, backend_obj.capabilities.machine),
                         getattr(backend_obj, "lint_rules", None))


def program_warnings(prog, backend_obj, pipeline, extents: dict[str, int], compiled: bool):
    found = static_warnings(prog, backend_obj, pipeline, extents)
    if compiled and not extents:
        raise DTExtentError("the compiled kernels' warnings need extents", None,
                            "pass sizes= (and inputs), or lint without compiled=True")
    if compiled:
        found += kernel_facts(prog, backend_obj, pipeline, extents)[1]
    return found


def kernel_facts(prog, backend_obj, pipeline, extents: dict[str, int]):
    if not hasattr(backend_obj, "compiled_facts"):
        raise DTBackendError(f"backend '{backend_obj.name}' reports nothing of its compiled kernels", None,
                             "ask the triton backend (backend='triton')")
    return backend_obj.compiled_facts(pipeline, context(prog.checked, extents, backend_obj.capabilities.machine))


def warn_once(prog, backend_obj, key: tuple, pipeline, extents: dict[str, int], size_args: dict[str, int]):
    """At a call's planning: the warnings of its schedule at its extents, once per program and
    shape; for the debugger, those a GPU would give."""
    from dt.debug import config as debug_config
    if debug_config.current() is not None:  # the debugger shows them where they point
        from dt import backends
        debug_config.record_warnings(pipeline, size_args,
                                     static_warnings(prog, backends.get("triton"), pipeline, extents))
    shape = (key, tuple(sorted(extents.items())))
    if shape in prog.linted.shapes or mode() == "ignore":
        return
    found = static_warnings(prog, backend_obj, pipeline, extents)
    if backend_obj.capabilities.compiles_per_shape:
        again = prog.linted.add(key, extents, pipeline.kernels[0].loc if pipeline.kernels else None)
        if again is not None and again.code not in allowed(prog.ast.source):
            found.append(again)
    emit(found, stacklevel=6)  # the caller of prog(...)
    prog.linted.shapes.add(shape)  # after: a warning raised as an error (DT_WARNINGS=error) is raised again


class Linted:
    """The shapes a program has been warned about, and the distinct extents it has been called
    with per backend and dtypes, for backends that compile their kernels again for each
    (Triton's: extents and strides are constants)."""

    def __init__(self):
        self.shapes: set[tuple] = set()
        self.seen: dict[tuple, set[tuple]] = {}

    def add(self, key: tuple, extents: dict[str, int], kernel_loc) -> PerformanceWarning | None:
        shapes = self.seen.setdefault(key, set())
        shapes.add(tuple(sorted(extents.items())))
        if len(shapes) != RECOMPILES:
            return None
        varying = sorted({d for shape in shapes for d, n in shape if n != dict(next(iter(shapes)))[d]})
        return PerformanceWarning(
            "recompiles", f"this program has been called with {RECOMPILES} shapes on backend '{key[0]}', which "
            f"compiles its kernels again for each: extents ({', '.join(varying)} here) are compile-time constants "
            f"of its kernels", kernel_loc,
            cost="a compile of every kernel for every new shape (0.13 s for a row-wise norm on an H100) instead of one",
            hint=f"call it with few distinct shapes: pad {', '.join(varying)} up to a few sizes (a multiple of 256, "
                 f"say) and mask the padding in the algorithm (dt's Triton kernels have no run-time extents yet)")
