"""Scheduled IR → a standalone Python module of Triton kernels and their host launcher.

Each Kernel of the pipeline becomes one `@triton.jit` function (kernel.py); the pipeline
becomes one public function that checks its inputs, infers the extents from their shapes,
allocates outputs and temporaries, and launches the kernels in order over a 1-D grid
(launcher.py). The module carries the helper functions its kernels and launcher call
(helpers.py) and imports torch, triton and triton.language only. Generating it imports
neither torch nor triton.
"""
from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from functools import cache

from dt.backends.pysource import Names, Writer, safe_text
from dt.backends.triton import helpers
from dt.backends.triton.expressions import LOG2E
from dt.backends.triton.format import wrap
from dt.backends.triton.gluon import GluonKernelRenderer, NotPipelined, gluon_helper
from dt.backends.triton.gluon_ws import WarpSpecializedRenderer
from dt.backends.triton.kernel import KernelRenderer
from dt.backends.triton.launcher import Launcher
from dt.backends.triton.limits import TileCheck
from dt.dtypes import FLOAT8, INTEGERS, is_integer
from dt.errors import DTBackendError
from dt.ir import scheduled as S

F32_DOT_PRECISIONS = ("ieee", "tf32", "tf32x3")
DTYPES = ("f32", "f16", "bf16", *INTEGERS)
LINE_WIDTH = 100
HEADER_WIDTH = 95  # the module docstring's prose
# Modules and builtins the generated code refers to; no generated local may shadow them.
GLOBALS_USED = ("tl", "libdevice", "triton", "torch", "float", "int", "min", "max", "range", "tuple", "ValueError",
                "TensorDescriptor", "os", "gluon", "gl", "mbarrier", "tma", "warpgroup_mma", "warpgroup_mma_wait",
                "GluonTensorDescriptor", "_tma_load", "_tma_store", "fence_async_shared", "GLUON",
                "warnings", "CompilationError", "OutOfResources", "PTXASError")


@dataclass(frozen=True)
class Module:
    source: str
    function: str  # the launcher's name in the module
    inputs: tuple[str, ...]
    scalars: tuple[str, ...]
    call_extents: tuple[str, ...]  # dims the launcher takes as arguments (no input binds them)
    tile_checks: tuple[TileCheck, ...]
    least_tiles: dict[str, int]  # `{dim}_SIZE` -> the lanes its padded tile has at least (tl.dot, pair swaps)
    launch_lines: tuple[tuple[int, int, S.Kernel], ...]  # (first, last line, kernel) of each launch
    kernels: tuple[str, ...]  # the @triton.jit kernels' names in the module
    gluon_kernels: tuple[str, ...] = ()  # their Gluon twins' (gluon.py), run on Hopper GPUs


def render(pipeline: S.Pipeline, f32_dot: str = "ieee", width: int | None = LINE_WIDTH,
           interpret: bool = False) -> Module:
    """The module for `pipeline`, to compile for a GPU or (`interpret`) to run under Triton's
    interpreter, which lacks libdevice; `width` None leaves every statement on one line."""
    renderable = DTYPES + (() if interpret else FLOAT8)  # Triton's interpreter has no 8-bit floats
    for t in pipeline.inputs + pipeline.outputs + pipeline.temporaries:
        if t.dtype not in renderable:
            raise DTBackendError(f"the triton backend does not support dtype {t.dtype} ('{t.name}')"
                                 f"{' under its interpreter' if interpret else ''}", None,
                                 f"it supports {', '.join(renderable)}; use the interp or numba backend for "
                                 f"{t.dtype}")
    for k in pipeline.kernels:
        for statement in S.walk_statements(k.body):
            cast = next((e for v in S.statement_values(statement) for e in S.walk_texpr(v)
                         if isinstance(e, S.Cast) and e.dtype not in renderable), None)
            if cast is not None:
                raise DTBackendError(f"the triton backend cannot compute in {cast.dtype} (a cast to it)"
                                     f"{' under its interpreter' if interpret else ''}", statement.loc,
                                     f"cast to one of {', '.join(renderable)}, or use the interp or numba "
                                     f"backend")
    if f32_dot not in F32_DOT_PRECISIONS:
        raise DTBackendError(f"unknown f32 dot precision {f32_dot!r}", None,
                             f"set DT_TRITON_F32_DOT to one of {', '.join(F32_DOT_PRECISIONS)}")
    device_helpers, host_helpers = helpers.device(interpret), helpers.host()
    module_names = Names(GLOBALS_USED)
    gluon_helpers = _gluon_helpers()
    helper_names = {name: module_names.fresh(name) for name in (*device_helpers, *gluon_helpers, *host_helpers)}
    in_kernels = set(module_names.taken)  # what kernel bodies refer to: local names must differ
    kernel_names = {k.name: module_names.ir(k.name) for k in pipeline.kernels}
    gluon_names = {k.name: module_names.fresh(f"{k.name}_gluon") for k in pipeline.kernels}
    function = module_names.ir(pipeline.name)
    in_launcher = set(module_names.taken)  # the launcher calls itself (on another GPU) and the kernels

    w = Writer()
    kernels = [KernelRenderer(k, pipeline, f32_dot, in_kernels, helper_names, kernel_names[k.name])
               for k in pipeline.kernels]
    bodies = [kr.render() for kr in kernels]
    refusals: dict[str, str] = {}  # kernel -> why a kernel of several products has no twin
    gluon_bodies = [] if interpret else _gluon_twins(pipeline, kernels, f32_dot, in_kernels, helper_names,
                                                     gluon_names, refusals)
    used_helpers = set().union(*(kr.helpers_used for kr in kernels))
    used_gluon_helpers = set().union(*(kr.gluon.helpers_used for kr in kernels if kr.gluon))
    least_tiles = {}
    for kr in kernels:
        for size, least in kr.least_tiles.items():
            least_tiles[size] = max(least_tiles.get(size, 0), least)
    launcher = Launcher(pipeline, kernels, function, in_launcher, helper_names, least_tiles)
    launch_helpers = ["_check"]
    if any(kr.program_count for kr in kernels):
        launch_helpers.append("_multiprocessors")
    if any(kr.use_tma or kr.gluon for kr in kernels):
        launch_helpers.append("_tma_ready")
    if gluon_bodies:
        launch_helpers += ["_gluon_wanted", "_gluon_descriptor", "_gluon_stages", "_gluon_launch"]
    _header(w, pipeline, f32_dot, function, launcher.args,
            libdevice=not interpret and bool(used_helpers & helpers.needing_libdevice()),
            descriptors=any(kr.use_tma for kr in kernels), exp2=any(kr.exp2_used for kr in kernels),
            twins={kernel_names[kr.kernel.name]: kr.gluon.name for kr in kernels if kr.gluon},
            refusals={kernel_names[k]: why for k, why in refusals.items()})
    emitted = [(name, source) for name, source in device_helpers.items() if name in used_helpers] \
        + [(name, host_helpers[name]) for name in launch_helpers]
    for name, helper in emitted:
        w.line("")
        w.line("")
        for line in helper.replace(name, helper_names[name]).splitlines():
            w.line(line)
    for body in bodies:
        w.line("")
        w.line("")
        w.lines.extend(body)
    if gluon_bodies:
        w.line("")
        w.line("")
        w.line("if GLUON:  # the kernels' Hopper twins (dt/backends/triton/gluon.py)")
        with w.indent():
            for name in sorted(used_gluon_helpers):
                w.line("")
                for line in gluon_helpers[name].replace(name, helper_names[name]).splitlines():
                    w.line(line)
            for body in gluon_bodies:
                w.line("")
                for line in body:
                    w.line(line)
    w.line("")
    w.line("")
    launcher.render(w)
    source = _format(w.lines, width)
    checks = tuple(c for kr in kernels for c in kr.limits.deferred)
    return Module(source, function, tuple(t.name for t in pipeline.inputs), pipeline.scalars,
                  launcher.call_extents, checks, least_tiles, _launch_lines(source, pipeline, kernel_names),
                  tuple(kernel_names.values()), tuple(kr.gluon.name for kr in kernels if kr.gluon))


@cache
def _gluon_helpers() -> dict[str, str]:
    """The device helpers as Gluon functions, `{name}_gluon`: rewritten once, not per module."""
    return {f"{name}_gluon": gluon_helper(source, name) for name, source in helpers.device(True).items()}


def _gluon_twins(pipeline, kernels, f32_dot, reserved, helper_names, gluon_names, refusals) -> list[list[str]]:
    """The Gluon kernel of each kernel the Gluon renderer writes (kr.gluon then holds its
    renderer); the others (NotPipelined) are Triton's alone, and `refusals` gets the reason of
    those with several products (the shape the twins take: why this one is not)."""
    bodies = []
    for kr in kernels:
        try:
            # several warpgroups: each in a partition of its own, a producer warp loading (gluon_ws.py)
            renderer = WarpSpecializedRenderer if (kr.kernel.num_warps or 4) > 4 else GluonKernelRenderer
            gluon = renderer(kr.kernel, pipeline, f32_dot, reserved, helper_names, gluon_names[kr.kernel.name])
            bodies.append(gluon.render())
            kr.gluon = gluon
        except NotPipelined as refusal:
            products = [n for s in S.walk_statements(kr.kernel.body) if isinstance(s, (S.Assign, S.Store))
                        for n in S.walk_texpr(s.value) if isinstance(n, S.Dot)]
            if len(products) > 1:
                refusals[kr.kernel.name] = str(refusal)
    return bodies


def _format(lines: list[str], width: int | None) -> str:
    out: list[str] = []
    in_docstring = False
    for line in lines:
        opens_or_closes = line.count('"""') % 2 == 1
        out.extend(wrap(line, width) if width and not (in_docstring or opens_or_closes) else [line])
        in_docstring ^= opens_or_closes
    return "\n".join(out) + "\n"


def _launch_lines(source: str, pipeline: S.Pipeline, kernel_names: dict[str, str]):
    """(first line, last line, kernel) of each kernel launch `name[grid](...)` in the source."""
    by_name = {kernel_names[k.name]: k for k in pipeline.kernels}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in by_name:
            found.append((node.lineno, node.end_lineno, by_name[node.func.value.id]))
    return tuple(found)


def _header(w: Writer, pipeline: S.Pipeline, f32_dot: str, function: str, args: list[str], libdevice: bool,
            descriptors: bool, exp2: bool, twins: dict[str, str], refusals: dict[str, str]):
    dtypes = sorted({t.dtype for t in pipeline.inputs}) or ["f32"]
    w.line(f'"""{pipeline.name}: Triton kernels generated by dt from {safe_text(pipeline.file) or "a DT program"} '
           f'({"/".join(dtypes)} inputs).')
    w.line("")
    if len(pipeline.outputs) == 1:
        w.line(f"    {pipeline.outputs[0].name} = {function}({', '.join(args)})")
    else:
        w.line(f"    outputs = {function}({', '.join(args)})  # a dict: "
               f"{', '.join(t.name for t in pipeline.outputs)}")
    w.line("")
    w.line("Arithmetic is float32 (loads upcast); tl.dot takes float16/bfloat16 operands as stored and")
    w.line(f'accumulates in float32; float32 operands use input_precision="{f32_dot}" (DT_TRITON_F32_DOT when')
    w.line('this was generated: "ieee" keeps full float32 precision, "tf32" uses TensorFloat-32 units).')
    nodes = [node for k in pipeline.kernels for s in S.walk_statements(k.body) if isinstance(s, (S.Assign, S.Store))
             for node in S.walk_texpr(s.value)]
    spanning = "the common dtype of the float inputs spanning their dimensions"
    if any(is_integer(t.dtype) for t in pipeline.inputs + pipeline.outputs + pipeline.temporaries):
        notes = [f"Float outputs are stored in {spanning}, integer ones as int64 unless cast."]
    else:
        notes = [f"Outputs are stored in {spanning}."]
    if len({t.dtype for t in pipeline.outputs}) > 1:  # save(), casts, integers
        notes.append(f"Output dtypes: {', '.join(f'{t.name} {t.dtype}' for t in pipeline.outputs)}.")
    if any(isinstance(n, S.Binary) and n.op in ("//", "%") and is_integer(n.dtype) for n in nodes):
        notes.append("Integer // and % round toward -infinity, as in Python.")
    if exp2:
        notes.append(f"exp(scores - b) of products computed here is written exp2(scores * {LOG2E.value!r} - "
                     f"b * {LOG2E.value!r}), log2(e) scaling each side: one fused multiply-add a lane.")
    if any(isinstance(n, S.Gather) for n in nodes):
        notes.append("A read at a computed index outside its tensor gives 0.")
    for kernel, twin in twins.items():
        notes.append(f"On a Hopper GPU, {kernel} runs as {twin} (Gluon, at the end) unless DT_TRITON_GLUON=0: "
                     f"each step's element-wise work overlaps the previous step's second product.")
    for kernel, why in refusals.items():
        notes.append(f"{kernel} has no Gluon twin: {why}.")
    notes.append('Extents and strides are tl.constexpr, so Triton compiles each kernel once per shape."""')
    for line in textwrap.wrap(" ".join(notes), HEADER_WIDTH):
        w.line(line)
    w.line("import torch")
    w.line("import triton")
    w.line("import triton.language as tl")
    if libdevice:
        w.line("from triton.language.extra import libdevice")
    if descriptors:
        w.line("from triton.tools.tensor_descriptor import TensorDescriptor")
    if twins:
        w.line("import os")
        w.line("import warnings")
        w.line("try:  # Gluon (Triton 3.5 and later) writes the Hopper twins of the kernels")
        w.line("    from triton.compiler.errors import CompilationError")
        w.line("    from triton.runtime.errors import OutOfResources, PTXASError")
        w.line("    from triton.experimental import gluon")
        w.line("    from triton.experimental.gluon import language as gl")
        w.line("    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma")
        w.line("    from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait")
        w.line("    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor")
        w.line("    # TMA's load into shared memory: async_copy_global_to_shared until Triton 3.7")
        w.line("    _tma_load = getattr(tma, \"async_load\", None) or tma.async_copy_global_to_shared")
        w.line("    _tma_store = getattr(tma, \"async_store\", None) or tma.async_copy_shared_to_global")
        w.line("    GLUON = True")
        w.line("except ImportError:")
        w.line("    GLUON = False")
