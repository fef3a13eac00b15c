"""The user-facing Program: binding inputs by DT name, inferring extents, dispatching to a
backend, and converting arrays (NumPy in, NumPy out; torch in, torch out on the same device)."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from dt import backends, call_checks, env, lint
from dt.arrays import backend_view, copy_into, to_numpy, to_torch
from dt.call_checks import is_torch
from dt.debug import config as debug_config
from dt.dtypes import ALL, NUMPY_NAMES, TORCH_NAMES
from dt.errors import (DTBackendError, DTError, DTExtentError, DTInputError, DTSyntaxError, Loc,
                       ScheduleNote, user_facing)
from dt.frontend import api
from dt.frontend.parser import normalise_source, parse
from dt.ir import algorithm as A
from dt.ir import reference, tiles
from dt.ir.check import check
from dt.ir.lower import lower
from dt.ir.lower.types import Types
from dt.ir.naming import size_name
from dt.ir.printer import ir_text
from dt.ir.scheduled import Assign, Gather, Pipeline, Scatter, Store, walk_statements, walk_texpr

DEFAULT_BACKEND_ORDER = ("numba", "interp")  # for CPU arrays, the first that loads


@dataclass
class _Binding:
    arrays: dict[str, object]  # as passed
    scalars: dict[str, float]
    extents: dict[str, int]
    dtypes: dict[str, str]
    torch_device: object | None  # the device of torch inputs, if any


class Program:
    """A checked DT program, callable on inputs by their DT names."""

    @user_facing
    def __init__(self, program: A.Program):
        self.ast = program
        self.checked = check(program)
        self.name = program.name
        self._pipelines: dict[tuple, Pipeline] = {}
        self._compiled: dict[tuple, object] = {}
        self._plans: dict[tuple, object] = {}  # call signature -> planned call, see _call_key
        self.linted = lint.Linted()  # the shapes warned about, per backend and dtypes
        self._accesses = self.checked.input_accesses
        self.inputs = tuple(n for n in self.checked.inputs if any(a.name == n for a in self._accesses))
        used_scalars = {e.name for f in self.checked.funcs.values() for e in A.walk(f.expr)
                        if isinstance(e, A.ScalarRef)}
        self.scalars = tuple(s for s in self.checked.scalars if s in used_scalars)
        self.outputs = self.checked.outputs

    @cached_property
    def input_dims(self) -> frozenset[str]:
        """The dimensions whose extents the inputs' shapes give (and the axes of inputs that no
        dimension spans): what a call needs no `sizes=` for."""
        bound = {d for _, dims in self.checked.input_bindings for d in dims}
        return frozenset(d for axes in self.checked.input_axes.values() for d in axes) | (bound - {None})

    @cached_property
    def unbound_dims(self) -> tuple[str, ...]:
        """The dimensions the program needs that no input's shape gives (the rows of a table its
        gradient only writes, E_axis0; a grouped axis): a call passes them as sizes=."""
        return tuple(d for d in self.checked.needed_dims if d not in self.input_dims)

    def as_custom_op(self, name: str, **options):
        """This program as the torch.library operator `name` ("namespace::op"), differentiable
        and traceable by torch.compile (dt.torch.custom_op, which takes the same options)."""
        from dt.torch import custom_op
        return custom_op(self, name, **options)

    def dt_source(self) -> str:
        """The program as DT text (a gradient program's: its algorithm, derived by dt.grad)."""
        if not self.ast.source:
            raise DTError(f"{self.name} was built with the Python API and has no DT text", None,
                          "write it in DT to have its text, or print its scheduled IR: prog.ir()")
        return self.ast.source

    def __repr__(self):
        return (f"<dt.Program {self.name}: inputs {', '.join(self.inputs) or '-'}; "
                f"scalars {', '.join(self.scalars) or '-'}; outputs {', '.join(self.outputs)}>")

    # ------------------------------------------------------------------ running
    @user_facing
    def __call__(self, /, *positional, backend: str | None = None, sizes: dict | None = None, out=None,
                 schedule: str | None = None, **args):
        """The outputs (one, or a dict by name) for inputs and scalars by DT name. `out`: arrays
        to write outputs into instead of allocating them (the output's array for one output, or a
        dict by name): each of the output's shape and dtype, C-contiguous, of the inputs' kind
        (NumPy arrays, or torch tensors on the inputs' device), sharing no memory with an input.
        `schedule` ("written", or "tuned": the tuning cache's for this shape, docs/tuning.md;
        default $DT_SCHEDULE, else "written")."""
        self._refuse_positional(positional)
        name = backend or env.read("DT_BACKEND") or None
        choice = schedule or env.read("DT_SCHEDULE") or "written"
        key = self._call_key(name, sizes, args)
        key = key and (key, choice)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._plan(name, sizes, args, choice)
            if key is not None:
                self._plans[key] = plan
        return plan(args, out)

    def _call_key(self, name, sizes, args):
        """What decides a call's plan: backend, debug state, extents given, each argument's kind,
        shape, dtype and device (None: plan afresh). Values and strides may change freely."""
        signature = []
        for k, v in args.items():
            if getattr(v, "ndim", None) is not None:  # arrays, tensors and NumPy scalars (a dtype each)
                device = getattr(v, "device", None)
                # a tensor's layout, and whether it is a lazily negated or conjugated view (x.conj().imag)
                lazy = (v.layout, v.is_neg() or v.is_conj()) if device is not None and hasattr(v, "is_neg") else None
                signature.append((k, type(v), v.shape, v.dtype, device, lazy))
            elif isinstance(v, (int, float)):
                signature.append((k, type(v)))
            else:
                return None
        if sizes is not None and not (isinstance(sizes, dict) and
                                      all(type(n) is int or isinstance(n, np.integer) for n in sizes.values())):
            return None  # not a key: [] is not {}, True == 1 and 4.0 == 4, but none is sizes (_plan refuses them)
        return (name, debug_config.current() is not None, tuple(sizes.items()) if sizes else None,
                tuple(signature))

    def _plan(self, name, sizes, args, choice="written"):
        """Bind and check one call's signature, compile for it, and return the function that runs
        every later call with the same signature."""
        b = self._bind(args, sizes)
        backend_obj = backends.get(name or resolve_backend(None, b.torch_device))
        if choice != "written":
            return self._tuned_plan(backend_obj.name, sizes, args, choice, b)
        debug_config.warn_if_ignored(backend_obj.name, self.name)
        pipeline = self.pipeline(b.dtypes)
        on_gpu = "cuda" in backend_obj.capabilities.devices
        self._check_fits(pipeline.outputs + pipeline.temporaries, b.extents,
                         call_checks.gpu_memory(b.torch_device) if on_gpu else call_checks.cpu_memory())
        key = (backend_obj.name, tuple(sorted(b.dtypes.items())))
        compiled = self._compiled.get(key)
        if compiled is None:
            self._check_capabilities(backend_obj, pipeline)
            compiled = self._compiled[key] = backend_obj.compile(pipeline)
        size_args = {size_name(d): n for d, n in b.extents.items() if d in pipeline.sizes}
        lint.warn_once(self, backend_obj, key, pipeline, b.extents, size_args)
        wants_torch = backend_obj.capabilities.array == "torch"
        device, inputs, scalars, outputs = b.torch_device, self.inputs, self.scalars, self.outputs
        integer_scalars = {n for n in scalars if n in b.dtypes}
        # Arguments already in the backend's array type pass through untouched (the call key
        # fixes each argument's type, so this holds for every call with this plan).
        as_given = all(is_torch(args[n]) if wants_torch else isinstance(args[n], np.ndarray) for n in inputs)
        convert_in = to_torch if wants_torch else to_numpy
        lazy = [n for n in inputs if is_torch(args[n]) and (args[n].is_neg() or args[n].is_conj())]
        # what the scalars' values decide, checked at every call (the call key fixes their types only)
        divisions, subscripts = ([x for x in checks if any(isinstance(n, A.ScalarRef) for n in A.walk(x[1]))]
                                 for checks in (self.checked.call_divisors, self.checked.computed_subscripts))

        specs = {t.name: (tuple(b.extents[d] for d in t.dims), t.dtype) for t in pipeline.outputs}

        def run(args, out=None):
            if lazy:  # read as the values they stand for (the call key fixes which inputs are lazy views)
                args = {**args, **{n: args[n].resolve_conj().resolve_neg() for n in lazy}}
            arrays = {n: args[n] for n in inputs} if as_given else {n: convert_in(args[n]) for n in inputs}
            given = call_checks.given_outputs(out, specs, device, {n: args[n] for n in inputs}) \
                if out is not None else {}
            # written in place where the backend's arrays are the caller's memory, else copied in after
            in_place = {n: a for n, a in ((n, backend_view(a, wants_torch, backend_obj)) for n, a in given.items())
                        if a is not None} if backend_obj.capabilities.given_outputs else {}
            try:  # the call key fixes each scalar's type: only a value (an int past a float's range) can fail
                scalar_values = {n: float(args[n]) for n in scalars if n not in integer_scalars}
                for n in integer_scalars:
                    scalar_values[n] = int(args[n])
                    if not call_checks.I64[0] <= scalar_values[n] < call_checks.I64[1]:
                        raise OverflowError(n)
            except (TypeError, ValueError, OverflowError):
                scalar_values = {n: self._scalar(n, args[n]) for n in scalars}
            if divisions or subscripts:
                call_checks.divisors(divisions, b.extents, scalar_values)
                call_checks.index_arithmetic(subscripts, b.extents, scalar_values)
            outs = compiled(arrays, scalar_values, size_args, in_place) if in_place else \
                compiled(arrays, scalar_values, size_args)
            outs = {n: o for n, o in outs.items() if n not in in_place}
            if device is not None:
                outs = {n: o if is_torch(o) and o.device == device else
                        (o.to(device) if is_torch(o) else to_torch(o).to(device)) for n, o in outs.items()}
            elif wants_torch:
                outs = {n: to_numpy(o) for n, o in outs.items()}
            for n, a in given.items():
                if n not in in_place:
                    copy_into(a, outs[n])
                outs[n] = a
            return outs[outputs[0]] if len(outputs) == 1 else {n: outs[n] for n in outputs}

        return run

    def _tuned_plan(self, name, sizes, args, choice, b: _Binding):
        """The plan of the schedule the tuning cache holds for this call (dt.tune.choose)."""
        from dt.tune.choose import CHOICES, choose
        if choice not in CHOICES:
            raise DTInputError(f"schedule={choice!r} is not a schedule choice", None,
                               'schedule="written" (the default) or schedule="tuned" (the tuning cache\'s)')
        data = {n: t for n, t in b.dtypes.items() if n in self.inputs and n not in self.checked.index_inputs}
        chosen, origin = choose(self, b.extents, data, name)
        warnings.warn(ScheduleNote(f"{self.name}: {origin}"), stacklevel=4)
        return chosen._plan(name, sizes, args)

    @user_facing
    def lint(self, sizes: dict | None = None, dtype: dict[str, str] | str = "f32", backend: str = "triton",
             compiled: bool = False, **inputs) -> list:
        """Every performance warning of this schedule on `backend` for inputs of `dtype` at the
        extents of `sizes` and of `inputs` (anything with a shape, by name), whatever DT_WARNINGS
        says; `compiled`: also its compiled kernels' (docs/performance-warnings.md)."""
        extents = self._extents(inputs, sizes or {}, "sizes") if sizes or inputs else {}
        return lint.program_warnings(self, backends.get(backend), self.pipeline(dtype), extents, compiled)

    @user_facing
    def kernel_facts(self, sizes: dict | None = None, dtype: dict[str, str] | str = "f32", backend: str = "triton",
                     **inputs):
        """(Each compiled kernel's facts at these extents, as `lint` takes them; their warnings)."""
        return lint.kernel_facts(self, backends.get(backend), self.pipeline(dtype),
                                 self._extents(inputs, sizes or {}, "sizes"))

    @user_facing
    def space(self, sizes: dict, dtype: str | dict[str, str] = "f32", backend: str = "triton", limit: int = 4096):
        """The schedules dt explores at these extents for inputs of `dtype` (dt.tune.space)."""
        from dt.tune import space
        return space(self, sizes, dtype, backend, limit)

    @user_facing
    def tune(self, sizes: dict, dtype: str | dict = "f32", backend: str = "triton", budget: float = 300, **options):
        """The space searched on `backend` for `budget` seconds, fastest first (dt.tune.search)."""
        from dt.tune import tune
        return tune(self, sizes, dtype, backend, budget, **options)

    @user_facing
    def reference(self, /, *positional, sizes: dict | None = None, **args):
        """The algorithm's answer, evaluated directly in float64 ignoring the schedule."""
        self._refuse_positional(positional)
        b = self._bind(args, sizes)
        call_checks.check_memory(call_checks.reference_tensors(self.checked, b.extents), b.extents,
                                 call_checks.cpu_memory())
        compute = "f64" if "f64" in b.dtypes.values() else "f32"
        types = Types(self.checked.algorithm, {n: b.dtypes[n] for n in self.inputs},
                      {n: d for n, d in b.dtypes.items() if n in self.scalars},
                      dict.fromkeys(self.checked.algorithm, compute))
        values = reference.evaluate(self.checked, {n: to_numpy(a).astype(np.float64) for n, a in b.arrays.items()},
                                    b.scalars, b.extents, compute, types)
        outs = {n: values[n] for n in self.outputs}
        if b.torch_device is not None:
            outs = {n: to_torch(o).to(b.torch_device) for n, o in outs.items()}
        return outs[self.outputs[0]] if len(self.outputs) == 1 else outs

    @user_facing
    def pipeline(self, dtypes: dict[str, str] | str = "f32") -> Pipeline:
        """The scheduled IR for these input dtypes (one name: every input's but those that index,
        i64 as are the scalars that index; a mapping: each input's, those that index i64 unless named)."""
        for dtype in dtypes.values() if isinstance(dtypes, dict) else (dtypes,):
            if not (isinstance(dtype, str) and dtype in ALL):
                raise DTInputError(f"dtype {dtype!r} is not one dt supports", None, f"use one of {', '.join(ALL)}")
        if not isinstance(dtypes, dict):
            dtypes = {**{n: dtypes for n in self.inputs if n not in self.checked.index_inputs},
                      **{n: "i64" for n in self.checked.index_scalars}}
        dtypes = {**{n: "i64" for n in self.inputs if n in self.checked.index_inputs}, **dtypes}
        key = tuple(sorted(dtypes.items()))
        if key not in self._pipelines:
            self._pipelines[key] = lower(self.checked, dtypes)
        return self._pipelines[key]

    @user_facing
    def source(self, backend: str = "interp", dtype: str = "f32") -> str:
        """The code `backend` generates for this program (inputs of `dtype`)."""
        return backends.get(backend).source(self.pipeline(dtype))

    @user_facing
    def ir(self, dtype: str = "f32") -> str:
        """The scheduled IR of this program (inputs of `dtype`) as text: what every backend renders."""
        return ir_text(self.pipeline(dtype))

    @user_facing
    def check_extents(self, extents: dict, dtype: str | dict[str, str] = "f32"):
        """Check extents (dimension name -> extent) as a call would, before anything is made: the
        dimensions, each extent, every tile's limit, and the memory inputs of `dtype`, outputs
        and temporaries need. For code that makes inputs, such as dt.testing.random_inputs."""
        checked = self._extents({}, extents, "extents")
        pipeline = self.pipeline(dtype)
        self._check_fits(pipeline.inputs + pipeline.outputs + pipeline.temporaries, checked, call_checks.cpu_memory())

    def _check_fits(self, tensors, extents: dict[str, int], limit: tuple[int, str] | None):
        """Raise unless, at these extents, every tile is within its limit and `tensors` (the
        pipeline's TensorSpecs) fit in `limit`, the memory they are made in."""
        tiles.check_extents(self.checked.tiles, extents)
        call_checks.check_memory([(t.role, t.name, t.dims, t.dtype,
                                   self._first_access(t.name) if t.role == "input"
                                   else (self.checked.written.get(t.name) or self.checked.funcs[t.name]).loc)
                                  for t in tensors], extents, limit)

    def _check_capabilities(self, backend_obj, pipeline: Pipeline):
        caps = backend_obj.capabilities
        for t in pipeline.inputs + pipeline.outputs:
            if t.dtype not in caps.dtypes:
                raise DTInputError(f"backend '{backend_obj.name}' does not support dtype {t.dtype} "
                                   f"('{t.name}')", self._first_access(t.name),
                                   f"it supports {', '.join(sorted(caps.dtypes))}")
        if not caps.gathers:
            gather = next((node for k in pipeline.kernels for s in walk_statements(k.body)
                           if isinstance(s, (Assign, Store)) for node in walk_texpr(s.value)
                           if isinstance(node, Gather)), None)
            if gather is not None:
                raise DTBackendError(f"backend '{backend_obj.name}' cannot read '{gather.tensor}' at computed indices",
                                     gather.loc, "run it on a backend that can (interp, numba, triton)")
        scatter = next((s for k in pipeline.kernels for s in walk_statements(k.body) if isinstance(s, Scatter)), None)
        if scatter is not None and not caps.scatters:
            raise DTBackendError(f"backend '{backend_obj.name}' cannot run updates ('{scatter.tensor}' written at "
                                 f"computed indices)", scatter.loc, "run it on a backend that can (interp, numba, triton)")

    # ------------------------------------------------------------------ binding
    def _refuse_positional(self, positional: tuple):
        if positional:
            names = self.inputs + self.scalars
            raise DTInputError(f"{self.name} takes its inputs by name, got {len(positional)} positional "
                               f"argument(s)", None, f"call it as {self.name}("
                               f"{', '.join(f'{n}=...' for n in names)})" if names else f"call it as {self.name}()")

    def _scalar(self, name: str, value) -> float | int:
        decl = self.ast.decl(name)
        return call_checks.scalar_value(name, value, decl.loc if decl else None)

    def _first_access(self, name: str) -> Loc | None:
        for a in self._accesses:
            if a.name == name:
                return a.loc
        decl = self.ast.decl(name)
        return decl.loc if decl else None

    def _bind(self, args: dict, sizes: dict | None) -> _Binding:
        names = set(self.inputs) | set(self.scalars)
        for k in args:
            if k not in names:
                raise DTInputError(f"'{k}' is not an input of {self.name}", None,
                                   f"its inputs are: {', '.join(self.inputs + self.scalars) or 'none'}")
        arrays, scalars, dtypes, device = {}, {}, {}, None
        for n in self.inputs:
            if n not in args:
                decl = self.ast.decl(n)
                raise DTInputError(f"missing input '{n}'", decl.loc if decl else None, f"pass {n}=<array>")
            a = args[n]
            if is_torch(a):
                if str(a.layout) != "torch.strided" or a.device.type == "meta":
                    raise DTInputError(f"input '{n}' is a {a.layout} tensor on {a.device}, which holds no dense data "
                                       "a kernel can read", self._first_access(n),
                                       "pass a dense tensor with data (.to_dense(), or one on a real device)")
                device = device if device is not None else a.device
                dtype = TORCH_NAMES.get(str(a.dtype))
                shown = str(a.dtype)
            else:
                if not isinstance(a, np.ndarray):
                    try:
                        a = np.asarray(a)
                    except (TypeError, ValueError) as e:  # ragged nested lists, say
                        raise DTInputError(f"input '{n}' is not an array: {e}", self._first_access(n),
                                           "pass a NumPy array or a torch tensor") from None
                dtype, shown = NUMPY_NAMES.get(a.dtype), str(a.dtype)
            if dtype is None:
                raise DTInputError(f"input '{n}' has dtype {shown}, which dt does not support",
                                   self._first_access(n), "pass float32, float16, bfloat16 or float64 data, or "
                                                          "bool, int8, uint8, int16, int32 or int64 data")
            arrays[n], dtypes[n] = a, dtype
        for n in self.scalars:
            if n not in args:
                decl = self.ast.decl(n)
                raise DTInputError(f"missing scalar '{n}'", decl.loc if decl else None, f"pass {n}=<number>")
            scalars[n] = self._scalar(n, args[n])
            if isinstance(scalars[n], int):  # an integer scalar: it may index (K[l + start])
                dtypes[n] = "i64"
        devices = {str(a.device) for a in arrays.values() if is_torch(a)}
        if len(devices) > 1:
            raise DTInputError(f"inputs are on different devices ({', '.join(sorted(devices))})", None,
                               "move every tensor to one device")
        extents = self._extents(arrays, {} if sizes is None else sizes)
        call_checks.divisors(self.checked.call_divisors, extents, scalars)
        call_checks.index_arithmetic(self.checked.computed_subscripts, extents, scalars)
        return _Binding(arrays, scalars, extents, dtypes, device)

    def _extents(self, arrays: dict, sizes, argument: str = "sizes") -> dict[str, int]:
        """The extent of every dimension the program needs, each checked: from the shapes of
        `arrays` (every input, or none) and from `sizes`, the dict passed as `argument`."""
        from_arrays = call_checks.array_extents(self.checked, arrays)
        result = {d: n for d, (n, _, _) in from_arrays.items()}
        for dim, n in self._given_extents(sizes, argument).items():
            if dim in from_arrays and from_arrays[dim][0] != n:
                _, source, loc = from_arrays[dim]
                raise DTExtentError(f"{argument} gives {dim} = {n}, but {source} has {result[dim]}", loc,
                                    f"drop it from {argument} or pass matching tensors")
            result[dim] = n
        call_checks.func_read_extents(self.checked, result, argument)
        for dim, (split, chunk) in self.checked.chunk_dims.items():  # ceil(len(l) / chunk) chunks of a split
            if split in result:
                result[dim] = -(-result[split] // chunk)
        missing = [d for d in self.checked.needed_dims if d not in result]
        if missing:
            hint = (" ".join(f"{argument} {m}=N" for m in missing) if argument.startswith("--") else
                    f"{argument}={{{', '.join(repr(m) + ': ...' for m in missing)}}}")  # a flag, or a dict
            raise DTExtentError(f"no extent given for {', '.join(repr(m) for m in missing)}", None, f"pass {hint}")
        for d, (n, _, loc) in from_arrays.items():
            call_checks.check_extent(n, f"the extent of '{d}' is", loc)
        return result

    def _given_extents(self, sizes, argument: str) -> dict[str, int]:
        """The extents in `sizes`, the dict passed as `argument`: names of dimensions, integer extents."""
        if not isinstance(sizes, dict):
            raise DTExtentError(f"{argument} must be a dict of extents by dimension name, got {type(sizes).__name__}",
                                None, f"e.g. {argument}={{'n': 64}}")
        given = {}
        # besides the declared dimensions, the axes of inputs no dimension spans (`E_axis0` of E[I[t], d])
        known = dict.fromkeys(d for d in self.checked.dim_kinds if d not in self.checked.chunk_dims) | \
            dict.fromkeys(d for axes in self.checked.input_axes.values() for d in axes)
        for dim, n in sizes.items():
            if dim not in known:
                raise DTExtentError(f"{argument} names {dim!r}, which is not a dimension of {self.name}", None,
                                    f"its dimensions: {', '.join(known)}")
            decl = self.ast.decl(dim)
            given[dim] = call_checks.extent_value(dim, n, decl.loc if decl else None, argument)
        return given


def resolve_backend(name: str | None, torch_device=None) -> str:
    """The backend argument, else $DT_BACKEND (read at each call), else the default: 'interp'
    while dt.debug is active, 'triton' for CUDA tensors when it loads, otherwise the first CPU
    backend that loads."""
    name = name or env.read("DT_BACKEND") or None
    if name:
        return name
    if debug_config.current() is not None:  # breakpoints, traces and sanitizers run on the interpreter
        return "interp"
    if torch_device is not None and getattr(torch_device, "type", "cpu") == "cuda" and backends.available("triton"):
        return "triton"
    for candidate in DEFAULT_BACKEND_ORDER:
        if candidate in backends.names() and backends.available(candidate):
            return candidate
    return "interp"


@user_facing
def load(path: str | os.PathLike) -> Program:
    """Parse and check a .dt file (UTF-8 text)."""
    path = Path(path)
    return Program(parse(_read_source(path), str(path), path.stem))


def _read_source(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        hint = "dt.load takes a .dt file" if isinstance(e, IsADirectoryError) else None
        raise DTInputError(f"cannot read {str(path)!r}: {e.strerror or e}", None, hint) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = normalise_source(data[:e.start].decode("utf-8"))
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        text = normalise_source(data.decode("utf-8", "replace")).split("\n")[line - 1]
        raise DTSyntaxError(f"{str(path)!r} is not UTF-8 text: byte 0x{data[e.start]:02x} cannot start or "
                            f"continue a character here", Loc(str(path), line, col, 1, text),
                            "save the file as UTF-8") from None


@user_facing
def loads(source: str, name: str = "program", file: str = "<string>") -> Program:
    """Parse and check DT source text."""
    return Program(parse(source, file, name))


@user_facing
def program(*outputs: api.Func, name: str | None = None):
    """Collect every declaration reachable from `outputs` into a DT program and compile it."""
    if not outputs or not all(isinstance(o, api.Func) for o in outputs):
        raise DTError("dt.program takes the output Funcs, e.g. dt.program(out)", api.caller_loc())
    for o in outputs:
        if not any(c.primitive in ("compile", "compile_to_kernel", "save") for c in o.schedule):
            o.compile(loc=o.loc)
    objects = api.collect(outputs)
    return Program(api.build(objects, name=name or outputs[0].name))
