"""The DTError family: every user-facing error carries the DT source location."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A place in DT source (a .dt file, or a Python line for programs built in Python)."""

    file: str
    line: int
    col: int  # 1-based; 0 when unknown
    length: int = 1
    text: str = ""  # the whole source line, for the caret display

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.col else f"{self.file}:{self.line}"


class _Diagnostic:
    """What an error and a warning show: the location, a caret under the DT source, notes, a hint."""

    kind = "error"

    def render(self) -> str:
        heading = f"{self._label()}: {self.message}"
        lines = [f"{self.loc}: {heading}" if self.loc else heading]
        lines += _excerpt(self.loc)
        lines += self._details()
        for note, loc in self.notes:
            lines.append(f"{loc}: note: {note}" if loc else f"note: {note}")
            lines += _excerpt(loc)
        if self.hint:
            lines.append(f"hint: {self.hint}")
        # a file name that is not UTF-8 (surrogate escapes) shown escaped: the text can be printed and sent
        return "\n".join(lines).encode("utf-8", "backslashreplace").decode("utf-8")

    def _label(self) -> str:
        return self.kind

    def _details(self) -> list[str]:
        return []


class DTError(_Diagnostic, Exception):
    """Base of every error dt reports to users."""

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None,
                 notes: tuple[tuple[str, Loc | None], ...] = ()):
        self.message = message
        self.loc = loc
        self.hint = hint
        self.notes = notes
        super().__init__(self.render())


class ScheduleNote(UserWarning):
    """Which schedule a call with schedule="tuned" runs: the tuned one and where it comes from,
    or the one as written and why (dt.tune.choose). Once per call signature."""


class PerformanceWarning(_Diagnostic, UserWarning):
    """A schedule that will run slowly, at the DT line that makes it so: what it costs (an
    estimate) and the schedule change that removes it. `code` names the warning
    (docs/performance-warnings.md lists them); `func` is the DT Func whose kernel it concerns."""

    kind = "performance warning"

    def __init__(self, code: str, message: str, loc: Loc | None, *, cost: str, hint: str, func: str = "",
                 notes: tuple[tuple[str, Loc | None], ...] = ()):
        self.code = code
        self.message = message
        self.loc = loc
        self.cost = cost
        self.hint = hint
        self.func = func
        self.notes = notes
        super().__init__(self.render())

    def _label(self) -> str:
        return f"{self.kind} [{self.code}]"

    def __reduce__(self):  # by its fields: a process pool's worker may raise it (DT_WARNINGS=error)
        return _performance_warning, (self.code, self.message, self.loc, self.cost, self.hint, self.func, self.notes)

    def _details(self) -> list[str]:
        return [f"cost: {self.cost}"]

    def __eq__(self, other):
        return isinstance(other, PerformanceWarning) and (self.code, self.message, self.loc) == \
            (other.code, other.message, other.loc)

    def __hash__(self):
        return hash((self.code, self.message, self.loc))


def _performance_warning(code, message, loc, cost, hint, func, notes) -> PerformanceWarning:
    return PerformanceWarning(code, message, loc, cost=cost, hint=hint, func=func, notes=notes)


def _excerpt(loc: Loc | None) -> list[str]:
    if loc is None or not loc.text:
        return []
    text = loc.text.rstrip("\n")
    shown = text.lstrip()
    indent = len(text) - len(shown)
    # One column per character, as columns are counted: a tab, form feed or line separator
    # printed as it is would move the text away from the caret (or start a new line).
    shown = "".join(c if c.isprintable() else " " for c in shown)
    lines = [f"    {shown}"]
    if loc.col:
        lines.append("    " + " " * max(loc.col - 1 - indent, 0) + "^" * max(loc.length, 1))
    return lines


class DTSyntaxError(DTError):
    kind = "syntax error"


class DTNameError(DTError):
    kind = "name error"


class DTDimensionError(DTError):
    kind = "dimension error"


class DTTypeError(DTError):
    kind = "type error"


class DTScheduleError(DTError):
    kind = "schedule error"


class DTExtentError(DTError):
    kind = "extent error"


class DTInputError(DTError):
    kind = "input error"


class DTBackendError(DTError):
    kind = "backend error"


def user_facing(fn):
    """Decorator for public entry points: a DTError surfaces from here, without the frames of
    dt's internals in its traceback (the message already points at the DT source)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (DTError, PerformanceWarning) as e:  # a warning raised under DT_WARNINGS=error
            raise e.with_traceback(None) from None

    return wrapper
