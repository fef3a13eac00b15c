"""Errors of dt.debug: bad breakpoint or trace requests, and what the sanitizers find."""
from __future__ import annotations

from dt.errors import DTError, Loc


class DTDebugError(DTError):
    """A breakpoint, trace or sanitizer request dt cannot honour (a bad DT_BREAK spec, a line
    with no statement, a condition naming no loop or dimension there)."""
    kind = "debug error"


class DTDebugWarning(UserWarning):
    """A debugging request that cannot take effect where it is: a breakpoint naming no Func of
    the program running, or breakpoints, traces or sanitizers under a backend other than the
    interpreter."""


class DTSanitizerError(DTError):
    """A sanitizer found a fault while a program instance ran. The run stops there; nothing is
    returned. `kernel`, `pid`, `tensor` and `index` say where."""
    kind = "sanitizer error"

    def __init__(self, message: str, loc: Loc | None, *, kernel: str, pid: int, tensor: str | None,
                 index: tuple[int, ...] | dict[str, int], iters: dict[str, int], hint: str | None = None):
        self.kernel = kernel
        self.pid = pid
        self.tensor = tensor
        self.index = index
        self.iters = iters
        super().__init__(message, loc, hint)


class DTOutOfBoundsError(DTSanitizerError):
    """A load or store reaches an element outside its tensor on a lane no mask covers."""
    kind = "out-of-bounds access"


class DTUninitializedReadError(DTSanitizerError):
    """A load reads an element of a temporary (or output) that no program instance has written."""
    kind = "read of unwritten memory"


class DTRaceError(DTSanitizerError):
    """Two program instances of one launch write the same element, or one reads what another
    wrote: the result then depends on the order the instances run in."""
    kind = "race between program instances"


class DTNonFiniteError(DTSanitizerError):
    """A tile statement produced NaN or Inf on a valid (unmasked) lane."""
    kind = "non-finite value"


class DTOutOfRangeRead(DTError):
    """What the bounds sanitizer reports, as a DTOutOfRangeWarning, of a read at computed
    indices outside its tensor (A[x + 1] at the last x, an out-of-range gather index): such a
    read gives 0 by definition, which is what zero padding relies on and what a bad index hides."""
    kind = "read outside a tensor"


class DTUndefinedCast(DTError):
    """What the bounds sanitizer reports, as a DTOutOfRangeWarning, of a float converted to an
    integer dtype that cannot hold it (NaN, or past the dtype's range): the result is undefined
    and differs between backends."""
    kind = "cast out of range"


class DTOutOfRangeWarning(UserWarning):
    """A DTOutOfRangeRead or DTUndefinedCast, rendered: where, which value, how many lanes; the
    run goes on."""
