"""The statistic patterns compute_with accumulates in one loop, and the lowering recognises:
a variance, rsum of squared deviations from a mean rsum(e, r) / len(r) (Chan's pairwise update),
and a sum or product of exponentials shifted by a max rmax(e, r) (the online softmax)."""
from __future__ import annotations

from dt.ir import algorithm as A
from dt.ir.check.uses import uses


def loop_statistic(r: A.Reduce, g: str, g_def: A.FuncDef) -> str | None:
    """'variance' or 'exp_sum' when reduction r reads Func g (a Func of its own loop) in one of
    the two forms compute_with accumulates in g's loop: squared deviations from g, a mean, or
    exponentials shifted by g, a max."""
    if centered_value(r, g, g_def) is not None:
        return "variance"
    if shifted_exp_value(r, g, g_def) is not None:
        return "exp_sum"
    return None


def centered_value(r: A.Reduce, mean: str, mean_def: A.FuncDef) -> A.Expr | None:
    """e, when reduction r is rsum((e - mean) * (e - mean)) (or rsum(pow(e - mean, 2))) over the
    dim that `mean`, defined as rsum(e, dim) / len(dim), averages e over: the sum of squared
    deviations that compute_with may accumulate in mean's own loop (Chan's pairwise update)."""
    e = mean_value(mean_def.expr, r.dim)
    deviation = squared_deviation(r)
    if e is None or deviation is None:
        return None
    value, access = deviation
    if access.name == mean and access.dims == mean_def.dims and A.same(value, e):
        return e
    return None


def shifted_exp_value(r: A.Reduce, maximum: str, max_def: A.FuncDef) -> A.Expr | None:
    """e, when reduction r is rsum(exp(e - maximum)) or rdot(exp(e - maximum), v) (either
    operand) over the dim that `maximum`, defined as rmax(e, dim), takes e's max over: the sum
    or product of exponentials that compute_with may accumulate in the max's loop, rescaled
    whenever the running max grows (the online softmax; flash attention's output)."""
    m = max_reduction(max_def.expr, r.dim)
    shifted = shifted_exp(r)
    if m is None or shifted is None:
        return None
    value, access = shifted
    if access.name == maximum and access.dims == max_def.dims and A.same(value, m.args[0]) \
            and sum(u.name == maximum for u in uses(r)) == 1:  # the other operand of a product does not read it
        return value
    return None


def mean_reduction(e: A.Expr, dim: str) -> A.Reduce | None:
    """rsum(v, dim) when e is rsum(v, dim) / len(dim)."""
    if isinstance(e, A.Binary) and e.op == "/" and isinstance(e.b, A.Len) and e.b.dim == dim \
            and isinstance(e.a, A.Reduce) and e.a.op == "sum" and e.a.dim == dim:
        return e.a
    return None


def max_reduction(e: A.Expr, dim: str) -> A.Reduce | None:
    """e itself when e is rmax(v, dim)."""
    return e if isinstance(e, A.Reduce) and e.op == "max" and e.dim == dim else None


def mean_value(e: A.Expr, dim: str) -> A.Expr | None:
    """v when e is rsum(v, dim) / len(dim)."""
    r = mean_reduction(e, dim)
    return None if r is None else r.args[0]


def squared_deviation(r: A.Reduce) -> tuple[A.Expr, A.Access] | None:
    """(e, f[...]) when reduction r is rsum((e - f[...]) * (e - f[...])) or rsum(pow(e - f[...], 2))."""
    body = r.args[0]
    if r.op != "sum" or not isinstance(body, A.Binary):
        return None
    if body.op == "*" and A.same(body.a, body.b):
        deviation = body.a
    elif body.op == "pow" and isinstance(body.b, A.Num) and body.b.value == 2:
        deviation = body.a
    else:
        return None
    if isinstance(deviation, A.Binary) and deviation.op == "-" and isinstance(deviation.b, A.Access) \
            and deviation.b.kind == "func":
        return deviation.a, deviation.b
    return None


def shifted_exp_operand(r: A.Reduce) -> int | None:
    """The index of r's operand that is exp(e - f[...]) when r is rsum(exp(e - f[...])), or rdot
    with such an operand (the first, if both are)."""
    if r.op not in ("sum", "dot"):
        return None
    return next((k for k, body in enumerate(r.args) if shifted_exponential(body)), None)


def shifted_exponential(e: A.Expr) -> bool:
    """Whether e is exp(x - f[...]), an exponential shifted by a Func (a softmax's numerator)."""
    return isinstance(e, A.Unary) and e.op == "exp" and isinstance(e.x, A.Binary) and e.x.op == "-" \
        and isinstance(e.x.b, A.Access) and e.x.b.kind == "func"


def shifted_exp(r: A.Reduce) -> tuple[A.Expr, A.Access] | None:
    """(e, f[...]) for r's operand exp(e - f[...]) (shifted_exp_operand)."""
    k = shifted_exp_operand(r)
    return None if k is None else (r.args[k].x.a, r.args[k].x.b)
