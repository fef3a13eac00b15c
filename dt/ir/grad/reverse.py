"""Reverse-mode differentiation of a DT algorithm: the gradient program, as DT text.

    text = gradient_source(checked, wrt=("A", "W"), saved=())

The passes, each a function below:
1. `hoist`: every reduction inside a larger expression becomes a Func of its own (`mean_sum`),
   so that each Func is element-wise, or one reduction of an element-wise body.
2. `reverse`: the Funcs in reverse order. A Func's adjoint `d_f[dims]` — `grad_f` for an output,
   plus what each Func reading it sends back — flows through its expression by the rules of
   dt.ir.grad.rules to the accesses it reads; what reaches an access is summed over the
   dimensions the access lacks (`rsum(..., x)`: a broadcast's gradient) and sent to that Func or
   input. `rsum` sends its adjoint to every element, `rdot` is a sum of products, `rmax`/`rmin`
   split it evenly among the elements equal to the result (as torch.amax). A Func no output
   changes with (a softmax's max: dt.ir.grad.shift) gets nothing: its adjoint is exactly 0.
3. `emit`: declarations, the forward Funcs the gradients read (recomputed, or inputs when
   saved), the adjoints, and `grad_X.compile();` for each input X.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dt.dtypes import is_integer
from dt.errors import DTError
from dt.ir import algorithm as A
from dt.ir.check.statistics import shifted_exponential
from dt.ir.check.uses import updates_of
from dt.ir.grad import rules, schedule
from dt.ir.grad.inverse import masked, minus, solved_read
from dt.ir.grad.shift import shift_invariant
from dt.ir.grad.rules import add, mul, num

# Reductions through which gradients flow; the arg-reductions give integers (no gradient).
DIFFERENTIABLE = ("sum", "dot", "max", "min")


@dataclass
class Gradient:
    """What `reverse` builds: definitions in order (forward ones first), and the names it made."""
    taken: set[str]  # every name of the program and of the derivation
    forward: list[A.FuncDef] = field(default_factory=list)
    backward: list[A.FuncDef] = field(default_factory=list)
    seeds: list[str] = field(default_factory=list)  # grad_f inputs, one per output
    outputs: list[str] = field(default_factory=list)  # grad_X, one per input in wrt
    # input -> (subscripts, their dimensions, the adjoint over them) of each gather reading it
    # (`E[I[t], d]`): added into its gradient by an update, `grad_E[I[t], d] += ...`
    scatters: dict[str, list[tuple[tuple[A.Expr, ...], tuple[str, ...], A.Expr]]] = field(default_factory=dict)

    def public(self, name: str, what: str) -> str:
        """A name the gradient program's user relies on (grad_A, grad_out): never renamed."""
        if name in self.taken:
            raise DTError(f"dt.grad names {what} '{name}', and the program already has a '{name}'", None,
                          f"rename the program's '{name}'")
        self.taken.add(name)
        return name

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


def gradient_source(checked, wrt: tuple[str, ...], saved: tuple[str, ...] = (), name: str = "",
                    of: tuple[str, ...] | None = None) -> tuple[str, list[str], list[str]]:
    """The gradient program's algorithm as DT text (declarations and definitions), the candidate
    statements of its default schedule (dt.ir.grad.schedule), and its outputs: the gradients of
    the outputs `of` (default: all) with respect to the inputs `wrt`, reading the Funcs `saved`
    as inputs."""
    gradient = Gradient({d.name for d in checked.program.declarations})
    gradient.forward = hoist(_in_order(checked.written, checked.outputs), gradient.fresh)
    reverse(gradient, checked, wrt, checked.outputs if of is None else of)
    text, body = emit(gradient, checked, saved, name)
    return text, schedule.candidates(checked.program, tuple(r for r in checked.kernel_roots if r not in checked.partials), body, gradient.outputs), gradient.outputs


def _in_order(defs: dict[str, A.FuncDef], outputs) -> list[A.FuncDef]:
    """The definitions the outputs need, producers before consumers."""
    done, order = set(), []

    def visit(name: str):
        if name in done or name not in defs:
            return
        done.add(name)
        for e in A.walk(defs[name].expr):
            if isinstance(e, A.Access) and e.kind == "func":
                visit(e.name)
        order.append(defs[name])
    for out in outputs:
        visit(out)
    return order


def _read(name: str, dims) -> A.Access:
    return A.Access(name, "func", tuple(A.DimRef(d) for d in dims))


# ------------------------------------------------------------------ 1. hoist
def hoist(funcs: list[A.FuncDef], fresh) -> list[A.FuncDef]:
    """The definitions with each reduction inside a larger expression a Func of its own, named
    by `fresh` after its Func and op (`mean_sum`), over the dimensions it varies along."""
    out: list[A.FuncDef] = []
    for f in funcs:
        made: list[A.FuncDef] = []

        def lift(e: A.Expr, context: tuple[str, ...], top: bool) -> A.Expr:
            if isinstance(e, A.Reduce) and e.op not in DIFFERENTIABLE:
                return e  # an index: nothing flows through it
            inner = context + (e.dim,) if isinstance(e, A.Reduce) else context
            if isinstance(e, A.Reduce) and e.dim in context:  # it shadows an outer dimension
                inner = tuple(d for d in context if d != e.dim) + (e.dim,)
            kids = tuple(lift(c, inner, False) for c in A.children(e)) if not isinstance(e, A.Access) else e.subscripts
            e = A.rebuild(e, kids) if kids else e
            if not isinstance(e, A.Reduce) or top:
                return e
            dims = tuple(d for d in context if d in A.free_dims(e))
            name = fresh(f"{f.name}_{e.op}")
            made.append(A.FuncDef(name, dims, e, e.loc))
            return _read(name, dims)
        try:
            expr = lift(f.expr, f.dims, True)
        except RecursionError:
            raise DTError(f"'{f.name}' is nested too deeply to differentiate", f.loc,
                          "split its expression over several Funcs") from None
        out += made + [A.FuncDef(f.name, f.dims, expr, f.loc)]
    return out


# ------------------------------------------------------------------ 2. reverse
def reverse(gradient: Gradient, checked, wrt: tuple[str, ...], of: tuple[str, ...]):
    defs = {f.name: f for f in gradient.forward}
    reaching, active = _flowing(gradient.forward, wrt, of)
    sent: dict[str, list[A.Expr]] = {}  # Func or input -> expressions over its own dims, summed
    for out in of:
        if out in active:
            seed = gradient.public(f"grad_{out}", f"the gradient flowing into '{out}'")
            gradient.seeds.append(seed)
            sent.setdefault(out, []).append(_read(seed, defs[out].dims))
    for f in reversed(gradient.forward):
        if f.name not in active or not sent.get(f.name):
            continue
        terms = sent.pop(f.name)
        if len(terms) == 1 and isinstance(terms[0], A.Access):
            adjoint = terms[0]
        else:
            name = gradient.fresh(f"d_{f.name}")
            gradient.backward.append(A.FuncDef(name, f.dims, _sum(terms), f.loc))
            adjoint = _read(name, f.dims)
        for access, g, context, product in _through_func(gradient, f, adjoint):
            if access.name in active or access.kind == "input" and access.name in wrt:
                _send(gradient, sent, access, g, context, product, defs, checked)
    feeding = {f.name for f in _in_order(defs, of)}  # the Funcs the outputs differentiated are made from
    for x in wrt:
        axes = checked.input_axes[x]
        if not sent.get(x) and not any(isinstance(e, A.Access) and e.name == x for f in gradient.forward
                                       if f.name in reaching and f.name in feeding for e in _values(f.expr)):
            raise DTError(f"input '{x}' reaches no float output ({', '.join(of)}): it has no gradient", None,
                          f"leave '{x}' out of wrt")
        read = A.Access(x, "input", tuple(A.DimRef(d) for d in axes))
        # reached only through ops with no gradient (floor, comparisons): zeros, even where x is inf or NaN;
        # only through gathers: zeros that the updates add into, without reading x (an embedding table)
        total = _sum(sent.get(x, [])) or (num(0) if gradient.scatters.get(x) else
                                          rules.call("where", A.Binary("==", read, read), num(0), num(0)))
        if isinstance(total, A.Cast) and total.dtype == "f64":  # widening: stored as the gradients are, not f64
            total = total.x  # (a narrowing cast stays: it rounds the gradient, as torch's .to() does)
        if isinstance(total, A.Cast) and gradient.scatters.get(x):  # not stored in the cast's dtype: the
            total = A.Binary("+", num(0), total)  # updates would add every other term rounded to it
        name = gradient.public(f"grad_{x}", f"the gradient of '{x}'")
        gradient.backward.append(A.FuncDef(name, axes, total))
        gradient.outputs.append(name)
        for i, (subscripts, dims, g) in enumerate(gradient.scatters.get(x, [])):
            gradient.backward.append(A.FuncDef(A.update_name(name, i), dims, g, None, A.Update(name, subscripts, True)))


def _sum(terms: list[A.Expr]) -> A.Expr:
    total = None
    for t in terms:
        total = add(total, t)
    return total


def without_gradient(checked, wrt: tuple[str, ...], of: tuple[str, ...]) -> set[str]:
    """The Funcs through which no gradient flows to wrt (their adjoint is 0)."""
    funcs = hoist(_in_order(checked.written, of), Gradient({d.name for d in checked.program.declarations}).fresh)
    return {f.name for f in funcs} - _flowing(funcs, wrt, of)[1]


def _flowing(funcs: list[A.FuncDef], wrt, of) -> tuple[set[str], set[str]]:
    """(the Funcs, hoisted and producers first, that depend on wrt; those of them a gradient flows
    through to wrt: some output of `of` changes with them — not a softmax's max, dt.ir.grad.shift)."""
    reaching = _active(funcs, set(wrt))
    return reaching, reaching - shift_invariant(_in_order({f.name: f for f in funcs}, of), of, reaching)


def _active(funcs: list[A.FuncDef], wrt: set[str]) -> set[str]:
    """The Funcs whose values depend on an input of wrt (outside subscripts)."""
    active = set(wrt)
    for f in funcs:
        integer = isinstance(f.expr, A.Reduce) and f.expr.op not in DIFFERENTIABLE or \
            isinstance(f.expr, A.Cast) and is_integer(f.expr.dtype)  # an index: no gradient flows through it
        if not integer and any(isinstance(e, A.Access) and e.name in active for e in _values(f.expr)):
            active.add(f.name)
    return active - wrt


def _values(e: A.Expr):
    """e and its sub-expressions, not entering subscripts (they index, they carry no gradient)."""
    return A.walk(e, into=lambda n: not isinstance(n, A.Access))


def _through_func(gradient: Gradient, f: A.FuncDef, adjoint: A.Expr):
    """(access, its adjoint, the dimensions that adjoint spans, the two factors of that adjoint
    when it is a product's (an rdot's operand read directly), else None) for each access f's
    definition reads."""
    e = f.expr
    if not isinstance(e, A.Reduce):
        return _through(gradient, e, adjoint, f.dims, _read(f.name, f.dims))
    if e.op not in DIFFERENTIABLE:
        return []
    context = f.dims + (e.dim,)
    if e.op == "sum":
        return _through(gradient, e.args[0], adjoint, context)
    if e.op == "dot":  # an operand read directly gets rdot(adjoint, the other, ...): a product again
        found = []
        for x, other in zip(e.args, reversed(e.args)):
            if isinstance(x, A.Access):
                found.append((x, mul(adjoint, other), context, (adjoint, other)))
            else:
                found += _through(gradient, x, mul(adjoint, other), context)
        return found
    # rmax / rmin: split evenly among the elements equal to the result (torch.amax's rule)
    body, result = e.args[0], _read(f.name, f.dims)
    ties = gradient.fresh(f"{f.name}_ties")
    gradient.backward.append(A.FuncDef(ties, f.dims, A.Reduce("sum", (A.Binary("==", body, result),), e.dim)))
    share = rules.div(mul(adjoint, A.Binary("==", body, result)), _read(ties, f.dims))
    return _through(gradient, body, share, context)


def _through(gradient: Gradient, e: A.Expr, g: A.Expr | None, context: tuple[str, ...],
             result: A.Expr | None = None) -> list:
    """Apply the rules down the expression tree (g: the adjoint of e, None for none). `result`:
    e's value as a read of its Func (e is a Func's definition), which the rules that use their
    result (exp, rsqrt, sigmoid, ...) read rather than compute again."""
    found, stack = [], [(e, g, result)]
    while stack:
        e, g, value = stack.pop()
        if g is None:
            continue
        y = e if value is None else value
        if isinstance(e, A.Access):
            found.append((e, g, context, None))
        elif isinstance(e, A.Unary):
            stack.append((e.x, rules.UNARY[e.op](e.x, y, g), None))
        elif isinstance(e, A.Binary):
            stack += [(x, adjoint, None) for x, adjoint in zip((e.a, e.b), rules.BINARY[e.op](e.a, e.b, y, g))]
        elif isinstance(e, A.Where):
            stack += [(e.a, rules.call("where", e.cond, g, num(0)), None),
                      (e.b, rules.call("where", e.cond, num(0), g), None)]
        elif isinstance(e, A.Cast) and not is_integer(e.dtype):
            # as torch's .to(): the gradient passes, held in the cast's dtype as a tensor's gradient is;
            # the operand's rule uses its own (unrounded) value
            stack.append((e.x, A.Cast(g, e.dtype), None))
        elif isinstance(e, A.Scan):
            stack.append((e.x, _suffix_sums(gradient, e, g, context), None))
    return found


def _suffix_sums(gradient: Gradient, scan: A.Scan, g: A.Expr, dims: tuple[str, ...]) -> A.Expr:
    """cumsum's adjoint: at each index of its dimension v, the sum of g from there to the end —
    the cumsum of g read backwards, read backwards (as torch's flip, cumsum, flip: no cancellation)."""
    if scan.op != "sum":
        raise DTError(f"the gradient of cum{scan.op} is not built yet", scan.loc,
                      "write this scan's backward by hand; cumsum's gradient is derived")
    v = scan.dim

    def backwards(name: str) -> A.Access:
        flipped = A.Binary("-", A.Binary("-", A.Len(v), A.Num(1.0, integer=True)), A.DimRef(v))
        return A.Access(name, "func", tuple(flipped if d == v else A.DimRef(d) for d in dims))
    held = gradient.fresh(f"d_cumsum_{v}")
    gradient.backward.append(A.FuncDef(held, dims, g))
    suffix = gradient.fresh(f"{held}_reversed")
    gradient.backward.append(A.FuncDef(suffix, dims, A.Scan("sum", backwards(held), v)))
    return backwards(suffix)


def _send(gradient: Gradient, sent: dict, access: A.Access, g: A.Expr, context, product, defs, checked):
    """Sum g over the dimensions the access lacks (the innermost sum of a product an rdot, so
    that it reaches the matrix units), and send it to the Func or input read."""
    own = defs[access.name].dims if access.kind == "func" else checked.input_axes[access.name]
    shifts, rotations = [], {}  # rotations: X[(d + e) % len(d)], a permutation of d's range
    for subscript, axis in zip(access.subscripts, own):
        shift = _shift(subscript, context, axis)
        if shift is None and (shift := _rotation(subscript, context, axis)):
            rotations[shift[0]] = shift[1]
        shifts.append(shift)
    dims = [d for d, _ in shifts] if all(shifts) else []
    if dims and len(set(dims)) == len(dims) and not any(set(dims) & A.free_dims(o) for _, o in shifts if o):
        if any(o is not None for _, o in shifts):  # X[t + j] sends X[t] what reached t - j (0 outside t's range)
            offsets = {d: o for d, o in shifts if o is not None and d not in rotations}
            g, product = _unshifted(g, offsets, rotations), None
    elif any(isinstance(n, A.Access) for sub in access.subscripts for n in A.walk(sub)):
        if access.kind != "input":
            raise DTError(f"the gradient through the gather {access.text} from a Func is not derived yet", access.loc,
                          "gather from an input (its gradient is an update, grad_E[I[t], d] += ...), or write this "
                          "part's backward by hand")
        # E[I[t], d]: what reached each element read is added into E's gradient where it was read from
        dims = tuple(dict.fromkeys(n.dim for s in access.subscripts for n in A.walk(s) if isinstance(n, A.DimRef)))
        for d in reversed([d for d in context if d not in dims]):
            g = A.Reduce("sum", (g,), d)
        gradient.scatters.setdefault(access.name, []).append((access.subscripts, dims, g))
        return
    elif inverse := solved_read(access, context, own, g, product):  # X[b, g * len(cg) + cg, p]: read at the solution
        dims, g, product = list(inverse.dims), inverse.adjoint, inverse.product
        context = tuple(d for d in context if d not in inverse.solved_dims)
    else:  # K[b, h // 4, l, k]: each element of K gets the sum of what reached the indices that read it
        match, dims = masked(access, context, own)
        g = rules.call("where", match, g, num(0))
        if product is not None:  # still a product, of the masked adjoint: it reaches the matrix units
            product = (rules.call("where", match, product[0], num(0)), product[1])
    extra = [d for d in context if d not in dims]
    if product is not None and extra:
        g = A.Reduce("dot", product, extra.pop())
    for d in reversed(extra):
        g = _sum_over(g, d)
    if tuple(dims) != tuple(own):  # read at other names or in another order: a Func at its own, read at ours
        name = gradient.fresh(f"d_{access.name}_at_{'_'.join(dims)}")
        gradient.backward.append(A.FuncDef(name, dims, g))
        g = _read(name, own)
    sent.setdefault(access.name, []).append(g)


def _sum_over(g: A.Expr, d: str) -> A.Expr:
    """rsum(g, d) with g's factors that do not vary along d outside it: softmax's
    `-(rdot(grad, exp(A - _max), y) / (_sum * _sum))` — a sum of products written as rdot where one
    factor is a shifted exponential, the form the online softmax's walk accumulates (compute_with)
    — and a product less a lane."""
    negated = isinstance(g, A.Unary) and g.op == "neg"
    core, factors = A.constant_factors(g.x if negated else g, d)
    if isinstance(core, A.Binary) and core.op == "*" and any(shifted_exponential(x) for x in (core.a, core.b)):
        out: A.Expr = A.Reduce("dot", (core.a, core.b), d)  # rdot(v, exp(e - mx)): the form compute_with takes
    else:
        out = A.Reduce("sum", (core,), d)
    for op, factor in reversed(factors):
        out = mul(out, factor) if op == "*" else rules.div(out, factor)
    return rules.neg(out) if negated else out


def _shift(subscript: A.Expr, context, axis: str) -> tuple[str, A.Expr | None] | None:
    """(d, offset) for a subscript that is a dimension d of the context plus terms without d and
    without reads (`t + j - (len(j) - 1)`, `d - len(d) // 2`): offset None for a bare `d`; None
    for anything else (`h // 4`, `2 * i`, a gather). A shifted d is the dimension the axis is named
    after (`axis`, t there: what binds its extent), whose extent spans the axis."""
    terms = A.signed_terms(subscript)
    found = []
    for i, (sign, term) in enumerate(terms):
        if sign == 1 and isinstance(term, A.DimRef) and term.dim in context:
            rest = [(s, t) for j, (s, t) in enumerate(terms) if j != i]
            if any(term.dim in A.free_dims(t) or any(isinstance(n, A.Access) for n in A.walk(t)) for _, t in rest):
                continue
            offset = None
            for s, t in rest:
                offset = t if offset is None and s == 1 else rules.neg(t) if offset is None else \
                    A.Binary("+" if s == 1 else "-", offset, t)
            found.append((term.dim, offset))
    if len(terms) == 1:
        return found[0] if found else None  # a bare dimension: a read along it
    # a shift only of the axis's own dimension, which spans it: group norm's X[b, g * len(cg) + cg, p]
    # is no shift of the group member cg (its extent is a group's, not the channels'), but a read at
    # an index expression
    named = [f for f in found if f[0] == axis]
    return named[0] if len(named) == 1 else None


def _rotation(subscript: A.Expr, context, axis: str) -> tuple[str, A.Expr] | None:
    """(d, offset) for a read rotated along its axis, `(d + offset) % len(d)` with d the dimension
    the axis is named after (rotate-half RoPE's `(d + len(d) // 2) % len(d)`); else None."""
    if not (isinstance(subscript, A.Binary) and subscript.op == "%" and isinstance(subscript.b, A.Len)):
        return None
    shift = _shift(subscript.a, context, axis)
    if shift is None or shift[1] is None or shift[0] != axis or subscript.b.dim != axis:
        return None
    return shift


def _unshifted(g: A.Expr, offsets: dict[str, A.Expr], rotations: dict[str, A.Expr]) -> A.Expr:
    """g at d - offset for each shifted dimension d, and 0 where that index is outside d's range;
    at (d - offset) % len(d) for each rotated one, a permutation of d's range (no index outside)."""
    moved = {d: minus(A.DimRef(d), o) for d, o in offsets.items()}
    rotated = {d: A.Binary("%", minus(A.DimRef(d), o), A.Len(d)) for d, o in rotations.items()}
    indices = moved | rotated

    def substitute(e: A.Expr) -> A.Expr:
        if isinstance(e, A.DimRef) and e.dim in indices:
            return indices[e.dim]
        if isinstance(e, A.Reduce) and e.dim in indices:  # it binds its own
            return e
        kids = A.children(e)
        return A.rebuild(e, tuple(substitute(k) for k in kids)) if kids else e
    g = substitute(g)
    for d, index in moved.items():
        zero = A.Num(0.0, integer=True)
        inside = A.Binary("*", A.Binary(">=", index, zero), A.Binary("<", index, A.Len(d)))
        g = rules.call("where", inside, g, num(0))
    return g


# ------------------------------------------------------------------ 3. emit
def _solved(f: A.FuncDef, forward: list[A.FuncDef], funcs: set[str], saved: tuple[str, ...]) -> A.FuncDef:
    """f read back from a saved Func that divides it by saved values, `s = f / d`, as `f = s * d`,
    where f is a reduction (attention's numerator from its saved output and row sum: the backward
    reads the output instead of walking the keys again, as flash attention's does); else f."""
    reductions = [e.op for e in A.walk(f.expr) if isinstance(e, A.Reduce)]
    if f.name in saved or not reductions or any(op not in ("sum", "dot") for op in reductions):
        return f  # a max is compared with its elements (ties): a copy rebuilt from s * d equals none
    for s in forward:
        e = s.expr
        if s.name not in saved or not (isinstance(e, A.Binary) and e.op == "/" and isinstance(e.a, A.Access)
                                       and e.a.name == f.name and e.a.kind == "func"):
            continue
        subscripts = e.a.subscripts
        if not all(isinstance(x, A.DimRef) for x in subscripts) or \
                sorted(x.dim for x in subscripts) != sorted(s.dims) or len(subscripts) != len(f.dims):
            continue  # s is f at each of its elements, once
        if any(isinstance(n, A.Reduce) or isinstance(n, A.Access) and n.name in funcs and n.name not in saved
               for n in A.walk(e.b)):
            continue  # d would be computed again: no cheaper than f
        to_f = {x.dim: A.DimRef(d) for x, d in zip(subscripts, f.dims)}
        read = A.Access(s.name, "func", tuple(to_f[d] for d in s.dims))
        return A.FuncDef(f.name, f.dims, A.Binary("*", read, A.substitute_dims(e.b, to_f)), f.loc)
    return f


def emit(gradient: Gradient, checked, saved: tuple[str, ...], name: str) -> tuple[str, list[A.FuncDef]]:
    names = {f.name for f in gradient.forward}
    gradient.forward = [_solved(f, gradient.forward, names, saved) for f in gradient.forward]
    defs = {f.name: f for f in gradient.forward + gradient.backward}
    updates = updates_of(defs)
    needed, stack = set(), list(gradient.outputs)
    while stack:
        n = stack.pop()
        if n in needed or n not in defs:
            continue
        needed.add(n)
        if n not in saved:
            stack += [e.name for x in defs[n].exprs for e in A.walk(x) if isinstance(e, A.Access) and e.kind == "func"]
            stack += updates.get(n, [])
    body = [f for f in gradient.forward + gradient.backward if f.name in needed and f.name not in saved]
    reads = {e.name for f in body for x in f.exprs for e in A.walk(x) if isinstance(e, A.Access)}
    inputs = [x for x in checked.inputs if x in reads] + [s for s in gradient.seeds if s in reads] + \
             [s for s in saved if s in needed]
    scalars = [s for s in checked.scalars if any(isinstance(e, A.ScalarRef) and e.name == s
                                                 for f in body for e in A.walk(f.expr))]
    dims: dict[str, None] = {}
    reduced = set()
    for f in body:
        dims.update(dict.fromkeys(f.dims))
        for e in A.walk(f.expr):
            if isinstance(e, (A.DimRef, A.Len, A.Reduce)):
                dims[e.dim] = None
            if isinstance(e, A.Reduce):
                reduced.add(e.dim)
    for x in inputs:
        dims.update(dict.fromkeys(checked.input_axes.get(x, ())))
    rvars = [d for d in dims if d in reduced or checked.dim_kinds.get(d) == "RVar"]
    seeds = [s for s in gradient.seeds if s in inputs]
    lines = [f"# The gradient of {name or checked.program.name} with respect to "
             f"{', '.join(o.removeprefix('grad_') for o in gradient.outputs)} (dt.grad): it reads the program's "
             f"inputs{' and ' + ', '.join(seeds) + ' (the gradients of its outputs)' if seeds else ''}.",
             f"Func {', '.join(f.name for f in body if f.update is None)};", f"In {', '.join(inputs)};"]
    lines += [f"SIn {', '.join(scalars)};"] * bool(scalars)
    lines += [f"Var {', '.join(d for d in dims if d not in rvars)};"] * any(d not in rvars for d in dims)
    lines += [f"RVar {', '.join(rvars)};"] * bool(rvars)
    lines.append("")
    lines += [f"{A.expr_text(f.update.access)} += {A.expr_text(f.expr)};" if f.update else
              f"{f.name}[{', '.join(f.dims)}] = {A.expr_text(f.expr)};" for f in body]
    lines.append("")
    return "\n".join(lines) + "\n", body
