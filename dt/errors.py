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


class DTError(Exception):
    """Base of every error dt reports to users."""

    kind = "error"

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None,
                 notes: tuple[tuple[str, Loc | None], ...] = ()):
        self.message = message
        self.loc = loc
        self.hint = hint
        self.notes = notes
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{self.loc}: {self.kind}: {self.message}" if self.loc else f"{self.kind}: {self.message}"]
        lines += _excerpt(self.loc)
        for note, loc in self.notes:
            lines.append(f"{loc}: note: {note}" if loc else f"note: {note}")
            lines += _excerpt(loc)
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


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
        except DTError as e:
            raise e.with_traceback(None) from None

    return wrapper
