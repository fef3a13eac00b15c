"""Helpers to test DT programs: seeded inputs, per-dtype tolerances, and comparison with the
reference. Used by the CLI, the test suite and the conformance suite alike."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dt import arrays
from dt.dtypes import INTEGERS, NUMPY, NUMPY_NAMES, TORCH_NAMES
from dt.errors import DTInputError

# (rtol, atol relative to the largest |reference| value) per output dtype. f16/bf16 round
# every input, every dot operand and the output; f32 rounds only arithmetic.
TOLERANCES = {"f64": (1e-9, 1e-12), "f32": (1e-4, 1e-5), "f16": (1e-2, 5e-3), "bf16": (5e-2, 2e-2),
              **{d: (0.0, 0.0) for d in INTEGERS}}  # integers agree exactly


def tolerance(dtype: str) -> tuple[float, float]:
    return TOLERANCES[dtype]


def numpy_dtype(dtype: str) -> np.dtype:
    if dtype not in NUMPY:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(NUMPY)}")
    return NUMPY[dtype]


def given_scalars(prog, scalars: dict | None) -> dict:
    """`scalars`, values for some of the program's scalars by name, checked to name only those."""
    for name, value in (scalars or {}).items():
        if name not in prog.scalars:
            raise DTInputError(f"scalars names {name!r}, which is not a scalar of {prog.name}", None,
                               f"its scalars: {', '.join(prog.scalars)}" if prog.scalars else "it has none")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise DTInputError(f"scalars gives {name!r} = {value!r}, which is not a number", None,
                               f"e.g. scalars={{{name!r}: 4}}")
    return dict(scalars or {})


def random_inputs(prog, extents: dict[str, int], dtype: str | dict[str, str] = "f32", seed: int = 0,
                  schedule: bool = True, scalars: dict | None = None) -> dict:
    """Seeded inputs for every input of `prog`, shaped by `extents` (dimension name -> extent), and
    the value `scalars` gives, else one in [0.5, 1.5), for every scalar. `dtype` is one dtype for every input, or one per input
    ({"X": "bf16", "W": "i8"}): float inputs are standard normal, integer data spans the dtype's
    range (at most -100..100; bool 0 or 1). An input that indexes another (I in E[I[t], d]) holds
    int64 indices within the axis it indexes; a scalar that indexes is 1.
    `schedule=False` checks the extents against the algorithm only, not against the schedule as
    written (for dt tune, which tries others)."""
    from dt.tune.dtypes import of_input, resolved
    if isinstance(dtype, dict):  # a DTInputError for an input left out or unknown; index scalars int64
        dtype = resolved(prog, dtype)
    if schedule:
        prog.check_extents(extents, dtype)  # a DTError for an extent missing, unknown, bad or too large
    else:
        prog._extents({}, extents, "extents")
    rng = np.random.default_rng(seed)
    args: dict = {}
    indexed = prog.checked.index_inputs
    for access in prog._accesses:
        if access.name in args:
            continue
        shape = [extents[d] for d in prog.checked.input_axes[access.name]]
        if access.name in indexed:
            args[access.name] = rng.integers(0, max(extents[indexed[access.name]], 1), shape, dtype=np.int64)
            continue
        kind = of_input(dtype, access.name)
        if kind in INTEGERS:
            info = np.iinfo(numpy_dtype(kind)) if kind != "bool" else None
            low, high = (0, 2) if info is None else (max(int(info.min), -100), min(int(info.max), 100) + 1)
            args[access.name] = rng.integers(low, high, shape).astype(numpy_dtype(kind))
            continue
        args[access.name] = rng.standard_normal(shape).astype(np.float32).astype(numpy_dtype(kind))
    given = given_scalars(prog, scalars)
    for s in prog.scalars:  # a scalar that indexes is an integer: 1
        drawn = 1 if s in prog.checked.index_scalars else float(0.5 + rng.random())
        args[s] = given.get(s, drawn)
    return args


@dataclass(frozen=True)
class Closest:
    """The element within tolerance whose error takes the largest share of what is allowed
    there (its error may look large relative to a reference near 0, which atol*scale allows for)."""
    index: tuple[int, ...]
    got: float
    want: float
    error: float
    allowed: float

    @property
    def share(self) -> float:
        return self.error / self.allowed


@dataclass(frozen=True)
class Comparison:
    """An output against its reference: `ok` when |out - ref| <= rtol*|ref| + atol*scale at
    every element, where `scale` is max|ref| (so atol is relative to the output's magnitude), an
    infinite reference matched exactly and a NaN by a NaN."""
    ok: bool
    max_abs: float
    max_rel: float
    first_bad: tuple[int, ...] | None  # () when the shapes differ
    got: float | None = None
    want: float | None = None
    rtol: float = 0.0
    atol: float = 0.0
    scale: float = 1.0
    bad: int = 0  # elements outside tolerance
    size: int = 0
    max_rel_want: float | None = None  # the reference where the relative error is largest
    closest: Closest | None = None  # when ok (and some element is allowed an error)

    def __str__(self):
        text = f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}"
        if self.first_bad is not None:
            text += f"; first mismatch at {self.first_bad}: got {self.got!r}, want {self.want!r}"
        return text


def compare(out, ref, dtype: str, rtol: float | None = None, atol: float | None = None) -> Comparison:
    out = np.asarray(to_numpy(out), dtype=np.float64)
    ref = np.asarray(to_numpy(ref), dtype=np.float64)
    if out.shape != ref.shape:
        return Comparison(False, float("inf"), float("inf"), (), None, None)
    default_rtol, default_atol = tolerance(dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    finite = np.isfinite(ref)
    scale = float(np.max(np.abs(ref[finite]))) if finite.any() else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.abs(out - ref)
        allowed = atol * max(scale, 1e-30) + rtol * np.abs(ref)
        # an infinite reference is matched exactly: its tolerance (rtol * inf) would pass anything but NaN
        bad = ~((finite & (diff <= allowed)) | (out == ref) | (np.isnan(out) & np.isnan(ref)))
        both = finite & np.isfinite(out)
        max_abs = float(diff[both].max()) if both.any() else 0.0
        rel = diff[both] / np.maximum(np.abs(ref[both]), 1e-30)
        max_rel = float(rel.max()) if rel.size else 0.0
        share = np.where(both & (allowed > 0), diff / allowed, 0.0)
    limits = dict(rtol=rtol, atol=atol, scale=scale, bad=int(bad.sum()), size=int(bad.size),
                  max_rel_want=float(ref[both][np.argmax(rel)]) if rel.size else None)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        return Comparison(False, max_abs, max_rel, index, float(out[index]), float(ref[index]), **limits)
    closest = None
    if share.size and share.max() > 0:
        at = np.unravel_index(int(np.argmax(share)), share.shape)
        closest = Closest(tuple(int(i) for i in at), float(out[at]), float(ref[at]), float(diff[at]),
                          float(allowed[at]))
    return Comparison(True, max_abs, max_rel, None, **limits, closest=closest)


def assert_close(out, ref, dtype: str, **kw):
    c = compare(out, ref, dtype, **kw)
    assert c.ok, str(c)


def to_numpy(x):
    """A torch tensor (any device) as a NumPy array; anything else as it is."""
    if type(x).__module__.startswith("torch"):
        return arrays.to_numpy(x)
    return x


def dtype_name(array) -> str | None:
    """The dt name ('f32', 'f16', 'bf16', 'f64') of a NumPy array's or torch tensor's dtype;
    None for any other dtype."""
    if type(array).__module__.startswith("torch"):
        return TORCH_NAMES.get(str(array.dtype))
    return NUMPY_NAMES.get(np.asarray(array).dtype)
