"""DT programs inside PyTorch: differentiable functions (`dt.torch.function`) and operators
registered with torch.library (`dt.torch.custom_op`, or `prog.as_custom_op`), whose backward
runs the gradient program dt.grad derives, on the same backend.

    rmsnorm = dt.torch.function(dt.load("rmsnorm.dt"))
    y = rmsnorm(X=x, W=w, eps=1e-6)          # y.backward() runs rmsnorm's gradient program
    op = dt.torch.custom_op(prog, "mylib::rmsnorm")   # traced by torch.compile without a graph break

Inputs and scalars are passed by their DT names; the result is the output (a tuple, in the
program's order, when it has several). Outputs no gradient reaches (integers) are marked
non-differentiable; a gradient torch does not pass (an output not used) counts as zeros.
"""
from __future__ import annotations

import torch

from dt.autodiff import grad, name_tuple

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"dt.torch needs torch 2.4 or later (torch.library.custom_op); this is torch {torch.__version__}")
from dt.dtypes import TORCH_BY_NAME, TORCH_NAMES
from dt.errors import DTError


class _Pair:
    """The forward program (with the saved Funcs as extra outputs) and its gradient program."""

    def __init__(self, prog, wrt, save):
        self.prog, self.inputs, self.scalars, self.outputs = prog, prog.inputs, prog.scalars, prog.outputs
        self.wrt = None if wrt is None else name_tuple(wrt)
        self.save = name_tuple(save)
        result = grad(prog, wrt=self.wrt, save=self.save)
        self.forward, self.backward = result if self.save else (prog, result)
        self.wrt = tuple(o.removeprefix("grad_") for o in self.backward.outputs)
        self.extra = tuple(s for s in self.save if s not in prog.outputs)  # saved Funcs returned besides

    def bind(self, kwargs: dict) -> list:
        unknown = set(kwargs) - set(self.inputs + self.scalars)
        missing = [n for n in self.inputs + self.scalars if n not in kwargs]
        if unknown or missing:
            raise DTError(f"{self.prog.name} takes {', '.join(self.inputs + self.scalars)} by name"
                          + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
                          + (f"; missing: {', '.join(missing)}" if missing else ""), None,
                          "pass each input and scalar as a keyword argument")
        return [kwargs[n] for n in self.inputs + self.scalars]

    def split(self, values) -> tuple[list, list]:
        """(the inputs' tensors, the scalars' values): by position, a 0-d tensor scalar too."""
        return list(values[:len(self.inputs)]), list(values[len(self.inputs):])

    def run_forward(self, backend, values, sizes=None) -> list:
        outs = self.forward(backend=backend, sizes=sizes, **dict(zip(self.inputs + self.scalars, values)))
        outs = outs if isinstance(outs, dict) else {self.outputs[0]: outs}
        return [outs[o] for o in self.outputs + self.extra]

    def run_backward(self, backend, values, grads, saved, sizes=None) -> list:
        """The gradient of each input (None for those not in wrt), then None for each scalar."""
        args = dict(zip(self.inputs + self.scalars, values))
        args.update({f"grad_{o}": g for o, g in zip(self.outputs, grads)})
        args.update(dict(zip(self.save, saved)))
        taken = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in args.items()
                 if k in self.backward.inputs + self.backward.scalars}
        # dimensions no input of the backward binds (a grouped axis, K[b, h // group, ...]): the forward's extents
        tensors = dict(zip(self.inputs, values))
        unbound = self.backward.unbound_dims
        sizes = {d: n for d, n in self.prog._extents(tensors, sizes or {}).items() if d in unbound} if unbound else None
        result = self.backward(backend=backend, sizes=sizes, **taken)
        result = result if isinstance(result, dict) else {self.backward.outputs[0]: result}
        return [result.get(f"grad_{x}") for x in self.inputs] + [None] * len(self.scalars)

    def saved_of(self, outs: list) -> list:
        by_name = dict(zip(self.outputs + self.extra, outs))
        return [by_name[s] for s in self.save]


def _refuse_a_second_derivative(prog):
    """Under create_graph=True (a double backward) autograd would record the backward's graph, which
    lacks the dt kernel's part: refused, rather than a second derivative missing terms."""
    if torch.is_grad_enabled():
        raise DTError(f"{prog.name}'s gradient is a dt kernel, which autograd cannot differentiate again "
                      "(create_graph=True, a double backward)", None,
                      "differentiate it once, or derive the second derivative with dt.grad as a program of its own")


def _zeros(spec) -> torch.Tensor:
    shape, dtype, device = spec
    return torch.zeros(shape, dtype=dtype, device=device)


def function(prog, *, backend: str | None = None, wrt=None, save=()):
    """A function of torch tensors (prog's inputs and scalars by name, and `sizes=` for the extents
    no input gives: top-k's k) returning its outputs, differentiable with respect to `wrt`
    (default: every float input) through torch.autograd: its backward runs dt.grad(prog) on
    `backend` (default: the program's). `save`: Funcs the forward stores for the backward instead
    of the backward recomputing them."""
    pair = _Pair(prog, wrt, save)

    class DTFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, sizes, *values):
            outs = pair.run_forward(backend, values, sizes)
            ctx.sizes = sizes
            tensors, ctx.scalar_values = pair.split(values)
            # only what the backward reads is kept; the others' shapes give extents (meta tensors hold no data)
            ctx.save_for_backward(*[t if n in pair.backward.inputs else None for n, t in zip(pair.inputs, tensors)],
                                  *pair.saved_of(outs))
            ctx.stand_ins = [t.new_empty(t.shape, device="meta") for t in tensors]
            ctx.output_specs = [(o.shape, o.dtype, o.device) for o in outs[:len(pair.outputs)]]
            ctx.mark_non_differentiable(*[o for o in outs[len(pair.outputs):]],
                                        *[o for o in outs if not o.is_floating_point()])
            shown = outs[:len(pair.outputs)]
            return shown[0] if len(shown) == 1 else tuple(shown)

        @staticmethod
        def backward(ctx, *grads):
            _refuse_a_second_derivative(prog)
            if not any(ctx.needs_input_grad[1:len(pair.inputs) + 1]):
                return (None,) * (1 + len(pair.inputs) + len(pair.scalars))
            tensors = ctx.saved_tensors
            values = [t if t is not None else stand_in for t, stand_in in zip(tensors, ctx.stand_ins)]
            values += ctx.scalar_values
            grads = [_zeros(spec) if g is None else g for g, spec in zip(grads, ctx.output_specs)]
            return (None, *pair.run_backward(backend, values, grads, tensors[len(pair.inputs):], ctx.sizes))

    DTFunction.__name__ = f"{prog.name}_function"

    def call(sizes: dict | None = None, **kwargs):
        return DTFunction.apply(sizes, *pair.bind(kwargs))
    call.__name__ = prog.name
    return call


def _output_specs(prog, tensors: dict, outputs) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of each named output for inputs of these shapes and dtypes (no run)."""
    extents = prog._extents(tensors, {})
    pipeline = prog.pipeline({**{n: TORCH_NAMES[str(t.dtype)] for n, t in tensors.items()},
                              **{s: "i64" for s in prog.checked.index_scalars}})
    specs = {t.name: t for t in pipeline.outputs}
    return [(tuple(extents[d] for d in specs[o].dims), getattr(torch, TORCH_BY_NAME[specs[o].dtype].removeprefix("torch.")))
            for o in outputs]


def _returns(n: int) -> str:
    """A schema's results: one bare Tensor, or a tuple of n."""
    return "Tensor" if n == 1 else f"({', '.join(['Tensor'] * n)})"


def _packed(values: list):
    return values[0] if len(values) == 1 else tuple(values)


_REGISTERED: dict[str, tuple] = {}  # operator name -> (program source, options, the function returned)


def custom_op(prog, name: str, *, backend: str | None = None, wrt=None, save=()):
    """Register `prog` as the operator `name` ("namespace::op") with torch.library, with a fake
    (meta) implementation for tracing and its backward (itself the operator `name`_backward,
    running dt.grad(prog)), so that torch.compile traces it whole and CUDA graphs capture it.
    Returns a function of its inputs and scalars by name, as `function` does. A name is
    registered once per process: asking again for the same program returns the same function."""
    if "::" not in name:
        raise DTError(f"the operator name {name!r} has no namespace", None, 'name it "namespace::op", e.g. "mylib::rmsnorm"')
    key = (prog.ast.source or prog.ir(), backend, wrt, save)  # a program built in Python: its scheduled IR
    if name in _REGISTERED:
        if _REGISTERED[name][0] == key:
            return _REGISTERED[name][1]
        raise DTError(f"the operator {name} is registered already, for another program or options", None,
                      "give each program its own operator name")
    pair = _Pair(prog, wrt, save)
    index = prog.checked.index_scalars
    arguments = ", ".join([f"Tensor {x}" for x in pair.inputs] +
                          [f"{'int' if s in index else 'float'} {s}" for s in pair.scalars])
    returned = pair.outputs + pair.extra
    forward_op = torch.library.custom_op(name, lambda *values: _packed(pair.run_forward(backend, values)),
                                         mutates_args=(), schema=f"({arguments}) -> {_returns(len(returned))}")

    @forward_op.register_fake
    def _(*values):
        tensors = dict(zip(pair.inputs, values))
        return _packed([values[0].new_empty(shape, dtype=dtype)
                        for shape, dtype in _output_specs(pair.forward, tensors, returned)])

    grads = [f"Tensor grad_{o}" for o in pair.outputs] + [f"Tensor {s}" for s in pair.save]
    differentiable = [x for x in pair.inputs if x in pair.wrt]
    backward_op = torch.library.custom_op(
        f"{name}_backward", lambda *values: _packed(_backward_values(pair, backend, values, differentiable)),
        mutates_args=(), schema=f"({arguments}, {', '.join(grads)}) -> {_returns(len(differentiable))}")

    @backward_op.register_fake
    def _(*values):
        return _packed([values[pair.inputs.index(x)].new_empty(values[pair.inputs.index(x)].shape)
                        for x in differentiable])

    def setup_context(ctx, inputs, output):
        output = output if isinstance(output, tuple) else (output,)
        tensors, ctx.scalar_values = pair.split(inputs)
        ctx.save_for_backward(*tensors, *pair.saved_of(list(output)))  # checked against in-place changes
        ctx.output_specs = [(o.shape, o.dtype, o.device) for o in output[:len(pair.outputs)]]

    def backward(ctx, *grads):
        _refuse_a_second_derivative(prog)
        tensors = ctx.saved_tensors
        grads = [_zeros(spec) if g is None else g for g, spec in zip(grads, ctx.output_specs)]
        computed = backward_op(*tensors[:len(pair.inputs)], *ctx.scalar_values, *grads[:len(pair.outputs)],
                               *tensors[len(pair.inputs):])
        computed = iter(computed if isinstance(computed, tuple) else (computed,))
        return tuple(next(computed) if x in differentiable else None for x in pair.inputs) + (None,) * len(pair.scalars)

    forward_op.register_autograd(backward, setup_context=setup_context)

    def call(**kwargs):
        outs = forward_op(*pair.bind(kwargs))
        outs = outs if isinstance(outs, tuple) else (outs,)
        return _packed(list(outs[:len(pair.outputs)]))
    call.__name__ = prog.name
    call.op = forward_op
    _REGISTERED[name] = (key, call)
    return call


def _backward_values(pair: _Pair, backend, values, differentiable) -> list:
    n = len(pair.inputs) + len(pair.scalars)
    grads, saved = values[n:n + len(pair.outputs)], values[n + len(pair.outputs):]
    result = dict(zip(pair.inputs, pair.run_backward(backend, values[:n], grads, saved)))
    return [result[x] for x in differentiable]
