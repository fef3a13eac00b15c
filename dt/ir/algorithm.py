"""The algorithm IR: what a DT program computes, independent of any schedule.

Expressions are small frozen dataclasses. Dimensions are referred to by name; tensors and
Funcs by name; element-wise ops by their name in the op table (dt.ir.ops). The frontend (DT text or the Python API) builds these nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Generator

from dt.errors import Loc

# How deeply an expression may nest: operations inside operations, `-(-(-x))` or the left-leaning
# tree of a 1000-term sum `a + a + ... + a`. The frontend and checker walk any depth without
# Python recursion; this bound is what the rest of the compiler (lowering, the backends, the
# Python code they generate) may rely on.
MAX_DEPTH = 1024


class ExprOps:
    """Operator overloading so that the Python API can write DT expressions naturally
    (Expr nodes, and Var / SIn objects, which stand for a DimRef / ScalarRef)."""

    def __add__(self, o): return Binary("+", as_expr(self), as_expr(o))
    def __radd__(self, o): return Binary("+", as_expr(o), as_expr(self))
    def __sub__(self, o): return Binary("-", as_expr(self), as_expr(o))
    def __rsub__(self, o): return Binary("-", as_expr(o), as_expr(self))
    def __mul__(self, o): return Binary("*", as_expr(self), as_expr(o))
    def __rmul__(self, o): return Binary("*", as_expr(o), as_expr(self))
    def __truediv__(self, o): return Binary("/", as_expr(self), as_expr(o))
    def __rtruediv__(self, o): return Binary("/", as_expr(o), as_expr(self))
    def __floordiv__(self, o): return Binary("//", as_expr(self), as_expr(o))
    def __rfloordiv__(self, o): return Binary("//", as_expr(o), as_expr(self))
    def __mod__(self, o): return Binary("%", as_expr(self), as_expr(o))
    def __rmod__(self, o): return Binary("%", as_expr(o), as_expr(self))
    def __neg__(self): return Unary("neg", as_expr(self))
    def __pow__(self, o): return Binary("pow", as_expr(self), as_expr(o))
    def __rpow__(self, o): return Binary("pow", as_expr(o), as_expr(self))
    def __lt__(self, o): return Binary("<", as_expr(self), as_expr(o))
    def __le__(self, o): return Binary("<=", as_expr(self), as_expr(o))
    def __gt__(self, o): return Binary(">", as_expr(self), as_expr(o))
    def __ge__(self, o): return Binary(">=", as_expr(self), as_expr(o))


def as_expr(value) -> "Expr":
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        raise TypeError("booleans are not DT values; use comparisons")
    if isinstance(value, int):
        return Num(float(value), integer=True)
    if isinstance(value, float):
        return Num(value)
    to_expr = getattr(value, "as_expr", None)
    if to_expr is not None:
        return to_expr()
    raise TypeError(f"cannot use {value!r} in a DT expression")


@dataclass(frozen=True, eq=False)
class Expr(ExprOps):
    pass


@dataclass(frozen=True, eq=False)
class Num(Expr):
    """A number; `integer` when written without a point or exponent (an index: `x + 1`)."""
    value: float
    loc: Loc | None = field(default=None, compare=False)
    integer: bool = False


@dataclass(frozen=True, eq=False)
class ScalarRef(Expr):
    """An SIn scalar input."""
    name: str
    loc: Loc | None = field(default=None, compare=False)
    decl: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class DimRef(Expr):
    """A dimension used as a value: its index along that dimension."""
    dim: str
    loc: Loc | None = field(default=None, compare=False)
    decl: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class Len(Expr):
    """len(v): the extent of dimension v."""
    dim: str
    loc: Loc | None = field(default=None, compare=False)
    decl: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class Access(Expr):
    """T[s0, s1, ...] where T is an input tensor ('input') or a Func ('func') and each subscript
    an integer index expression: a dimension (`A[x, y]`), arithmetic of dimensions, constants and
    lens (`X[t - j]`, `K[h // 4]`), or a read of an integer tensor (a gather: `E[I[t], d]`)."""
    name: str
    kind: str
    subscripts: tuple[Expr, ...]
    loc: Loc | None = field(default=None, compare=False)
    decl: object = field(default=None, compare=False, repr=False)  # the frontend object, for dt.program

    @property
    def dims(self) -> tuple[str, ...] | None:
        """The dimension each subscript names when every one is a bare dimension (`A[x, y]`), else None."""
        if all(isinstance(s, DimRef) for s in self.subscripts):
            return tuple(s.dim for s in self.subscripts)
        return None

    @property
    def text(self) -> str:
        """The access as DT writes it: `A[x, y + 1]`."""
        return f"{self.name}[{', '.join(expr_text(s) for s in self.subscripts)}]"


@dataclass(frozen=True, eq=False)
class Unary(Expr):
    op: str  # an op of one operand of dt.ir.ops ('neg', 'exp', ...)
    x: Expr
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    op: str  # an op of two operands of dt.ir.ops ('+', '<', 'maximum', ...)
    a: Expr
    b: Expr
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True, eq=False)
class Where(Expr):
    cond: Expr
    a: Expr
    b: Expr
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    """cast(x, dtype): x converted to `dtype` (a dt dtype name; floats to integers round toward 0)."""
    x: Expr
    dtype: str
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True, eq=False)
class Reduce(Expr):
    """rsum / rmax / rmin over `dim` of `body`; rdot(a, b, k) is Reduce('dot', (a, b), k);
    rargtopk(e, r, i) is Reduce('argtopk', (e,), r, slot='i'): its result varies along `slot`."""
    op: str  # 'sum' | 'max' | 'min' | 'dot' | 'argmax' | 'argmin' | 'argtopk'
    args: tuple[Expr, ...]
    dim: str
    loc: Loc | None = field(default=None, compare=False)
    dim_loc: Loc | None = field(default=None, compare=False)
    dim_decl: object = field(default=None, compare=False, repr=False)
    slot: str | None = None


@dataclass(frozen=True)
class Scan(Expr):
    """cumsum / cumprod / cummax / cummin of `x` along `dim`, a pure dimension of the Func it is
    in: the combination of x at every index of dim up to and including each one."""
    op: str  # 'sum' | 'prod' | 'max' | 'min'
    x: Expr
    dim: str
    loc: Loc | None = field(default=None, compare=False)
    dim_loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Stored(Expr):
    """An output inlined at a use read at plain dimensions: the value of `name` at `dims` (its
    axes, in order), `x` (its definition there), which the first kernel computing it also stores."""
    name: str
    dims: tuple[str, ...]
    x: Expr
    loc: Loc | None = field(default=None, compare=False)


def scans_along(e: Expr, dim: str) -> list[Scan]:
    """The scans in e that run along `dim`."""
    return [n for n in walk(e) if isinstance(n, Scan) and n.dim == dim]


def elementwise(op: str, operands: tuple[Expr, ...], loc: Loc | None = None) -> Expr:
    """Element-wise op `op` (a name of the op table, dt.ir.ops) applied to `operands`."""
    if len(operands) == 1:
        return Unary(op, operands[0], loc)
    if len(operands) == 2:
        return Binary(op, *operands, loc)
    return Where(*operands, loc)


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Unary, Cast, Scan, Stored)):
        return (e.x,)
    if isinstance(e, Access):
        return e.subscripts
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Where):
        return (e.cond, e.a, e.b)
    if isinstance(e, Reduce):
        return e.args
    return ()


def walk(e: Expr, into: Callable[[Expr], bool] | None = None):
    """e and every expression inside it, parents before children, left to right; with `into`,
    not inside the nodes it says no for (their children, that is: the nodes themselves come)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        if into is None or into(node):
            stack.extend(reversed(children(node)))


def recurse(step: Callable[[object], Generator], node):
    """Run a recursive function over a tree of any depth without Python recursion. `step(node)`
    is a generator: it yields each child whose result it needs (`value = yield child`) and
    returns node's result; results and errors come in the order plain recursion gives."""
    stack = [step(node)]
    value = None
    while True:
        try:
            child = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value = done.value
        else:
            stack.append(step(child))
            value = None


def depth(e: Expr) -> tuple[int, Expr]:
    """The number of nested expressions on e's deepest path, and the expression MAX_DEPTH + 1
    levels down that path when it is deeper than that (e itself otherwise)."""
    best, deepest_path = 0, None
    stack = [(e, 1, None)]  # (node, its depth, the path above it as a linked list)
    while stack:
        node, d, above = stack.pop()
        path = (node, above)
        if d > best:
            best, deepest_path = d, path
        # a bare dimension as a subscript (A[x]) is a name, not a level of nesting
        kids = [c for c in children(node) if not (isinstance(node, Access) and isinstance(c, DimRef))]
        stack.extend((c, d + 1, path) for c in kids)
    chain = []
    while deepest_path is not None:
        chain.append(deepest_path[0])
        deepest_path = deepest_path[1]
    chain.reverse()
    return best, chain[MAX_DEPTH] if best > MAX_DEPTH else e


def rebuild(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    if isinstance(e, Unary):
        return Unary(e.op, kids[0], e.loc)
    if isinstance(e, Cast):
        return Cast(kids[0], e.dtype, e.loc)
    if isinstance(e, Access):
        return Access(e.name, e.kind, tuple(kids), e.loc, e.decl)
    if isinstance(e, Binary):
        return Binary(e.op, kids[0], kids[1], e.loc)
    if isinstance(e, Where):
        return Where(kids[0], kids[1], kids[2], e.loc)
    if isinstance(e, Reduce):
        return Reduce(e.op, kids, e.dim, e.loc, e.dim_loc, e.dim_decl, e.slot)
    if isinstance(e, Scan):
        return Scan(e.op, kids[0], e.dim, e.loc, e.dim_loc)
    if isinstance(e, Stored):
        return Stored(e.name, e.dims, kids[0], e.loc)
    return e


def substitute_dims(e: Expr, to: dict[str, Expr]) -> Expr:
    """e with each dimension of `to` replaced by its expression (a Func's definition read at the
    subscripts it is read at)."""
    def step(node):
        if isinstance(node, DimRef):
            return to.get(node.dim, node)
        kids = []
        for c in children(node):
            kids.append((yield c))
        return rebuild(node, tuple(kids)) if kids else node
    return recurse(step, e)


def same(a: Expr, b: Expr) -> bool:
    """Whether two expressions are written alike (source locations aside)."""
    pairs = [(a, b)]
    while pairs:
        a, b = pairs.pop()
        if type(a) is not type(b):
            return False
        for f in fields(a):
            if not f.compare:
                continue
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(x, Expr):
                pairs.append((x, y))
            elif isinstance(x, tuple) and any(isinstance(v, Expr) for v in x):
                if len(x) != len(y):
                    return False
                pairs += zip(x, y)
            elif x != y:
                return False
    return True


def free_dims(e: Expr) -> frozenset[str]:
    """Dimensions an expression varies over (reductions bind theirs)."""
    return recurse(_free_dims, e)


def _free_dims(e: Expr):
    if isinstance(e, DimRef):
        return frozenset((e.dim,))
    dims = frozenset()
    for c in children(e):
        dims |= yield c
    if isinstance(e, Reduce):
        return dims - {e.dim} | ({e.slot} if e.slot else set())
    return dims | {e.dim} if isinstance(e, Scan) else dims


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2}


def expr_text(e: Expr, parent: int = 0) -> str:
    """An index expression (or any small expression) as DT writes it, for messages."""
    if isinstance(e, Num):
        return str(int(e.value)) if e.integer else repr(e.value)
    if isinstance(e, (DimRef,)):
        return e.dim
    if isinstance(e, Len):
        return f"len({e.dim})"
    if isinstance(e, ScalarRef):
        return e.name
    if isinstance(e, Access):
        return e.text
    if isinstance(e, Binary) and e.op in _PRECEDENCE:
        p = _PRECEDENCE[e.op]
        text = f"{expr_text(e.a, p)} {e.op} {expr_text(e.b, p + 1)}"
        return f"({text})" if p < parent else text
    if isinstance(e, Unary) and e.op == "neg":
        return f"-{expr_text(e.x, 3)}"
    if isinstance(e, Cast):
        return f"cast({expr_text(e.x)}, {e.dtype})"
    if isinstance(e, Binary) and e.op in ("<", "<=", ">", ">=", "==", "!="):
        text = f"{expr_text(e.a, 1)} {e.op} {expr_text(e.b, 1)}"
        return f"({text})" if parent else text
    if isinstance(e, Binary) and e.op == "pow":
        return f"{expr_text(e.a, 4)} ** {expr_text(e.b, 4)}"
    if isinstance(e, Reduce):
        function = "rdot" if e.op == "dot" else f"r{e.op}"
        return f"{function}({', '.join(expr_text(a) for a in e.args)}, {e.dim}{', ' + e.slot if e.slot else ''})"
    if isinstance(e, Scan):
        return f"cum{e.op}({expr_text(e.x)}, {e.dim})"
    name = e.op if isinstance(e, (Unary, Binary)) else type(e).__name__.lower()
    return f"{name}({', '.join(expr_text(a) for a in children(e))})"


def signed_terms(e: Expr) -> list[tuple[int, Expr]]:
    """e as a sum of terms, each with its sign (+1 or -1): `t + j - (len(j) - 1)` is t, j, -len(j), +1."""
    terms: list[tuple[int, Expr]] = []
    stack = [(1, e)]
    while stack:
        sign, node = stack.pop()
        if isinstance(node, Binary) and node.op in ("+", "-"):
            stack += [(sign, node.a), (sign if node.op == "+" else -sign, node.b)]
        else:
            terms.append((sign, node))
    return terms


def constant_factors(e: Expr, dim: str) -> tuple[Expr, list[tuple[str, Expr]]]:
    """(e without its outer factors that do not vary along `dim`, those factors as ('*' or '/',
    factor), outermost first): `g * W[y] / s[x]` along y is (g * W[y], [('/', s[x])])."""
    found = []
    while isinstance(e, Binary) and e.op in ("*", "/"):
        if dim not in free_dims(e.b) and dim in free_dims(e.a):
            found.append((e.op, e.b))
            e = e.a
        elif e.op == "*" and dim not in free_dims(e.a) and dim in free_dims(e.b):
            found.append(("*", e.a))
            e = e.b
        else:
            break
    return e, found


@dataclass(frozen=True)
class Update:
    """Where an update definition writes (`g[I[t], d] += e`): into the Func `target` at
    `subscripts`, one per axis of `target`, adding to what is there (`accumulate`) or replacing it."""
    target: str
    subscripts: tuple[Expr, ...]
    accumulate: bool
    loc: Loc | None = field(default=None, compare=False)

    @property
    def access(self) -> Access:
        """The written element as an access (its subscripts read integers and bind nothing)."""
        return Access(self.target, "func", self.subscripts, self.loc)

    @property
    def text(self) -> str:
        return f"{self.access.text} {'+=' if self.accumulate else '='}"


def update_name(target: str, index: int) -> str:
    """The name of a Func's update number `index` (its schedule's, its kernel's): g_update, g_update1, ..."""
    return f"{target}_update{index or ''}"


@dataclass(frozen=True)
class FuncDef:
    """`name[dims] = expr`. An update (`update` set) computes expr over `dims` (the dimensions of
    its left-hand side) and writes each element into `update.target` at `update.subscripts`; the
    Func `name` holds no tensor of its own (`update_name`)."""
    name: str
    dims: tuple[str, ...]  # LHS dimension names, in order
    expr: Expr
    loc: Loc | None = field(default=None, compare=False)
    update: Update | None = None

    @property
    def exprs(self) -> tuple[Expr, ...]:
        """Every expression of the definition: its right-hand side, and an update's written access."""
        return (self.expr,) + ((self.update.access,) if self.update else ())


@dataclass(frozen=True)
class ScheduleCall:
    """One schedule statement as written, e.g. mm.block(x:128, y:128)."""
    func: str
    primitive: str
    args: tuple  # primitive-specific, see dt.ir.schedule
    loc: Loc | None = field(default=None, compare=False)
    arg_locs: tuple[Loc | None, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Declaration:
    name: str
    kind: str  # 'Func' | 'In' | 'SIn' | 'Var' | 'RVar'
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Program:
    """A whole DT program: declarations, Func definitions and schedule statements, as written."""
    name: str
    declarations: tuple[Declaration, ...]
    funcs: tuple[FuncDef, ...]
    schedule: tuple[ScheduleCall, ...]
    source: str = field(default="", compare=False)
    file: str = field(default="<dt>", compare=False)

    def decl(self, name: str) -> Declaration | None:
        for d in self.declarations:
            if d.name == name:
                return d
        return None

    def names_of(self, kind: str) -> tuple[str, ...]:
        return tuple(d.name for d in self.declarations if d.kind == kind)

    def func(self, name: str) -> FuncDef:
        for f in self.funcs:
            if f.name == name:
                return f
        raise KeyError(name)
