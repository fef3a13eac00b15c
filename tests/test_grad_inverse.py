"""dt.grad's reads at index expressions that it solves for their dimensions (dt/ir/grad/inverse.py):
each element of the tensor read gets what reached the one index (or the run of indices) that read
it, not a masked sum over the whole axis, which read the adjoint once per element of the axis."""
import re

import numpy as np
import pytest

import dt
from dt.testing import random_inputs
from test_grad import ROOT, _outputs, _taken, gradient_errors

CASES = {
    # a stride with an offset: A[2 * i + 1] leaves every other element and A's tail unread
    "stride": ("Func o;\nIn A, B;\nVar i;\no[i] = A[2 * i + 1] * B[i];\no.compile();\n",
               {"i": 7, "A_axis0": 17}, "grad_A", "(A_axis0 - 1) // 2"),
    # a group's member (mixed radix): channels past len(g) * len(cg) are read by no group
    "radix": ("Func o;\nIn X;\nVar g, cg, p;\no[g, cg, p] = X[g * len(cg) + cg, p] * X[g * len(cg) + cg, p];\n"
              "o.compile();\n", {"g": 3, "cg": 4, "p": 5, "X_axis0": 14}, "grad_X", "X_axis0 // len(cg)"),
    # a run of len(r) indices reads one element; the last run is cut short by c's extent
    "quotient": ("Func o;\nIn X, W;\nVar c, p;\nRVar r;\no[c, p] = X[c // len(r), p] * W[c, p];\no.compile();\n",
                 {"c": 10, "p": 3, "r": 3, "X_axis0": 4}, "grad_X", "rsum(where(X_axis0 * len(r) + r < len(c)"),
}


@pytest.mark.parametrize("backend", ["interp", "numba"])
@pytest.mark.parametrize("case", CASES)
def test_a_read_solved_for_its_dimensions_sends_each_element_what_reached_it(case, backend):
    source, sizes, output, solution = CASES[case]
    prog = dt.loads(source)
    text = dt.grad(prog).dt_source()
    definition = next(line for line in text.splitlines() if line.startswith(f"{output}["))
    axis = next(iter(d for d in sizes if d.endswith("_axis0")))
    assert solution in definition and f"== {axis}" not in definition, definition  # not where(index == axis, ...)
    errors = gradient_errors(prog, sizes, backend=backend)
    assert max(errors.values()) < 1e-5, (case, errors)


@pytest.mark.needs_triton
@pytest.mark.parametrize("case", CASES)
def test_the_solved_gradients_run_on_triton_as_on_the_interpreter(case):
    source, sizes, _, _ = CASES[case]
    prog = dt.loads(source)
    backward = dt.grad(prog)
    args = random_inputs(prog, sizes, "f32", seed=3)
    rng = np.random.default_rng(4)
    seeds = {f"grad_{o}": rng.standard_normal(np.shape(v)).astype(np.float32)
             for o, v in _outputs(prog, prog(backend="interp", sizes=sizes, **args)).items()}
    got, want = (_outputs(backward, backward(backend=b, sizes=sizes, **_taken(backward, {**args, **seeds})))
                 for b in ("triton", "interp"))
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=1e-5, atol=1e-5)


# reductions in the adjoint that run along a dimension the solution replaces: solving would let
# them capture the substituted index (review of session 48), so these keep the masked sum
CAPTURED = {
    "quotient": ("Func o;\nIn X, W;\nVar c;\nRVar r;\no[c] = X[c // len(r)] * cast(rargmax(W[c, r], r), f32);\n"
                 "o.compile();\n", {"c": 6, "r": 3, "X_axis0": 2}),
    "radix": ("Func o;\nIn X, W;\nVar g;\nRVar cg;\n"
              "o[g] = rsum(X[g * len(cg) + cg] * cast(rargmax(W[g, cg], cg), f32), cg);\no.compile();\n",
              {"g": 3, "cg": 4, "X_axis0": 12}),
}


@pytest.mark.parametrize("case", CAPTURED)
def test_a_read_whose_adjoint_reduces_along_the_solved_dimension_keeps_the_masked_sum(case):
    source, sizes = CAPTURED[case]
    prog = dt.loads(source)
    assert "== X_axis0" in dt.grad(prog).dt_source()
    errors = gradient_errors(prog, sizes, backend="numba")
    assert max(errors.values()) < 1e-5, (case, errors)


def test_a_products_operand_read_at_a_stride_keeps_its_gradient_a_product():
    """rdot(A[m, 2 * k + 1], B[k, n], k): grad_A is rdot(grad_o, B, n) at the solution, which the
    matrix units take, not a sum an element at a time; the offset renders as `- 1`, a -2 as `+ 2`."""
    prog = dt.loads("Func o;\nIn A, B;\nVar m, n;\nRVar k;\no[m, n] = rdot(A[m, 2 * k + 1], B[k, n], k);\n"
                    "o.compile();\n")
    grad_a = next(line for line in dt.grad(prog).dt_source().splitlines() if line.startswith("grad_A["))
    assert "rdot(" in grad_a and "(A_axis1 - 1) // 2" in grad_a, grad_a
    errors = gradient_errors(prog, {"m": 3, "n": 4, "k": 5, "A_axis1": 12}, backend="numba")
    assert max(errors.values()) < 1e-5, errors
    shifted = dt.loads("Func o;\nIn A, B;\nVar i;\no[i] = A[3 * i - 2] * B[i];\no.compile();\n")
    assert "(A_axis0 + 2) // 3" in dt.grad(shifted).dt_source()


def test_group_norms_gradient_reads_each_channel_once():
    """grad_X summed every channel of the batch for each channel (a factor of the channel count:
    rsum over g and cg of where(g * len(cg) + cg == c, ...)); it now reads its group's statistics."""
    text = dt.grad(dt.load(ROOT / "examples" / "llm" / "group_norm.dt")).dt_source()
    grad_x = next(line for line in text.splitlines() if line.startswith("grad_X["))
    assert "rsum" not in grad_x and "d_var_sum_1[b, c // len(cg)]" in grad_x
    # the group's sums walk the channels of the group and each row of them in memory order, all in
    # one kernel a (batch, group): the statistics and d_rstd computed in d_mean's, which stores
    # d_rstd for grad_X (it reads it at computed indices); dW walks a channel's rows
    d_rstd = next(line for line in text.splitlines() if line.startswith("d_rstd["))
    assert re.search(r"rsum\(rsum\(where\(g \* len\(cg\) \+ cg < len\(c\), .*, cg\), s\)", d_rstd), d_rstd
    assert "d_rstd.fuse_at(d_mean, b);" in text and "d_mean.tensorize(cg:0, p:1024, s:1024);" in text
    assert "grad_W.block(c:1);" in text and "grad_W.tensorize(s:1024, b:1);" in text
    prog = dt.loads(text)
    assert [k.name for k in prog.pipeline("f32").kernels] == ["d_mean_kernel", "grad_X_kernel", "grad_W_kernel"]


def test_a_bound_scaled_by_an_extent_in_a_reduction_lowers():
    """skipping.index_bound read `m * len(k)` as a scaled dimension and multiplied by the extent it
    cannot know (a TypeError in the lowering); it is no bound of a walk, which masks it instead."""
    prog = dt.loads("Func o;\nIn A;\nVar m;\nRVar l, k;\no[m] = rsum(where(l < m * len(k), A[m, l], 0.0), l);\n"
                    "o.compile();\n")
    a = np.random.default_rng(0).standard_normal((5, 12)).astype(np.float32)
    got = prog(A=a, sizes={"k": 2}, backend="interp")
    want = np.array([a[m, :min(2 * m, 12)].sum() for m in range(5)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
