"""The dtypes a search makes its inputs in: one name for every input (`dt tune --dtype bf16`), or
one per input, for programs whose inputs differ (an int8 weight beside bf16 activations:
`dt tune --dtype bf16 --dtype Wq=i8`, `prog.tune(sizes, {"X": "bf16", "Wq": "i8", "S": "bf16"})`).
Inputs and scalars that index others are int64."""
from __future__ import annotations

from dt.dtypes import ALL, INTEGERS, ITEM_BYTES
from dt.errors import DTInputError

LOOSEST_FIRST = ("bf16", "f16", "f32", "f64")  # TOLERANCES' float dtypes, least precise first


def resolved(prog, dtype: str | dict[str, str]) -> str | dict[str, str]:
    """`dtype` as a search and its cache key take it: one name where every input that indexes
    nothing has it, else {input: name} for those inputs in the program's order and the scalars
    that index (int64, as a call passing them Python ints makes them). Inputs and scalars that
    index are made int64 whatever a mapping names for them (an integer): indices are not what a
    schedule is tuned for, and a call's index dtypes do not pick an entry of the cache."""
    if isinstance(dtype, str):
        return _known(dtype, None)
    named = {n: _known(t, n) for n, t in dict(dtype).items()}
    indexing = set(prog.checked.index_inputs) | set(prog.checked.index_scalars)
    data = _data_inputs(prog)
    unknown = [n for n in named if n not in prog.inputs and n not in indexing]
    if unknown:
        raise DTInputError(f"dtype names {', '.join(map(repr, unknown))}, which {prog.name} does not read", None,
                           f"its inputs are {', '.join(prog.inputs)}")
    missing = [n for n in data if n not in named]
    if missing:
        raise DTInputError(f"no dtype is given for {', '.join(map(repr, missing))}", None,
                           "name every input ({'X': 'bf16', 'W': 'i8', ...}), or give one dtype for the rest "
                           "(dt tune --dtype bf16 --dtype W=i8)")
    for n in (n for n in named if n in indexing and named[n] not in INTEGERS):
        raise DTInputError(f"{n!r} indexes {prog.name}'s inputs, so its dtype must be an integer, not {named[n]}",
                           None, f"use one of {', '.join(INTEGERS)}")
    if len({named[n] for n in data}) == 1:
        return named[data[0]]
    return {**{n: named[n] for n in data}, **dict.fromkeys(prog.checked.index_scalars, "i64")}


def with_default(prog, default: str, named: dict[str, str]) -> str | dict[str, str]:
    """`default` for every input that indexes nothing and `named` does not name (the command line's
    `--dtype bf16 --dtype W=i8`), resolved."""
    return resolved(prog, {**dict.fromkeys(_data_inputs(prog), default), **named})


def of_input(dtype: str | dict[str, str], name: str) -> str:
    """The dtype of the input `name` (one that indexes nothing) under a resolved `dtype`."""
    return dtype[name] if isinstance(dtype, dict) else dtype


def label(dtype: str | dict[str, str]) -> str:
    """'bf16', or 'X=bf16 Wq=i8 S=bf16': the search's title, its cache key's dtype, a file's note."""
    return dtype if isinstance(dtype, str) else " ".join(f"{n}={t}" for n, t in dtype.items())


def checked_in(dtype: str | dict[str, str]) -> str:
    """The dtype whose tolerance outputs are checked with: the least precise float the inputs have
    (f32 where none is f16, bf16 or f64: 8-bit floats and integers are computed in f32)."""
    names = {dtype} if isinstance(dtype, str) else set(dtype.values())
    return next((d for d in LOOSEST_FIRST if d in names), "f32")


def checked_for(dtype: str | dict[str, str], stored: str) -> str:
    """The dtype whose tolerance an output stored in `stored` is checked with: the looser of the
    inputs' (checked_in) and its own (float32 inputs cast to a bf16 result round as bf16)."""
    return next(d for d in LOOSEST_FIRST if d in (checked_in(dtype), stored))


def item_bytes(dtype: str | dict[str, str]) -> int:
    """The bytes of an element of the inputs a search's cost estimates count: its checked dtype's."""
    return ITEM_BYTES.get(checked_in(dtype), 4)


def parse(values: list[str]) -> tuple[str, dict[str, str]]:
    """(The default, {input: dtype}) of the command line's --dtype values: 'bf16' or 'W=i8'."""
    default, named = "f32", {}
    for value in values:
        name, _, dtype = value.rpartition("=")
        if name:
            named[name] = _known(dtype, name)
        else:
            default = _known(dtype, None)
    return default, named


def _data_inputs(prog) -> list[str]:
    """The inputs that index nothing, in the program's order: those a dtype names."""
    return [n for n in prog.inputs if n not in prog.checked.index_inputs]


def _known(dtype: str, name: str | None) -> str:
    if dtype not in ALL:
        raise DTInputError(f"dtype {dtype!r}{f' (of {name!r})' if name else ''} is not one dt supports", None,
                           f"use one of {', '.join(ALL)}")
    return dtype
