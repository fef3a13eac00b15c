"""The Python API of the DT language: the same objects the DT parser builds.

    from dt import Func, In, SIn, Var, RVar, rsum, exp
    x, y = Var("x"), RVar("y")
    A = In("A")
    s, sm = Func("s"), Func("sm")
    s[x] = rsum(exp(A[x, y]), y)
    sm[x, y] = exp(A[x, y]) / s[x]
    s.fuse_at(sm, x)
    sm.block(x=4); sm.tensorize(x=0, y=512)
    sm.compile_to_kernel()
    prog = dt.program(sm)
"""
from __future__ import annotations

import inspect
import linecache
import os
import re
import sys

from dt.dtypes import ALL
from dt.errors import DTDimensionError, DTError, DTNameError, DTScheduleError, DTTypeError, Loc
from dt.ir import algorithm as A
from dt.ir.ops import OPS_LIST

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A DT name, as the grammar's NAME: ASCII only, so that generated code holds it as it is (Python
# folds some other letters when it parses source, 'ﬁ' to 'fi', which would make two names one).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_HINT = "names are ASCII letters, digits and underscores, not starting with a digit"


def caller_loc() -> Loc | None:
    """The first Python frame outside the dt package: where the user wrote this."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep):
        frame = frame.f_back
    if frame is None:
        return None
    filename, line = frame.f_code.co_filename, frame.f_lineno
    col, length = 0, 1
    positions = list(frame.f_code.co_positions())
    index = frame.f_lasti // 2
    if index < len(positions) and positions[index][2] is not None:
        start_line, end_line, start_col, end_col = positions[index]
        col = start_col + 1
        if start_line == end_line and end_col is not None:
            length = max(end_col - start_col, 1)
    return Loc(filename, line, col, length, linecache.getline(filename, line))


class _Named:
    kind = ""

    def __init__(self, name: str, *, loc: Loc | None = None):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise DTNameError(f"{name!r} is not a valid DT name", loc or caller_loc(), _NAME_HINT)
        self.name = name
        self.loc = loc or caller_loc()

    def __repr__(self):
        return f"{self.kind}({self.name!r})"


class Var(_Named, A.ExprOps):
    """A pure dimension label. Used as a value, it is the index along that dimension."""
    kind = "Var"

    def as_expr(self):
        return A.DimRef(self.name, caller_loc(), decl=self)


class RVar(Var):
    """A reduction dimension label."""
    kind = "RVar"


class SIn(_Named, A.ExprOps):
    """A scalar input."""
    kind = "SIn"

    def as_expr(self):
        return A.ScalarRef(self.name, caller_loc(), decl=self)


def _dims(obj, indices, loc) -> tuple[tuple[str, ...], tuple[Var, ...]]:
    """The dimensions on the left of a definition: Var objects only."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    names, decls = [], []
    for i in indices:
        if isinstance(i, Var):
            names.append(i.name)
            decls.append(i)
        else:
            shown = A.expr_text(i) if isinstance(i, A.Expr) else repr(i)
            raise DTNameError(f"index {shown} on the left of '{obj.name}' is not a Var", loc,
                              "a definition names the dimensions it defines: f[x, y] = ...; write the arithmetic "
                              "on the right-hand side")
    return tuple(names), tuple(decls)


def _subscripts(obj, indices, loc) -> tuple[A.Expr, ...]:
    """The subscripts of an access: dimensions, integers and index expressions of them."""
    if not isinstance(indices, tuple):
        indices = (indices,)
    subscripts = []
    for i in indices:
        try:
            subscripts.append(A.as_expr(i))
        except TypeError:
            raise DTNameError(f"index {i!r} of '{obj.name}' is not a dimension or an index expression", loc,
                              "index tensors with dimension objects and integer arithmetic of them: "
                              "A[x, y + 1]") from None
    return tuple(subscripts)


class In(_Named):
    """An input tensor."""
    kind = "In"

    def __getitem__(self, indices):
        loc = caller_loc()
        return A.Access(self.name, "input", _subscripts(self, indices, loc), loc, decl=self)


class _Schedulable:
    """The schedule primitives, recorded as ScheduleCalls on `self.name` in `self.schedule`."""
    name: str
    schedule: list

    def _call(self, primitive, args, loc, arg_locs=()):
        self.schedule.append(A.ScheduleCall(self.name, primitive, tuple(args), loc or caller_loc(), tuple(arg_locs)))
        return self

    # Schedule primitives. Dimension sizes are keyword arguments (x=128) or dict items.
    def block(self, sizes: dict | None = None, *, loc: Loc | None = None, arg_locs=(), **kw):
        return self._call("block", _sizes(sizes, kw), loc, arg_locs)

    def tensorize(self, sizes: dict | None = None, *, loc: Loc | None = None, arg_locs=(), **kw):
        return self._call("tensorize", _sizes(sizes, kw), loc, arg_locs)

    def map(self, *order, loc: Loc | None = None, arg_locs=()):
        """Block order, slowest-varying first. Splits: "x:x1/8" or (x, "x1", 8)."""
        return self._call("map", tuple(_map_entry(o) for o in order), loc, arg_locs)

    def num_warps(self, n: int, *, loc: Loc | None = None, arg_locs=()):
        return self._call("num_warps", (n,), loc, arg_locs)

    def num_stages(self, n: int, *, loc: Loc | None = None, arg_locs=()):
        return self._call("num_stages", (n,), loc, arg_locs)

    def persistent(self, programs: int | None = None, *, loc: Loc | None = None, arg_locs=()):
        """Launch at most `programs` programs (default: one per multiprocessor), each walking blocks."""
        return self._call("persistent", () if programs is None else (programs,), loc, arg_locs)

    def tma(self, *, loc: Loc | None = None, arg_locs=()):
        """Load and store the kernel's tiles through TMA tensor descriptors where the GPU has them."""
        return self._call("tma", (), loc, arg_locs)

    def stream(self, *, loc: Loc | None = None, arg_locs=()):
        """Let the lines of the tensors the kernel reads once leave the GPU's L2 cache first."""
        return self._call("stream", (), loc, arg_locs)

    def fuse_at(self, consumer: "Func", dim, *, loc: Loc | None = None, arg_locs=()):
        if isinstance(consumer, Func):
            self.fuse_targets.append(consumer)
        return self._call("fuse_at", (_name(consumer), _name(dim)), loc, arg_locs)

    def compute_with(self, sibling: "Func", dim, *, loc: Loc | None = None, arg_locs=()):
        """Accumulate this Func's reduction over `dim` in the same loop as `sibling`'s."""
        return self._call("compute_with", (_name(sibling), _name(dim)), loc, arg_locs)

    def inline(self, *, loc: Loc | None = None):
        return self._call("inline", (), loc)

    def compile(self, *, loc: Loc | None = None):
        return self._call("compile", (), loc)

    def save(self, *, loc: Loc | None = None):
        """An output, like compile(), stored in the compute dtype (float32 for f16/bf16 inputs): a
        statistic a backward reads back."""
        return self._call("save", (), loc)

    def compile_to_kernel(self, *, loc: Loc | None = None):
        return self._call("compile_to_kernel", (), loc)


class Func(_Schedulable, _Named):
    """A tensor function: defined once, then updated any number of times (`f[I[t], d] += e`),
    scheduled by its methods (an update's by `f.update(i)`'s)."""
    kind = "Func"

    def __init__(self, name: str, *, loc: Loc | None = None):
        super().__init__(name, loc=loc)
        self.definition: A.FuncDef | None = None
        self.redefinitions: list[A.FuncDef] = []
        self.updates: list[A.FuncDef] = []
        self.lhs_decls: tuple[Var, ...] = ()
        self.schedule: list[A.ScheduleCall] = []
        self.fuse_targets: list[Func] = []

    def __getitem__(self, indices):
        loc = caller_loc()
        return A.Access(self.name, "func", _subscripts(self, indices, loc), loc, decl=self)

    def __setitem__(self, indices, expr):
        """f[x, y] = e defines f; f[I[t], d] = e (a computed index) and f[...] += e (Python reads
        f[...] + e) update it."""
        loc = caller_loc()
        subscripts = _subscripts(self, indices, loc)
        expr = A.as_expr(expr)
        added = isinstance(expr, A.Binary) and expr.op == "+" and A.same(expr.a, A.Access(self.name, "func", subscripts))
        if added or not all(isinstance(s, A.DimRef) for s in subscripts):
            self.update_define(subscripts, expr.b if added else expr, accumulate=added, loc=loc)
        else:
            self.define(indices, expr, loc=loc)

    def define(self, indices, expr, *, loc: Loc | None = None):
        names, decls = _dims(self, indices, loc)
        definition = A.FuncDef(self.name, names, A.as_expr(expr), loc)
        if self.definition is None:
            self.definition, self.lhs_decls = definition, decls
        else:
            self.redefinitions.append(definition)

    def update_define(self, subscripts: tuple[A.Expr, ...], expr, *, accumulate: bool, loc: Loc | None = None):
        """An update: expr over the dimensions of `subscripts` written (or added, `accumulate`) into
        this Func at `subscripts`."""
        dims = tuple(dict.fromkeys(n.dim for s in subscripts for n in A.walk(s) if isinstance(n, A.DimRef)))
        update = A.Update(self.name, tuple(subscripts), accumulate, loc)
        self.updates.append(A.FuncDef(A.update_name(self.name, len(self.updates)), dims, A.as_expr(expr), loc,
                                      update))

    def update(self, index: int = 0) -> "UpdateStage":
        """The schedule of update number `index` (in the order written), which runs in a kernel of its own."""
        return UpdateStage(A.update_name(self.name, index), self.schedule)


class UpdateStage(_Schedulable):
    """An update of a Func, for its schedule: `f.update().block(t=1)`."""

    def __init__(self, name: str, schedule: list):
        self.name, self.schedule, self.fuse_targets = name, schedule, []

def _name(x) -> str:
    return x.name if isinstance(x, _Named) else str(x)


def _sizes(sizes, kw) -> tuple[tuple[str, int], ...]:
    merged = dict(sizes or {})
    merged.update(kw)
    return tuple((_name(k), v) for k, v in merged.items())


_SPLIT = re.compile(r"\s*(\w+)\s*:\s*(\w+)\s*/\s*([0-9]+)\s*")


def _map_entry(o):
    if isinstance(o, tuple) and len(o) == 3:
        dim, inner, group = _name(o[0]), _name(o[1]), o[2]
    else:
        o = _name(o)
        if ":" not in o:
            return o
        split = _SPLIT.fullmatch(o)
        if split is None:
            raise DTScheduleError(f"map takes dimensions and splits like \"x:x1/8\", got {o!r}", caller_loc(),
                                  "a split names the dimension, the inner part and the group size: \"x:x1/8\"")
        dim, inner, group = split.groups()
        group = int(group)
    if not _NAME.fullmatch(inner):  # a new dimension: generated code holds its name
        raise DTNameError(f"{inner!r} (the inner part of the split of '{dim}') is not a valid DT name", caller_loc(),
                          _NAME_HINT)
    return (dim, inner, group)


# The element-wise functions of the language (dt.exp, dt.where, dt.eq, ...), one per function of
# the op table (dt.ir.ops), by their public name; dt/__init__.py exports them.
_PARAMETERS = {1: ("x",), 2: ("a", "b"), 3: ("cond", "a", "b")}


def _function(op):
    def fn(*args):
        loc = caller_loc()
        if len(args) != op.arity:
            raise DTError(f"{op.api_name} takes {op.arity} argument(s), got {len(args)}", loc)
        return A.elementwise(op.name, tuple(A.as_expr(a) for a in args), loc)
    fn.__name__ = fn.__qualname__ = op.api_name
    fn.__doc__ = f"Element-wise {op.name} (dt.ir.ops)."
    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY) for p in _PARAMETERS[op.arity]])
    return fn


FUNCTIONS = {op.api_name: _function(op) for op in OPS_LIST if op.api_name}


def _reduction(op):
    def fn(body, dim):
        if not isinstance(dim, Var):
            raise DTDimensionError(f"r{op} needs a dimension object as its last argument", caller_loc())
        return A.Reduce(op, (A.as_expr(body),), dim.name, caller_loc(), None, dim_decl=dim)
    fn.__name__ = f"r{op}"
    return fn


rsum, rmax, rmin = _reduction("sum"), _reduction("max"), _reduction("min")
rargmax, rargmin = _reduction("argmax"), _reduction("argmin")


def rargtopk(body, dim, slot):
    """The indices along `dim` of the len(slot) largest values of body, largest first."""
    if not isinstance(dim, Var) or not isinstance(slot, Var):
        raise DTDimensionError("rargtopk needs dimension objects as its last two arguments", caller_loc())
    return A.Reduce("argtopk", (A.as_expr(body),), dim.name, caller_loc(), None, dim_decl=dim, slot=slot.name)


def _scan(op):
    def fn(body, dim):
        if not isinstance(dim, Var):
            raise DTDimensionError(f"cum{op} needs a dimension object as its last argument", caller_loc())
        return A.Scan(op, A.as_expr(body), dim.name, caller_loc())
    fn.__name__ = f"cum{op}"
    return fn


cumsum, cumprod, cummax, cummin = _scan("sum"), _scan("prod"), _scan("max"), _scan("min")


def rdot(a, b, dim):
    """rsum(a * b, dim), lowered to tensor-core dot products where tile shapes allow."""
    if not isinstance(dim, Var):
        raise DTDimensionError("rdot needs a dimension object as its last argument", caller_loc())
    return A.Reduce("dot", (A.as_expr(a), A.as_expr(b)), dim.name, caller_loc(), None, dim_decl=dim)


def cast(x, dtype: str):
    """cast(x, dtype): x converted to `dtype` ('i64', 'i32', 'bf16', ...); a Func defined as a
    cast is stored in that dtype. Floats convert to integers rounding toward zero."""
    if dtype not in ALL:
        raise DTTypeError(f"{dtype!r} is not a dtype", caller_loc(), f"cast to one of {', '.join(ALL)}")
    return A.Cast(A.as_expr(x), dtype, caller_loc())


def dim_len(dim: Var):
    """len(v): the extent of v as a number."""
    return A.Len(dim.name, caller_loc(), decl=dim)


def reshape(expr, *layout):
    """reshape(e, x, 1): e laid out over x with a new unit axis. Broadcasting is by name, so
    this only checks the layout and returns e."""
    loc = caller_loc()
    e = A.as_expr(expr)
    names = tuple(_name(d) for d in layout if not (isinstance(d, int) and d == 1))
    check_reshape(e, names, loc)
    return e


def check_reshape(e: A.Expr, names: tuple[str, ...], loc):
    free = A.free_dims(e)
    if set(names) != set(free) or len(names) != len(set(names)):
        raise DTDimensionError(f"reshape lists dimensions ({', '.join(names)}) but its argument has "
                               f"({', '.join(sorted(free))})", loc,
                               "list each dimension of the argument once, with 1 for each new unit axis")


def collect(outputs) -> list[_Named]:
    seen: dict[int, _Named] = {}
    stack: list[_Named] = list(outputs)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        if isinstance(obj, Func):
            stack += list(obj.lhs_decls) + obj.fuse_targets
            for d in [obj.definition] + obj.redefinitions + obj.updates:
                if d is not None:
                    for node in (n for e in d.exprs for n in A.walk(e)):
                        stack += [x for x in (getattr(node, "decl", None), getattr(node, "dim_decl", None)) if x]
    # Consumers that fuse these producers in are reachable through fuse_targets; producers of
    # consumers through their definitions. Order: as created, for stable output.
    return sorted(seen.values(), key=lambda o: (o.loc.file, o.loc.line, o.loc.col) if o.loc else ("", 0, 0))


def build(objects: list[_Named], *, name: str, source: str = "", file: str = "<python>") -> A.Program:
    declarations, funcs, schedule = [], [], []
    by_name: dict[str, _Named] = {}
    for obj in objects:
        declarations.append(A.Declaration(obj.name, obj.kind, obj.loc))
        if obj.name in by_name and by_name[obj.name] is not obj:
            continue
        by_name[obj.name] = obj
        if isinstance(obj, Func):
            funcs += [d for d in [obj.definition] + obj.redefinitions + obj.updates if d is not None]
            # an update is a Func of its own (not one a user declares): its schedule's and its kernel's
            declarations += [A.Declaration(u.name, "Func", u.loc) for u in obj.updates]
            schedule += obj.schedule
    schedule.sort(key=lambda c: (c.loc.file, c.loc.line, c.loc.col) if c.loc else ("", 0, 0))
    return A.Program(name, tuple(declarations), tuple(funcs), tuple(schedule), source, file)
