"""What one conformance case is: a DT algorithm, the schedules it runs under, its sizes and
dtypes, how its inputs are drawn, an independent NumPy reference, and its tolerances.

The catalogue (`dt.conformance.catalogue`) is a list of these, written as data.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from dt.dtypes import NAMES as DTYPES  # the dtypes a case runs in

# (rtol, atol) per output dtype; atol is relative to the largest |reference| value of the output
# (dt.testing.compare). f16/bf16 round every input, every dot operand, every stored temporary
# and the output, so they get the rounding error of a few such steps; f32 only of arithmetic.
DEFAULT_TOLERANCES: Mapping[str, tuple[float, float]] = {
    "f64": (1e-9, 1e-12),
    "f32": (1e-4, 1e-5),
    "f16": (1e-2, 5e-3),
    "bf16": (5e-2, 2e-2),
}

# How input values are drawn: name -> (rng, shape) -> float64 values. Values are then rounded
# to the run's dtype, and the reference sees exactly the rounded values.
DOMAINS: Mapping[str, Callable[[np.random.Generator, tuple], np.ndarray]] = {
    "normal": lambda rng, shape: rng.standard_normal(shape),
    "wide": lambda rng, shape: 4.0 * rng.standard_normal(shape),  # saturates sigmoid/tanh, spans floor/ceil
    "positive": lambda rng, shape: rng.uniform(0.25, 4.0, shape),  # log, sqrt, rsqrt, pow bases
    "negative": lambda rng, shape: -rng.uniform(0.25, 4.0, shape),  # rmax: a 0 identity would win
    "nonzero": lambda rng, shape: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape),  # divisors
    "ints": lambda rng, shape: rng.integers(-3, 4, shape).astype(np.float64),  # ties for comparisons, zeros
    "integers": lambda rng, shape: rng.integers(-50, 51, shape).astype(np.float64),  # exact in every float dtype
    # int8's whole range, mostly near its ends: i8 products whose sums pass float32's 2**24
    "int8": lambda rng, shape: rng.choice([-128, -127, 127, 126, 3, -5, 0], shape).astype(np.float64),
    "divisors": lambda rng, shape: rng.choice([-7, -4, -3, -2, -1, 1, 2, 3, 4, 7], shape).astype(np.float64),
    # gather indices into a 10-row axis: repeats, and out of range on both ends
    "ids": lambda rng, shape: rng.integers(-2, 12, shape).astype(np.float64),
    "ids_u8": lambda rng, shape: rng.choice([0, 1, 2, 5, 9, 10, 200, 255], shape).astype(np.float64),
    "scalar": lambda rng, shape: rng.uniform(0.5, 1.5, shape),  # the default for SIn scalars
    "offset": lambda rng, shape: 50.0 + rng.standard_normal(shape),  # a mean far from 0: variances that cancel
    "logits": lambda rng, shape: 100.0 + 10.0 * rng.standard_normal(shape),  # exp overflows f32 unless shifted
    "specials": lambda rng, shape: _specials(rng, shape),  # ties, NaN, +-inf, a first row of -inf
}


def _specials(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Small integers (ties) with NaN, +inf and -inf scattered in, and the first row -inf
    throughout: what arg-reductions rank."""
    values = rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0, np.nan, np.inf, -np.inf], shape,
                        p=[0.19, 0.19, 0.19, 0.19, 0.19, 0.01, 0.02, 0.02])
    if len(shape) > 1 and shape[0] > 1:
        values[0] = -np.inf
    return values


@dataclass(frozen=True, eq=False)
class Case:
    """One entry of the catalogue.

    name        unique, `family.variant` (e.g. "rmax.negative"); --ops and vendor files match it
    algorithm   DT declarations and definitions
    schedules   schedule name -> DT schedule statements (appended to the algorithm)
    reference   NumPy, written for this case; its parameters are DT names (inputs, scalars,
                dimensions: their extents), it returns the output array, or {output: array}
    sizes       extents of every dimension, for the default (small, CI) run
    full_sizes  extents for --full (large: meant for GPUs); default: `sizes`
    domains     input or scalar name -> a DOMAINS name, or a number for a fixed scalar
    dtypes      the input dtypes it runs in (every input gets the same one but those of input_dtypes
                and those that index others, i64)
    input_dtypes  input name -> a dtype of its own (integer data: 'i16', 'bool', ...)
    tolerances  dtype -> (rtol, atol), overriding DEFAULT_TOLERANCES
    op          the row of the summary table; default: the name up to its first '.'
    """
    name: str
    algorithm: str
    schedules: Mapping[str, str]
    reference: Callable[..., object]
    sizes: tuple[Mapping[str, int], ...]
    full_sizes: tuple[Mapping[str, int], ...] = ()
    domains: Mapping[str, object] = field(default_factory=dict)
    dtypes: tuple[str, ...] = DTYPES
    input_dtypes: Mapping[str, str] = field(default_factory=dict)
    tolerances: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    op: str = ""

    @property
    def row(self) -> str:
        return self.op or self.name.partition(".")[0]

    def source(self, schedule: str) -> str:
        return f"{self.algorithm.strip()}\n\n{self.schedules[schedule].strip()}\n"

    def size_sets(self, full: bool) -> tuple[Mapping[str, int], ...]:
        return (self.full_sizes or self.sizes) if full else self.sizes

    def tolerance(self, dtype: str) -> tuple[float, float]:
        return self.tolerances.get(dtype, DEFAULT_TOLERANCES[dtype])

    def draw(self, name: str, rng: np.random.Generator, shape: tuple, scalar: bool = False):
        """Values for input or scalar `name` (float64; a float for scalars)."""
        domain = self.domains.get(name, "scalar" if scalar else "normal")
        if isinstance(domain, (int, float)):
            return float(domain)
        values = DOMAINS[domain](rng, shape)
        return float(values) if scalar else values

    def expected(self, values: Mapping[str, object], outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The reference's answer, {output: float64 array}; `values` holds inputs, scalars and
        extents by DT name."""
        params = inspect.signature(self.reference).parameters
        missing = [p for p in params if p not in values]
        if missing:
            raise TypeError(f"reference of {self.name} takes {', '.join(missing)}, which the program lacks")
        with np.errstate(all="ignore"):
            out = self.reference(**{p: values[p] for p in params})
        if not isinstance(out, Mapping):
            if len(outputs) != 1:
                raise TypeError(f"reference of {self.name} returns one array for outputs {', '.join(outputs)}")
            out = {outputs[0]: out}
        if set(out) != set(outputs):
            raise TypeError(f"reference of {self.name} returns {sorted(out)}, the program outputs {list(outputs)}")
        return {n: np.asarray(out[n], dtype=np.float64) for n in outputs}
