"""One Kernel of the scheduled IR → one `@triton.jit` function, in the style of the DT talk's
generated code (`mm_kernel(A_ptr, A_x_stride: tl.constexpr, ..., x_SIZE: tl.constexpr)`,
`x_block_start`, `x_arange = tl.arange(0, 128)`, `k_accumulator`, loads named after their
tensors). `KernelRenderer` names and plans the kernel and renders its statements and memory
accesses, each scheduled-IR node by the method named after it (dt.backends.render); its tile
expressions are expressions.py's."""
from __future__ import annotations

import contextlib

from dt.backends.pysource import Names, Writer, guarded, loop_bounds, safe_text
from dt.backends.triton.cache_hints import eviction_policies
from dt.backends.triton.expressions import ATOM, TL_DTYPE, ExpressionRenderer, atom, scores
from dt.backends.triton.integers import Signs, integer_scalars
from dt.backends.triton.lane_accumulators import int32_index_dims, with_lane_accumulators
from dt.backends.triton.layout import AxisLayout, KernelLayout, dot_minimum
from dt.backends.triton.limits import TileLimits
from dt.backends.triton.pair_swaps import with_pair_swaps
from dt.backends.triton.tma import TmaPlan
from dt.ir import scheduled as S
from dt.ir import uses
from dt.ir.index_expr import index_source as index, renamed


class KernelRenderer(ExpressionRenderer):
    """Names, plans and renders one kernel; `helpers_used`, `least_tiles`, `limits.deferred` and
    `tma` tell the module and its launcher what the kernel needs."""

    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, f32_dot: str, reserved, helpers, name):
        kernel = with_pair_swaps(kernel)
        # (the loops of one walk are side by side before the lanes' results come between them)
        self.eviction = eviction_policies(kernel)
        kernel = with_lane_accumulators(kernel)
        self.kernel = kernel
        self.pipeline = pipeline
        self.f32_dot = f32_dot
        self.helpers = helpers
        self.name = name
        self.layout = KernelLayout(kernel)
        self.limits = TileLimits(kernel, self.layout)
        self.params = uses.kernel_params(kernel, pipeline)
        self.signs = Signs(kernel)
        self.scores = scores(kernel, pipeline)
        self.exp2_used = False
        self.integer_scalars = integer_scalars(pipeline)
        self.names = Names(reserved)
        self.helpers_used: set[str] = set()
        self.least_tiles: dict[str, int] = {}  # a whole-extent tile -> the lanes it takes at least
        # The kernel's IR names first (as they are), then the names it derives (`x_offsets`, `A_ptr`).
        self.names.ir("pid")
        self.scalars = {s: self.names.ir(pipeline.global_names.scalars[s]) for s in self.params.scalars}
        for size in self.params.sizes:
            self.names.ir(size)
        for s in S.walk_statements(kernel.body):
            if isinstance(s, S.For):
                self.names.ir(s.var)
            elif not isinstance(s, (S.Store, S.Scatter)):
                self.names.ir(s.name)
        self.tensor_args = {t: self._tensor_names(t) for t in self.params.tensors}
        self.tiles = {size: self.names.fresh(size[:-len("_SIZE")] + "_TILE") for size in self._symbolic_sizes()}
        self.aranges: dict[tuple, str] = {}  # (dim, tile) -> arange name
        self.arange_int64: dict[str, bool] = {}
        self.offsets: dict[str, str] = {}  # axis -> offsets name
        self.masks: dict[str, str] = {}  # axis -> mask name
        self.scalar_axis_index: dict[S.IExpr, str] = {}  # start of a scalar axis rendered -> its name
        self.gather_indices: dict[tuple[int, int], str] = {}  # (id of a Gather, axis) -> its named subscript
        self._plan_axes()
        self._plan_dots()
        self._plan_pairs()
        self.tma = TmaPlan(kernel, pipeline, self.layout, self.names)
        self.use_tma = self.names.fresh("USE_TMA") if self.tma.descriptors else None
        self.program_count = self.names.fresh("program_count") if kernel.persistent else None
        self.gluon = None  # the kernel's Gluon twin (gluon.py), where codegen makes one

    # ------------------------------------------------------------ names and plans
    def _tensor_names(self, tensor: str):
        return self.names.fresh(f"{tensor}_ptr"), [self.names.fresh(f"{tensor}_{a}_stride")
                                                   for a in self.axis_labels(tensor)]

    def axis_labels(self, tensor: str) -> list[str]:
        """What the tensor's strides and gather subscripts are named after along each axis: its
        dimension, or `axis1` where none spans it (E[I[t], d]: `E_axis0_stride`, `E_d_stride`)."""
        dims = self.pipeline.tensor(tensor).dims
        return [d.removeprefix(f"{tensor}_") if d == f"{tensor}_axis{i}" else d for i, d in enumerate(dims)]

    def _symbolic_sizes(self) -> list[str]:
        sizes = []
        for s in S.walk_statements(self.kernel.body):
            if isinstance(s, S.Axis) and isinstance(s.size, S.IVar) and s.size.name not in sizes:
                sizes.append(s.size.name)
        return sizes

    def _plan_axes(self):
        for name, lay in self.layout.axes.items():
            ax = lay.axis
            if ax.scalar:  # one index, no tile: its start (named `{axis}_index` unless a name already)
                start = self.index(ax.start)
                self.offsets[name] = start if start.isidentifier() else self.names.fresh(f"{name}_index")
                continue
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
        """Dots go to tl.dot when every tile dim is at least MIN_DOT (the reduced one of 8-bit
        operands, 2 * MIN_DOT); a whole-extent tile in such a dot is then padded to at least that
        many lanes, so that holds at every size."""
        for node in self._tl_dots(self.kernel.body):
            for axis, least in zip((node.a.dims[0], node.axis, node.b.dims[1]), dot_minimum(node)):
                tile = self.layout.axes[axis].tile
                if isinstance(tile, str):
                    self.least_tiles[tile] = max(self.least_tiles.get(tile, 0), least)

    def _tensor_core(self, dot: S.Dot) -> bool:
        tiles = [self.layout.axes[a].tile for a in (dot.a.dims[0], dot.axis, dot.b.dims[1])]
        return all(isinstance(t, str) or t >= least for t, least in zip(tiles, dot_minimum(dot)))

    def tile_text(self, axis: str) -> str:
        tile = self.layout.axes[axis].tile
        return str(tile) if isinstance(tile, int) else self.tiles[tile]

    def shape_text(self, axes) -> str:
        sizes = [self.tile_text(a) for a in axes]
        return f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"

    def _plan_pairs(self):
        """A tile whose lanes are swapped in pairs takes 2 lanes at least (an extent of 1 pads)."""
        for s in S.walk_statements(self.kernel.body):
            if isinstance(s, S.Assign) and isinstance(s.value, S.SwapPairs):
                tile = self.layout.axes[s.value.axis].tile
                if isinstance(tile, str):
                    self.least_tiles[tile] = max(self.least_tiles.get(tile, 0), 2)

    # ------------------------------------------------------------ kernel
    def parameters(self) -> list[str]:
        """The kernel's tensors (pointer and strides), scalars, extents and tiles."""
        params = []
        for t in self.params.tensors:
            ptr, strides = self.tensor_args[t]
            params.append(ptr)
            params += [f"{s}: tl.constexpr" for s in strides]
        # Integer scalars are int64, as DT types them, whatever value Triton is passed (it would
        # make one that fits int32, and 1, narrower).
        params += [f"{self.scalars[s]}: tl.int64" if s in self.integer_scalars else self.scalars[s]
                   for s in self.params.scalars]
        params += [f"{self.names.ir(s)}: tl.constexpr" for s in self.params.sizes]
        return params + [f"{self.tiles[s]}: tl.constexpr" for s in self.tiles]

    def render(self) -> list[str]:
        w = Writer()
        params = self.parameters() + list(self.tma.descriptors.values())
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
            for dim in int32_index_dims(self.kernel):
                w.line(f'tl.static_assert({self.names.ir(S.size_name(dim))} < 2**31, '
                       f'"an arg-reduction over {dim} indexes it in int32")')
            if self.program_count:
                # Triton flattens the walk over blocks into the block's inner loop (a persistent
                # matmul's epilogue overlaps the next tile's loads), but its TMA lowering fails where
                # the flattened nest loads a tile outside its innermost loop (attention's queries,
                # loaded before the walk: "PassManager::run failed", Triton 3.6 and 3.9)
                flatten = (f", flatten={self.use_tma}" if self.use_tma and not _loads_outside_innermost_loops(body[lead:])
                           else "")
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

    def LetValue(self, s: S.LetValue, w: Writer):
        w.line(f"{self.names.ir(s.name)} = {self.texpr(s.value, s.loc)}")

    def Assign(self, s: S.Assign, w: Writer):
        self.limits.check_tiles(s.value, s.loc, s.dt_name or s.name)
        self.name_gather_subscripts(s.value, w, s.loc)
        if isinstance(s.value, S.SwapPairs):
            self.swap_pairs(s, w)
        elif s.value in self.tma.box_descriptor:
            name = self.names.ir(s.name)
            self.tma_or_pointers(w, f"{name} = {self.box_load(s.value)}", f"{name} = {self.pointer_load(s.value)}")
        else:
            w.line(f"{self.names.ir(s.name)} = {self.texpr(s.value, s.loc)}")

    def swap_pairs(self, s: S.Assign, w: Writer):
        """tile -> [..., lanes / 2, 2] -> its even and odd lanes -> joined odd first, shaped back."""
        x = s.value.x
        name = self.names.ir(s.name)
        tile = self.layout.axes[s.value.axis].tile
        half = str(tile // 2) if isinstance(tile, int) else f"{self.tiles[tile]} // 2"
        pairs = "(" + ", ".join([self.tile_text(a) for a in x.dims[:-1]] + [half, "2"]) + ")"
        source = self.texpr(x, s.loc)
        even, odd = self.names.fresh(f"{source}_even"), self.names.fresh(f"{source}_odd")
        w.line(f"{even}, {odd} = tl.split(tl.reshape({source}, {pairs}))")
        w.line(f"{name} = tl.reshape(tl.join({odd}, {even}), {self.shape_text(x.dims)})")

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
        loop asks (tl.range's num_stages); one stage is no pipelining either way, nor is a walk's
        last tile (one iteration)."""
        if (self.kernel.num_stages or 0) < 2 or loop.kind == "tail":
            return False
        return not any(isinstance(s, S.For) for s in S.walk_statements(loop.body)) and not self._tl_dots(loop.body)

    def Axis(self, ax: S.Axis, w: Writer):
        if ax.scalar:
            if self.offsets[ax.name] != self.index(ax.start):
                w.line(f"{self.offsets[ax.name]} = {self.index(ax.start)}")
            if self.layout.is_int64(ax.start):  # as an int64 Index, the axis's index is this name
                self.scalar_axis_index[ax.start] = self.offsets[ax.name]
            return
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
        """A 1-D tensor over `axis` viewed in `layout` (size 1 along the other axes); a scalar
        axis's index (in no layout) as it is."""
        if len(layout) <= 1 or axis not in layout:
            return name
        return f"{name}[{', '.join(':' if a == axis else 'None' for a in layout)}]"

    def mask(self, indices, layout) -> str | None:
        parts = [self.spread(self.masks[a], a, layout) for a in layout if a in indices and a in self.masks]
        return " & ".join(parts) if parts else None

    def pointer_load(self, e: S.Load) -> str:
        mask = self.mask(e.indices, e.order)
        args = self.pointer(e.tensor, e.indices, e.order)
        if mask:
            args += f", mask={mask}, other={self.zero(e.tensor)}"
        if e in self.eviction:
            args += f', eviction_policy="{self.eviction[e]}"'
        return self.cast_load(e, f"tl.load({args})")

    def box_load(self, e: S.Load) -> str:
        box = f"{self.tma.box_descriptor[e]}.load([{self.box_start(e.indices)}])"
        tiled = self.tma.tiled(e.indices)
        if tiled != e.indices:  # a box of 1 along each scalar axis, which the tile has not
            box = f"{box}.reshape({self.shape_text(tiled)})"
        if tiled != e.order:  # loaded in the tensor's order, transposed in registers (K as [k, l])
            perm = tuple(tiled.index(a) for a in e.order)
            box = f"tl.trans({box})" if len(perm) == 2 else f"tl.permute({box}, {perm})"
        return self.cast_load(e, box)

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
        return ", ".join(f"tl.cast({self.index(e)}, tl.int32)"
                         if self.layout.is_int64(e) or S.index_names(e) & self.layout.int64_loops else self.index(e)
                         for e in starts)

    def Scatter(self, s: S.Scatter, w: Writer):
        """tensor[subscripts] (+)= value: pointer = base + sum(subscript * stride), masked to the
        valid lanes and to subscripts inside the tensor. Adds are atomic: programs run at once, and
        the order in which they add (so a float sum's rounding) differs from run to run."""
        spec = self.pipeline.tensor(s.tensor)
        ptr, strides = self.tensor_args[s.tensor]
        value = self.texpr(s.value, s.loc)
        if s.value.dtype != spec.dtype:
            value = f"{value}.to({TL_DTYPE[spec.dtype]})"
        subscripts = [self.texpr(e, s.loc) for e in s.subscripts]
        pointer = " + ".join([ptr] + [f"{i} * {stride}" for i, stride in zip(subscripts, strides)])
        lanes = self.mask(s.value.dims, s.value.dims)
        inside = [f"({i} >= 0) & ({i} < {self.index(n)})" for i, n in zip(subscripts, s.extents)]
        mask = " & ".join(([f"({lanes})" if "&" in lanes else lanes] if lanes else []) + inside)
        args = f"{pointer}, {value}" + (f", mask={mask}" if mask else "")
        w.line(f"tl.atomic_add({args}, sem=\"relaxed\")" if s.accumulate else f"tl.store({args})")

    def Store(self, s: S.Store, w: Writer):
        spec = self.pipeline.tensor(s.tensor)
        self.limits.check_tiles(s.value, s.loc, s.tensor)
        self.name_gather_subscripts(s.value, w, s.loc)
        value, prec = self.texpr(s.value, s.loc), self.prec(s.value)
        if s.value.dtype != spec.dtype:
            value, prec = f"{atom(value, prec)}.to({TL_DTYPE[spec.dtype]})", ATOM
        tiled = s.value.dims  # the store's axes but its scalar ones
        mask = self.mask(s.indices, tiled)
        args = f"{self.pointer(s.tensor, s.indices, tiled)}, {value}"
        if mask:
            args += f", mask={mask}"
        with guarded(w, s, self.index):
            if s in self.tma.box_descriptor:
                box_value = value if tiled == s.indices else \
                    f"{atom(value, prec)}.reshape({self.shape_text(s.indices)})"
                self.tma_or_pointers(w, f"{self.tma.box_descriptor[s]}.store([{self.box_start(s.indices)}], "
                                        f"{box_value})", f"tl.store({args})")
            else:
                w.line(f"tl.store({args})")


def _loads_outside_innermost_loops(body) -> bool:
    """Whether `body` loads a tile anywhere but in a loop with no loop inside it: where Triton,
    flattening the loop nest, puts the code between loops under a condition."""
    innermost = not any(isinstance(s, S.For) for s in body)
    for s in body:
        if isinstance(s, S.For):
            if _loads_outside_innermost_loops(s.body):
                return True
        elif not innermost and any(isinstance(node, S.Load) for value in S.statement_values(s)
                                   for node in S.walk_texpr(value)):
            return True
    return False
