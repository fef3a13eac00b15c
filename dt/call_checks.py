"""What a program call's arguments must be, checked before anything is allocated: scalars are
real numbers, extents integers within bounds (and no Func read past its own), and the tensors a
call creates fit in memory."""
from __future__ import annotations

import math
import os
import re

import numpy as np
from numpy.lib.array_utils import byte_bounds

from dt.dtypes import ITEM_BYTES, NUMPY_NAMES, TORCH_NAMES
from dt.errors import DTExtentError, DTInputError, DTTypeError, Loc
from dt.ir import algorithm as A
from dt.ir.check.schedule import MAX_EXTENT
from dt.ir.tiles import value_dims

_REAL_DTYPE = re.compile(r"(torch\.)?(u?int|float|bfloat)\d+")  # NumPy's, ml_dtypes' and torch's names


I64 = (-2 ** 63, 2 ** 63)  # the range of an integer scalar


def scalar_value(name: str, value, loc: Loc | None) -> float | int:
    """A scalar argument as the kernels take it: Python and NumPy integers and 0-d integer arrays
    and tensors as integers (within i64), floats, 0-d arrays and tensors of those, and other real
    numbers as floats; nan and inf as they are. Not bools, complex numbers, strings or arrays of
    more than one element."""
    what = _not_real(value)
    if what is None and getattr(value, "shape", None) == () and re.match(r"(torch\.)?u?int", str(value.dtype)):
        value = int(value.item())  # a 0-d integer array or tensor: an integer, as a NumPy integer is
    if what is None and isinstance(value, (int, np.integer)):
        if I64[0] <= int(value) < I64[1]:
            return int(value)
        what = f"an integer of {int(value).bit_length()} bits, too large for i64"
    elif what is None:
        try:
            return float(value)
        except OverflowError:
            what = f"an integer of {int(value).bit_length()} bits, too large for a float"
        except (TypeError, ValueError):
            what = type(value).__name__
    hint = "pass 1.0 or 0.0" if "bool" in what else f"pass a real number: {name}=0.5"
    raise DTInputError(f"scalar '{name}' must be a real number, got {what}", loc, hint)


def _not_real(value) -> str | None:
    """Why value is not a real number, or None when it may be one."""
    if isinstance(value, (bool, np.bool_)):
        return "a bool"
    if isinstance(value, (int, float)):
        return None
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if dtype is not None:  # NumPy scalars and arrays, torch tensors
        if shape != ():
            return f"an array of shape {tuple(shape)}"
        if not _REAL_DTYPE.fullmatch(str(dtype)):
            return f"a value of dtype {dtype}"
        return None
    if isinstance(value, (complex, str, bytes)) or not hasattr(value, "__float__"):
        return type(value).__name__
    return None


def extent_value(dim: str, value, loc: Loc | None, argument: str = "sizes") -> int:
    """An extent given in the dict `argument` (sizes= of a call): an integer (Python or NumPy,
    not a bool) from 1 to MAX_EXTENT."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise DTExtentError(f"{argument} gives '{dim}' = {value!r}, which is not an integer", loc,
                            f"pass an integer extent, e.g. {argument}={{'{dim}': 64}}")
    return check_extent(int(value), f"{argument} gives '{dim}' =", loc)


def check_extent(n: int, what: str, loc: Loc | None) -> int:
    """n, an extent (`what` says whose), unless it is out of bounds."""
    if n < 1:
        raise DTExtentError(f"{what} {n}; extents must be at least 1", loc)
    if n > MAX_EXTENT:
        raise DTExtentError(f"{what} {n}; extents are at most 2**62 ({MAX_EXTENT})", loc)
    return n


def format_bytes(n: int) -> str:
    for unit, size in (("TB", 10 ** 12), ("GB", 10 ** 9), ("MB", 10 ** 6), ("kB", 10 ** 3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def check_memory(tensors: list[tuple[str, str, tuple[str, ...], str, Loc | None]], extents: dict[str, int],
                 limit: tuple[int, str] | None):
    """Raise unless the tensors, (what, name, dims, dtype, loc) each, fit in `limit`: (bytes, the
    memory's name). The error names the largest and the bytes each needs."""
    if limit is None or not tensors:
        return
    needs = [(math.prod(extents[d] for d in dims) * ITEM_BYTES[dtype], what, name, dims, dtype, loc)
             for what, name, dims, dtype, loc in tensors]
    total = sum(n for n, *_ in needs)
    if total <= limit[0]:
        return
    n, what, name, dims, dtype, loc = max(needs, key=lambda need: need[0])
    shape = ", ".join(f"{d}={extents[d]}" for d in dims)
    needed = f"{what} '{name}' needs {format_bytes(n)} ({shape}; {dtype})"
    if n <= limit[0]:
        needed += f", and with the others {format_bytes(total)}"
    raise DTExtentError(f"{needed}: more than the {format_bytes(limit[0])} of {limit[1]}", loc,
                        "use smaller extents, or split the work into several calls")


def cpu_memory() -> tuple[int, str] | None:
    """The machine's physical memory, where the system tells it."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "memory this machine has"
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such value
        return None


def gpu_memory(device) -> tuple[int, str]:
    """The memory of CUDA device `device` (a torch device; None or a CPU one: the current GPU)."""
    import torch
    index = device if device is not None and device.type == "cuda" else torch.cuda.current_device()
    return torch.cuda.get_device_properties(index).total_memory, f"memory the GPU ({device or 'cuda'}) has"


def reference_tensors(cp, extents: dict[str, int]) -> list[tuple[str, str, tuple[str, ...], str, Loc | None]]:
    """The float64 arrays the reference evaluator holds at once, at most: every computed Func,
    and the largest value it computes on the way (an operand broadcast over the dimensions of
    an expression)."""
    tensors = [("the reference's array of", n, f.dims, "f64", f.loc) for n, f in cp.algorithm.items()]
    values = [(n, dims, f.loc) for n, f in cp.algorithm.items() for dims in value_dims(f)]
    if values:
        name, dims, loc = max(values, key=lambda v: math.prod(extents[d] for d in v[1]))
        tensors.append(("a value the reference computes for", name, dims, "f64", loc))
    return tensors


def is_torch(x) -> bool:
    """Whether x is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "device")


def given_outputs(out, specs: dict[str, tuple[tuple[int, ...], str]], torch_device, inputs: dict) -> dict:
    """`out=` of a call as {output name: array}, each checked to be what the call would return
    (`specs`: name -> (shape, dtype)): a NumPy array, or with torch inputs a tensor on their device;
    of the output's shape and dtype; C-contiguous; sharing no memory with an input or another one."""
    names = list(specs)
    if not isinstance(out, dict):
        if len(names) != 1:
            raise DTInputError(f"out= must be a dict of arrays by output name: the program has outputs "
                               f"{', '.join(names)}", None, f"e.g. out={{'{names[0]}': array}}")
        out = {names[0]: out}
    given = {}
    for name, array in out.items():
        if name not in specs:
            raise DTInputError(f"out= names '{name}', which is not an output", None, f"the outputs: {', '.join(names)}")
        shape, dtype = specs[name]
        torch_array = is_torch(array)
        if torch_device is not None:
            kind_ok = torch_array and array.device == torch_device
            want = f"a torch tensor on {torch_device} (the inputs' device)"
        else:
            kind_ok = isinstance(array, np.ndarray)
            want = "a NumPy array (the inputs are NumPy arrays)"
        if not kind_ok:
            raise DTInputError(f"out '{name}' must be {want}, not {type(array).__name__}"
                               + (f" on {array.device}" if torch_array else ""), None,
                               "pass what the call would return")
        have = TORCH_NAMES.get(str(array.dtype)) if torch_array else NUMPY_NAMES.get(array.dtype)
        if tuple(array.shape) != shape or have != dtype:
            raise DTInputError(f"out '{name}' is {have or array.dtype} {tuple(array.shape)}; the output is {dtype} "
                               f"{shape}", None, "allocate it with the output's shape and dtype")
        if not torch_array and not array.flags.writeable:
            raise DTInputError(f"out '{name}' is read-only", None, "pass an array the call may write into")
        if not (array.is_contiguous() if torch_array else array.flags.c_contiguous):
            raise DTInputError(f"out '{name}' is not contiguous (C order)", None,
                               "pass a contiguous array (.contiguous() / np.ascontiguousarray makes a copy "
                               "to write into, not the array itself)")
        for other, value in [*inputs.items(), *given.items()]:
            if _overlap(array, value):
                raise DTInputError(f"out '{name}' shares memory with '{other}'", None,
                                   "write outputs into arrays of their own: a kernel reads its inputs while "
                                   "it writes")
        given[name] = array
    return given


def _overlap(a, b) -> bool:
    """Whether two arrays (NumPy's or torch's, in any mix) share memory, by the bytes they span."""
    bounds_a, bounds_b = _bounds(a), _bounds(b)
    if bounds_a is None or bounds_b is None or bounds_a[0] != bounds_b[0]:
        return False
    return bounds_a[1] < bounds_b[2] and bounds_b[1] < bounds_a[2]


def _bounds(x) -> tuple[str, int, int] | None:
    """(device, first byte, one past the last byte) of an array's memory; None for an empty one."""
    if is_torch(x):
        return (str(x.device), x.data_ptr(), x.data_ptr() + _span(x)) if x.numel() else None
    if not isinstance(x, np.ndarray) or not x.size:
        return None
    return ("cpu", *byte_bounds(x))


def _span(t) -> int:
    """The bytes from a tensor's first element to just past its last (strided views included)."""
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


def func_read_extents(checked, extents: dict[str, int], argument: str):
    """A Func read along another dimension than its own (`e[z, y]` for `e[x, y]`,
    CheckedProgram.func_reads) passes extents: an unbound x takes the longest of the dimensions it is
    read along, then an unbound z x's. z may be shorter (the reads cover part of e); a z longer than
    x is an error: it would read memory no backend wrote."""
    reads = checked.func_reads
    changed = True
    while changed:  # a chain of reads passes extents on
        changed = False
        for own in {own for *_, own in reads if own not in extents}:
            known = [extents[dim] for _, _, dim, o in reads if o == own and dim in extents]
            if known:
                extents[own], changed = max(known), True
        for _, _, dim, own in reads:
            if dim not in extents and own in extents:
                extents[dim], changed = extents[own], True
    for access, axis, dim, own in reads:
        if dim in extents and own in extents and extents[dim] > extents[own]:
            raise DTExtentError(f"{A.expr_text(access)} reads '{access.name}' along '{dim}' ({extents[dim]}), past "
                                f"its axis {axis}, '{own}' ({extents[own]})", access.loc,
                                f"give '{dim}' at most {extents[own]}, or '{own}' at least {extents[dim]} (in "
                                f"{argument} or the inputs' shapes), or read '{access.name}' along '{own}'")


def divisors(divisions, extents: dict[str, int], scalars: dict) -> None:
    """Each subscript's `//` or `%` (CheckedProgram.call_divisors) divides by a positive integer
    at these extents and scalars."""
    for access, division in divisions:
        bounds = _range(division.b, extents, scalars, [])  # lens, constants and scalars: one value
        if bounds is not None and bounds[0] > 0:
            continue
        if isinstance(division.b, A.ScalarRef):
            raise DTTypeError(f"scalar '{division.b.name}' divides a subscript (// or %) but is "
                              f"{scalars[division.b.name]!r}", division.b.loc or access.loc,
                              f"pass {division.b.name} as a positive integer")
        value = f"{bounds[0]}" if bounds is not None else "not a positive integer"
        raise DTTypeError(f"'{division.op}' in the index of '{access.name}' ({access.text}) divides by "
                          f"{A.expr_text(division.b)}, which is {value} at this call", division.loc or access.loc,
                          "pass tensors, sizes= or scalars that make it a positive integer")


def index_arithmetic(subscripts, extents: dict[str, int], scalars: dict) -> None:
    """Every step of each subscript's arithmetic (CheckedProgram.computed_subscripts) stays within
    i64 over the dimensions' ranges at these extents and scalars: a backend's index would wrap
    round into another element (`K[l * s + 1]` with s = 2**62)."""
    for access, subscript in subscripts:
        ranges: list[tuple[A.Expr, int, int]] = []
        if _range(subscript, extents, scalars, ranges) is None:
            continue  # an op whose range is not followed here (a cast): the backends' own arithmetic
        for node, low, high in ranges:
            if low < I64[0] or high >= I64[1]:
                raise DTInputError(f"the index {A.expr_text(subscript)} of '{access.name}' reaches "
                                   f"{A.expr_text(node)} = {high if high >= I64[1] else low} at this call, past the "
                                   f"64-bit integers indices are computed in", node.loc or access.loc,
                                   "pass smaller scalars or extents")


def _range(e: A.Expr, extents: dict[str, int], scalars: dict, ranges: list) -> tuple[int, int] | None:
    """The least and greatest value of an index expression over its dimensions' ranges (each
    node's appended to `ranges`); None where it has an op not followed here."""
    if isinstance(e, A.DimRef):
        result = (0, extents[e.dim] - 1) if e.dim in extents else None
    elif isinstance(e, A.Len):
        result = (extents[e.dim],) * 2 if e.dim in extents else None
    elif isinstance(e, A.Num):
        result = (int(e.value),) * 2
    elif isinstance(e, A.ScalarRef):
        value = scalars.get(e.name)
        result = (value, value) if isinstance(value, int) else None
    elif isinstance(e, A.Unary) and e.op in ("neg", "abs"):
        x = _range(e.x, extents, scalars, ranges)
        result = x and ((-x[1], -x[0]) if e.op == "neg" else
                        (0 if x[0] <= 0 <= x[1] else min(abs(x[0]), abs(x[1])), max(abs(x[0]), abs(x[1]))))
    elif isinstance(e, A.Binary) and e.op in ("+", "-", "*", "//", "%", "maximum", "minimum"):
        a, b = _range(e.a, extents, scalars, ranges), _range(e.b, extents, scalars, ranges)
        if a is None or b is None or (e.op in ("//", "%") and b[0] <= 0):
            return None  # a divisor not positive: call_checks.divisors says so
        if e.op == "%":
            result = (0, b[1] - 1)
        else:
            combine = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
                       "//": lambda x, y: x // y, "maximum": max, "minimum": min}[e.op]
            corners = [combine(x, y) for x in a for y in b]
            result = (min(corners), max(corners))
    else:
        result = None
    if result is not None:
        ranges.append((e, *result))
    return result


def array_extents(checked, arrays: dict) -> dict[str, tuple[int, str, Loc | None]]:
    """dimension -> (extent, which axis of which input gave it, where that input is indexed)."""
    extents: dict[str, tuple[int, str, Loc | None]] = {}
    for access, bindings in checked.input_bindings:
        if access.name not in arrays:
            continue
        shape = tuple(arrays[access.name].shape)
        rank = len(access.subscripts)
        if len(shape) != rank:
            raise DTExtentError(f"'{access.name}' is indexed with {rank} dimension(s) ({access.text}) but the "
                                f"tensor passed has rank {len(shape)} (shape {shape})", access.loc,
                                f"pass a {rank}-D tensor")
        axis_dims = checked.input_axes[access.name]
        for axis, (binding, n) in enumerate(zip(bindings, shape)):
            source = f"{access.text} axis {axis}"
            for dim in dict.fromkeys((binding, axis_dims[axis])):
                if dim is None:
                    continue
                if dim in extents and extents[dim][0] != n:
                    have, where, first = extents[dim]
                    raise DTExtentError(f"the extent of '{dim}' disagrees: {have} from {where}, but {n} from "
                                        f"{source}", access.loc,
                                        "pass tensors whose shapes agree on every dimension",
                                        ((f"{dim} = {have} from {where}", first),))
                extents.setdefault(dim, (n, source, access.loc))
    return extents
