"""The reference evaluator: the algorithm evaluated directly with NumPy, ignoring the
schedule. It is the oracle every backend is checked against, so it is written for clarity:
named-axis arrays in float64, broadcasting by dimension name."""
from __future__ import annotations

import numpy as np

from dt.dtypes import NUMPY, is_integer
from dt.ir import algorithm as A
from dt.ir.ops import OPS, REDUCTIONS, SCANS
from dt.ir.check.program import CheckedProgram
from dt.ir.lower.types import Types


class _Named:
    """An array with one dimension name per axis."""

    def __init__(self, array, dims: tuple[str, ...]):
        self.array = array
        self.dims = dims

    def aligned(self, dims: tuple[str, ...]) -> np.ndarray:
        """This array viewed over `dims` (a superset of its own), size 1 where it lacks one."""
        own = [d for d in dims if d in self.dims]
        arr = np.transpose(self.array, [self.dims.index(d) for d in own])
        return arr.reshape([arr.shape[own.index(d)] if d in self.dims else 1 for d in dims])


def _union(*values: _Named) -> tuple[str, ...]:
    dims: list[str] = []
    for v in values:
        dims += [d for d in v.dims if d not in dims]
    return tuple(dims)


def _gather(source: np.ndarray, subscripts: list[_Named]) -> _Named:
    """source at computed indices, one index array per axis; 0 wherever an index falls outside."""
    dims = _union(*subscripts)
    index = np.broadcast_arrays(*(s.aligned(dims) for s in subscripts))
    index = [np.floor(i).astype(np.int64) for i in index]
    inside = np.ones(index[0].shape, dtype=bool) if index else np.ones((), dtype=bool)
    for i, n in zip(index, source.shape):
        inside &= (i >= 0) & (i < n)
    clipped = tuple(np.clip(i, 0, max(n - 1, 0)) for i, n in zip(index, source.shape))
    values = source[clipped] if source.size else np.zeros(inside.shape)
    return _Named(np.where(inside, values, 0.0), dims)


def _cast(x: _Named, dtype: str, compute: str | None) -> _Named:
    """x converted to dtype as the backends convert it: a float operand rounded to the compute
    dtype first (`compute`; None for an integer operand, exact in float64 up to 2**53), floats to
    integers toward zero, integers wrapping as NumPy's casts do."""
    value = np.asarray(x.array, dtype=np.float64)
    if compute is not None:
        value = value.astype(NUMPY[compute])
    if dtype == "bool":
        out = value != 0
    elif is_integer(dtype):
        with np.errstate(all="ignore"):
            out = np.trunc(value).astype(np.int64).astype(NUMPY[dtype])
    else:
        out = value.astype(NUMPY[dtype])
    return _Named(np.asarray(out, dtype=np.float64), x.dims)


def _top_indices(x: _Named, dim: str, slot: str, extents) -> _Named:
    """rargtopk: along `dim`, the indices of the extents[slot] largest values, largest first, NaN
    before every number, equal values by index; -1 past the row's length."""
    dims = x.dims if dim in x.dims else x.dims + (dim,)
    values = np.broadcast_to(x.aligned(dims), [extents[d] for d in dims])
    values = np.moveaxis(values, dims.index(dim), -1)
    n, k = values.shape[-1], extents[slot]
    index = np.broadcast_to(np.arange(n), values.shape)
    order = np.lexsort((index, -np.where(np.isnan(values), 0.0, values), ~np.isnan(values)), axis=-1)[..., :k]
    if k > n:
        order = np.concatenate([order, np.full(order.shape[:-1] + (k - n,), -1)], axis=-1)
    return _Named(order.astype(np.float64), tuple(d for d in dims if d != dim) + (slot,))


def evaluate(cp: CheckedProgram, inputs: dict[str, np.ndarray], scalars: dict[str, float],
             extents: dict[str, int], compute: str = "f32", types: Types | None = None) -> dict[str, np.ndarray]:
    """Every computed Func as a float64 array over its LHS dims; casts round a float operand to
    `compute`, the dtype the backends compute in (`types` says which operands are floats)."""
    values: dict[str, np.ndarray] = {}

    def ev(e: A.Expr):  # a step of A.recurse: expressions nest deeper than Python recursion goes
        if isinstance(e, A.Num):
            return _Named(np.float64(e.value), ())
        if isinstance(e, A.ScalarRef):
            return _Named(np.float64(scalars[e.name]), ())
        if isinstance(e, A.Len):
            return _Named(np.float64(extents[e.dim]), ())
        if isinstance(e, A.DimRef):
            return _Named(np.arange(extents[e.dim], dtype=np.float64), (e.dim,))
        if isinstance(e, A.Access):
            source = np.asarray(inputs[e.name] if e.kind == "input" else values[e.name], dtype=np.float64)
            if e.dims is not None:  # a Func read along shorter dimensions than its own: their part of it
                return _Named(source[tuple(slice(0, extents[d]) for d in e.dims)], e.dims)
            subscripts = []
            for sub in e.subscripts:
                subscripts.append((yield sub))
            return _gather(source, subscripts)
        if isinstance(e, A.Cast):
            return _cast((yield e.x), e.dtype, compute if types is None or types.kind(e.x) == "float" else None)
        if isinstance(e, A.Unary):
            x = yield e.x
            with np.errstate(all="ignore"):
                return _Named(OPS[e.op].reference(x.array), x.dims)
        if isinstance(e, (A.Binary, A.Where)):
            args = []
            for c in A.children(e):
                args.append((yield c))
            dims = _union(*args)
            arrays = [a.aligned(dims) for a in args]
            with np.errstate(all="ignore"):
                out = OPS[e.op if isinstance(e, A.Binary) else "where"].reference(*arrays)
            return _Named(np.asarray(out, dtype=np.float64), dims)
        if isinstance(e, A.Stored):
            return (yield e.x)
        if isinstance(e, A.Scan):
            x = yield e.x
            dims = x.dims if e.dim in x.dims else x.dims + (e.dim,)
            shape = [extents[d] for d in dims]
            array = np.broadcast_to(x.aligned(dims), shape)  # constant along the dimension: repeated
            with np.errstate(all="ignore"):
                return _Named(SCANS[e.op].reference(array, axis=dims.index(e.dim)), dims)
        if isinstance(e, A.Reduce):
            args = []
            for a in e.args:
                args.append((yield a))
            return reduce(e, args)
        raise AssertionError(e)

    def reduce(e: A.Reduce, args: list[_Named]) -> _Named:
        out_dims = tuple(d for d in _union(*args) if d != e.dim)
        if e.op == "dot":
            letters = {d: chr(ord("a") + i) for i, d in enumerate(_union(*args) + (e.dim,))}
            spec = ",".join("".join(letters[d] for d in a.dims) for a in args)
            out = np.einsum(f"{spec}->{''.join(letters[d] for d in out_dims)}", *(a.array for a in args),
                            optimize=True)
            if all(e.dim not in a.dims for a in args):
                out = out * extents[e.dim]
            return _Named(np.asarray(out, dtype=np.float64), out_dims)
        x = args[0]
        if e.slot:
            return _top_indices(x, e.dim, e.slot, extents)
        if e.dim not in x.dims:  # the body does not vary along the reduced dimension
            x = _Named(np.broadcast_to(np.asarray(x.array)[..., None], np.shape(x.array) + (extents[e.dim],)),
                       x.dims + (e.dim,))
        axis = x.dims.index(e.dim)
        if x.array.shape[axis] == 0:
            identity = 0 if REDUCTIONS[e.op].index else REDUCTIONS[e.op].identity
            return _Named(np.full([s for i, s in enumerate(x.array.shape) if i != axis], identity), out_dims)
        return _Named(REDUCTIONS[e.op].reference(x.array, axis=axis), out_dims)

    for name, f in (*cp.algorithm.items(), *cp.inlined_outputs.items()):
        v = A.recurse(ev, f.expr)
        shape = [extents[d] for d in f.dims]
        values[name] = np.array(np.broadcast_to(v.aligned(f.dims), shape), dtype=np.float64)
        if f.update is not None:
            _write(values[f.update.target], f, values[name], [A.recurse(ev, s) for s in f.update.subscripts],
                   extents)
    return values


def _write(target: np.ndarray, f: A.FuncDef, value: np.ndarray, subscripts: list[_Named], extents):
    """An update: each element of `value` (over f.dims) added to, or stored into, `target` at its
    subscripts, in the order of f.dims (row-major); an element whose index falls outside is dropped."""
    shape = [extents[d] for d in f.dims]
    index = [np.broadcast_to(s.aligned(f.dims), shape).astype(np.int64).ravel() for s in subscripts]
    inside = np.ones(value.size, dtype=bool)
    for i, n in zip(index, target.shape):
        inside &= (i >= 0) & (i < n)
    where = tuple(i[inside] for i in index)
    if f.update.accumulate:
        np.add.at(target, where, value.ravel()[inside])
    else:
        target[where] = value.ravel()[inside]

