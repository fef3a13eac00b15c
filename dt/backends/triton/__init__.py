"""The `triton` backend: scheduled IR → a readable, standalone Triton module (one
`@triton.jit` kernel per Kernel and a host launcher), run on CUDA tensors, or on CPU tensors
through Triton's interpreter when TRITON_INTERPRET=1.

Generating the module needs no GPU, and neither torch nor triton: `source` always gives the
module compiled for a GPU (`source(pipeline, interpret=True)`, the interpreter's, only when
asked). Running needs torch and triton, and a CUDA GPU or the interpreter; without them,
`compile` refuses with a hint.

The float32 dot precision is read from DT_TRITON_F32_DOT ("ieee", the default, "tf32" or
"tf32x3") each time a pipeline is compiled or its source generated, and written into the
generated code as `input_precision=`.
"""
from __future__ import annotations

import os
import sys
import threading

from dt.backends.base import BackendUnavailable, Capabilities
from dt.backends.pysource import load_module
from dt.backends.triton import interpreter_fix, lint
from dt.backends.triton.codegen import DTYPES, Module, render
from dt.dtypes import FLOAT8
from dt.backends.triton.expressions import SUPPORTED_OPS
from dt.backends.triton.compiled import CODES as COMPILED_CODES
from dt.backends.triton.limits import check_at_launch
from dt.backends.triton.integers import integer_scalars
from dt.backends.triton.precision import F32_DOT_ENV, f32_dot_precision
from dt.errors import DTBackendError
from dt.ir import scheduled as S


class TritonBackend:
    name = "triton"

    def __init__(self, device: str | None, missing: BackendUnavailable | None = None):
        """`device`: 'cuda', 'cpu' (Triton's interpreter), or None where kernels cannot run:
        no GPU and no interpreter, or (`missing` says which) no torch or triton installed. The
        source can still be generated."""
        self.device = device
        self.missing = missing
        self.interpret = device == "cpu"
        mode = {"cuda": "CUDA", "cpu": "Triton interpreter on CPU tensors",
                None: f"source only: {missing}" if missing else
                "source only: no CUDA GPU and TRITON_INTERPRET is not set"}[device]
        self.capabilities = Capabilities(
            dtypes=frozenset(DTYPES + (FLOAT8 if device == "cuda" else ())), ops=SUPPORTED_OPS,
            array="torch", gathers=True, scatters=True, given_outputs=True, machine="gpu",
            compiles_per_shape=device == "cuda",
            devices={"cuda": ("cuda",), "cpu": ("cpu",), None: ()}[device],
            notes={"f32_dot": f"input_precision from ${F32_DOT_ENV} (default ieee)", "mode": mode,
                   "nan": "rmax/rmin follow tl.max/tl.min, which may drop NaN on the GPU"})

    lint_rules = lint.RULES
    compiled_codes = COMPILED_CODES  # the warnings of compiled_facts

    def compiled_facts(self, pipeline: S.Pipeline, context):
        """Each kernel's registers, spills, shared memory and occupancy at the context's extents,
        compiled for the GPU here (else an H100) without launching, and the warnings they give."""
        if self.missing is not None:
            raise DTBackendError(f"backend 'triton' cannot compile kernels here: {self.missing}", None,
                                 self.missing.hint)
        from dt.backends.triton.compiled import compiled_facts
        return compiled_facts(pipeline, context, render(pipeline, f32_dot_precision()))

    def module(self, pipeline: S.Pipeline) -> Module:
        """The module `compile` runs here (the interpreter's under TRITON_INTERPRET=1)."""
        return render(pipeline, f32_dot_precision(), interpret=self.interpret)

    def source(self, pipeline: S.Pipeline, interpret: bool = False) -> str:
        """The module compiled for a GPU, whatever runs here (`interpret`: the module for
        Triton's interpreter, which has no libdevice)."""
        return render(pipeline, f32_dot_precision(), interpret=interpret).source

    def compile(self, pipeline: S.Pipeline):
        if self.missing is not None:
            raise DTBackendError(f"backend 'triton' is not available: {self.missing}", None, self.missing.hint)
        if self.device is None:
            raise DTBackendError("the triton backend cannot run kernels here: " + NO_DEVICE, None, NO_DEVICE_HINT)
        module = self.module(pipeline)
        namespace = load_module(module.source, f"triton {pipeline.name}", {"__name__": f"dt_triton_{pipeline.name}"})
        launcher = namespace[module.function]
        outputs = tuple(t.name for t in pipeline.outputs)
        single = outputs[0] if len(outputs) == 1 else None
        to_cuda = not self.interpret
        filename = launcher.__code__.co_filename
        if self.interpret:
            launcher = _one_at_a_time(launcher)
        no_inputs = not module.inputs
        replays = None
        if not (self.interpret or no_inputs):
            from dt.backends.triton.replay import Replays  # imports torch: only when kernels run on a GPU
            # A Gluon twin's launches are recorded too, its descriptors replayed on the call's
            # tensors (replay._rebased).
            replays = Replays(launcher, namespace, module.kernels + module.gluon_kernels, pipeline.name)
        ints = integer_scalars(pipeline)  # their values are part of a replay's key
        integers = [i for i, s in enumerate(module.scalars) if s in ints]
        kwargs = {"device": "cuda" if to_cuda else "cpu"} if no_inputs else {}

        def run(tensors: dict, scalars: dict, sizes: dict, outputs: dict | None = None) -> dict:
            args = [tensors[n] for n in module.inputs]
            if to_cuda:
                args = [a if a.is_cuda else a.cuda() for a in args]
            scalar_args = [scalars[s] for s in module.scalars]
            # given outputs are replayed too: which ones, and their strides, are part of the key
            key = replays.key(args, tuple(sizes.items()), outputs, tuple(scalar_args[i] for i in integers)) \
                if replays is not None and not replays.hooked() else None
            replay = replays.functions.get(key, _UNRECORDED) if key is not None else None
            if replay is not None and replay is not _UNRECORDED:
                result = replay(*args, *scalar_args, *outputs.values()) if outputs else replay(*args, *scalar_args)
            else:  # the launcher: recording this key's launches the first time (None: not replayable)
                if module.tile_checks:
                    check_at_launch(module.tile_checks, module.least_tiles, sizes)
                extent_args = [sizes[f"{d}_SIZE"] for d in module.call_extents]
                try:
                    if replay is _UNRECORDED:
                        result = replays.record(key, args, scalar_args, extent_args, outputs)
                    else:
                        result = launcher(*args, *scalar_args, *extent_args, **kwargs, outputs=outputs)
                except Exception as e:
                    _raise_resource_error(e, module, filename)
                    _raise_compiler_failure(e, module, filename)
                    raise
            return {single: result} if single is not None else result

        run.module = module  # the generated source and how to call it
        run.namespace = namespace  # the executed module: kernels and launcher
        run.replays = replays  # the replayed calls' functions by key (None: calls always go through the launcher)
        return run


_UNRECORDED = object()
# Triton's interpreter is not thread-safe: while a kernel runs it patches triton.language and
# keeps the grid in a global builder, so two launches from different threads break each other.
_INTERPRETER_LOCK = threading.Lock()


def _one_at_a_time(launcher):
    def launch(*args, **kwargs):
        with _INTERPRETER_LOCK:
            return launcher(*args, **kwargs)
    return launch


def _raise_resource_error(e: Exception, module: Module, filename: str):
    """Report Triton's OutOfResources (a kernel too large for the GPU) at the kernel's DT line."""
    from triton.runtime.errors import OutOfResources
    if not isinstance(e, OutOfResources):
        return
    kernel = _launched(e, module, filename)
    what = f"kernel '{kernel.name}'" if kernel else "a kernel"
    advice = []
    if kernel is not None and (kernel.num_stages or 0) > 1 and e.name == "shared memory" and e.required > 0:
        # A loop pipelined n deep keeps n - 1 buffers of each load: shared memory grows by one
        # such set per stage (what does not grow with stages makes this an upper estimate).
        stages = int(e.limit // (e.required / (kernel.num_stages - 1))) + 1
        advice.append(f"try {kernel.func}.num_stages({min(stages, kernel.num_stages - 1)})")
    whole = sorted({a.dim for a in S.walk_statements(kernel.body)
                    if isinstance(a, S.Axis) and isinstance(a.size, S.IVar)}) if kernel is not None else []
    if whole:  # a tile over a whole extent grows with the call's sizes: no stage count bounds it
        dims = " and ".join(f"'{d}'" for d in whole)
        advice.append(f"its tiles span the whole of {dims} (padded to a power of two) and grow with the sizes, so "
                      f"fewer stages may not be enough: walk {dims} in tiles (tensorize with a size), or use "
                      f"smaller blocks")
    else:
        advice.append("use smaller tiles (tensorize / block sizes)" + ("" if advice else " or fewer pipeline stages"))
    if kernel is not None and kernel.tma and e.name == "shared memory":
        advice.append(f"remove {kernel.func}.tma(): TMA moves every box through shared memory")
    hint = "; or ".join(advice)
    raise DTBackendError(f"{what} needs more {e.name} than the GPU has ({e.required} > {e.limit})",
                         kernel.loc if kernel else None, hint) from e


def _raise_compiler_failure(e: Exception, module: Module, filename: str):
    """Report a crash of Triton's compiler on a generated kernel (an MLIR pass failing: Triton's
    bug, not the schedule's) at the kernel's DT line, with the ways around it."""
    if not (isinstance(e, RuntimeError) and "PassManager::run failed" in str(e)):
        return
    kernel = _launched(e, module, filename)
    what = f"kernel '{kernel.name}'" if kernel else "a kernel"
    func = kernel.func if kernel else "its Func"
    around = ([f"remove {func}.tma()"] if kernel is not None and kernel.tma else []) + ["change its tiles or stages"]
    raise DTBackendError(f"Triton's compiler failed on {what} (an MLIR pass: its message is above, on stderr)",
                         kernel.loc if kernel else None,
                         f"a Triton bug, not an error in the schedule: schedule {func} another way "
                         f"({', or '.join(around)}); `dt compile --backend triton` writes the kernel's source, "
                         f"to report it with") from e


def _launched(e: Exception, module: Module, filename: str):
    """The kernel whose launch in the generated launcher raised `e` (None if none of them)."""
    kernel = None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            kernel = next((k for first, last, k in module.launch_lines if first <= tb.tb_lineno <= last), kernel)
        tb = tb.tb_next
    return kernel


NO_DEVICE = "no CUDA GPU is visible to torch, and TRITON_INTERPRET is not set"
NO_DEVICE_HINT = ("run on a machine with an NVIDIA GPU, or set TRITON_INTERPRET=1 to run the Triton code on the CPU "
                  "through Triton's interpreter (slow); generating it (prog.source('triton'), dt compile) needs "
                  "neither")


def create() -> TritonBackend:
    try:
        where = device()
    except BackendUnavailable as e:  # generating source needs neither torch nor triton
        return TritonBackend(None, missing=e)
    if where == "cpu":
        interpreter_fix.apply()
    return TritonBackend(where)


def device() -> str | None:
    """Where Triton kernels run here: 'cuda', 'cpu' under Triton's interpreter
    (TRITON_INTERPRET=1), or None when neither (source generation only); BackendUnavailable
    when torch or triton is missing."""
    try:
        import torch
        import triton
    except ImportError as e:
        raise BackendUnavailable(f"the triton backend needs the '{e.name}' package",
                                 "pip install 'dt[triton]' (installs triton and torch)") from None
    if triton.knobs.runtime.interpret:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else None


def interpret_without_gpu() -> bool:
    """Switch Triton to its interpreter (TRITON_INTERPRET=1) when no CUDA GPU is visible and
    TRITON_INTERPRET is not set; True when it did (`dt run` does, and says so). It must come
    before triton is imported, which makes the @triton.jit functions of its standard library for
    one mode or the other: once triton is imported, or without torch, it leaves things as they
    are (and running says why it cannot)."""
    if "TRITON_INTERPRET" in os.environ or "triton" in sys.modules:
        return False
    try:
        import torch
    except ImportError:
        return False
    if torch.cuda.is_available():
        return False
    os.environ["TRITON_INTERPRET"] = "1"
    return True
