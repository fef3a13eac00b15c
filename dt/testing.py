"""Helpers to test DT programs: seeded inputs, per-dtype tolerances, and comparison with the
reference. Used by the CLI, the test suite and the conformance suite alike."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dt.backends.numpy.runtime import DTYPES

# (rtol, atol relative to the largest |reference| value) per output dtype. f16/bf16 round
# every input, every dot operand and the output; f32 rounds only arithmetic.
TOLERANCES = {"f64": (1e-9, 1e-12), "f32": (1e-4, 1e-5), "f16": (1e-2, 5e-3), "bf16": (5e-2, 2e-2)}


def tolerance(dtype: str) -> tuple[float, float]:
    return TOLERANCES[dtype]


def numpy_dtype(dtype: str) -> np.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def random_inputs(prog, extents: dict[str, int], dtype: str = "f32", seed: int = 0) -> dict:
    """Seeded standard-normal inputs of `dtype` for every input of `prog`, shaped by `extents`
    (dimension name -> extent), and a value in [0.5, 1.5) for every scalar."""
    rng = np.random.default_rng(seed)
    args: dict = {}
    for access in prog._accesses:
        if access.name in args:
            continue
        missing = [d for d in access.indices if d not in extents]
        if missing:
            raise KeyError(f"no extent given for {', '.join(missing)} (needed by input {access.name})")
        shape = [extents[d] for d in access.indices]
        args[access.name] = rng.standard_normal(shape).astype(np.float32).astype(numpy_dtype(dtype))
    for s in prog.scalars:
        args[s] = float(0.5 + rng.random())
    return args


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs: float
    max_rel: float
    first_bad: tuple[int, ...] | None
    got: float | None = None
    want: float | None = None

    def __str__(self):
        text = f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}"
        if self.first_bad is not None:
            text += f"; first mismatch at {self.first_bad}: got {self.got!r}, want {self.want!r}"
        return text


def compare(out, ref, dtype: str, rtol: float | None = None, atol: float | None = None) -> Comparison:
    out = np.asarray(_numpy(out), dtype=np.float64)
    ref = np.asarray(_numpy(ref), dtype=np.float64)
    if out.shape != ref.shape:
        return Comparison(False, float("inf"), float("inf"), (), None, None)
    default_rtol, default_atol = tolerance(dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    finite = np.isfinite(ref)
    scale = float(np.max(np.abs(ref[finite]))) if finite.any() else 1.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(out - ref)
        bad = ~((diff <= atol * max(scale, 1e-30) + rtol * np.abs(ref)) | (out == ref)
                | (np.isnan(out) & np.isnan(ref)))
        both = finite & np.isfinite(out)
        max_abs = float(diff[both].max()) if both.any() else 0.0
        rel = diff[both] / np.maximum(np.abs(ref[both]), 1e-30)
        max_rel = float(rel.max()) if rel.size else 0.0
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        return Comparison(False, max_abs, max_rel, index, float(out[index]), float(ref[index]))
    return Comparison(True, max_abs, max_rel, None)


def assert_close(out, ref, dtype: str, **kw):
    c = compare(out, ref, dtype, **kw)
    assert c.ok, str(c)


def _numpy(x):
    if type(x).__module__.startswith("torch"):
        from dt.runtime import _to_numpy
        return _to_numpy(x)
    return x
