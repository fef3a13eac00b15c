"""dt.grad: gradient programs derived from the algorithm, checked against central finite
differences of the float64 reference on every example (and on random programs), against
torch.autograd where torch is here, and run on every backend."""
import glob
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dt
from dt import backends
from dt.ir import scheduled as S
from dt.testing import random_inputs
from strategies import batched, elementwise, indexed, matmul, row_reduction, two_matmuls

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(Path(p) for p in glob.glob(str(ROOT / "examples" / "*.dt")) + glob.glob(str(ROOT / "examples" / "llm" / "*.dt")))
# What the gradient cannot go through yet, and why (each refused with this message)
REFUSED = {"argmax": "reaches no float output"}
# Casts to narrow floats round: the float64 reference is a staircase at finite differences' scale
ROUNDING = {"fp8_matmul", "layernorm_stats", "w8a8_matmul"}
has_torch = importlib.util.find_spec("torch") is not None


def _float64(args: dict) -> dict:
    return {k: v.astype(np.float64) if getattr(v, "dtype", None) is not None and v.dtype.kind == "f" else v
            for k, v in args.items()}


def _taken(prog, args: dict) -> dict:
    """The arguments `prog` takes (a gradient program reads only the inputs its gradients need)."""
    return {k: v for k, v in args.items() if k in prog.inputs + prog.scalars}


def _outputs(prog, values) -> dict:
    return values if isinstance(values, dict) else {prog.outputs[0]: values}


def gradient_errors(prog, sizes, backend="interp", seed=1, eps=1e-6, **grad_args):
    """For each input X: |d/dt L(X + t V) - <grad_X, V>| over the larger of them, L = sum of
    grad_f * f over the outputs, V a random direction, the derivative by central differences of
    the float64 reference."""
    backward = dt.grad(prog, **grad_args)
    args = _float64(random_inputs(prog, sizes, "f32", seed=seed))
    rng = np.random.default_rng(seed + 1)
    seeds = {f"grad_{o}": rng.standard_normal(np.shape(v)) for o, v in _outputs(prog, prog.reference(**args, sizes=sizes)).items()}
    got = _outputs(backward, backward(backend=backend, sizes=sizes, **_taken(backward, {**args, **seeds})))

    def loss(x, shifted):
        values = _outputs(prog, prog.reference(**{**args, x: shifted}, sizes=sizes))
        return sum(float(np.sum(seeds[f"grad_{o}"] * v)) for o, v in values.items() if f"grad_{o}" in seeds)
    errors = {}
    for name, g in got.items():
        x = name.removeprefix("grad_")
        v = rng.standard_normal(args[x].shape)
        numeric = (loss(x, args[x] + eps * v) - loss(x, args[x] - eps * v)) / (2 * eps)
        analytic = float(np.sum(np.asarray(g, np.float64) * v))
        errors[x] = abs(numeric - analytic) / max(abs(numeric), abs(analytic), 1e-9)
    return errors


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_differentiates_or_says_why_not(path):
    prog = dt.load(path)
    sizes = {d: 5 for d in prog.checked.needed_dims}
    if path.stem in REFUSED:
        with pytest.raises(dt.DTError, match=REFUSED[path.stem]):
            dt.grad(prog)
        return
    if path.stem in ROUNDING:
        pytest.skip("narrow casts round: checked against torch.autograd instead")
    errors = gradient_errors(prog, sizes)
    assert errors and max(errors.values()) < 1e-6, errors


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from((elementwise, row_reduction, matmul, two_matmuls, batched)).flatmap(lambda family: family()))
def test_random_programs_match_finite_differences(case):
    source, extents = case
    prog = dt.loads(source)
    errors = gradient_errors(prog, {d: min(n, 9) for d, n in extents.items()})
    assert max(errors.values()) < 1e-5, (source, errors)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(indexed())
def test_reads_at_index_expressions_and_gathers_differentiate_or_are_refused_with_a_reason(case):
    source, extents = case
    prog = dt.loads(source)
    sizes = {d: min(n, 9) for d, n in extents.items()}
    try:
        dt.grad(prog)
    except dt.DTError as refusal:  # x's axis read at another index of x (a rotation of x is derived)
        assert any(op in source for op in ("//", "%", "* x")), (source, refusal)
        assert "is read at an index of 'x' itself" in str(refusal)
        return
    errors = gradient_errors(prog, sizes)
    assert max(errors.values()) < 1e-5, (source, errors)


def test_a_rotated_read_sends_its_gradient_rotated_back():
    """X[(d + e) % len(d)] reads every element of d once: X[d] gets what reached (d - e) % len(d)
    (rotate-half RoPE), with no mask and no sum over d."""
    text = dt.grad(dt.load(ROOT / "examples" / "llm" / "rope.dt")).dt_source()
    assert "grad_Q[b, s, h, d] = grad_q_out[b, s, h, (d - len(d) // 2) % len(d)] * " in text
    assert "==" not in text
    prog = dt.loads("Func o;\nIn A;\nVar x, y;\no[x, y] = A[x, (y + 3) % len(y)] * A[x, y];\no.compile();\n")
    errors = gradient_errors(prog, {"x": 2, "y": 7})
    assert max(errors.values()) < 1e-5, errors



def test_a_gradient_output_is_fused_into_another_as_the_forward_fused_their_outputs():
    # rope.dt stores k_out from q_out's kernel (k_out.fuse_at(q_out, s)): grad_K joins grad_Q's kernel alike,
    # with k_out's tiles, instead of a kernel of its own blocked by 1024 along a d of 8
    backward = dt.grad(dt.load(ROOT / "examples" / "llm" / "rope.dt"), wrt=("Q", "K"))
    text = backward.dt_source()
    assert "grad_K.tensorize(kh:0, d:0);\ngrad_K.fuse_at(grad_Q, s);" in text and "grad_K.block" not in text
    assert len(backward.pipeline("f32").kernels) == 1
    # S is read rotated twice (where(.., -S[s, rot], S[s, rot])) for each of k and q: one gather serves all
    assert backward.source("triton", "bf16").count("tl.load(S_ptr") == 1
    rng = np.random.default_rng(3)
    Q, K, grad_q, grad_k = (rng.standard_normal(shape) for shape in ((2, 3, 4, 8), (2, 3, 2, 8), (2, 3, 4, 8),
                                                                      (2, 3, 2, 8)))
    C, S = rng.standard_normal((3, 8)), rng.standard_normal((3, 8))
    got = backward(backend="numba", C=C, S=S, grad_q_out=grad_q, grad_k_out=grad_k)
    sign = np.where(np.arange(8) < 4, -1.0, 1.0)
    for grad, want_of in ((got["grad_Q"], grad_q), (got["grad_K"], grad_k)):
        # out[d] = x[d] C[d] + x[(d + 4) % 8] sign[d] S[d]: x[j] gets g[j] C[j] + g[(j - 4) % 8] (sign S)[(j - 4) % 8]
        want = want_of * C[None, :, None] + np.roll(want_of * (sign * S)[None, :, None], 4, axis=-1)
        np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("subscript, back", [("y - 3", "y + 3"), ("(y - 3) % len(y)", "(y + 3) % len(y)"),
                                            ("(y - len(y) // 2) % len(y)", "(y + len(y) // 2) % len(y)"),
                                            ("(y - z) % len(y)", "(y + z) % len(y)")])
def test_a_shift_or_rotation_back_the_other_way_is_written_as_one(subscript, back):
    """A read shifted or rotated by -e goes back at y + e, not y - -e; rotated also by a dimension
    the read lacks (summed over), at an odd extent."""
    prog = dt.loads(f"Func o;\nIn A, B;\nVar x, y, z;\no[x, y, z] = A[x, {subscript}] * B[x, z] + A[x, y];\n"
                    "o.compile();\n")
    text = dt.grad(prog).dt_source()
    assert f"grad_o[x, {back}, z]" in text and "- -" not in text and "==" not in text, text  # no masked sum
    errors = gradient_errors(prog, {"x": 2, "y": 7, "z": 3})
    assert max(errors.values()) < 1e-5, errors


def test_what_the_gradient_refuses_at_its_axis_own_dimension_names_the_forms_it_derives():
    prog = dt.loads("Func o;\nIn A;\nVar x, y;\no[x, y] = A[x, len(y) - 1 - y] * A[x, y];\no.compile();\n")
    with pytest.raises(dt.DTError, match=r"is read at an index of 'y' itself") as refusal:
        dt.grad(prog)
    assert "rotated ('(y + offset) % len(y)'" in refusal.value.hint


def test_a_products_gradients_are_products():
    text = dt.grad(dt.load(ROOT / "examples" / "matmul.dt")).dt_source()
    assert "grad_A[x, k] = rdot(grad_mm[x, y], B[k, y], y);" in text
    assert "grad_B[k, y] = rdot(grad_mm[x, y], A[x, k], x);" in text
    lowered = dt.grad(dt.load(ROOT / "examples" / "matmul.dt")).ir("bf16")
    assert "dot(" in lowered  # matrix-unit products, not multiply-and-sum


def test_ties_split_the_gradient_as_torch_does():
    prog = dt.loads("Func m, o;\nIn A, B;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y], y);\n"
                    "o[x] = m[x] + rsum(maximum(A[x, y], B[x, y]), y);\no.compile();\n")
    a = np.array([[1.0, 3.0, 3.0, 2.0]])
    b = np.array([[1.0, 0.0, 5.0, 0.0]])
    got = dt.grad(prog)(backend="interp", A=a, B=b, grad_o=np.array([1.0]))
    # rmax: 3 twice, half each; maximum: a tie at 1 (half), A wins at 3 and 2, B at 5
    np.testing.assert_allclose(got["grad_A"], [[0.5, 1.5, 0.5, 1.0]])
    np.testing.assert_allclose(got["grad_B"], [[0.5, 0.0, 1.0, 0.0]])


SOFTMAX_HEAD = "Func m, e, s, o;\nIn A;\nVar x, y;\nRVar z;\nm[x] = rmax(A[x, z], z);\n"


@pytest.mark.parametrize("program, invariant", [
    ("e[x, y] = exp(A[x, y] - m[x]);\ns[x] = rsum(e[x, z], z);\no[x, y] = e[x, y] / s[x];", True),  # softmax
    ("e[x, y] = exp((A[x, y] - m[x]) * 0.5);\ns[x] = rsum(where(A[x, z] > 0, e[x, z], 0.0), z);\n"
     "o[x, y] = e[x, y] / s[x];", True),  # a temperature and a mask
    ("e[x, y] = A[x, y] - m[x];\ns[x] = log(rsum(exp(e[x, z]), z));\no[x, y] = e[x, y] - s[x];", True),  # log_softmax
    ("e[x, y] = exp(A[x, y] - m[x]);\ns[x] = rsum(e[x, z], z);\no[x, y] = log(s[x]) + m[x] - A[x, y];", True),
    ("e[x, y] = exp(A[x, y] - m[x]);\ns[x] = rsum(e[x, z], z);\no[x, y] = e[x, y];", False),  # not normalised
    ("e[x, y] = exp(A[x, y] - m[x]);\ns[x] = rsum(e[x, z], z);\no[x, y] = e[x, y] / s[x] + m[x];", False),
    ("e[x, y] = exp(A[x, y] - m[x]);\ns[y] = rsum(e[z, y], z);\no[x, y] = e[x, y] / s[y];", False),  # sums across shifts
    ("e[x, y] = exp(A[x, y] - m[x]);\ns[x] = rsum(e[x, z] * e[x, z], z);\no[x, y] = e[x, y] / s[x];", False),
    ("e[x, y] = (A[x, y] - m[x]) * (A[x, y] - m[x]);\ns[x] = rsum(e[x, z], z);\no[x, y] = e[x, y] / s[x];", False),
])
def test_a_max_no_output_changes_with_gets_no_gradient(program, invariant):
    # the adjoint of a softmax's max is exactly 0: dt.grad leaves it out (no ties, no walk for it),
    # and only where every output is the same for any value of the max
    prog = dt.loads(SOFTMAX_HEAD + program + "\no.compile();\n")
    text = dt.grad(prog).dt_source()
    assert ("m_ties" not in text and "d_m[" not in text) == invariant
    assert max(gradient_errors(prog, dict(x=6, y=6, z=6)).values()) < 1e-5


def test_shifts_that_cancel_only_in_floating_point_keep_the_gradient():
    # m * 1e16 + m - m * 1e16 is m: the shift test adds its coefficients exactly (1e16 + 1 - 1e16 is 0
    # in floats, which read it as no shift and dropped the max's gradient)
    prog = dt.loads(SOFTMAX_HEAD + "e[x, y] = A[x, y] - (m[x] * 1e16 + m[x] - m[x] * 1e16);\n"
                    "s[x] = rsum(e[x, z], z);\no[x, y] = e[x, y] / s[x];\no.compile();\n")
    assert "d_m[" in dt.grad(prog).dt_source()


def test_the_softmax_gradients_of_the_examples_leave_their_max_out():
    for path, statistic in (("softmax_safe.dt", "_max"), ("llm/cross_entropy.dt", "row_max"),
                            ("llm/causal_mha.dt", "mx"), ("attention_safe.dt", "mx")):
        text = dt.grad(dt.load(ROOT / "examples" / path)).dt_source()
        assert f"{statistic}_ties" not in text and f"d_{statistic}[" not in text, path
        assert f"{statistic}[" in text, path  # still read: the exponent's shift
    text = dt.grad(dt.load(ROOT / "examples" / "llm" / "cross_entropy.dt")).dt_source()
    assert "grad_L[r, v] = d_row_sum[r] * exp(L[r, v] - row_max[r]);" in text  # the textbook softmax - one-hot


def test_saved_funcs_are_outputs_of_the_forward_and_inputs_of_the_backward():
    prog = dt.load(ROOT / "examples" / "layernorm.dt")
    forward, backward = dt.grad(prog, save=("mean", "variance"))
    assert set(forward.outputs) == {"layernorm", "mean", "variance"}
    assert {"mean", "variance"} <= set(backward.inputs) and "rsum(A[x, y], y)" not in backward.dt_source()
    args = random_inputs(prog, dict(x=6, y=9), "f32", seed=3)
    outs = forward(backend="interp", **args)
    np.testing.assert_allclose(outs["layernorm"], prog(backend="interp", **args), rtol=1e-6)
    g = np.random.default_rng(0).standard_normal((6, 9)).astype(np.float32)
    saved = backward(backend="interp", **_taken(backward, dict(args, grad_layernorm=g, mean=outs["mean"],
                                                                variance=outs["variance"])))
    recomputed = dt.grad(prog)(backend="interp", **_taken(backward, dict(args, grad_layernorm=g)))
    for name in ("grad_A", "grad_W", "grad_Bias"):
        np.testing.assert_allclose(saved[name], recomputed[name], rtol=1e-5, atol=1e-5)


def test_only_the_outputs_named_send_gradients():
    prog = dt.load(ROOT / "examples" / "llm" / "layernorm_stats.dt")
    backward = dt.grad(prog, of="y")
    assert "grad_y" in backward.inputs and "grad_mean" not in backward.inputs and "grad_rstd" not in backward.inputs


@pytest.mark.parametrize("call, message", [
    (lambda p: dt.grad(p, wrt="Z"), "'Z' is not an input of softmax_safe"),
    (lambda p: dt.grad(p, of="A"), "'A' is not an output of softmax_safe"),
    (lambda p: dt.grad(p, save="nothing"), "'nothing' is not a Func"),
])
def test_bad_arguments_are_errors(call, message):
    with pytest.raises(dt.DTError, match=message):
        call(dt.load(ROOT / "examples" / "softmax_safe.dt"))


def test_a_gathers_gradient_is_an_update_adding_at_the_gathered_indices():
    backward = dt.grad(dt.load(ROOT / "examples" / "llm" / "embedding.dt"))
    assert "grad_E[I[t], d] += grad_out[t, d];" in backward.dt_source()
    assert "grad_E.update().block(t:1, d:1024);" in backward.dt_source()  # the forward's blocks, reused
    ids = np.array([3, 0, 3, 3, 7, 0])  # repeated ids: their gradients add up
    seed = np.random.default_rng(0).standard_normal((6, 5))
    assert "grad_E[E_axis0, d] = 0.0;" in backward.dt_source() and "E" not in backward.inputs  # no read of the table
    grad = backward(I=ids, grad_out=seed, sizes={"E_axis0": 8}, backend="interp")
    want = np.zeros((8, 5))
    np.add.at(want, ids, seed)
    np.testing.assert_allclose(grad, want, rtol=1e-6)
    gathered_from_a_func = dt.loads("Func h, o;\nIn E, I;\nVar v, d, t;\nh[v, d] = exp(E[v, d]);\n"
                                    "o[t, d] = h[I[t], d];\no.compile();\n")
    with pytest.raises(dt.DTError, match=r"the gradient through the gather h\[I\[t\], d\] from a Func"):
        dt.grad(gathered_from_a_func)
    with pytest.raises(dt.DTError, match="'I' indexes another tensor"):
        dt.grad(dt.load(ROOT / "examples" / "llm" / "embedding.dt"), wrt="I")


@pytest.mark.parametrize("backend", ["numba", pytest.param("triton", marks=pytest.mark.needs_triton)])
@pytest.mark.parametrize("name", ["softmax_safe", "layernorm", "matmul", "llm/add_rmsnorm", "llm/embedding",
                                  "llm/cross_entropy"])
def test_gradient_programs_run_on_every_backend(backend, name):
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    prog = dt.load(ROOT / "examples" / f"{name}.dt")
    backward = dt.grad(prog)
    sizes = {d: 24 if d in ("k", "y") else 20 for d in prog.checked.needed_dims}
    args = random_inputs(backward, sizes, "f32", seed=4)
    unbound = {d: sizes[d] for d in ("E_axis0",) if d in backward.checked.needed_dims}  # the table's rows
    want = _outputs(backward, backward(backend="interp", sizes=unbound, **_float64(args)))
    got = _outputs(backward, backward(backend=backend, sizes=unbound, **args))
    for name, w in want.items():
        g = np.asarray(got[name].cpu() if hasattr(got[name], "cpu") else got[name], np.float64)
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * float(np.abs(w).max()))


def test_dt_grad_writes_the_gradient_program(tmp_path, capsys):
    from dt.cli import main
    out, forward = tmp_path / "layernorm_grad.dt", tmp_path / "layernorm_saving.dt"
    assert main(["grad", str(ROOT / "examples" / "layernorm.dt"), "--wrt", "A,W", "-o", str(out)]) == 0
    backward = dt.load(out)
    assert set(backward.outputs) == {"grad_A", "grad_W"}
    assert main(["grad", str(ROOT / "examples" / "layernorm.dt"), "--save", "mean"]) == 2
    assert "--save needs --forward" in capsys.readouterr().err
    assert main(["grad", str(ROOT / "examples" / "layernorm.dt"), "--save", "mean", "--forward", str(forward)]) == 0
    assert "mean" in dt.load(forward).outputs and "In A, W, grad_layernorm, mean;" in capsys.readouterr().out


# ---------------------------------------------------------------- against torch.autograd
def _torch_references():
    import torch

    def softmax_safe(A):
        return {"_softmax": torch.softmax(A, -1)}

    def layernorm(A, W, Bias, eps):
        return {"layernorm": torch.nn.functional.layer_norm(A, A.shape[-1:], W, Bias, eps)}

    def layernorm_stats(A, W, Bias, eps):  # the statistics stored as f32, as the program casts them
        mean = A.mean(-1).float().double()
        rstd = torch.rsqrt(((A - mean[:, None]) ** 2).mean(-1) + eps).float().double()
        return {"y": (A - mean[:, None]) * rstd[:, None] * W + Bias, "mean": mean, "rstd": rstd}

    def add_rmsnorm(X, R, W, eps):
        h = X + R
        return {"h": h, "y": h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * W}

    def causal_mha(Q, K, V):
        return {"attention": torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True)}
    return {"softmax_safe": softmax_safe, "layernorm": layernorm, "llm/layernorm_stats": layernorm_stats,
            "llm/add_rmsnorm": add_rmsnorm, "llm/causal_mha": causal_mha}


@pytest.mark.skipif(not has_torch, reason="torch is not installed (pip install dt[torch])")
@pytest.mark.parametrize("name", ["softmax_safe", "layernorm", "llm/layernorm_stats", "llm/add_rmsnorm",
                                  "llm/causal_mha"])
def test_gradients_match_torch_autograd_in_float64(name):
    import torch
    prog = dt.load(ROOT / "examples" / f"{name}.dt")
    sizes = {d: 7 for d in prog.checked.needed_dims}
    args = _float64(random_inputs(prog, sizes, "f32", seed=2))
    tensors = {k: torch.tensor(v, requires_grad=True) if k in prog.inputs else v for k, v in args.items()}
    outs = _torch_references()[name](**tensors)
    seeds = {f"grad_{o}": torch.randn(v.shape, dtype=torch.float64) for o, v in outs.items()}
    sum((seeds[f"grad_{o}"] * v).sum() for o, v in outs.items()).backward()
    backward = dt.grad(prog)
    got = _outputs(backward, backward(backend="interp", sizes=sizes,
                                      **_taken(backward, {**args, **{k: v.numpy() for k, v in seeds.items()}})))
    tolerance = 1e-6 if name in ("llm/layernorm_stats",) else 1e-9  # its f32 casts round gradients too, as torch's
    for x in prog.inputs:
        np.testing.assert_allclose(got[f"grad_{x}"], tensors[x].grad.numpy(), rtol=tolerance, atol=tolerance)


def test_ops_without_a_gradient_give_zeros_even_at_inf_and_nan():
    prog = dt.loads("Func o;\nIn A;\nVar x;\no[x] = floor(A[x]) + (A[x] > 0);\no.compile();\n")
    got = dt.grad(prog)(backend="interp", A=np.array([1.5, np.inf, np.nan, -2.0]))
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 0.0])


def test_the_conformance_suite_has_a_gradient_case_for_every_differentiable_op():
    from dt.conformance.gradients import CASES
    from dt.ir.grad import rules
    from dt.ir.ops import OPS
    names = {c.name.removeprefix("grad.") for c in CASES}
    from dt.ir.algorithm import Num
    A, B = Num(1.0), Num(2.0)
    unary = {op for op, rule in rules.UNARY.items() if rule(A, A, A) is not None}
    binary = {OPS[op].checks[0].name for op, rule in rules.BINARY.items() if rule(A, B, A, A) != (None, None)}
    assert unary | binary | {"rsum", "rmax", "rmin", "rdot", "softmax", "variance", "where"} <= names


def test_the_derived_layernorm_backward_equals_the_hand_written_one():
    forward_prog = dt.load(ROOT / "examples" / "llm" / "layernorm_stats.dt")
    forward, backward = dt.grad(forward_prog, of="y", save=("mean", "rstd"))
    by_hand = dt.load(ROOT / "examples" / "llm" / "layernorm_backward.dt")
    args = _float64(random_inputs(forward_prog, dict(x=9, k=37), "f32", seed=6))
    outs = forward(backend="interp", **args)
    dy = np.random.default_rng(1).standard_normal((9, 37))
    derived = backward(backend="interp", **_taken(backward, dict(args, grad_y=dy, mean=outs["mean"], rstd=outs["rstd"])))
    written = by_hand(backend="interp", DY=dy, A=args["A"], W=args["W"], Mean=outs["mean"], Rstd=outs["rstd"])
    # the statistics are f32 (the forward casts them), and so are the derived gradients through them
    for mine, theirs in (("grad_A", "dx"), ("grad_W", "dw"), ("grad_Bias", "db")):
        np.testing.assert_allclose(derived[mine], written[theirs], rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- a review's findings
def test_names_the_user_relies_on_are_never_renamed():
    clash = dt.loads("Func grad_A, o;\nIn A;\nVar x;\ngrad_A[x] = A[x] * 2.0;\no[x] = grad_A[x] * A[x];\no.compile();")
    with pytest.raises(dt.DTError, match="dt.grad names the gradient of 'A' 'grad_A'"):
        dt.grad(clash)
    # a reduction's Func of its own takes a name no input has
    prog = dt.loads("Func o;\nIn A, o_sum;\nVar x;\nRVar y;\no[x] = rsum(A[x, y], y) * 2.0 + o_sum[x];\no.compile();")
    assert gradient_errors(prog, dict(x=4, y=5), wrt="A")["A"] < 1e-6


def test_pow_at_a_base_of_zero_is_differentiated_as_torch_does():
    prog = dt.loads("Func o;\nIn A, B;\nVar x;\no[x] = A[x] ** B[x];\no.compile();\n")
    got = dt.grad(prog)(backend="interp", A=np.array([0.0, 0.0, 2.0]), B=np.array([2.0, 0.0, 3.0]), grad_o=np.ones(3))
    np.testing.assert_allclose(got["grad_A"], [0.0, 0.0, 12.0])
    np.testing.assert_allclose(got["grad_B"], [0.0, 0.0, 8.0 * np.log(2.0)])


def test_what_save_cannot_do_is_an_error_that_says_why():
    prog = dt.loads("Func m, o;\nIn A;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y], y);\no[x] = m[x] * 2.0;\no.compile();\n")
    with pytest.raises(dt.DTError, match="'m' is an rmax the outputs change with, which dt.grad does not save"):
        dt.grad(prog, save="m")
    with pytest.raises(dt.DTError, match="saving e breaks attention_safe's schedule"):
        dt.grad(dt.load(ROOT / "examples" / "attention_safe.dt"), save="e")


def test_a_program_with_an_update_is_refused_rather_than_differentiated_without_it():
    """The derivation reads definitions only: through `g[I[t], d] += ...` it would have given a
    gradient missing what the update adds (all zeros here), silently."""
    prog = dt.loads("Func g, o; In E, I, G; Var v, d, t;\ng[v, d] = 0.0 * E[v, d];\n"
                    "g[I[t], d] += G[t, d] * E[I[t], d];\no[v, d] = g[v, d] * E[v, d];\no.compile(); g.compile();\n")
    for wrt in ("E", "G"):
        with pytest.raises(dt.DTError, match="'g' is written by an update, which dt.grad does not differentiate"):
            dt.grad(prog, wrt=wrt, of="o")


def test_a_gradient_program_no_schedule_holds_for_is_an_error_not_a_program_that_fails_later(monkeypatch):
    # its scans need whole columns in a tile (the default schedule's candidates give them); with
    # none, the unscheduled program does not lower
    prog = dt.loads("Func o;\nIn A;\nVar x, y;\no[x, y] = cumsum(A[x, y], x) * A[x, y];\no.tensorize(y:0);\no.compile();\n")
    assert dt.grad(prog) is not None
    monkeypatch.setattr(dt.ir.grad.schedule, "candidates", lambda *args: [])
    with pytest.raises(dt.DTError, match="found no schedule under which"):
        dt.grad(prog)


@pytest.mark.slow
def test_a_gradient_program_is_tuned_like_any_program():
    backward = dt.grad(dt.load(ROOT / "examples" / "softmax_safe.dt"))
    sizes = dict(x=6, y=300)
    space = backward.space(sizes, "f32", backend="interp")
    assert len(space) > 0
    for candidate in space:  # a Func shares one loop at most: no choice the checker must refuse for that
        subjects = [line.split(".")[0] for line in candidate.text.splitlines() if ".compute_with(" in line]
        assert len(subjects) == len(set(subjects))
    result = backward.tune(sizes, "f32", backend="interp", budget=3, cache=False)
    tuned = dt.loads(result.best.text, name="tuned")
    args = random_inputs(backward, sizes, "f32", seed=2)
    np.testing.assert_allclose(tuned(backend="interp", **args), backward(backend="interp", **args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["interp", "numba"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_stored_max_equals_the_values_it_was_taken_over(backend, dtype):
    # rmax's gradient counts the elements equal to the max: the max kept in a temporary must equal
    # one of the (computed, f32) values, never a copy rounded to bf16 or values computed in f64
    prog = dt.loads("Func m, t;\nIn A;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y] / sqrt(len(y)), y);\n"
                    "t[x] = rsum(A[x, y] / sqrt(len(y)) == m[x], y);\nm.block(x:1);\nt.block(x:1);\nt.compile();\n")
    A = np.random.default_rng(0).standard_normal((8, 40))
    if dtype == "bf16":
        A = A.astype(pytest.importorskip("ml_dtypes").bfloat16)
    assert f"m: {'f32'}[x]" in prog.ir(dtype)
    assert (np.asarray(prog(A=A.astype(np.float32) if dtype == "f32" else A, backend=backend), np.float64) >= 1).all()


def test_default_schedule_shares_row_walks_and_schedules_every_kernel():
    cross_entropy = dt.grad(dt.load(ROOT / "examples" / "llm" / "cross_entropy.dt")).dt_source()
    assert "row_sum.compute_with(row_max, v);" in cross_entropy  # the online softmax's max and sum in one walk
    assert "grad_L.block(r:1);" in cross_entropy  # whole rows: the fused row statistics computed once a row
    assert "grad_L.update().block(r:1024);" in cross_entropy  # the update at the target: 1024 rows a program
    attention = dt.grad(dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")).dt_source()
    assert "num.block(b:1, h:1, m:128);" in attention  # the forward's sizes of the dimensions num walks


def test_group_norms_gradient_matches_torch_at_groups_of_several_channels():
    # X[b, g * len(cg) + cg, p] is a read at an index expression, not a shift of the group member cg:
    # binding cg to X's channel axis (and shifting by g * len(cg)) gave grad_X off by 0.9 at cg < c
    torch = pytest.importorskip("torch")
    backward = dt.grad(dt.load(ROOT / "examples" / "llm" / "group_norm.dt"))
    rng = np.random.default_rng(0)
    for b, groups, per, s in ((2, 3, 4, 5), (1, 2, 6, 3)):
        X, G = rng.standard_normal((b, groups * per, s)), rng.standard_normal((b, groups * per, s))
        W, B = rng.standard_normal(groups * per), rng.standard_normal(groups * per)
        got = backward(backend="interp", X=X, W=W, grad_out=G, eps=1e-5, sizes={"g": groups, "cg": per})
        x, w = torch.tensor(X, requires_grad=True), torch.tensor(W, requires_grad=True)
        torch.nn.functional.group_norm(x, groups, w, torch.tensor(B), 1e-5).backward(torch.tensor(G))
        np.testing.assert_allclose(got["grad_X"], x.grad.numpy(), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(got["grad_W"], w.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_saving_a_max_its_gradient_needs_or_ignores():
    # a max divided by B and saved through s = m / B: m is not rebuilt as s * B (the ties compare the
    # elements with m itself), so the gradient is the recomputing one
    prog = dt.loads("Func m, s;\nIn A, B;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y], y);\ns[x] = m[x] / B[x];\n"
                    "s.compile();\n")
    forward, backward = dt.grad(prog, save=("s",))
    assert "m[x] = rmax(" in backward.dt_source()
    rng = np.random.default_rng(0)
    A, B = np.round(rng.standard_normal((6, 7)), 1), rng.standard_normal(6) * 3
    A[1, :2] = A[1].max() + 1  # a tie
    args = dict(A=A, B=B, grad_s=rng.standard_normal(6))
    assert backward.inputs == ("A", "B", "grad_s")  # s saved, but nothing reads it back
    got = backward(backend="interp", **args)
    want = dt.grad(prog)(backend="interp", **args)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12)
    # a max through which no gradient reaches wrt can be saved
    scaled = dt.loads("Func m, o;\nIn A, B;\nVar x, y;\nRVar z;\nm[x] = rmax(B[x, z], z);\n"
                      "o[x, y] = A[x, y] * m[x];\no.compile();\n")
    forward, _ = dt.grad(scaled, wrt=("A",), save=("m",))
    assert "m.save();" in forward.dt_source()


def test_save_keeps_an_inlined_statistic_and_compile_to_kernels_one_kernel():
    src = ("Func v, r, o;\nIn A;\nVar x, y;\nRVar z;\nv[x] = rsum(A[x, z] * A[x, z], z) / len(z);\n"
           "r[x] = rsqrt(v[x] + 0.00001);\no[x, y] = A[x, y] * r[x];\no.block(x:1);\no.tensorize(y:0);\n"
           "v.fuse_at(o, x);\nr.inline();\no.compile();\n")
    forward, _ = dt.grad(dt.loads(src), save=("r",))
    assert {t.name: t.dtype for t in forward.pipeline("bf16").outputs} == {"r": "f32", "o": "bf16"}
    two_kernels = "Func s, o;\nIn A;\nVar x, y;\nRVar z;\ns[x] = rsum(A[x, z], z);\no[x, y] = A[x, y] / s[x];\n"
    with pytest.raises(dt.DTError, match="needs one kernel"):
        dt.loads(two_kernels + "o.compile_to_kernel();\no.save();\n").pipeline("f32")
    saved_then_plain = dt.loads(two_kernels + "o.save();\no.compile();\n")
    assert saved_then_plain.pipeline("bf16").outputs[0].dtype == "bf16"  # the later compile() wins


def test_cross_entropys_backward_from_its_saved_statistics_walks_each_row_once():
    xent = dt.load(ROOT / "examples" / "llm" / "cross_entropy.dt")
    forward, backward = dt.grad(xent, save=("row_max", "row_sum"))  # its max gets no gradient: savable
    text = backward.dt_source()
    assert "In L, T, grad_loss, row_max, row_sum;" in text and "rmax" not in text and "rsum" not in text
    assert "grad_L.map(r, v);" in text  # an element-wise root's programs in row order
    pipeline = backward.pipeline({"L": "bf16", "T": "i64", "grad_loss": "bf16", "row_max": "f32", "row_sum": "f32"})
    assert [t.dtype for t in pipeline.outputs] == ["bf16"]
    rng = np.random.default_rng(3)
    L = (rng.standard_normal((5, 301)) * 3).astype(np.float32)
    T = np.array([0, 300, -100, 7, 150])
    grad_loss = rng.standard_normal(5).astype(np.float32)
    saved = forward(backend="numba", L=L, T=T)
    got = backward(backend="numba", L=L, T=T, grad_loss=grad_loss, row_max=saved["row_max"], row_sum=saved["row_sum"])
    want = dt.grad(xent)(backend="numba", L=L, T=T, grad_loss=grad_loss)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)  # one output: an array


def test_gradient_outputs_over_the_same_dimensions_share_one_tile_of_one_kernel():
    # SwiGLU's two gradients read the same G, U and grad_swiglu: grad_U is computed and stored in
    # grad_G's tile loop (not over a whole row first), and grad_G keeps the forward's blocks
    backward = dt.grad(dt.load(ROOT / "examples" / "llm" / "swiglu.dt"))
    text = backward.dt_source()
    assert "grad_U.fuse_at(grad_G, f);" in text
    assert "grad_G.block(t:1, f:1024);" in text and "grad_G.num_warps(4);" in text
    pipeline = backward.pipeline("f32")
    assert len(pipeline.kernels) == 1 and not pipeline.temporaries
    source = backward.source("triton", "f32")
    assert source.count("tl.load(G_ptr") == 1 and "for " not in source.split("def swiglu_grad")[0]
    G, U, grad = (np.random.default_rng(i).standard_normal((5, 2100)) for i in range(3))
    silu = G / (1 + np.exp(-G))
    got = backward(backend="numba", G=G.astype(np.float32), U=U.astype(np.float32), grad_swiglu=grad.astype(np.float32))
    np.testing.assert_allclose(got["grad_U"], grad * silu, rtol=1e-5, atol=1e-6)
    sigmoid = 1 / (1 + np.exp(-G))
    np.testing.assert_allclose(got["grad_G"], grad * U * (sigmoid + G * sigmoid * (1 - sigmoid)), rtol=1e-4, atol=1e-5)


def test_a_sums_constant_factors_go_outside_it_and_softmaxs_gradient_sum_joins_the_online_walk():
    backward = dt.grad(dt.load(ROOT / "examples" / "softmax_safe.dt"))
    text = backward.dt_source()
    assert "d__sum[x] = -(rdot(grad__softmax[x, y], exp(A[x, y] - _max[x]), y) / (_sum[x] * _sum[x]));" in text
    assert "d__sum.compute_with(_max, y);" in text
    assert "grad_A.block(x:1);" in text and "grad_A.tensorize(y:4096);" in text  # a row a program, one tile up to 4096
    kernel = backward.pipeline("f32").kernels[0]
    assert len(backward.pipeline("f32").kernels) == 1
    assert sum(isinstance(s, S.For) for s in kernel.body) == 2  # max, sum and d__sum in one walk; the write
    layernorm = dt.grad(dt.load(ROOT / "examples" / "layernorm.dt")).dt_source()
    assert "rsum(grad_layernorm[x, y] * W[y] * (A[x, y] - mean[x]), y) * -0.5 *" in layernorm


def test_a_weights_gradient_and_its_biass_walk_the_rows_once_in_chunks():
    """grad_W and grad_Bias reduce over the rows x in one kernel: the default schedule sums both
    in one walk (compute_with), split in chunks of rows across programs, the chunks' partial sums
    in a kernel of their own; the result is the unsplit program's. (With grad_A too, they sum in
    grad_A's walk instead: tests/test_walk_sums.py.)"""
    backward = dt.grad(dt.load(ROOT / "examples" / "layernorm.dt"), wrt=("W", "Bias"), save=("mean", "variance"))[1]
    text = backward.dt_source()
    for line in ("grad_W.split(x:2048);", "grad_Bias.split(x:2048);", "grad_Bias.compute_with(grad_W, x);"):
        assert line in text
    pipeline = backward.pipeline("f32")
    chunks = next(k for k in pipeline.kernels if k.func == "grad_W_chunks_stored")
    # one walk of the chunk's rows for both sums: its whole tiles, then its last, cut one
    assert [s.kind for s in chunks.body if isinstance(s, S.For)] == ["reduction", "tail"]
    unsplit = dt.loads(text.replace("grad_W.split(x:2048);", "").replace("grad_Bias.split(x:2048);", "")
                       .replace("grad_Bias.compute_with(grad_W, x);", ""))
    args = random_inputs(backward, dict(x=4100, y=7), "f32", seed=5)
    got, want = backward(backend="numba", **args), unsplit(backend="numba", **args)
    for name in ("grad_W", "grad_Bias"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


SAVED_ATTENTION = ("mx", "dvsr", "attention")


@pytest.mark.slow
def test_attention_backward_runs_flash_style_without_storing_the_scores():
    # the derived algorithm, reading the forward's output and row statistics, with the schedule of the
    # GPU row: each gradient recomputes its tiles of scores in its loop, skips the tiles above the
    # diagonal (its max, an input, is taken as finite), and feeds grad_attention to the matrix units
    # unscaled (dvsr applied after)
    prog = dt.load(ROOT / "benchmarks" / "gpu" / "schedules" / "causal_mha_grad_flash.dt")
    dtypes = {**dict.fromkeys(("Q", "K", "V", "grad_attention", "attention"), "bf16"), "mx": "f32", "dvsr": "f32"}
    pipeline = prog.pipeline(dtypes)
    assert all(len(t.dims) <= 3 and t.dtype == "f32" for t in pipeline.temporaries)  # no [b, h, s, s]; d_dvsr f32
    assert [t.dtype for t in pipeline.outputs] == ["bf16"] * 3  # the f32 statistics do not widen the gradients
    source = prog.source("triton", dtypes)
    assert "for m_iter in range(max(0, l_block_start) // 32 * 32," in source  # grad_K's and grad_V's one walk
    assert "tl.dot(V, grad_attention" in source and "grad_attention / dvsr" not in source
    assert len(pipeline.kernels) == 3  # d_dvsr (a row sum over n), grad_Q, grad_K with grad_V
    causal = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    forward, backward = dt.grad(causal, save=SAVED_ATTENTION)
    sizes = dict(b=1, h=2, m=70, l=70, k=16, n=16)
    args = random_inputs(causal, sizes, "f32", seed=4)
    args["grad_attention"] = np.random.default_rng(5).standard_normal((1, 2, 70, 16)).astype(np.float32)
    saved = forward(backend="numba", **{n: args[n] for n in ("Q", "K", "V")})
    assert all(saved[n].dtype == np.float32 for n in SAVED_ATTENTION)
    want = dt.grad(causal).reference(**_float64(args), sizes=sizes)  # recomputing everything
    for backend in ("interp", "numba"):
        got = prog(backend=backend, **args, **{n: saved[n] for n in SAVED_ATTENTION})
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=2e-4, atol=2e-5 * np.abs(value).max())


def test_the_default_schedule_recomputes_products_over_a_head_and_keeps_other_products_stored():
    # attention's scores and their gradient are products over the head (which the forward's products
    # keep whole in a tile): each gradient recomputes its tiles of them in its loop, flash-style, and
    # nothing of [b, h, s, s] is stored (the previous default stored both: 490-745x slower on an H200)
    causal = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    forward, backward = dt.grad(causal, save=SAVED_ATTENTION)
    text = backward.dt_source()
    for line in ("scores_dot.inline();", "d_e.inline();", "grad_Q.tensorize(m:128, k:0, l:64, n:0);",
                 "grad_V.fuse_at(grad_K, k);", "grad_K.compute_with(grad_V, m);", "d_dvsr.block(b:1, h:1, m:64);"):
        assert line in text
    dtypes = {**dict.fromkeys(("Q", "K", "V", "grad_attention", "attention"), "bf16"), "mx": "f32", "dvsr": "f32"}
    pipeline = backward.pipeline(dtypes)
    assert all(len(t.dims) <= 3 for t in pipeline.temporaries) and len(pipeline.kernels) == 3
    sizes = dict(b=1, h=2, m=300, l=300, k=16, n=16)  # several blocks a head, the last cut short
    args = random_inputs(causal, sizes, "f32", seed=6)
    args["grad_attention"] = np.random.default_rng(7).standard_normal((1, 2, 300, 16)).astype(np.float32)
    saved = forward(backend="numba", **{n: args[n] for n in ("Q", "K", "V")})
    want = dt.grad(causal).reference(**_float64(args), sizes=sizes)
    for backend in ("interp", "numba"):
        got = backward(backend=backend, **args, **{n: saved[n] for n in SAVED_ATTENTION})
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=2e-4, atol=2e-5 * np.abs(value).max())
    # a product over a matmul's inner dimension (tiled by the forward, not whole) stays stored; a
    # norm's row (whole in its forward's tile, but no product's: a sum reduces it) and a sequence
    # the forward keeps whole but reduces with a max and a sum are walked one row a program
    mmsigmoid = dt.grad(dt.load(ROOT / "examples" / "mmsigmoid.dt")).dt_source()
    assert "\nmm.inline();" not in mmsigmoid and "\nmm.block(x:128, y:128);" in mmsigmoid
    assert "ss.block(t:1);" in dt.grad(dt.load(ROOT / "examples" / "llm" / "add_rmsnorm.dt")).dt_source()
    assert "dvsr.block(m:1);" in dt.grad(dt.load(ROOT / "examples" / "attention_talk.dt")).dt_source()
    norm_of_product = dt.loads("Func h, ss, y;\nIn X, W;\nVar t, e;\nRVar k, d;\nh[t, e] = rdot(X[t, k], W[e, k], k);\n"
                               "ss[t] = rsum(h[t, d] * h[t, d], d);\n"
                               "y[t, e] = h[t, e] * rsqrt(ss[t] / len(d) + 1e-6);\n"
                               "h.block(t:64, e:64); h.tensorize(t:64, e:64, k:0);\ny.block(t:1); y.tensorize(e:0);\n"
                               "ss.fuse_at(y, t); y.compile();")
    assert "ss.block(t:1);" in dt.grad(norm_of_product).dt_source()


def test_a_product_read_by_a_product_without_flash_tiles_stays_stored():
    # o[m] has one dimension: no flash tiles, so s, which it reads, is not recomputed in its loop
    # (grad_w would recompute it an element at a time), and the gradient matches the reference
    prog = dt.loads("Func s, o;\nIn Q, K, w;\nVar m;\nRVar l, k;\ns[m, l] = rdot(Q[m, k], K[l, k], k);\n"
                    "o[m] = rdot(s[m, l], w[l], l);\n"
                    "o.block(m:16); o.tensorize(m:16, l:0, k:0); s.inline(); o.compile();")
    backward = dt.grad(prog)
    assert "\ns.inline();" not in backward.dt_source() and "\ns.block(m:128, l:128);" in backward.dt_source()
    sizes = dict(m=20, l=24, k=8)
    args = _float64(random_inputs(backward, sizes, "f32", seed=1))
    want = backward.reference(**args)
    for name, value in backward(backend="interp", **args).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-9, atol=1e-9)


def test_the_backward_reads_a_saved_output_for_the_numerator_it_divides_and_saves_maxima_it_ignores():
    forward, backward = dt.grad(dt.load(ROOT / "examples" / "llm" / "causal_mha.dt"), save=SAVED_ATTENTION)
    text = backward.dt_source()
    assert "num[b, h, m, n] = attention[b, h, m, n] * dvsr[b, h, m];" in text  # no walk of the keys for it
    assert "In Q, K, V, grad_attention, mx, dvsr, attention;" in text
    assert "mx.save();" in forward.dt_source() and "dvsr.save();" in forward.dt_source()
    # saved statistics are stored in the compute dtype: float32 for bf16 inputs, float64 for f64 ones
    assert {t.name: t.dtype for t in forward.pipeline("bf16").outputs} == {"attention": "bf16", "mx": "f32",
                                                                         "dvsr": "f32"}
    assert {t.dtype for t in forward.pipeline("f64").outputs} == {"f64"}
    sizes = dict(b=1, h=1, m=9, l=9, k=4, n=4)
    rng = np.random.default_rng(0)
    Q, K, V, grad = (rng.standard_normal((1, 1, 9, 4)) for _ in range(4))
    saved = forward(backend="interp", Q=Q, K=K, V=V)
    got = backward(backend="interp", Q=Q, K=K, V=V, grad_attention=grad, **{n: saved[n] for n in SAVED_ATTENTION})
    want = dt.grad(dt.load(ROOT / "examples" / "llm" / "causal_mha.dt"))(backend="interp", Q=Q, K=K, V=V,
                                                                        grad_attention=grad, sizes=None)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-12)
    softmax_forward, _ = dt.grad(dt.load(ROOT / "examples" / "softmax_safe.dt"), save="_max")  # its max is ignored
    assert "_max.save();" in softmax_forward.dt_source()


def test_an_input_reaching_the_outputs_only_through_a_max_they_do_not_change_with_gets_zeros():
    prog = dt.loads("Func m, e, o;\nIn A, B;\nVar x, y;\nRVar z;\nm[x] = rmax(B[x, z], z);\n"
                    "e[x, y] = exp(A[x, y] - m[x]);\no[x, y] = e[x, y] / rsum(e[x, z], z);\no.compile();\n")
    rng = np.random.default_rng(0)
    got = dt.grad(prog)(backend="interp", A=rng.standard_normal((3, 4)), B=rng.standard_normal((3, 4)),
                        grad_o=rng.standard_normal((3, 4)))
    np.testing.assert_array_equal(got["grad_B"], 0.0)  # B only moves the max: exactly no gradient
    assert gradient_errors(prog, dict(x=3, y=4, z=4))["A"] < 1e-5


def test_a_division_by_infinity_is_no_shift_the_outputs_ignore():
    prog = dt.loads(SOFTMAX_HEAD + "e[x, y] = exp(A[x, y] - m[x]) / inf;\ns[x] = rsum(e[x, z], z);\n"
                    "o[x, y] = exp(A[x, y] - m[x]) + e[x, y] + s[x];\no.compile();\n")
    assert "d_m[" in dt.grad(prog).dt_source()


def test_a_subscript_of_two_dimensions_of_the_left_binds_nothing_in_the_gradient():
    # grad_X sums over x and y, so they are RVars there; X[x - y + len(y) - 1] still binds neither
    prog = dt.loads("Func o;\nIn X, W;\nVar x, y;\no[x, y] = X[x - y + len(y) - 1] * W[x, y];\no.compile();\n")
    rng = np.random.default_rng(1)
    X, W, g = rng.standard_normal(8), rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    got = dt.grad(prog)(backend="interp", X=X, W=W, grad_o=g)
    index = np.arange(5)[:, None] - np.arange(4)[None, :] + 3
    want_X = np.zeros(8)
    np.add.at(want_X, index, g * W)
    np.testing.assert_allclose(got["grad_X"], want_X, atol=1e-12)
    np.testing.assert_allclose(got["grad_W"], g * X[index], atol=1e-12)


def test_the_gradient_through_a_cast_to_bf16_is_rounded_as_torchs():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install dt[torch])")
    prog = dt.loads("Func o; In A, W; Var x;\no[x] = cast(A[x], bf16) * W[x];\no.compile();\n")
    rng = np.random.default_rng(0)
    A, W, G = (rng.standard_normal(8).astype(np.float32) * s for s in (1.0, 3.3, 1.37))
    G = torch.tensor(G).to(torch.bfloat16).float().numpy()  # the gradient torch passes the bf16 product
    got = dt.grad(prog, wrt=("A",))(W=W, grad_o=G, backend="interp")
    a = torch.tensor(A, requires_grad=True)
    (a.to(torch.bfloat16) * torch.tensor(W)).backward(torch.tensor(G).to(torch.bfloat16))
    np.testing.assert_array_equal(np.asarray(got, np.float32), a.grad.numpy())


def test_the_gradient_through_a_cast_to_f64_is_stored_as_the_input_is():
    prog = dt.loads("Func o;\nIn A;\nVar x;\no[x] = cast(A[x], f64) * 2.0;\no.compile();\n")
    got = dt.grad(prog)(backend="interp", grad_o=np.ones(4, np.float32))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, 2.0)


def test_a_reduction_dimension_in_a_subscript_binds_no_dimension_a_plain_subscript_binds():
    # conv1d's gradient: grad_W[c, j] sums X[b, c, t + j - (len(j) - 1)] over t; j is W's width, not X's length
    prog = dt.load(ROOT / "examples" / "llm" / "conv1d.dt")
    rng = np.random.default_rng(2)
    X, W, B = rng.standard_normal((1, 3, 6)), rng.standard_normal((3, 3)), rng.standard_normal(3)
    got = dt.grad(prog)(backend="interp", X=X, W=W, B=B, grad_out=np.ones((1, 3, 6)))
    assert got["grad_W"].shape == (3, 3) and got["grad_X"].shape == (1, 3, 6)
    assert gradient_errors(prog, {"b": 1, "c": 3, "t": 6, "j": 3})["W"] < 1e-5


def test_saving_a_func_named_as_a_call_keyword_says_to_rename_it():
    prog = dt.load(ROOT / "examples" / "mmsigmoid.dt")  # its output is `out`
    with pytest.raises(dt.DTError, match="'out' cannot be saved under its name") as e:
        dt.grad(prog, save=("out",))
    assert e.value.hint == "rename the Func (e.g. out_) to save it" and e.value.loc is not None


def test_an_input_read_through_a_narrowing_cast_and_a_gather_keeps_its_gradients_dtype(backend="numba"):
    """grad_A was the cast term alone, a bf16 Func, so the update adding the gather's gradient
    added it in bf16 (0.018 off): only the cast's term is rounded, as torch's .to() rounds."""
    prog = dt.loads("Func y;\nIn A, I;\nVar x, d;\ny[x, d] = cast(cast(A[x, d], bf16), f32) * 0.001 + A[I[x], d];\n"
                    "y.compile();\n")
    backward = dt.grad(prog)
    assert "grad_A[x, d] = 0.0 + cast(" in backward.dt_source()
    rng = np.random.default_rng(0)
    A, I = rng.standard_normal((4, 8)).astype(np.float32), np.array([1, 2, 3, 0])
    g = (rng.standard_normal((4, 8)) * 3).astype(np.float32)
    got = np.asarray(backward(I=I, grad_y=g, backend=backend))
    rounded = np.asarray(dt.loads("Func r;\nIn G;\nVar x, d;\nr[x, d] = cast(G[x, d] * 0.001, bf16);\nr.compile();\n")(
        G=g, backend="interp"), np.float32)
    np.testing.assert_allclose(got, rounded + g[np.argsort(I)], rtol=1e-6, atol=1e-6)


def test_bad_names_in_wrt_and_save_are_errors_that_say_so():
    layernorm = dt.load(ROOT / "examples" / "layernorm.dt")
    for kwargs, message in ((dict(wrt=("A", "A")), "wrt names 'A' twice"), (dict(wrt=()), "wrt names nothing"),
                            (dict(save=("mean", "mean")), "save names 'mean' twice")):
        with pytest.raises(dt.DTError, match=message):
            dt.grad(layernorm, **kwargs)


def test_a_func_an_update_writes_at_and_fused_elsewhere_is_a_schedule_error_not_a_crash():
    """An update's written subscripts read idx: fused into w's kernel, which runs after the update's,
    it was never stored where the update loads it (an internal error); dt.grad derived such a
    schedule for `L[r, rargmax(L[r, v], v)] * W[r]`."""
    source = ("Func idx, g, w;\nIn L, G;\nVar r;\nRVar v;\nidx[r] = rargmax(L[r, v], v);\ng[r, v] = L[r, v] * 0.0;\n"
              "g[r, idx[r]] += G[r];\nw[r] = G[r] * L[r, idx[r]];\nw.block(r:4);\nw.tensorize(r:4);\n{fuse}\n"
              "g.compile();\nw.compile();\n")
    with pytest.raises(dt.DTScheduleError, match="'g_update' reads it in g_update's kernel, which runs before"):
        dt.loads(source.format(fuse="idx.fuse_at(w, r);")).pipeline("f32")
    fused_into_update = dt.loads(source.format(fuse="idx.fuse_at(g_update, r);"))  # its written subscripts use it
    args = random_inputs(fused_into_update, {"r": 8, "v": 16}, "f32")
    for name, value in fused_into_update(backend="numba", **args).items():
        np.testing.assert_allclose(value, fused_into_update.reference(**args)[name], rtol=1e-6)
    prog = dt.loads("Func idx, y;\nIn L, W;\nVar r;\nRVar v;\nidx[r] = rargmax(L[r, v], v);\ny[r] = L[r, idx[r]] * W[r];\n"
                    "y.compile();\n")
    errors = gradient_errors(prog, {"r": 5, "v": 7}, backend="numba")
    assert max(errors.values()) < 1e-5, errors
