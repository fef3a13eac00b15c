"""One Kernel of the scheduled IR → one `@triton.jit` function, in the style of the DT talk's
generated code (`mm_kernel(A_ptr, A_x_stride: tl.constexpr, ..., x_SIZE: tl.constexpr)`,
`x_block_start`, `x_arange = tl.arange(0, 128)`, `k_accumulator`, loads named after their
tensors). `KernelRenderer` renders each scheduled-IR node by the method named after it
(dt.backends.render); `OPS`, what each op of dt.ir.ops becomes, lives here."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from dt.backends.pysource import Names, Writer, loop_bounds, number, safe_text
from dt.backends.render import Renderer, supported_ops
from dt.backends.triton.cache_hints import eviction_policies
from dt.backends.triton.lane_accumulators import with_lane_accumulators
from dt.backends.triton.layout import MIN_DOT, AxisLayout, KernelLayout
from dt.backends.triton.limits import TileLimits
from dt.backends.triton.tma import TmaPlan
from dt.ir import scheduled as S
from dt.ir.index_expr import index_source as index, renamed

TL_DTYPE = {"f32": "tl.float32", "f16": "tl.float16", "bf16": "tl.bfloat16", "bool": "tl.int1"}

INF, NAN = 'float("inf")', 'float("nan")'  # as Triton's sources spell them
# Python precedence levels of what the renderer writes (higher binds tighter).
COMPARISON, AND, SUM, PRODUCT, UNARY_PREC, ATOM = 2, 3, 4, 5, 6, 7


@dataclass(frozen=True)
class Infix:
    """A Python operator between the operands, of `precedence`."""
    symbol: str
    precedence: int


@dataclass(frozen=True)
class Prefix:
    symbol: str


@dataclass(frozen=True)
class Helper:
    """A call of one of the module's helper functions (device_helpers.py)."""
    name: str


# What each op of dt.ir.ops becomes: a format string over the operands ({0}, {1}, ...), an
# operator, or a helper call. NaN propagates through maximum/minimum as in NumPy (Triton's default
# leaves it unspecified).
OPS = {
    "neg": Prefix("-"), "exp": "tl.exp({0})", "exp2": "tl.exp2({0})", "log": "tl.log({0})", "log2": "tl.log2({0})",
    "sqrt": "tl.sqrt({0})", "rsqrt": "tl.rsqrt({0})", "sigmoid": "tl.sigmoid({0})", "tanh": Helper("_tanh"),
    "abs": "tl.abs({0})", "erf": "tl.erf({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "floor": "tl.floor({0})", "ceil": "tl.ceil({0})",
    "softplus": "(tl.maximum({0}, 0.0) + tl.log(1.0 + tl.exp(-tl.abs({0}))))",
    "+": Infix("+", SUM), "-": Infix("-", SUM), "*": Infix("*", PRODUCT), "/": Infix("/", PRODUCT),
    "maximum": "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "minimum": "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)", "pow": Helper("_pow"),
    **{op: Infix(op, COMPARISON) for op in ("<", "<=", ">", ">=", "==", "!=")},
    "where": "tl.where({0}, {1}, {2})",
    "not": Prefix("~"), "and": Infix("&", AND),
}
REDUCE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}
SUPPORTED_OPS = supported_ops(OPS, (*REDUCE, "dot"))


class KernelRenderer(Renderer):
    """Names, plans and renders one kernel; `helpers_used`, `dot_dims`, `limits.deferred` and
    `tma` tell the module and its launcher what the kernel needs."""
    backend = "triton"
    OPS = OPS

    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, f32_dot: str, reserved, helpers, name):
        kernel = with_lane_accumulators(kernel)
        self.kernel = kernel
        self.pipeline = pipeline
        self.f32_dot = f32_dot
        self.helpers = helpers
        self.name = name
        self.layout = KernelLayout(kernel)
        self.limits = TileLimits(kernel, self.layout)
        self.eviction = eviction_policies(kernel)
        self.params = S.kernel_params(kernel, pipeline)
        self.names = Names(reserved)
        self.helpers_used: set[str] = set()
        self.dot_dims: set[str] = set()
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
        self.tma = TmaPlan(kernel, pipeline, self.layout, self.names)
        self.use_tma = self.names.fresh("USE_TMA") if self.tma.descriptors else None
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

    def _tensor_core(self, dot: S.Dot) -> bool:
        tiles = [self.layout.axes[a].tile for a in (dot.a.dims[0], dot.axis, dot.b.dims[1])]
        return all(isinstance(t, str) or t >= MIN_DOT for t in tiles)

    def tile_text(self, axis: str) -> str:
        tile = self.layout.axes[axis].tile
        return str(tile) if isinstance(tile, int) else self.tiles[tile]

    def shape_text(self, axes) -> str:
        sizes = [self.tile_text(a) for a in axes]
        return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"

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
        params += list(self.tma.descriptors.values())
        params += [f"{n}: tl.constexpr" for n in (self.program_count, self.use_tma) if n]
        loc = f" ({safe_text(str(self.kernel.loc))})" if self.kernel.loc else ""
        w.line("@triton.jit")
        w.line(f"def {self.name}({', '.join(params)}):")
        with w.indent():
            w.line(f"# computes {self.kernel.func}{loc}")
            if self.use_tma:
                w.line(f"# {self.use_tma}: tiles move through the TMA descriptors "
                       f"{', '.join(self.tma.descriptors.values())};")
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
                    self.statement(s, w)
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
                    self.statement(s, w)
        return w.lines

    def index(self, e: S.IExpr) -> str:
        return index(renamed(e, self.names.ir))

    # ------------------------------------------------------------ statements
    def Let(self, s: S.Let, w: Writer):
        w.line(f"{self.names.ir(s.name)} = {self.index(s.value)}")

    def Assign(self, s: S.Assign, w: Writer):
        self.limits.check_tiles(s.value, s.loc, s.dt_name or s.name)
        if s.value in self.tma.box_descriptor:
            name = self.names.ir(s.name)
            self.tma_or_pointers(w, f"{name} = {self.box_load(s.value)}", f"{name} = {self.pointer_load(s.value)}")
        else:
            w.line(f"{self.names.ir(s.name)} = {self.texpr(s.value, s.loc)}")

    def For(self, s: S.For, w: Writer):
        bounds = loop_bounds(self.index(s.start), self.index(s.stop), s.step)
        if self.stage_hint(s):
            w.line(f"for {self.names.ir(s.var)} in tl.range({bounds}, num_stages={self.kernel.num_stages}):")
        else:
            w.line(f"for {self.names.ir(s.var)} in range({bounds}):")
        with w.indent():
            for t in s.body:
                self.statement(t, w)

    def stage_hint(self, loop: S.For) -> bool:
        """Whether the loop names the kernel's num_stages itself: Triton pipelines an innermost
        loop whose loads feed tl.dot at the kernel's num_stages, and any other loop only when the
        loop asks (tl.range's num_stages); one stage is no pipelining either way."""
        if (self.kernel.num_stages or 0) < 2:
            return False
        return not any(isinstance(s, S.For) for s in S.walk_statements(loop.body)) and not self._tl_dots(loop.body)

    def Axis(self, ax: S.Axis, w: Writer):
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

    def pointer_load(self, e: S.Load) -> str:
        mask = self.mask(e.indices, e.order)
        args = self.pointer(e.tensor, e.indices, e.order)
        if mask:
            args += f", mask={mask}, other=0.0"
        if e in self.eviction:
            args += f', eviction_policy="{self.eviction[e]}"'
        return self.cast_load(e, f"tl.load({args})")

    def box_load(self, e: S.Load) -> str:
        return self.cast_load(e, f"{self.tma.box_descriptor[e]}.load([{self.box_start(e.indices)}])")

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

    def Store(self, s: S.Store, w: Writer):
        spec = self.pipeline.tensor(s.tensor)
        self.limits.check_tiles(s.value, s.loc, s.tensor)
        value = self.texpr(s.value, s.loc)
        if s.value.dtype != spec.dtype:
            value = f"{atom(value, self.prec(s.value))}.to({TL_DTYPE[spec.dtype]})"
        mask = self.mask(s.indices, s.indices)
        args = f"{self.pointer(s.tensor, s.indices, s.indices)}, {value}"
        if mask:
            args += f", mask={mask}"
        if s in self.tma.box_descriptor:
            self.tma_or_pointers(w, f"{self.tma.box_descriptor[s]}.store([{self.box_start(s.indices)}], {value})",
                                 f"tl.store({args})")
        else:
            w.line(f"tl.store({args})")

    # ------------------------------------------------------------ tile expressions
    def prec(self, e: S.TExpr) -> int:
        how = self.OPS.get(e.op) if isinstance(e, (S.Unary, S.Binary)) else None
        if isinstance(how, Infix):
            return how.precedence
        if isinstance(how, Prefix):
            return UNARY_PREC
        if isinstance(e, S.Literal) and e.value < 0:
            return UNARY_PREC
        if isinstance(e, S.Dot) and not self._tensor_core(e) and e.acc is not None:
            return SUM
        return ATOM

    def sub(self, e: S.TExpr, loc, minimum: int) -> str:
        """e rendered as an operand that binds at least as tightly as `minimum`."""
        return atom(self.texpr(e, loc), self.prec(e), minimum)

    def Literal(self, e: S.Literal, loc=None) -> str:
        return number(e.value, INF, NAN)

    def Param(self, e: S.Param, loc=None) -> str:
        return self.scalars[e.name]

    def Extent(self, e: S.Extent, loc=None) -> str:
        return f"float({self.names.ir(S.size_name(e.dim))})"

    def IndexOf(self, e: S.IndexOf, loc=None) -> str:
        return f"{self.offsets[e.axis]}.to({TL_DTYPE[self.pipeline.compute_dtype]})"

    def Index(self, e: S.Index, loc=None) -> str:
        return f"tl.cast({self.index(e.value)}, {TL_DTYPE[self.pipeline.compute_dtype]})"

    def Ref(self, e: S.Ref, loc=None) -> str:
        return self.names.ir(e.name)

    def Load(self, e: S.Load, loc=None) -> str:
        if e not in self.tma.box_descriptor:
            return self.pointer_load(e)
        return f"({self.box_load(e)} if {self.use_tma} else {self.pointer_load(e)})"

    def Unary(self, e: S.Unary, loc=None) -> str:
        how = self.op(e.op)
        if isinstance(how, Prefix):
            return f"{how.symbol}{self.sub(e.x, loc, UNARY_PREC)}"
        return self.apply(how, self.texpr(e.x, loc))

    def Binary(self, e: S.Binary, loc=None) -> str:
        how = self.op(e.op)
        if isinstance(how, Infix):
            p = how.precedence
            # Left-associative; comparisons do not chain, so both sides of one need parentheses.
            left = self.sub(e.a, loc, p + 1 if p == COMPARISON else p)
            right = self.sub(e.b, loc, p + 1)
            return f"{left} {how.symbol} {right}"
        return self.apply(how, self.texpr(e.a, loc), self.texpr(e.b, loc))

    def Where(self, e: S.Where, loc=None) -> str:
        return self.apply(self.op("where"), self.texpr(e.cond, loc), self.texpr(e.a, loc), self.texpr(e.b, loc))

    def apply(self, how, *operands: str) -> str:
        """A call an OPS entry writes: a helper function of the module's, or a format string."""
        if isinstance(how, Helper):
            self.helpers_used.add(how.name)
            return f"{self.helpers[how.name]}({', '.join(operands)})"
        return how.format(*operands)

    def Expand(self, e: S.Expand, loc=None) -> str:
        x_dims = e.x.dims
        if not x_dims:  # a scalar: a tile of ones along every target axis
            return f"tl.full({(1,) * len(e.target)}, {self.texpr(e.x, loc)}, {TL_DTYPE[e.x.dtype]})"
        own = [d for d in e.target if d in x_dims]
        perm = [x_dims.index(d) for d in own]
        inner = self.sub(e.x, loc, ATOM)
        if perm != list(range(len(perm))):
            inner = f"tl.trans({inner})" if len(perm) == 2 else f"tl.permute({inner}, {tuple(perm)})"
        if len(own) == len(e.target):
            return inner
        return f"{inner}[{', '.join(':' if d in x_dims else 'None' for d in e.target)}]"

    def BroadcastTo(self, e: S.BroadcastTo, loc=None) -> str:
        if isinstance(e.x, S.Expand) and not e.x.x.dims:  # a scalar filling a whole tile
            value = self.texpr(e.x.x, loc)
            return f"tl.full({self.shape_text(e.dims)}, {value}, {TL_DTYPE[e.x.x.dtype]})"
        return f"tl.broadcast_to({self.texpr(e.x, loc)}, {self.shape_text(e.dims)})"

    def Mask(self, e: S.Mask, loc=None) -> str:
        if e.axis in self.masks:
            return self.masks[e.axis]
        return f"tl.full({self.shape_text((e.axis,))}, 1, tl.int1)"

    def Full(self, e: S.Full, loc=None) -> str:
        if e.value == 0.0:
            return f"tl.zeros({self.shape_text(e.axes)}, {TL_DTYPE[e.dtype]})"
        return f"tl.full({self.shape_text(e.axes)}, {number(e.value, INF, NAN)}, {TL_DTYPE[e.dtype]})"

    def Cast(self, e: S.Cast, loc=None) -> str:
        return f"{self.sub(e.x, loc, ATOM)}.to({TL_DTYPE[e.dtype]})"

    def Reduce(self, e: S.Reduce, loc=None) -> str:
        return f"{REDUCE[e.op]}({self.texpr(e.x, loc)}, axis={e.x.dims.index(e.axis)})"

    def Dot(self, e: S.Dot, loc=None) -> str:
        i, k, j = e.a.dims[0], e.axis, e.b.dims[1]
        a, b = self.texpr(e.a, loc), self.texpr(e.b, loc)
        acc = self.texpr(e.acc, loc) if e.acc is not None else None
        if self._tensor_core(e):
            args = [a, b] + ([acc] if acc is not None else [])
            if e.a.dtype == "f32":
                args.append(f'input_precision="{self.f32_dot}"')
            return f"tl.dot({', '.join(args)})"
        # Tiles under MIN_DOT: multiply-and-sum over a 3-D (i, j, k) tile in float32. The reduction
        # runs along the last axis: Triton rewrites sum(a[:, :, None] * b[None, :, :], axis=1) into a
        # tl.dot of default (TF32) precision on GPUs, which would round f32 operands.
        self.limits.check_tile((i, k, j), frozenset(), loc, "the product of a small dot")
        f32 = []
        for x, text in ((e.a, a), (e.b, b)):
            text = atom(text, self.prec(x))
            f32.append(text if x.dtype == "f32" else f"{text}.to(tl.float32)")
        product = f"tl.sum({f32[0]}[:, None, :] * tl.trans({f32[1]})[None, :, :], axis=2)"
        return product if acc is None else f"{atom(acc, self.prec(e.acc), SUM)} + {product}"


def atom(text: str, prec: int, minimum: int = ATOM) -> str:
    """`text`, of precedence `prec`, parenthesised unless it binds at least as tightly as `minimum`."""
    return text if prec >= minimum else f"({text})"
