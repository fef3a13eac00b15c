"""Run-time helpers of the NumPy interpreter's generated code: masked loads and stores over
tile spans. A span is (start, size, valid): lanes [0, size) at indices start + lane, of which
the first `valid` are in bounds."""
from __future__ import annotations

import math

import numpy as np

from dt.dtypes import NUMPY as DTYPES  # the generated code's rt.DTYPES["f32"], ...


def span(start: int, size: int, limit: int | None) -> tuple[int, int, int]:
    if limit is None:
        return start, size, size
    return start, size, max(0, min(size, limit - start))


def load(tensor: np.ndarray, spans, perm, dtype) -> np.ndarray:
    view = tensor[tuple(slice(s, s + v) for s, _, v in spans)]
    if any(v < n for _, n, v in spans):
        padded = np.zeros([n for _, n, _ in spans], dtype=dtype)
        padded[tuple(slice(0, v) for _, _, v in spans)] = view
        view = padded
    if perm is not None:  # the positions of the tile's axes among the spans, in the tile's order
        kept = sorted(perm)
        if len(kept) < view.ndim:  # scalar axes (one lane each) are no tile axes
            view = view.reshape([view.shape[i] for i in kept])
        view = view.transpose([kept.index(i) for i in perm])
    return view.astype(dtype, copy=False) if view.dtype == dtype else view.astype(dtype)


def gather(tensor: np.ndarray, subscripts, shape, dtype) -> np.ndarray:
    """tensor at computed indices (one integer array or number per axis, broadcast to `shape`);
    0 wherever an index falls outside the tensor."""
    index = np.broadcast_arrays(*(np.asarray(s, dtype=np.int64) for s in subscripts), np.empty(shape, dtype=bool))[:-1]
    inside = np.ones(shape, dtype=bool)
    for i, n in zip(index, tensor.shape):
        inside &= (i >= 0) & (i < n)
    if not tensor.size:
        return np.zeros(shape, dtype=dtype)
    values = tensor[tuple(np.clip(i, 0, n - 1) for i, n in zip(index, tensor.shape))].astype(dtype)
    return np.where(inside, values, np.zeros((), dtype=dtype))


def cast(value, dtype):
    """A number converted to dtype (a NumPy scalar of it)."""
    return np.asarray(value).astype(dtype)[()]


def store(tensor: np.ndarray, spans, value: np.ndarray):
    if np.ndim(value) < len(spans):  # the value has no axes for the scalar axes (one lane each)
        value = np.reshape(value, [n for _, n, _ in spans])
    tensor[tuple(slice(s, s + v) for s, _, v in spans)] = value[tuple(slice(0, v) for _, _, v in spans)]


def scatter(tensor: np.ndarray, subscripts, spans, value, accumulate: bool):
    """value (over the tile axes of `spans`) added into tensor (`accumulate`) or stored there at
    computed indices (one integer array or number per axis), lane by lane in row-major order;
    lanes past a span's valid part, or whose index falls outside the tensor, write nothing."""
    shape = [n for _, n, _ in spans]
    valid = np.ones(shape, dtype=bool)
    for axis, (_, n, v) in enumerate(spans):
        valid &= (np.arange(n) < v).reshape([n if a == axis else 1 for a in range(len(spans))])
    index = [np.broadcast_to(np.asarray(s, dtype=np.int64), shape) for s in subscripts]
    for i, n in zip(index, tensor.shape):
        valid &= (i >= 0) & (i < n)
    where = tuple(i[valid] for i in index)
    values = np.broadcast_to(np.asarray(value), shape)[valid].astype(tensor.dtype)
    if accumulate:
        np.add.at(tensor, where, values)
    else:
        tensor[where] = values


def mask(sp) -> np.ndarray:
    return np.arange(sp[1]) < sp[2]


def offsets(sp, dtype) -> np.ndarray:
    return np.arange(sp[0], sp[0] + sp[1], dtype=dtype)


def number(index: int, dtype):
    """An index value as a scalar of the compute dtype (a Python float would make NumPy compute
    in float64 wherever it meets no array)."""
    return dtype.type(index)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rsqrt(x):
    return 1.0 / np.sqrt(x)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(x).astype(x.dtype, copy=False) if isinstance(x, np.ndarray) else math.erf(x)


def dot(a, b, acc, dtype):
    return acc + np.matmul(a.astype(dtype, copy=False), b.astype(dtype, copy=False))
