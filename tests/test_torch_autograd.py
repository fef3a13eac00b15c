"""DT programs in torch.autograd and as torch.library operators (dt.torch): gradcheck, opcheck,
torch.compile(fullgraph=True), and a small training loop (CPU: interp and numba)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import dt
from dt import backends

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed (pip install dt[torch])")
ROOT = Path(__file__).resolve().parents[1]
CASES = {  # program -> its inputs' shapes (small), its scalars
    "examples/softmax_safe.dt": ({"A": (3, 7)}, {}),
    "examples/layernorm.dt": ({"A": (3, 7), "W": (7,), "Bias": (7,)}, {"eps": 0.5}),
    "examples/llm/add_rmsnorm.dt": ({"X": (3, 7), "R": (3, 7), "W": (7,)}, {"eps": 0.5}),
    "examples/llm/causal_mha.dt": ({"Q": (1, 2, 5, 4), "K": (1, 2, 5, 4), "V": (1, 2, 5, 3)}, {}),
    # 4 query heads over 2 key/value heads: K and V's gradients sum over each group's query heads
    "examples/llm/gqa_attention.dt": ({"Q": (1, 4, 5, 4), "K": (1, 2, 5, 4), "V": (1, 2, 5, 3)}, {"group": 2}),
}


def _inputs(shapes, dtype, seed=0):
    import torch
    generator = torch.Generator().manual_seed(seed)
    return {n: torch.randn(*s, dtype=dtype, generator=generator).requires_grad_() for n, s in shapes.items()}


@pytest.mark.parametrize("path", [pytest.param(path, marks=pytest.mark.slow) if "gqa" in path else path
                                  for path in CASES])
def test_gradcheck_passes_on_the_autograd_function(path):
    import torch
    import dt.torch as dtt
    shapes, scalars = CASES[path]
    fn = dtt.function(dt.load(ROOT / path), backend="interp")
    inputs = _inputs(shapes, torch.float64)
    assert torch.autograd.gradcheck(lambda *xs: fn(**dict(zip(inputs, xs)), **scalars), tuple(inputs.values()))


def test_saved_funcs_are_used_and_the_gradient_is_the_same():
    import torch
    import dt.torch as dtt
    prog = dt.load(ROOT / "examples" / "layernorm.dt")
    shapes, scalars = CASES["examples/layernorm.dt"]
    inputs = _inputs(shapes, torch.float64)
    saving = dtt.function(prog, backend="interp", save=("mean", "variance"))
    assert torch.autograd.gradcheck(lambda *xs: saving(**dict(zip(inputs, xs)), **scalars), tuple(inputs.values()))


def test_an_unused_output_gets_a_zero_gradient_and_wrt_limits_the_gradients():
    import torch
    import dt.torch as dtt
    shapes, scalars = CASES["examples/llm/add_rmsnorm.dt"]
    inputs = _inputs(shapes, torch.float64)
    h, y = dtt.function(dt.load(ROOT / "examples/llm/add_rmsnorm.dt"), backend="interp", wrt=("X",))(**inputs, **scalars)
    y.sum().backward()  # h unused
    assert inputs["X"].grad is not None and inputs["R"].grad is None and inputs["W"].grad is None
    reference = inputs["X"].detach().clone().requires_grad_()
    hr = reference + inputs["R"].detach()
    (hr * torch.rsqrt((hr * hr).mean(-1, keepdim=True) + 0.5) * inputs["W"].detach()).sum().backward()
    torch.testing.assert_close(inputs["X"].grad, reference.grad)


@pytest.mark.skipif(not backends.available("numba"), reason="numba is not installed")
def test_a_custom_op_passes_opcheck_and_compiles_whole():
    import torch
    prog = dt.load(ROOT / "examples/llm/add_rmsnorm.dt")
    op = prog.as_custom_op("dt_tests::add_rmsnorm", backend="numba")
    shapes, scalars = CASES["examples/llm/add_rmsnorm.dt"]
    inputs = _inputs(shapes, torch.float32)
    torch.library.opcheck(op.op, (*inputs.values(), scalars["eps"]))

    def loss(X, R, W):
        h, y = op(X=X, R=R, W=W, eps=0.5)
        return (y * y).sum() + h.sum()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")  # a graph break raises here
    got = compiled(**inputs)
    got.backward()
    eager = {n: t.detach().clone().requires_grad_() for n, t in inputs.items()}
    want = loss(**eager)
    want.backward()
    torch.testing.assert_close(got, want)
    for name in inputs:
        torch.testing.assert_close(inputs[name].grad, eager[name].grad)


@pytest.mark.slow
@pytest.mark.skipif(not backends.available("numba"), reason="numba is not installed")
@pytest.mark.parametrize("save", [(), ("mx", "dvsr", "attention")])
def test_a_module_with_dt_rmsnorm_and_attention_trains(save):
    import torch
    import dt.torch as dtt
    rmsnorm_prog = dt.loads("Func y, ss;\nIn X, W;\nSIn eps;\nVar t;\nRVar d;\n"
                            "ss[t] = rsum(X[t, d] * X[t, d], d);\n"
                            "y[t, d] = X[t, d] * rsqrt(ss[t] / len(d) + eps) * W[d];\ny.compile();\n", name="rmsnorm")
    rmsnorm = dtt.function(rmsnorm_prog, backend="numba")
    # with the output and row statistics saved, its backward is flash-style: no [b, h, s, s] stored
    attention = dtt.function(dt.load(ROOT / "examples/llm/causal_mha.dt"), backend="numba", save=save)

    class Block(torch.nn.Module):
        def __init__(self, width=8, heads=2):
            super().__init__()
            self.heads, self.norm = heads, torch.nn.Parameter(torch.ones(width))
            self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)

        def forward(self, x):  # x: [tokens, width]
            t, w = x.shape
            h = rmsnorm(X=x, W=self.norm, eps=1e-6)
            q, k, v = (z.reshape(1, t, self.heads, w // self.heads).transpose(1, 2).contiguous()
                       for z in self.qkv(h).chunk(3, -1))
            return x + self.out(attention(Q=q, K=k, V=v).transpose(1, 2).reshape(t, w))

    torch.manual_seed(0)
    model, x = Block(), torch.randn(6, 8)
    target = torch.randn(6, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert model.norm.grad is not None and float(model.norm.grad.abs().sum()) > 0


# ---------------------------------------------------------------- a review's findings
@pytest.mark.slow
def test_custom_ops_of_one_output_one_gradient_and_integer_scalars():
    import torch
    import dt.torch as dtt
    softmax = dt.load(ROOT / "examples/softmax_safe.dt").as_custom_op("dt_tests::softmax", backend="interp")
    a = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: softmax(A=a), (a,))
    product = dt.loads("Func o;\nIn A, B;\nVar x;\no[x] = A[x] * B[x];\no.compile();\n")
    times = dtt.custom_op(product, "dt_tests::times", backend="interp", wrt="A")
    a, b = (torch.randn(4, requires_grad=True) for _ in range(2))
    times(A=a, B=b).sum().backward()
    torch.testing.assert_close(a.grad, b.detach())
    assert b.grad is None
    shapes, scalars = CASES["examples/llm/gqa_attention.dt"]
    gqa = dtt.custom_op(dt.load(ROOT / "examples/llm/gqa_attention.dt"), "dt_tests::gqa", backend="interp")
    inputs = _inputs(shapes, torch.float64)
    torch.library.opcheck(gqa.op, (*inputs.values(), scalars["group"]))
    assert torch.autograd.gradcheck(lambda *xs: gqa(**dict(zip(inputs, xs)), group=2), tuple(inputs.values()))


def test_a_custom_op_with_saved_funcs_passes_opcheck_and_names_are_registered_once():
    import torch
    import dt.torch as dtt
    prog = dt.load(ROOT / "examples/layernorm.dt")
    op = dtt.custom_op(prog, "dt_tests::layernorm", backend="interp", save=("mean", "variance"))
    shapes, scalars = CASES["examples/layernorm.dt"]
    torch.library.opcheck(op.op, (*_inputs(shapes, torch.float32).values(), scalars["eps"]))
    assert dtt.custom_op(prog, "dt_tests::layernorm", backend="interp", save=("mean", "variance")) is op
    with pytest.raises(dt.DTError, match="registered already"):
        dtt.custom_op(dt.load(ROOT / "examples/softmax_safe.dt"), "dt_tests::layernorm")


def test_custom_ops_see_inputs_changed_in_place_and_scalars_may_be_tensors():
    import torch
    import dt.torch as dtt
    prog = dt.load(ROOT / "examples/llm/add_rmsnorm.dt")
    op = prog.as_custom_op("dt_tests::add_rmsnorm_inplace", backend="interp")
    shapes, _ = CASES["examples/llm/add_rmsnorm.dt"]
    inputs = _inputs(shapes, torch.float32)
    h, y = op(**inputs, eps=0.5)
    with torch.no_grad():
        inputs["W"].mul_(100)  # after the forward saved it
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    fn = dtt.function(prog, backend="interp", wrt="X")
    inputs = _inputs(shapes, torch.float64)
    fn(**inputs, eps=torch.tensor(0.5, dtype=torch.float64))[1].sum().backward()
    assert inputs["X"].grad is not None and inputs["W"].grad is None


def test_the_function_keeps_only_what_its_backward_reads():
    import torch
    import dt.torch as dtt
    prog = dt.loads("Func o;\nIn A, B;\nVar x;\nRVar y;\no[x] = rsum(A[x, y] * 2.0 + B[x, y], y);\no.compile();\n")
    fn = dtt.function(prog, backend="interp")
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    out = fn(A=a, B=b)
    assert all(t is None for t in out.grad_fn.saved_tensors)  # the gradient reads only grad_o (and y's extent)
    out.sum().backward()
    torch.testing.assert_close(a.grad, torch.full((3, 4), 2.0))


def test_a_second_derivative_through_a_dt_gradient_is_refused():
    import torch
    import dt.torch as dtt
    square = dtt.function(dt.loads("Func y; In X; Var t;\ny[t] = X[t] * X[t];\ny.compile();\n", name="sq"),
                          backend="numba")
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    first, = torch.autograd.grad(square(X=x).sum(), x)  # once: 2x
    assert first.tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(dt.DTError, match="cannot differentiate again"):
        torch.autograd.grad(square(X=x).sum(), x, create_graph=True)
    cube = dtt.custom_op(dt.loads("Func y; In X; Var t;\ny[t] = X[t] * X[t] * X[t];\ny.compile();\n", name="cube"),
                         "dt_tests::cube", backend="numba")
    with pytest.raises(dt.DTError, match="cannot differentiate again"):
        torch.autograd.grad(cube(X=x).sum(), x, create_graph=True)


def test_an_operator_name_asked_again_for_an_edited_python_program_is_refused():
    import torch
    from dt import Func, In, Var

    def scaled(factor):
        x, A, f = Var("x"), In("A"), Func("f")
        f[x] = A[x] * factor
        return dt.program(f)
    op = scaled(2.0).as_custom_op("dt_tests::scaled_py", backend="numba")
    assert scaled(2.0).as_custom_op("dt_tests::scaled_py", backend="numba") is op  # the same program again
    with pytest.raises(dt.DTError, match="registered already"):
        scaled(3.0).as_custom_op("dt_tests::scaled_py", backend="numba")
    assert op(A=torch.ones(3)).tolist() == [2.0, 2.0, 2.0]


def test_a_function_takes_the_extents_no_input_gives():
    """top-k's k is the extent of `i`, which no input gives: the function takes sizes= (it had no
    way to pass them, though the extent error asked for sizes=)."""
    import torch
    import dt.torch
    prog = dt.load(ROOT / "examples" / "llm" / "topk.dt")
    topk = dt.torch.function(prog, backend="numba")
    L = torch.randn(3, 20, dtype=torch.float64, requires_grad=True)
    outs = dict(zip(prog.outputs, topk(L=L, sizes={"i": 4})))
    values, indices = outs["tv"], outs["ti"]
    want_values, want_indices = torch.topk(L, 4, dim=1)
    torch.testing.assert_close(values, want_values)
    assert torch.equal(indices, want_indices)
    g = torch.randn_like(values)
    got, = torch.autograd.grad(values, L, g)
    want, = torch.autograd.grad(want_values, L, g)
    torch.testing.assert_close(got, want)
