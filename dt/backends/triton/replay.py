"""Fast repeat calls on the GPU: replay a call's kernel launches without Triton's JIT dispatch.

Launching a `@triton.jit` kernel binds every argument, computes its specialisation key and
looks the compiled kernel up: about 10 µs of host time per launch, more than small kernels
take on the GPU. Every size and stride is a `tl.constexpr` in dt's kernels, so once the
sizes, each tensor's shape, dtype, strides, pointer alignment (Triton specialises pointers
on 16-byte alignment) and device, and the integer scalars' values (Triton specialises ints on
their value, and the launcher's int() hides their identity) of a call are known, so is every
launch: which compiled kernel, its grid and every argument but the tensors' addresses and the
float scalars' values. A call's key holds all of that: everything the launcher checks or
branches on is in it, so what the launcher did for a key's first call, its checks included,
holds for every later call with the key.

`Replays` records the launches of the first call with a given such key by running the
readable launcher with its kernels wrapped, and turns them into a small generated function
that allocates the outputs and calls each compiled kernel's launcher directly. Later calls
with the same key run that function. Outputs the caller gives (`outputs=`, the runtime's
`out=`) are tensors of the call like the inputs: which ones are given is part of the key,
and the function takes them after the scalars, allocates only the others and passes the
given tensors' addresses (and descriptors on them) where the recorded launches had theirs.
A call whose tensors are not all distinct objects is not recorded (a replay tells tensors
apart by identity). Launch hooks (profilers such as Proton) need Triton's own launch path:
while any is set, every call goes through the launcher.
"""
from __future__ import annotations

import os
import types

import torch
from triton import knobs
from triton.tools.tensor_descriptor import TensorDescriptor

from dt.backends.pysource import Writer, load_module

ALIGNMENT = 16  # bytes; Triton compiles pointers it sees aligned to this as aligned


class _Recorder:
    """Stands in for a @triton.jit kernel while a call is recorded: launches it and logs the
    compiled kernel, grid and arguments."""

    def __init__(self, jit, log: list):
        self.jit, self.log = jit, log

    def __getitem__(self, grid):
        def launch(*args, **options):
            compiled = self.jit[grid](*args, **options)
            self.log.append((compiled, tuple(grid), args))
        return launch


class Replays:
    """The replay functions of one generated module, by call key (see `key`)."""

    def __init__(self, launcher: types.FunctionType, namespace: dict, kernel_names, name: str):
        self.launcher, self.namespace, self.name = launcher, namespace, name
        # those the module defines: its Gluon twins only where Triton has Gluon (`if GLUON:`)
        self.kernel_names = tuple(n for n in kernel_names if n in namespace)
        self.functions: dict[tuple, object] = {}

    @staticmethod
    def key(tensors: list, sizes: tuple, outputs: dict | None = None, integers: tuple = ()) -> tuple:
        """The call's key: `tensors` the inputs, `outputs` the outputs given, by name, `integers`
        the integer scalars' values."""
        tensors = (*tensors, *outputs.values()) if outputs else tensors
        # DT_TRITON_GLUON picks a kernel's Gluon twin or its Triton kernel (gluon.py)
        return (sizes, integers, tuple(outputs or ()), _current_device(), os.environ.get("DT_TRITON_GLUON", ""),
                tuple((t.get_device(), t.shape, t.dtype, t.stride(), t.data_ptr() % ALIGNMENT == 0) for t in tensors))

    @staticmethod
    def hooked() -> bool:
        runtime = knobs.runtime
        return bool(runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls)

    def record(self, key: tuple, tensors: list, scalars: list, extents: list = (), outputs: dict | None = None):
        """Run the launcher once, recording its launches; return its result. Later calls with
        this key replay the launches (when they can be replayed; see `_build`) given the
        tensors, the scalars and the given outputs' tensors, in `outputs`' order: the extents
        passed as arguments are part of the key."""
        log: list = []
        globals_ = dict(self.namespace)
        for name in self.kernel_names:
            globals_[name] = _Recorder(self.namespace[name], log)
        recording = types.FunctionType(self.launcher.__code__, globals_, self.launcher.__name__,
                                       self.launcher.__defaults__, self.launcher.__closure__)
        # Fresh float objects: each scalar is then found among the launch arguments by identity.
        scalars = [float.fromhex(float(s).hex()) for s in scalars]
        given = list(outputs.values()) if outputs else []
        result = recording(*tensors, *scalars, *extents, outputs=outputs)
        distinct = len({id(t) for t in (*tensors, *given)}) == len(tensors) + len(given)
        if tensors[0].get_device() == _current_device() and distinct:
            self.functions[key] = self._build(log, tensors, scalars, given, result)
        return result

    def _build(self, log, tensors, scalars, given, result):
        """The replay function's source: allocations and direct launches, or None when an
        argument is of a kind this does not know how to replay."""
        sources = {id(t): f"input{i}" for i, t in enumerate(tensors)}
        sources.update({id(s): f"scalar{i}" for i, s in enumerate(scalars)})
        sources.update({id(t): f"output{i}" for i, t in enumerate(given)})
        names: dict[str, object] = {"torch": torch, "empty_strided": torch.empty_strided, "get_stream": _stream,
                                    "TensorDescriptor": TensorDescriptor}
        outputs = result if isinstance(result, dict) else {None: result}
        allocations = {id(t): t for t in outputs.values() if id(t) not in sources}
        for _, _, args in log:
            allocations.update({id(a): a for a in args if isinstance(a, torch.Tensor) and id(a) not in sources})
        w = Writer()
        params = [f"input{i}" for i in range(len(tensors))] + [f"scalar{i}" for i in range(len(scalars))] \
            + [f"output{i}" for i in range(len(given))]
        w.line(f"def replay_{self.name}({', '.join(params)}):")
        with w.indent():
            names["device"] = tensors[0].device
            w.line(f"stream = get_stream({tensors[0].get_device()})")
            for n, (ident, t) in enumerate(allocations.items()):
                if t._base is not None or t.device != tensors[0].device:
                    return None  # a view of another tensor, or elsewhere: not a buffer the launcher made
                sources[ident] = f"buffer{n}"
                w.line(f"buffer{n} = empty_strided({tuple(t.shape)}, {t.stride()}, dtype={t.dtype}, device=device)")
            for n, (compiled, grid, args) in enumerate(log):
                names[f"run{n}"], names[f"function{n}"] = compiled.run, compiled.function
                names[f"metadata{n}"] = compiled.packed_metadata
                values = []
                for a in args:
                    if id(a) in sources:
                        values.append(sources[id(a)])
                    elif type(a) in (int, bool) or a is None:
                        values.append(repr(a))  # a constexpr: a size, a stride or a tile
                    elif isinstance(a, TensorDescriptor) and id(a.base) in sources:
                        # A TMA descriptor: its tensor's shape and strides are part of the key.
                        values.append(f"TensorDescriptor({sources[id(a.base)]}, {list(a.shape)}, {list(a.strides)}, "
                                      f"{list(a.block_shape)})")
                    elif type(a).__name__ == "TensorDescriptor" and hasattr(a, "layout") and id(a.base) in sources:
                        # A Gluon twin's descriptor (gluon.py): the recorded one on this call's tensor.
                        recorded = f"descriptor{len(names)}"
                        names[recorded], names["rebased"] = a, _rebased
                        values.append(f"rebased({recorded}, {sources[id(a.base)]})")
                    else:
                        return None
                grid = tuple(grid) + (1,) * (3 - len(grid))
                w.line(f"run{n}({', '.join(map(str, grid))}, stream, function{n}, metadata{n}, None, None, None, "
                       f"{', '.join(values)})")
            if None in outputs:
                w.line(f"return {sources[id(outputs[None])]}")
            else:
                w.line("return {" + ", ".join(f"{k!r}: {sources[id(t)]}" for k, t in outputs.items()) + "}")
        return load_module(w.text(), f"triton replay {self.name}", names)[f"replay_{self.name}"]


def _rebased(descriptor, base):
    """`descriptor` on another tensor of the same shape, strides, dtype and alignment (a call of
    the same key): a copy, not a new one, whose construction checks all that again."""
    copy = object.__new__(type(descriptor))
    copy.__dict__.update(descriptor.__dict__)
    copy.base = base
    return copy


def _stream(index: int):
    return torch._C._cuda_getCurrentRawStream(index)


def _current_device() -> int:
    return torch._C._cuda_getDevice()
