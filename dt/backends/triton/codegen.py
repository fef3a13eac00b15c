"""Scheduled IR → a standalone Python module of Triton kernels and their host launcher.

Each Kernel of the pipeline becomes one `@triton.jit` function in the style of the DT
talk's generated code (`mm_kernel(A_ptr, A_x_stride: tl.constexpr, ..., x_SIZE:
tl.constexpr)`, `x_block_start`, `x_arange = tl.arange(0, 128)`, `k_accumulator`, loads
named after their tensors); the pipeline becomes one public function that checks its
inputs, infers the extents from their shapes, allocates outputs and temporaries, and
launches the kernels in order over a 1-D grid. The module imports torch, triton and
triton.language only.
"""
from __future__ import annotations

import ast
import contextlib
import math
from dataclasses import dataclass

from dt.backends.pysource import Names, Writer, index, safe_text
from dt.backends.triton.cache_hints import eviction_policies
from dt.backends.triton.lane_accumulators import with_lane_accumulators
from dt.backends.triton.format import wrap
from dt.backends.triton.layout import MIN_DOT, AxisLayout, KernelLayout, next_power_of_2
from dt.errors import DTBackendError, DTScheduleError, Loc
from dt.ir import scheduled as S
from dt.ir.algorithm import COMPARISONS
from dt.ir.tiles import MAX_TILE

TMA_MAX_BOX = 256  # a TMA box spans at most 256 elements along each dimension
TMA_MIN_ROW_BYTES = 16  # and at least 16 bytes along the contiguous one
TMA_MAX_RANK = 5
ITEM_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
F32_DOT_PRECISIONS = ("ieee", "tf32", "tf32x3")
DTYPES = ("f32", "f16", "bf16")
TL_DTYPE = {"f32": "tl.float32", "f16": "tl.float16", "bf16": "tl.bfloat16", "bool": "tl.int1"}
TORCH_DTYPE = {"f32": "torch.float32", "f16": "torch.float16", "bf16": "torch.bfloat16"}
LINE_WIDTH = 100
# Modules and builtins the generated code refers to; no generated local may shadow them.
GLOBALS_USED = ("tl", "libdevice", "triton", "torch", "float", "int", "min", "max", "range", "tuple", "ValueError",
                "TensorDescriptor")

UNARY = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt",
         "rsqrt": "tl.rsqrt", "sigmoid": "tl.sigmoid", "tanh": "_tanh", "abs": "tl.abs", "erf": "tl.erf",
         "sin": "tl.sin", "cos": "tl.cos", "floor": "tl.floor", "ceil": "tl.ceil"}
BINARY_CALLS = {"maximum": "tl.maximum", "minimum": "tl.minimum", "pow": "_pow"}
REDUCE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}
# Python precedence levels of what the renderer writes (higher binds tighter).
PRECEDENCE = {**{op: 2 for op in COMPARISONS}, "and": 3, "+": 4, "-": 4, "*": 5, "/": 5}
UNARY_PREC, ATOM = 6, 7

# Triton has no tanh or pow that runs both compiled and under its interpreter, so the module
# carries its own, built from tl.exp / tl.exp2 / tl.log2. Compiled, tanh is CUDA's tanhf
# instead (libdevice, what torch.compile's kernels call): fewer instructions than the exp
# formula, it made bf16 DyT 4-7% faster on an H100.
HELPERS = {
    "_tanh": '''\
@triton.jit
def _tanh(x):
    # (1 - e) / (1 + e) with e = exp(-2|x|) never overflows; it cancels near 0, where the
    # odd Taylor series (error < 1e-12 relative for |x| < 0.125) is used instead.
    e = tl.exp(-2.0 * tl.abs(x))
    large = (1.0 - e) / (1.0 + e)
    x2 = x * x
    small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (
        62.0 / 2835.0 + x2 * (-1382.0 / 155925.0))))))
    return tl.where(tl.abs(x) < 0.125, small, tl.where(x < 0.0, -large, large))
''',
    "_pow": '''\
@triton.jit
def _pow(x, y):
    # x ** y as NumPy defines it: |x| ** y signed for a negative x and an odd integral y,
    # NaN for a negative x and a fractional y, and 1 when y == 0 or x == 1.
    magnitude = tl.exp2(y * tl.log2(tl.abs(x)))
    integral = tl.floor(y) == y
    odd = integral & (tl.floor(y * 0.5) * 2.0 != y)
    signed = tl.where(odd, -magnitude, magnitude)
    result = tl.where(x < 0.0, tl.where(integral, signed, float("nan")), magnitude)
    return tl.where((y == 0.0) | (x == 1.0), 1.0, result)
''',
}
COMPILED_HELPERS = {  # each calls libdevice
    "_tanh": '''\
@triton.jit
def _tanh(x):
    # CUDA's tanhf: 2 ulp at most, and cheaper than the exp formula the interpreter uses.
    return libdevice.tanh(x)
''',
}
CHECK_HELPER = '''\
def _check(name, tensor, rank, dtype, device):
    if tensor.dim() != rank or tensor.dtype != dtype or tensor.device != device:
        raise ValueError(f"{name} must be a {rank}-D {dtype} tensor on {device}, "
                         f"not a {tensor.dim()}-D {tensor.dtype} tensor on {tensor.device}")
'''

LAUNCH_HELPERS = {  # host-side helpers of persistent and TMA launches
    "_multiprocessors": '''\
def _multiprocessors(device):
    # A persistent kernel launches one program per multiprocessor (per thread under Triton's interpreter).
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return torch.get_num_threads()
''',
    "_tma_ready": '''\
def _tma_ready(device, *boxes):
    # TMA (Hopper and later) moves boxes of at most 256 a side and 16 bytes or more along the
    # last, of tensors whose rows start 16-byte aligned and whose last dimension is contiguous,
    # zero-filling where a box leaves the tensor: the tensor must end where the kernel's
    # extents do. Elsewhere the kernel loads and stores through pointers.
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (9, 0):
        return False
    return all(tuple(t.shape) == extents and t.data_ptr() % 16 == 0 and t.stride(-1) == 1
               and all(stride * t.element_size() % 16 == 0 for stride in t.stride()[:-1])
               and max(box) <= 256 and box[-1] * t.element_size() >= 16 for t, box, extents in boxes)
''',
}


@dataclass(frozen=True)
class TileCheck:
    """A tile whose element count depends on extents: checked before each launch."""
    factors: tuple  # ints, and `{dim}_SIZE` names standing for that extent's padded tile
    what: str
    loc: Loc | None
    hint: str


@dataclass(frozen=True)
class Module:
    source: str
    function: str  # the launcher's name in the module
    inputs: tuple[str, ...]
    scalars: tuple[str, ...]
    call_extents: tuple[str, ...]  # dims the launcher takes as arguments (no input binds them)
    tile_checks: tuple[TileCheck, ...]
    dot_dims: frozenset[str]  # `{dim}_SIZE` whose padded tile is at least MIN_DOT
    launch_lines: tuple[tuple[int, int, S.Kernel], ...]  # (first, last line, kernel) of each launch
    kernels: tuple[str, ...]  # the @triton.jit kernels' names in the module


def tile_padding(size: int, dot: bool) -> int:
    """The lanes the launcher gives a whole extent of `size` (`{dim}_TILE`)."""
    return max(MIN_DOT if dot else 1, next_power_of_2(size))


def render(pipeline: S.Pipeline, f32_dot: str = "ieee", width: int | None = LINE_WIDTH,
           interpret: bool = False) -> Module:
    """The module for `pipeline`, to compile for a GPU or (`interpret`) to run under Triton's
    interpreter, which lacks libdevice; `width` None leaves every statement on one line."""
    for t in pipeline.inputs + pipeline.outputs + pipeline.temporaries:
        if t.dtype not in DTYPES:
            raise DTBackendError(f"the triton backend does not support dtype {t.dtype} ('{t.name}')", None,
                                 f"it supports {', '.join(DTYPES)}; use the interp or numba backend for {t.dtype}")
    if f32_dot not in F32_DOT_PRECISIONS:
        raise DTBackendError(f"unknown f32 dot precision {f32_dot!r}", None,
                             f"set DT_TRITON_F32_DOT to one of {', '.join(F32_DOT_PRECISIONS)}")
    module_names = Names(GLOBALS_USED)
    helpers = {name: module_names.fresh(name) for name in (*HELPERS, "_check", *LAUNCH_HELPERS)}
    in_kernels = set(module_names.taken)  # what kernel bodies refer to: local names must differ
    kernel_names = {k.name: module_names.ir(k.name) for k in pipeline.kernels}
    function = module_names.ir(pipeline.name)
    in_launcher = set(module_names.taken)  # the launcher calls itself (on another GPU) and the kernels

    w = Writer()
    kernels = [_KernelRenderer(k, pipeline, f32_dot, in_kernels, helpers, kernel_names[k.name])
               for k in pipeline.kernels]
    bodies = [kr.render() for kr in kernels]
    used_helpers = set().union(*(kr.helpers_used for kr in kernels))
    dot_dims = frozenset().union(*(kr.dot_dims for kr in kernels))
    launcher = _Launcher(pipeline, kernels, function, in_launcher, helpers, dot_dims)
    sources = HELPERS if interpret else {**HELPERS, **COMPILED_HELPERS}
    launch_helpers = []
    if any(kr.program_count for kr in kernels):
        launch_helpers.append("_multiprocessors")
    if any(kr.use_tma for kr in kernels):
        launch_helpers.append("_tma_ready")
    _header(w, pipeline, f32_dot, function, launcher.args,
            libdevice=not interpret and bool(used_helpers & COMPILED_HELPERS.keys()),
            descriptors="_tma_ready" in launch_helpers)
    emitted = [(name, sources[name]) for name in HELPERS if name in used_helpers] + [("_check", CHECK_HELPER)] \
        + [(name, LAUNCH_HELPERS[name]) for name in launch_helpers]
    for name, helper in emitted:
        w.line("")
        w.line("")
        for line in helper.replace(name, helpers[name]).splitlines():
            w.line(line)
    for body in bodies:
        w.line("")
        w.line("")
        w.lines.extend(body)
    w.line("")
    w.line("")
    launcher.render(w)
    source = _format(w.lines, width)
    checks = tuple(c for kr in kernels for c in kr.tile_checks)
    return Module(source, function, tuple(t.name for t in pipeline.inputs), pipeline.scalars,
                  launcher.call_extents, checks, dot_dims, _launch_lines(source, pipeline, kernel_names),
                  tuple(kernel_names.values()))


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
            descriptors: bool):
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
    w.line("Outputs are stored in the inputs' dtype. Extents and strides are tl.constexpr, so Triton")
    w.line('compiles each kernel once per shape."""')
    w.line("import torch")
    w.line("import triton")
    w.line("import triton.language as tl")
    if libdevice:
        w.line("from triton.language.extra import libdevice")
    if descriptors:
        w.line("from triton.tools.tensor_descriptor import TensorDescriptor")


class _KernelRenderer:
    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, f32_dot: str, reserved, helpers, name):
        kernel = with_lane_accumulators(kernel)
        self.kernel = kernel
        self.pipeline = pipeline
        self.f32_dot = f32_dot
        self.helpers = helpers
        self.name = name
        self.layout = KernelLayout(kernel)
        self.eviction = eviction_policies(kernel)
        self.params = S.kernel_params(kernel, pipeline)
        self.names = Names(reserved)
        self.ref_dtypes: dict[str, str] = {}
        self.helpers_used: set[str] = set()
        self.dot_dims: set[str] = set()
        self.tile_checks: list[TileCheck] = []
        self._static_checked: set[tuple] = set()
        # The kernel's IR names first (as they are), then the names it derives (`x_offsets`, `A_ptr`).
        self.names.ir("pid")
        self.scalars = {s: self.names.ir(pipeline.global_names.scalars[s]) for s in self.params.scalars}
        for size in self.params.sizes:
            self.names.ir(size)
        for s in S.walk_statements(kernel.body):
            if isinstance(s, S.For):
                self.names.ir(s.var)
            elif not isinstance(s, S.Store):
                self.names.ir(s.name)
        self.tensor_args = {t: self._tensor_names(t) for t in self.params.tensors}
        self.tiles = {size: self.names.fresh(size[:-len("_SIZE")] + "_TILE") for size in self._symbolic_sizes()}
        self.aranges: dict[tuple, str] = {}  # (dim, tile) -> arange name
        self.arange_int64: dict[str, bool] = {}
        self.offsets: dict[str, str] = {}  # axis -> offsets name
        self.masks: dict[str, str] = {}  # axis -> mask name
        self._plan_axes()
        self._plan_dots()
        self.descriptors: dict[tuple[str, tuple[int, ...]], str] = {}  # (tensor, box) -> descriptor
        self.box_dims: dict[tuple[str, tuple[int, ...]], list[tuple[str, ...]]] = {}  # the dims indexing each box
        self.box_descriptor: dict[S.Load | S.Store, str] = {}  # what moves by TMA, and through which
        self.loops_around: dict[str, list[S.For]] = {}  # axis -> the tile loops enclosing it
        self._plan_tma()
        self.use_tma = self.names.fresh("USE_TMA") if self.descriptors else None
        self.program_count = self.names.fresh("program_count") if kernel.persistent else None

    # ------------------------------------------------------------ names and plans
    def _tensor_names(self, tensor: str):
        spec = self.pipeline.tensor(tensor)
        return self.names.fresh(f"{tensor}_ptr"), [self.names.fresh(f"{tensor}_{d}_stride") for d in spec.dims]

    def _symbolic_sizes(self) -> list[str]:
        sizes = []
        for s in S.walk_statements(self.kernel.body):
            if isinstance(s, S.Axis) and isinstance(s.size, S.IVar) and s.size.name not in sizes:
                sizes.append(s.size.name)
        return sizes

    def _plan_axes(self):
        for name, lay in self.layout.axes.items():
            ax = lay.axis
            key = (ax.dim, lay.tile)
            if key not in self.aranges:
                self.aranges[key] = self.names.fresh(f"{ax.dim}_arange")
            arange = self.aranges[key]
            start_is_64 = self.layout.is_int64(ax.start)
            self.arange_int64[arange] = self.arange_int64.get(arange, False) or not start_is_64
            self.offsets[name] = arange if ax.start == S.IConst(0) else self.names.fresh(f"{name}_offsets")
            if lay.masked:
                self.masks[name] = self.names.fresh(f"{name}_mask")

    def _tl_dots(self, body) -> list[S.Dot]:
        """The dots of `body` that go to tl.dot (_tensor_core), nested loops included."""
        return [node for s in S.walk_statements(body) if isinstance(s, (S.Assign, S.Store))
                for node in S.walk_texpr(s.value) if isinstance(node, S.Dot) and self._tensor_core(node)]

    def _plan_dots(self):
        """Dots go to tl.dot when every tile dim is at least MIN_DOT; a whole-extent tile in
        such a dot is then padded to at least MIN_DOT lanes, so that holds at every size."""
        for node in self._tl_dots(self.kernel.body):
            for axis in (node.a.dims[0], node.axis, node.b.dims[1]):
                tile = self.layout.axes[axis].tile
                if isinstance(tile, str):
                    self.dot_dims.add(tile)

    def _plan_tma(self):
        """With `tma`, every load and store whose tile is a box of its tensor (`_tma_candidate`)
        goes through a tensor descriptor: TMA reads zeros and drops writes outside the tensor,
        which is then what the masks did."""
        if not self.kernel.tma:
            return

        def visit(body, loops):
            for s in body:
                if isinstance(s, S.Axis):
                    self.loops_around[s.name] = loops
                elif isinstance(s, S.For):
                    visit(s.body, loops + [s])
        visit(self.kernel.body, [])
        boxes = 0  # tiles that are boxes, whatever their dtype
        for s in S.walk_statements(self.kernel.body):
            if isinstance(s, S.Store) and s.value.dims == s.indices:
                boxes += self._tma_candidate(s)
            if isinstance(s, (S.Assign, S.Store)):
                for node in S.walk_texpr(s.value):
                    if isinstance(node, S.Load) and node.order == node.indices:
                        boxes += self._tma_candidate(node)
        if not boxes:
            raise DTScheduleError(
                f"{self.kernel.func}.tma() finds no tile to move through a tensor descriptor in kernel "
                f"'{self.kernel.name}'", self.kernel.loc,
                f"TMA moves a tile that is a box of its tensor: indexed by its dimensions in the tensor's order, "
                f"of 1 to {TMA_MAX_RANK} dimensions, each tiled with a power of two of at most {TMA_MAX_BOX} that is "
                f"the block or divides it, or with the whole of an unblocked extent (tensorize(v:0)), and "
                f"{TMA_MIN_ROW_BYTES} bytes or more along the last; or remove {self.kernel.func}.tma()")

    def _tma_candidate(self, node: S.Load | S.Store) -> bool:
        """Whether the tile is a box of its tensor; if so and its rows are wide enough in this
        dtype for TMA, it moves through a descriptor."""
        tensor, indices = node.tensor, node.indices
        spec = self.pipeline.tensor(tensor)
        if not 1 <= len(indices) <= TMA_MAX_RANK:
            return False
        box = []
        for a in indices:
            lay = self.layout.axes[a]
            ax = lay.axis
            fixed = isinstance(lay.tile, int) and lay.tile <= TMA_MAX_BOX and ax.size == S.IConst(lay.tile)
            # A whole extent padded at launch (`{dim}_TILE`): the launcher checks its box fits.
            whole = isinstance(lay.tile, str) and ax.size == S.IVar(lay.tile) and ax.start == S.IConst(0)
            if not (fixed or whole) or not self._valid_inside_tensor(ax):
                return False
            box.append(lay.tile)
        last = box[-1]
        if isinstance(last, int) and last * max(ITEM_BYTES.values()) < TMA_MIN_ROW_BYTES:
            return False  # too narrow in every dtype
        if isinstance(last, str) or last * ITEM_BYTES[spec.dtype] >= TMA_MIN_ROW_BYTES:  # else pointers here
            key = (tensor, tuple(box))
            dims = tuple(self.layout.axes[a].axis.dim for a in indices)
            if dims not in self.box_dims.setdefault(key, []):
                self.box_dims[key].append(dims)
            if key not in self.descriptors:
                self.descriptors[key] = self.names.fresh(f"{tensor}_desc")
            self.box_descriptor[node] = self.descriptors[key]
        return True

    def _valid_inside_tensor(self, ax: S.Axis) -> bool:
        """Whether the axis's lanes are valid exactly where its index is below its extent (the
        launcher's _tma_ready checks that the tensor ends there too): the tile ends where the
        block does, or a tile loop's steps divide the block."""
        extent = S.IVar(S.size_name(ax.dim))
        limit = ax.limit
        if isinstance(limit, S.IVar) and limit.name in self.layout.lets:
            limit = self.layout.lets[limit.name]
        if limit is None or limit == extent or limit == S.imin(S.iadd(ax.start, ax.size), extent):
            return True
        # A tile loop inside a block: lowering walks range(0, block length, tile), so with the
        # tile dividing the block, every tile ends inside the block.
        if not (isinstance(limit, S.IBin) and limit.op == "min" and limit.b == extent and isinstance(limit.a, S.IBin)
                and limit.a.op == "+" and isinstance(limit.a.b, S.IConst)):
            return False
        block_start, block = limit.a.a, limit.a.b.value
        return any(ax.start == S.iadd(block_start, S.IVar(loop.var)) and loop.start == S.IConst(0)
                   and ax.size == S.IConst(loop.step) and block % loop.step == 0
                   for loop in self.loops_around[ax.name])

    def _tensor_core(self, dot: S.Dot) -> bool:
        tiles = [self.layout.axes[a].tile for a in (dot.a.dims[0], dot.axis, dot.b.dims[1])]
        return all(isinstance(t, str) or t >= MIN_DOT for t in tiles)

    def tile_text(self, axis: str) -> str:
        tile = self.layout.axes[axis].tile
        return str(tile) if isinstance(tile, int) else self.tiles[tile]

    def shape_text(self, axes) -> str:
        sizes = [self.tile_text(a) for a in axes]
        return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"

    # ------------------------------------------------------------ tile size limits
    def check_tile(self, axes, unit, loc, what: str):
        """Refuse (now, or at launch for whole-extent tiles) a tile of more than MAX_TILE elements."""
        factors = tuple(self.layout.axes[a].tile for a in axes if a not in unit)
        key = tuple(sorted(map(str, factors)))
        if key in self._static_checked:
            return
        self._static_checked.add(key)
        dims = ", ".join(self.layout.axes[a].axis.dim for a in axes if a not in unit)
        hint = (f"use smaller tiles along {dims}: lower the sizes in the schedule's tensorize/block calls for "
                f"'{self.kernel.func}', or tensorize a whole-extent dimension (size 0) with a fixed tile")
        if all(isinstance(f, int) for f in factors):
            numel = math.prod(factors)
            if numel > MAX_TILE:
                raise DTScheduleError(f"{what} in kernel '{self.kernel.name}' is a tile of "
                                      f"{' x '.join(map(str, factors))} = {numel} elements; Triton allows at "
                                      f"most {MAX_TILE} (2**20) per tile", loc, hint)
        else:
            self.tile_checks.append(TileCheck(factors, f"{what} in kernel '{self.kernel.name}'", loc, hint))

    def check_tiles(self, value: S.TExpr, loc, dt_name: str):
        for node in S.walk_texpr(value):
            if node.dims:
                self.check_tile(node.dims, node.unit, loc, f"a tile computing '{dt_name}'")

    # ------------------------------------------------------------ kernel
    def render(self) -> list[str]:
        w = Writer()
        params = []
        for t in self.params.tensors:
            ptr, strides = self.tensor_args[t]
            params.append(ptr)
            params += [f"{s}: tl.constexpr" for s in strides]
        params += [self.scalars[s] for s in self.params.scalars]
        params += [f"{self.names.ir(s)}: tl.constexpr" for s in self.params.sizes]
        params += [f"{self.tiles[s]}: tl.constexpr" for s in self.tiles]
        params += list(self.descriptors.values())
        params += [f"{n}: tl.constexpr" for n in (self.program_count, self.use_tma) if n]
        loc = f" ({safe_text(str(self.kernel.loc))})" if self.kernel.loc else ""
        w.line("@triton.jit")
        w.line(f"def {self.name}({', '.join(params)}):")
        with w.indent():
            w.line(f"# computes {self.kernel.func}{loc}")
            if self.use_tma:
                w.line(f"# {self.use_tma}: tiles move through the TMA descriptors "
                       f"{', '.join(self.descriptors.values())};")
                w.line("# the launcher passes False where TMA cannot take the tensors")
            body = list(self.kernel.body)
            lead = 0
            while lead < len(body) and isinstance(body[lead], S.Let):
                lead += 1
            # The program-id decomposition comes first; a persistent kernel runs, before its walk
            # over blocks, only the Lets that do not depend on the block.
            per_block = {"pid"} if self.program_count else set()
            for s in body[:lead]:
                if S.index_names(s.value) & per_block:
                    per_block.add(s.name)
            if not self.program_count and self.layout.uses_pid:
                w.line(f"{self.names.ir('pid')} = tl.program_id(0).to(tl.int64)")
            for s in body[:lead]:
                if s.name not in per_block:
                    self.stmt(w, s)
            for (dim, tile), name in self.aranges.items():
                size = str(tile) if isinstance(tile, int) else self.tiles[tile]
                to64 = ".to(tl.int64)" if self.arange_int64[name] else ""
                w.line(f"{name} = tl.arange(0, {size}){to64}")
            if self.program_count:
                flatten = f", flatten={self.use_tma}" if self.use_tma else ""
                w.line(f"# persistent: program tl.program_id(0) computes blocks pid, pid + {self.program_count}, ...")
                w.line(f"for {self.names.ir('pid')} in tl.range(tl.program_id(0).to(tl.int64), "
                       f"{self.index(self.kernel.program_count)}, {self.program_count}{flatten}):")
            with w.indent() if self.program_count else contextlib.nullcontext():
                for s in [s for s in body[:lead] if s.name in per_block] + body[lead:]:
                    self.stmt(w, s)
        return w.lines

    def index(self, e: S.IExpr) -> str:
        return index(_rename(e, self.names.ir))

    def stmt(self, w: Writer, s):
        if isinstance(s, S.Let):
            w.line(f"{self.names.ir(s.name)} = {self.index(s.value)}")
        elif isinstance(s, S.Axis):
            self.axis(w, s)
        elif isinstance(s, S.Assign):
            self.ref_dtypes[s.name] = self.dtype(s.value)
            self.check_tiles(s.value, s.loc, s.dt_name or s.name)
            if s.value in self.box_descriptor:
                name = self.names.ir(s.name)
                self.tma_or_pointers(w, f"{name} = {self.box_load(s.value)}", f"{name} = {self.pointer_load(s.value)}")
            else:
                w.line(f"{self.names.ir(s.name)} = {self.texpr(s.value, s.loc)}")
        elif isinstance(s, S.For):
            step = f", {s.step}" if s.step != 1 else ""
            bounds = f"{self.index(s.start)}, {self.index(s.stop)}{step}"
            if self.stage_hint(s):
                w.line(f"for {self.names.ir(s.var)} in tl.range({bounds}, num_stages={self.kernel.num_stages}):")
            else:
                w.line(f"for {self.names.ir(s.var)} in range({bounds}):")
            with w.indent():
                for t in s.body:
                    self.stmt(w, t)
        elif isinstance(s, S.Store):
            self.store(w, s)
        else:
            raise AssertionError(s)

    def stage_hint(self, loop: S.For) -> bool:
        """Whether the loop names the kernel's num_stages itself: Triton pipelines an innermost
        loop whose loads feed tl.dot at the kernel's num_stages, and any other loop only when the
        loop asks (tl.range's num_stages); one stage is no pipelining either way."""
        if (self.kernel.num_stages or 0) < 2:
            return False
        return not any(isinstance(s, S.For) for s in S.walk_statements(loop.body)) and not self._tl_dots(loop.body)

    def axis(self, w: Writer, ax: S.Axis):
        lay: AxisLayout = self.layout.axes[ax.name]
        arange = self.aranges[(ax.dim, lay.tile)]
        offsets = self.offsets[ax.name]
        if offsets != arange:
            w.line(f"{offsets} = {self.index(ax.start)} + {arange}")
        if not lay.masked:
            return
        conds = []
        if ax.limit is not None:
            conds.append(f"{offsets} < {self.index(ax.limit)}")
        if lay.pad_mask:
            size = self.index(ax.size)
            conds.append(f"{arange} < {size}")
        text = conds[0] if len(conds) == 1 else " & ".join(f"({c})" for c in conds)
        w.line(f"{self.masks[ax.name]} = {text}")

    # ------------------------------------------------------------ memory
    def pointer(self, tensor: str, indices, layout) -> str:
        ptr, strides = self.tensor_args[tensor]
        terms = [ptr] + [f"{self.spread(self.offsets[a], a, layout)} * {stride}"
                         for a, stride in zip(indices, strides)]
        return " + ".join(terms)

    @staticmethod
    def spread(name: str, axis: str, layout) -> str:
        """A 1-D tensor over `axis` viewed in `layout` (size 1 along the other axes)."""
        if len(layout) <= 1:
            return name
        return f"{name}[{', '.join(':' if a == axis else 'None' for a in layout)}]"

    def mask(self, indices, layout) -> str | None:
        parts = [self.spread(self.masks[a], a, layout) for a in layout if a in indices and a in self.masks]
        return " & ".join(parts) if parts else None

    def load(self, e: S.Load) -> str:
        if e not in self.box_descriptor:
            return self.pointer_load(e)
        return f"({self.box_load(e)} if {self.use_tma} else {self.pointer_load(e)})"

    def pointer_load(self, e: S.Load) -> str:
        mask = self.mask(e.indices, e.order)
        args = self.pointer(e.tensor, e.indices, e.order)
        if mask:
            args += f", mask={mask}, other=0.0"
        if e in self.eviction:
            args += f', eviction_policy="{self.eviction[e]}"'
        return self.cast_load(e, f"tl.load({args})")

    def box_load(self, e: S.Load) -> str:
        return self.cast_load(e, f"{self.box_descriptor[e]}.load([{self.box_start(e.indices)}])")

    def cast_load(self, e: S.Load, text: str) -> str:
        return text if self.pipeline.tensor(e.tensor).dtype == e.dtype else f"{text}.to({TL_DTYPE[e.dtype]})"

    def tma_or_pointers(self, w: Writer, through_box: str, through_pointers: str):
        """A statement moving a tile through its descriptor, or (no TMA) through pointers."""
        for branch, line in ((f"if {self.use_tma}:", through_box), ("else:", through_pointers)):
            w.line(branch)
            with w.indent():
                w.line(line)

    def box_start(self, indices) -> str:
        """A box's first index along each axis; TMA takes int32 coordinates."""
        starts = [self.layout.axes[a].axis.start for a in indices]
        return ", ".join(f"tl.cast({self.index(e)}, tl.int32)" if self.layout.is_int64(e) else self.index(e)
                         for e in starts)

    def store(self, w: Writer, s: S.Store):
        spec = self.pipeline.tensor(s.tensor)
        self.check_tiles(s.value, s.loc, s.tensor)
        value = self.texpr(s.value, s.loc)
        if self.dtype(s.value) != spec.dtype:
            value = f"{_atom(value, self.prec(s.value))}.to({TL_DTYPE[spec.dtype]})"
        mask = self.mask(s.indices, s.indices)
        args = f"{self.pointer(s.tensor, s.indices, s.indices)}, {value}"
        if mask:
            args += f", mask={mask}"
        if s in self.box_descriptor:
            self.tma_or_pointers(w, f"{self.box_descriptor[s]}.store([{self.box_start(s.indices)}], {value})",
                                 f"tl.store({args})")
        else:
            w.line(f"tl.store({args})")

    # ------------------------------------------------------------ tile expressions
    def dtype(self, e: S.TExpr) -> str:
        compute = self.pipeline.compute_dtype
        if isinstance(e, (S.Load, S.Cast, S.Full)):
            return e.dtype
        if isinstance(e, S.Ref):
            return self.ref_dtypes[e.name]
        if isinstance(e, S.Mask) or (isinstance(e, S.Binary) and e.op in COMPARISONS + ("and",)) \
                or (isinstance(e, S.Unary) and e.op == "not"):
            return "bool"
        if isinstance(e, S.Where):
            return self.dtype(e.a)
        if isinstance(e, (S.Expand, S.BroadcastTo, S.Reduce)) or (isinstance(e, S.Unary) and e.op == "neg"):
            return self.dtype(e.x)
        if isinstance(e, S.Dot):
            return e.acc_dtype
        return compute

    def prec(self, e: S.TExpr) -> int:
        if isinstance(e, S.Binary) and e.op in PRECEDENCE:
            return PRECEDENCE[e.op]
        if isinstance(e, S.Unary) and e.op in ("neg", "not"):
            return UNARY_PREC
        if isinstance(e, S.Literal) and e.value < 0:
            return UNARY_PREC
        if isinstance(e, S.Dot) and not self._tensor_core(e) and e.acc is not None:
            return PRECEDENCE["+"]
        return ATOM

    def sub(self, e: S.TExpr, loc, minimum: int) -> str:
        """e rendered as an operand that binds at least as tightly as `minimum`."""
        return _atom(self.texpr(e, loc), self.prec(e), minimum)

    def texpr(self, e: S.TExpr, loc=None) -> str:
        if isinstance(e, S.Literal):
            return _number(e.value)
        if isinstance(e, S.Param):
            return self.scalars[e.name]
        if isinstance(e, S.Extent):
            return f"float({self.names.ir(S.size_name(e.dim))})"
        if isinstance(e, S.IndexOf):
            return f"{self.offsets[e.axis]}.to({TL_DTYPE[self.pipeline.compute_dtype]})"
        if isinstance(e, S.Index):
            return f"tl.cast({self.index(e.value)}, {TL_DTYPE[self.pipeline.compute_dtype]})"
        if isinstance(e, S.Ref):
            return self.names.ir(e.name)
        if isinstance(e, S.Load):
            return self.load(e)
        if isinstance(e, S.Unary):
            if e.op == "neg":
                return f"-{self.sub(e.x, loc, UNARY_PREC)}"
            if e.op == "not":
                return f"~{self.sub(e.x, loc, UNARY_PREC)}"
            fn = UNARY[e.op]
            if fn in self.helpers:
                self.helpers_used.add(fn)
                fn = self.helpers[fn]
            return f"{fn}({self.texpr(e.x, loc)})"
        if isinstance(e, S.Binary):
            if e.op in PRECEDENCE:
                p = PRECEDENCE[e.op]
                # Left-associative; comparisons do not chain, so both sides of one need parentheses.
                left = self.sub(e.a, loc, p + 1 if e.op in COMPARISONS else p)
                right = self.sub(e.b, loc, p + 1)
                return f"{left} {'&' if e.op == 'and' else e.op} {right}"
            a, b = self.texpr(e.a, loc), self.texpr(e.b, loc)
            if e.op == "pow":
                self.helpers_used.add("_pow")
                return f"{self.helpers['_pow']}({a}, {b})"
            # NaN propagates as in NumPy (Triton's default leaves it unspecified).
            return f"{BINARY_CALLS[e.op]}({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"
        if isinstance(e, S.Where):
            return f"tl.where({self.texpr(e.cond, loc)}, {self.texpr(e.a, loc)}, {self.texpr(e.b, loc)})"
        if isinstance(e, S.Expand):
            return self.expand(e, loc)
        if isinstance(e, S.BroadcastTo):
            if isinstance(e.x, S.Expand) and not e.x.x.dims:  # a scalar filling a whole tile
                value = self.texpr(e.x.x, loc)
                return f"tl.full({self.shape_text(e.dims)}, {value}, {TL_DTYPE[self.dtype(e.x.x)]})"
            return f"tl.broadcast_to({self.texpr(e.x, loc)}, {self.shape_text(e.dims)})"
        if isinstance(e, S.Mask):
            if e.axis in self.masks:
                return self.masks[e.axis]
            return f"tl.full({self.shape_text((e.axis,))}, 1, tl.int1)"
        if isinstance(e, S.Full):
            if e.value == 0.0:
                return f"tl.zeros({self.shape_text(e.axes)}, {TL_DTYPE[e.dtype]})"
            return f"tl.full({self.shape_text(e.axes)}, {_number(e.value)}, {TL_DTYPE[e.dtype]})"
        if isinstance(e, S.Cast):
            return f"{self.sub(e.x, loc, ATOM)}.to({TL_DTYPE[e.dtype]})"
        if isinstance(e, S.Reduce):
            return f"{REDUCE[e.op]}({self.texpr(e.x, loc)}, axis={e.x.dims.index(e.axis)})"
        if isinstance(e, S.Dot):
            return self.dot(e, loc)
        raise AssertionError(e)

    def expand(self, e: S.Expand, loc) -> str:
        x_dims = e.x.dims
        if not x_dims:  # a scalar: a tile of ones along every target axis
            return f"tl.full({(1,) * len(e.target)}, {self.texpr(e.x, loc)}, {TL_DTYPE[self.dtype(e.x)]})"
        own = [d for d in e.target if d in x_dims]
        perm = [x_dims.index(d) for d in own]
        inner = self.sub(e.x, loc, ATOM)
        if perm != list(range(len(perm))):
            inner = f"tl.trans({inner})" if len(perm) == 2 else f"tl.permute({inner}, {tuple(perm)})"
        if len(own) == len(e.target):
            return inner
        return f"{inner}[{', '.join(':' if d in x_dims else 'None' for d in e.target)}]"

    def dot(self, e: S.Dot, loc) -> str:
        i, k, j = e.a.dims[0], e.axis, e.b.dims[1]
        a, b = self.texpr(e.a, loc), self.texpr(e.b, loc)
        acc = self.texpr(e.acc, loc) if e.acc is not None else None
        if self._tensor_core(e):
            args = [a, b] + ([acc] if acc is not None else [])
            if self.dtype(e.a) == "f32":
                args.append(f'input_precision="{self.f32_dot}"')
            return f"tl.dot({', '.join(args)})"
        # Tiles under MIN_DOT: multiply-and-sum over a 3-D (i, j, k) tile in float32. The reduction
        # runs along the last axis: Triton rewrites sum(a[:, :, None] * b[None, :, :], axis=1) into a
        # tl.dot of default (TF32) precision on GPUs, which would round f32 operands.
        self.check_tile((i, k, j), frozenset(), loc, "the product of a small dot")
        f32 = []
        for x, text in ((e.a, a), (e.b, b)):
            text = _atom(text, self.prec(x))
            f32.append(text if self.dtype(x) == "f32" else f"{text}.to(tl.float32)")
        product = f"tl.sum({f32[0]}[:, None, :] * tl.trans({f32[1]})[None, :, :], axis=2)"
        return product if acc is None else f"{_atom(acc, self.prec(e.acc), PRECEDENCE['+'])} + {product}"


class _Launcher:
    """The public function: checks inputs, infers extents, allocates, launches in order."""

    def __init__(self, pipeline: S.Pipeline, kernels, function: str, reserved, helpers: dict, dot_dims):
        self.pipeline = pipeline
        self.kernels = kernels
        self.function = function
        self.helpers = helpers
        self.check = helpers["_check"]
        self.dot_dims = dot_dims
        self.names = Names(reserved)
        bound = {d for t in pipeline.inputs for d in t.dims}
        self.call_extents = tuple(d for d in pipeline.sizes if d not in bound)
        # DT names first (as they are: inputs, scalars and extents given as arguments are called by
        # their DT names, which differ from one another), then the launcher's own.
        self.args = [self.names.ir(t.name) for t in pipeline.inputs] + [self.names.ir(s) for s in pipeline.scalars] \
            + [self.names.ir(d) for d in self.call_extents]
        for t in pipeline.temporaries + pipeline.outputs:
            self.names.ir(t.name)
        self.sizes = {d: self.names.fresh(S.size_name(d)) for d in pipeline.sizes}
        self.device = self.names.fresh("device")

    def render(self, w: Writer):
        p = self.pipeline
        args = list(self.args) + ([f"{self.device}=None"] if not p.inputs else [])
        w.line(f"def {self.function}({', '.join(args)}):")
        with w.indent():
            outs = ", ".join(f"{t.name}[{', '.join(t.dims)}]" for t in p.outputs)
            given = f"; extents {', '.join(self.call_extents)} as arguments" if self.call_extents else ""
            w.line(f'"""Computes {outs}{given}. {self._returns()}"""')
            self.bind(w)
            for t in p.temporaries + p.outputs:
                shape = ", ".join(self.sizes[d] for d in t.dims)
                shape = f"({shape},)" if len(t.dims) == 1 else f"({shape})"
                w.line(f"{self.names.ir(t.name)} = torch.empty({shape}, dtype={TORCH_DTYPE[t.dtype]}, "
                       f"device={self.device})")
            for kr in self.kernels:
                self.launch(w, kr)
            if len(p.outputs) == 1:
                w.line(f"return {self.names.ir(p.outputs[0].name)}")
            else:
                w.line(f"return {{{', '.join(repr(t.name) + ': ' + self.names.ir(t.name) for t in p.outputs)}}}")

    def _returns(self) -> str:
        outs = self.pipeline.outputs
        if len(outs) == 1:
            return f"Returns {outs[0].name} ({TORCH_DTYPE[outs[0].dtype]})."
        return f"Returns {{{', '.join(repr(t.name) + ': ...' for t in outs)}}}."

    def bind(self, w: Writer):
        p = self.pipeline
        if p.inputs:
            first = self.names.ir(p.inputs[0].name)
            w.line(f"{self.device} = {first}.device")
            w.line(f'if {self.device}.type == "cuda" and {self.device}.index != torch.cuda.current_device():')
            with w.indent():
                w.line(f"with torch.cuda.device({self.device}):  # Triton launches on the current device")
                with w.indent():
                    w.line(f"return {self.function}({', '.join(self.args)})")
        else:
            w.line(f'{self.device} = torch.device({self.device} or ("cuda" if torch.cuda.is_available() else "cpu"))')
        for t in p.inputs:
            w.line(f'{self.check}("{t.name}", {self.names.ir(t.name)}, {len(t.dims)}, {TORCH_DTYPE[t.dtype]}, '
                   f'{self.device})')
        bound: set[str] = set()
        for t in p.inputs:
            name = self.names.ir(t.name)
            new = [(i, d) for i, d in enumerate(t.dims) if d not in bound]
            if len(new) == len(t.dims) and t.dims:
                targets = ", ".join(self.sizes[d] for d in t.dims)
                w.line(f"{targets}{',' if len(t.dims) == 1 else ''} = {name}.shape")
            else:
                for i, d in new:
                    w.line(f"{self.sizes[d]} = {name}.shape[{i}]")
                # Every extent of this input is known now: its shape must agree with them.
                shape = ", ".join(self.sizes[d] for d in t.dims)
                shape = f"({shape},)" if len(t.dims) == 1 else f"({shape})"
                w.line(f"if {name}.shape != {shape}:")
                with w.indent():
                    w.line(f'raise ValueError(f"{t.name} has shape {{tuple({name}.shape)}}, expected '
                           f'({", ".join(t.dims)}) = {{{shape}}}")')
            bound |= set(t.dims)
        for d in self.call_extents:
            w.line(f"{self.sizes[d]} = int({self.names.ir(d)})")

    def launch(self, w: Writer, kr: _KernelRenderer):
        k = kr.kernel
        args = []
        for t in kr.params.tensors:
            name = self.names.ir(t)
            args += [name, f"*{name}.stride()"]
        args += [f"float({self.names.ir(s)})" for s in kr.params.scalars]
        args += [self.sizes[s[:-len('_SIZE')]] for s in kr.params.sizes]
        tiles = {}
        for size in kr.tiles:
            tile = f"triton.next_power_of_2({self.sizes[size[:-len('_SIZE')]]})"
            tiles[size] = f"max({MIN_DOT}, {tile})" if size in self.dot_dims else tile
            if kr.use_tma:  # named: the TMA boxes use it too
                name = self.names.fresh(kr.tiles[size])
                w.line(f"{name} = {tiles[size]}")
                tiles[size] = name
        args += list(tiles.values())
        if kr.use_tma:
            tma = self.names.fresh(f"{k.func}_tma")
            boxes = {key: "[" + ", ".join(str(b) if isinstance(b, int) else tiles[b] for b in key[1]) + "]"
                     for key in kr.descriptors}
            ready = []
            for (t, box), text in boxes.items():
                for dims in kr.box_dims[(t, box)]:
                    extents = ", ".join(self.sizes[d] for d in dims) + ("," if len(dims) == 1 else "")
                    ready.append(f"({self.names.ir(t)}, {text}, ({extents}))")
            w.line(f"{tma} = {self.helpers['_tma_ready']}({self.device}, {', '.join(ready)})")
            descriptors = {key: self.names.fresh(name) for key, name in kr.descriptors.items()}
            w.line(f"{' = '.join(descriptors.values())} = None")
            w.line(f"if {tma}:")
            with w.indent():
                for (t, box), descriptor in descriptors.items():
                    tensor = self.names.ir(t)
                    w.line(f"{descriptor} = TensorDescriptor({tensor}, {tensor}.shape, {tensor}.stride(), "
                           f"{boxes[(t, box)]})")
            args += descriptors.values()
        options = [f"num_warps={k.num_warps}"] if k.num_warps else []
        options += [f"num_stages={k.num_stages}"] if k.num_stages else []
        grid = self.names.fresh(f"{k.func}_grid")
        count = index(_rename(k.program_count, lambda n: self.sizes[n[:-len('_SIZE')]]))
        if kr.program_count:
            programs = self.names.fresh(f"{k.func}_programs")
            most = k.persistent_programs or f"{self.helpers['_multiprocessors']}({self.device})"
            w.line(f"{programs} = min({count}, {most})")
            w.line(f"{grid} = ({programs},)")
            args.append(programs)
        else:
            w.line(f"{grid} = ({count},)")
        if kr.use_tma:
            args.append(tma)
        w.line(f"{kr.name}[{grid}]({', '.join(args + options)})")


def _rename(e: S.IExpr, rename) -> S.IExpr:
    if isinstance(e, S.IVar):
        return S.IVar(rename(e.name))
    if isinstance(e, S.IBin):
        return S.IBin(e.op, _rename(e.a, rename), _rename(e.b, rename))
    return e


def _number(value: float) -> str:
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    if math.isnan(value):
        return 'float("nan")'
    return repr(float(value))


def _atom(text: str, prec: int, minimum: int = ATOM) -> str:
    return text if prec >= minimum else f"({text})"
