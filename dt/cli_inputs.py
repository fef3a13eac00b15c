"""What the `dt` command line is given, read and checked: NAME=VALUE options (--size, --scalar),
counts and tolerances, and inputs from .npy / .npz files (never unpickled). A command line dt
cannot act on is a UsageError."""
from __future__ import annotations

import argparse
import math

from dt import call_checks


class UsageError(Exception):
    """A command line dt cannot act on: printed as `dt: ...`, exit status 2."""


def sizes(pairs: list[str]) -> dict[str, int]:
    """--size DIM=N pairs; the extents themselves are the runtime's to check (at least 1, ...)."""
    return named_values(pairs, "--size", "name=integer", int)


def scalars(pairs: list[str]) -> dict[str, float | int]:
    return named_values(pairs, "--scalar", "name=number", integer_or_float)


def named_values(pairs: list[str], option: str, form: str, parse) -> dict:
    """The NAME=VALUE pairs given by a repeated option, each value read by `parse`."""
    values = {}
    for pair in pairs or ():
        name, sep, text = pair.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError(pair)
            values[name.strip()] = parse(text)
        except ValueError:
            raise UsageError(f"{option} takes {form}, got {pair!r}") from None
    return values


def integer_or_float(text: str) -> int | float:
    """An integer stays one: a scalar may index (K[l + start])."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"a finite number >= 0, got {text!r}")
    return value


def count(text: str) -> int:
    """A seed or a number of runs: an integer >= 0 (NumPy refuses negative seeds)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"an integer >= 0, got {text!r}")
    return value


# ---------------------------------------------------------------- inputs from files


# The first bytes of a .npy file, and of a .npz file (a zip archive, or an empty one)
_ARRAY_FILE_STARTS = (b"\x93NUMPY", b"PK\x03\x04", b"PK\x05\x06")


def load_array(path: str, what: str):
    import numpy as np
    try:
        with open(path, "rb") as f:
            # np.load takes any other file for a pickle, and would say so, and how to unpickle it
            if not f.read(6).startswith(_ARRAY_FILE_STARTS):
                raise UsageError(f"cannot read {path} ({what}): it is not a .npy or .npz file")
        return np.load(path, allow_pickle=False)  # never unpickle: a .npy/.npz holds numbers only
    except (FileNotFoundError, IsADirectoryError):  # reported by main() as for a DT file
        raise
    except (OSError, ValueError, EOFError) as e:
        raise UsageError(f"cannot read {path} ({what}): {e}") from None


def file_inputs(prog, pairs: list[str], npz_files: list[str]) -> tuple[dict, dict[str, str]]:
    """The arrays (and scalars) given by --input NAME=FILE.npy and --inputs FILE.npz, by name,
    and the file each came from."""
    import numpy as np
    given: dict = {}
    origin: dict[str, str] = {}

    def add(name: str, value, path: str):
        if name not in prog.inputs and name not in prog.scalars:
            raise UsageError(f"{path}: the program has no input or scalar {name!r} "
                             f"(inputs: {', '.join(prog.inputs) or '-'}"
                             + (f"; scalars: {', '.join(prog.scalars)})" if prog.scalars else ")"))
        if name in given:
            raise UsageError(f"{name} is given twice: by {origin[name]} and by {path}")
        if name in prog.scalars:
            try:
                if np.ndim(value) != 0:
                    raise ValueError(f"shape {np.shape(value)}")
                # an integer stays one, as with --scalar: it may index (K[l + start])
                value = int(value) if np.asarray(value).dtype.kind in "iu" else float(value)
            except (TypeError, ValueError) as e:
                raise UsageError(f"{path}: scalar {name} must be a single real number ({e})") from None
        given[name], origin[name] = value, path

    for pair in pairs or ():
        name, sep, path = pair.partition("=")
        if not sep or not name.strip() or not path:
            raise UsageError(f"--input takes NAME=FILE.npy, got {pair!r}")
        array = load_array(path, f"--input {name.strip()}")
        if not isinstance(array, np.ndarray):
            raise UsageError(f"{path}: --input takes a .npy file of one array; give .npz files with --inputs")
        add(name.strip(), array, path)
    for path in npz_files or ():
        archive = load_array(path, "--inputs")
        if isinstance(archive, np.ndarray):
            raise UsageError(f"{path}: --inputs takes a .npz file of named arrays; give .npy files with "
                             f"--input NAME=FILE.npy")
        with archive:
            for name in archive.files:
                try:
                    array = archive[name]
                except ValueError as e:  # an object array, which would need unpickling
                    raise UsageError(f"cannot read {path} (array {name!r}): {e}") from None
                add(name, array, path)
    return given, origin


def extents_from_files(prog, given: dict, sizes: dict[str, int]) -> dict[str, int]:
    """--size extents, completed by the shapes of the inputs read from files (the runtime's
    check: ranks, and extents the files disagree on)."""
    extents = dict(sizes)
    arrays = {n: a for n, a in given.items() if n in prog.inputs}
    for dim, (n, source, _) in call_checks.array_extents(prog.checked, arrays).items():
        if dim in sizes and sizes[dim] != n:
            raise UsageError(f"--size {dim}={sizes[dim]}, but {source} of the input files has {dim}={n}")
        extents.setdefault(dim, n)
    return extents
