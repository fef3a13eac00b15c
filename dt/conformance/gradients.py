"""The catalogue's gradient cases (dt.grad): for each differentiable op and reduction, the
gradient program dt.grad derives from a one-op program, run under its default schedule and
unscheduled, against the derivative written here in NumPy (not derived: the derivation is what
is under test). Ties of rmax/rmin and maximum/minimum split the gradient evenly, as PyTorch's;
`abs` has gradient 0 at 0.

The algorithms are derived when this module is imported, so the text a backend runs is the text
dt.grad writes."""
from __future__ import annotations

import inspect
import math

import numpy as np

from dt.conformance.case import Case

S2 = ({"x": 1, "y": 1}, {"x": 7, "y": 13}, {"x": 33, "y": 70})
SMM = ({"x": 1, "y": 1, "k": 1}, {"x": 13, "y": 7, "k": 19}, {"x": 40, "y": 33, "k": 70})
# bf16 and f16 round the seed, every recomputed value and every stored gradient: the same few
# steps of rounding as a forward case, a few more for chains
TOLERANCES = {"f16": (2e-2, 1e-2), "bf16": (8e-2, 4e-2)}


def _erf_derivative(A):
    return 2.0 / math.sqrt(math.pi) * np.exp(-A * A)


# op -> (domain, d op(A) / dA in NumPy)
UNARY = {
    "neg": ("normal", lambda A: -np.ones_like(A)),
    "exp": ("normal", np.exp),
    "exp2": ("normal", lambda A: np.exp2(A) * math.log(2.0)),
    "log": ("positive", lambda A: 1.0 / A),
    "log2": ("positive", lambda A: 1.0 / (A * math.log(2.0))),
    "sqrt": ("positive", lambda A: 0.5 / np.sqrt(A)),
    "rsqrt": ("positive", lambda A: -0.5 * A ** -1.5),
    # not saturated: there 1 - sigmoid(A) cancels in f16 (as in any f16 backward)
    "sigmoid": ("normal", lambda A: np.exp(-A) / (1.0 + np.exp(-A)) ** 2),
    "tanh": ("normal", lambda A: 1.0 / np.cosh(A) ** 2),
    "abs": ("ints", np.sign),
    "erf": ("normal", _erf_derivative),
    "sin": ("wide", np.cos),
    "cos": ("wide", lambda A: -np.sin(A)),
    "softplus": ("wide", lambda A: 1.0 / (1.0 + np.exp(-A))),
}


def _share(a, b, wins):
    """maximum's (minimum's) gradient share of a: 1 where it wins, 1/2 on a tie."""
    return np.where(wins(a, b), 1.0, np.where(a == b, 0.5, 0.0))


# op -> (expression, domains of A and B, (d/dA, d/dB) in NumPy)
BINARY = {
    "add": ("A[x, y] + B[x, y]", ("normal", "normal"), (lambda A, B: np.ones_like(A), lambda A, B: np.ones_like(B))),
    "sub": ("A[x, y] - B[x, y]", ("normal", "normal"), (lambda A, B: np.ones_like(A), lambda A, B: -np.ones_like(B))),
    "mul": ("A[x, y] * B[x, y]", ("normal", "normal"), (lambda A, B: B, lambda A, B: A)),
    "div": ("A[x, y] / B[x, y]", ("normal", "nonzero"), (lambda A, B: 1.0 / B, lambda A, B: -A / (B * B))),
    "maximum": ("maximum(A[x, y], B[x, y])", ("ints", "ints"),
                (lambda A, B: _share(A, B, np.greater), lambda A, B: _share(B, A, np.greater))),
    "minimum": ("minimum(A[x, y], B[x, y])", ("ints", "ints"),
                (lambda A, B: _share(A, B, np.less), lambda A, B: _share(B, A, np.less))),
    "pow": ("pow(A[x, y], B[x, y])", ("positive", "normal"),
            (lambda A, B: B * A ** (B - 1.0), lambda A, B: A ** B * np.log(A))),
    "mod": ("A[x, y] % B[x, y]", ("normal", "nonzero"),
            (lambda A, B: np.ones_like(A), lambda A, B: -np.floor(A / B))),
    "where": ("where(A[x, y] > 0, A[x, y] * B[x, y], B[x, y])", ("normal", "normal"),
              (lambda A, B: np.where(A > 0, B, 0.0), lambda A, B: np.where(A > 0, A, 1.0))),
}


def _split(forward: str) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """dt.grad's program for `forward`: its algorithm, its schedules (dt.grad's default, and
    none: every Func its own kernel, computed lane by lane), and its inputs."""
    import dt
    backward = dt.grad(dt.loads(forward, name="case"))
    algorithm, _, schedule = backward.dt_source().rstrip().rpartition("\n\n")
    compiles = "\n".join(line for line in schedule.splitlines() if line.endswith(".compile();"))
    return algorithm, {"default": schedule.strip(), "unscheduled": compiles}, backward.inputs


def _taking(inputs: tuple[str, ...], gradients):
    """A reference taking exactly the gradient program's inputs (the runner passes what its
    signature names): `gradients(grad_out, A, B)`, with zeros of grad_out's shape for an input
    the gradient does not read (a sum's gradient reads only grad_out)."""
    def reference(**values):
        zeros = np.zeros_like(values["grad_out"])
        return gradients(values["grad_out"], values.get("A", zeros), values.get("B", zeros))
    reference.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in inputs])
    return reference


def _unary_case(op: str, domain: str, derivative) -> Case:
    expression = "-A[x, y]" if op == "neg" else f"{op}(A[x, y])"
    algorithm, schedules, inputs = _split(f"Func out;\nIn A;\nVar x, y;\nout[x, y] = {expression};\nout.compile();\n")
    return Case(f"grad.{op}", algorithm, schedules, _taking(inputs, lambda g, A, B: {"grad_A": g * derivative(A)}),
                S2, domains={"A": domain}, tolerances=TOLERANCES, op="grad")


def _binary_case(name: str, expression: str, domains, derivatives) -> Case:
    algorithm, schedules, inputs = _split(f"Func out;\nIn A, B;\nVar x, y;\nout[x, y] = {expression};\nout.compile();\n")
    d_a, d_b = derivatives
    return Case(f"grad.{name}", algorithm, schedules,
                _taking(inputs, lambda g, A, B: {"grad_A": g * d_a(A, B), "grad_B": g * d_b(A, B)}), S2,
                domains=dict(zip("AB", domains)), tolerances=TOLERANCES, op="grad")


def _routed(pick):
    def reference(grad_out, A):
        return {"grad_A": grad_out[:, None] * _ties(A, pick)}
    return reference


def _ties(A, pick):
    """rmax's (rmin's) gradient routing: evenly among the elements equal to the result."""
    hit = (A == pick(A, axis=1, keepdims=True)).astype(np.float64)
    return hit / hit.sum(axis=1, keepdims=True)


def _reduction_cases() -> list[Case]:
    cases = []
    for op, pick in (("rmax", np.max), ("rmin", np.min)):
        algorithm, schedules, _ = _split(f"Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = {op}(A[x, y], y);\nout.compile();\n")
        cases.append(Case(f"grad.{op}", algorithm, schedules, _routed(pick), S2,
                          domains={"A": "ints"}, tolerances=TOLERANCES, op="grad"))
    algorithm, schedules, _ = _split("Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = rsum(A[x, y] * A[x, y], y);\nout.compile();\n")
    cases.append(Case("grad.rsum", algorithm, schedules, lambda grad_out, A: {"grad_A": 2.0 * A * grad_out[:, None]},
                      S2, tolerances=TOLERANCES, op="grad"))
    algorithm, schedules, _ = _split("Func out;\nIn A, B;\nVar x, y;\nRVar k;\nout[x, y] = rdot(A[x, k], B[k, y], k);\n"
                                  "out.compile();\n")
    cases.append(Case("grad.rdot", algorithm, schedules,
                      lambda grad_out, A, B: {"grad_A": grad_out @ B.T, "grad_B": A.T @ grad_out}, SMM,
                      tolerances=TOLERANCES, op="grad"))
    # the online statistics: a softmax (max and sum of shifted exponentials) and a variance
    algorithm, schedules, _ = _split(
        "Func out, mx, total;\nIn A;\nVar x;\nRVar y;\nmx[x] = rmax(A[x, y], y);\n"
        "total[x] = rsum(exp(A[x, y] - mx[x]), y);\nout[x, y] = exp(A[x, y] - mx[x]) / total[x];\nout.compile();\n")

    def softmax_backward(grad_out, A):
        p = np.exp(A - A.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return {"grad_A": p * (grad_out - (grad_out * p).sum(axis=1, keepdims=True))}
    cases.append(Case("grad.softmax", algorithm, schedules, softmax_backward, S2, tolerances=TOLERANCES, op="grad"))
    algorithm, schedules, _ = _split(
        "Func out, mean;\nIn A;\nVar x;\nRVar y;\nmean[x] = rsum(A[x, y], y) / len(y);\n"
        "out[x] = rsum((A[x, y] - mean[x]) * (A[x, y] - mean[x]), y) / len(y);\nout.compile();\n")
    cases.append(Case("grad.variance", algorithm, schedules,
                      lambda grad_out, A: {"grad_A": grad_out[:, None] * 2.0 * (A - A.mean(axis=1, keepdims=True))
                                           / A.shape[1]}, S2, tolerances=TOLERANCES, op="grad"))
    return cases


CASES: tuple[Case, ...] = (
    *(_unary_case(op, domain, derivative) for op, (domain, derivative) in UNARY.items()),
    *(_binary_case(name, *entry) for name, entry in BINARY.items()),
    *_reduction_cases(),
)
