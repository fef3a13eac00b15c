"""Hopper (sm_90) kernels in Gluon where Triton's scheduler falls short: a loop whose first
product feeds element-wise work that feeds a second product (attention: scores, softmax, P·V).
Triton waits for each wgmma at once (its pipeliner makes one properly asynchronous only when
its result feeds another's accumulator); here step t issues its first product, then step t-1's
second, waits for the first only, and runs its element-wise work while the second runs
(docs/performance.md, "Attention past Triton's scheduler"). The products' operands move by TMA
into shared memory: once, before the loop, or through a ring of the kernel's stages with an
mbarrier a slot; a result that is a box of its tensor leaves by TMA. Everything else is the
Triton renderer's code, `gl` for `tl`, in wgmma register layouts (each product's result its own,
every other tile that of the result sharing its columns): every two-dimensional tile has the
products' rows as its first dimension.

This renderer writes the twins of kernels of one warpgroup (4 warps); gluon_ws.py those of
two, each warpgroup in a partition of its own beside a warp that loads. `GluonKernelRenderer`
raises `NotPipelined` (with the reason) for a kernel of another shape; the kernel is then
Triton's alone. On a Hopper GPU, where the tensors suit TMA, the launcher runs the twin unless
DT_TRITON_GLUON=0 (on an H200 the twins were 0.96-1.68x their Triton kernels: docs/triton.md,
"Gluon twins on Hopper"), and the Triton kernel elsewhere."""
from __future__ import annotations

import re

from dt.backends.pysource import Writer
from dt.backends.triton.compiled import H100, MULTIPROCESSOR, SHARED_RESERVED
from dt.backends.triton.expressions import TL_DTYPE, atom
from dt.backends.triton.gluon_layouts import GluonLayouts
from dt.backends.triton.gluon_plan import GluonPlan, NotPipelined, Staged
from dt.ir import scheduled as S
from dt.ir.index_expr import index_source as index, renamed

DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4}
# the shared memory a program of an H100 or H200 may take
MAX_SHARED = MULTIPROCESSOR[H100][0] - SHARED_RESERVED
# tl functions whose gl namesakes take the same arguments
GL_FUNCTIONS = ("sum", "max", "min", "maximum", "minimum", "where", "exp", "exp2", "log", "log2", "sqrt", "rsqrt",
                "reduce", "program_id", "store", "static_assert", "cast", "abs", "fma", "cdiv", "erf", "floor",
                "ceil", "umulhi", "div_rn", "fdiv", "static_range")
_TL_CALL = re.compile(r"\btl\.(" + "|".join(GL_FUNCTIONS) + r")\(")


def gluon_text(line: str) -> str:
    return _TL_CALL.sub(r"gl.\1(", line)


def gluon_helper(source: str, name: str) -> str:
    """A device helper's source (device_helpers.py) as a Gluon function named `{name}_gluon`."""
    lines = [gluon_text(line) for line in source.replace("@triton.jit", "@gluon.jit").splitlines()]
    return "\n".join(lines).replace(f"def {name}(", f"def {name}_gluon(")


class GluonKernelRenderer(GluonLayouts):
    """The Gluon twin of a KernelRenderer's kernel of one warpgroup (see the module's docstring)."""
    partitioned = False  # one warpgroup runs everything; several: gluon_ws.py

    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, f32_dot: str, reserved, helpers, name):
        if kernel.persistent or kernel.tma:
            raise NotPipelined("persistent and tma() kernels stay Triton's")
        super().__init__(kernel, pipeline, f32_dot, reserved, helpers, name)
        self.warps = kernel.num_warps or 4
        # the ring's slots: the schedule's stages (2 to 4), fewer where they do not fit at launch
        self.requested_stages = max(2, min(kernel.num_stages or 2, 4))
        self.stages = self.names.fresh("STAGES")
        self.consumers = 1  # the partitions that run the loops, each with its own boxes loaded once
        plan = self.plan = GluonPlan(kernel, pipeline, self.layout, self.warps)
        if self.warps > 4 and not self.partitioned:
            raise NotPipelined(f"{self.warps} warps: each warpgroup in a partition of its own (gluon_ws.py)")
        self.staged, self.loops, self.row_dim, self.chains = plan.staged, plan.loops, plan.row_dim, plan.chains
        # id of a pipelined loop -> its start, its tile count, and where a tile to load starts
        self.bounds: dict[int, tuple[str, str, str]] = {}
        self.descriptors = {}  # (tensor, box) -> descriptor parameter
        self.buffers = {}  # (tensor, box) -> (shared buffer, barriers)
        for st in self.staged.values():
            key = (st.tensor, st.box)
            if key not in self.descriptors:
                self.descriptors[key] = self.names.fresh(f"{st.tensor}_desc")
                self.buffers[key] = (self.names.fresh(f"{st.tensor}_smem"), self.names.fresh(f"{st.tensor}_ready"))
        self.stored = plan.stored
        for st in self.stored.values():
            self.descriptors[(st.tensor, st.box)] = self.names.fresh(f"{st.tensor}_desc")
        # the boxes loaded through rings, in the staged order (the generated text follows it)
        self.ringed = dict.fromkeys((st.tensor, st.box) for st in self.staged.values() if st.loop is not None)
        if any((st.tensor, st.box) in self.ringed for st in self.staged.values() if st.loop is None):
            raise NotPipelined("a box loaded both before a loop and in one")
        self.grids = self._grids()
        self.default = self.grids[next(iter(self.grids))]
        # the first products' first operand, read before their loop, goes to registers once (wgmma
        # then reads only the second from shared memory): its box -> its register layout
        firsts = [s.body[self.loops[id(s)].first].value for s in kernel.body if id(s) in self.loops]
        self.in_registers = {(self.staged[d.a.name].tensor, self.staged[d.a.name].box):
                             self._grid(self.layout.axes[d.dims[1]].axis.dim).operand for d in firsts}
        self.tile_count = self.names.fresh("tiles_loaded")
        self.slot = self.names.fresh("slot")
        self.previous_slot = self.names.fresh("previous_slot")
        self.views = {key: self.names.fresh(f"{key[0]}_tile") for key in self.descriptors}
        self.tile = self.names.fresh("tile")
        self.step = self.names.fresh("t")
        self.loaded: dict[tuple, str] = {}  # box loaded before a loop -> the coordinates it holds
        self.phases: dict[tuple, int] = {}  # key of a box loaded outside loops -> loads so far
        self._check_shared_memory()

    def _shared_keys(self) -> list[tuple]:
        """The boxes other than the rings' that take shared memory beside them: those loaded once
        and, where partitions store (gluon_ws.py), the stored ones (in one partition a stored
        box's buffer takes the rings' memory once they are done)."""
        return [k for k in self.descriptors if k not in self.ringed and (k in self.buffers or self.partitioned)]

    def _check_shared_memory(self):
        """Refuse a twin 2 stages cannot hold, where the boxes' sizes are known here; the launcher
        checks the others at the call (_gluon_stages)."""
        total = 0
        for key in [*self.ringed, *self._shared_keys()]:
            tensor, box = key
            elements = 1
            for b in box:
                if not isinstance(b, int):
                    return  # a whole extent: known at the call
                elements *= b
            total += elements * DTYPE_BYTES[self.pipeline.tensor(tensor).dtype] * (2 if key in self.ringed else 1)
        if total > MAX_SHARED:
            raise NotPipelined(f"{total} bytes of shared memory at 2 stages, the fewest")

    # ------------------------------------------------------------ kernel
    def render(self) -> list[str]:
        w = Writer()
        params = self.parameters() + list(self.descriptors.values()) + [f"{self.stages}: gl.constexpr"]
        w.line("@gluon.jit")
        w.line(f"def {self.name}({', '.join(params)}):")
        with w.indent():
            w.line(f"# computes {self.kernel.func}: Hopper's matrix units run a step's second product while")
            w.line("# the next step's element-wise work runs (dt/backends/triton/gluon.py)")
            self._prologue(w)
            self._shared_memory(w)
            for s in self.kernel.body:
                self.statement(s, w)
        return [gluon_text(line) for line in w.lines]

    def _prologue(self, w: Writer):
        """The register layouts, the program id and the tiles' aranges."""
        self._layouts(w)
        if self.layout.uses_pid:
            w.line(f"{self.names.ir('pid')} = gl.program_id(0).to(gl.int64)")
        for (dim, tile), name in self.aranges.items():
            size = str(tile) if isinstance(tile, int) else self.tiles[tile]
            to64 = ".to(gl.int64)" if self.arange_int64[name] else ""
            role = self.default.rows if dim == self.row_dim else self._grid(dim).columns
            w.line(f"{name} = {self._arange(dim, size, role)}{to64}")

    def _arange(self, dim: str, size: str, role: str) -> str:
        return f"gl.arange(0, {size}, layout={role})"

    def launch_box(self, key: tuple) -> tuple:
        """The box a descriptor the launcher makes moves: the tiles' own."""
        return key[1]

    def launch_options(self) -> str:
        return f"{{'num_warps': {self.warps}}}"

    def stage_request(self, boxes: dict) -> str:
        """The arguments of the launcher's _gluon_stages, `boxes` naming each descriptor's box:
        the stages asked for, the rings' boxes, the others' (each partition's), the most bytes."""
        def listed(keys, copies):
            return ", ".join(f"({boxes[k]}, {DTYPE_BYTES[self.pipeline.tensor(k[0]).dtype] * copies})" for k in keys)
        return f"{self.requested_stages}, [{listed(self.ringed, 1)}], [{listed(self._shared_keys(), self.consumers)}], {MAX_SHARED}"

    def _shared_memory(self, w: Writer):
        for key, descriptor in self.descriptors.items():
            if key not in self.buffers:
                continue  # a stored box: its buffer is made where the store is
            smem, ready = self.buffers[key]
            if key in self.ringed:
                w.line(f"{smem} = gl.allocate_shared_memory({descriptor}.dtype, [{self.stages}] + "
                       f"{descriptor}.block_type.shape, {descriptor}.layout)")
                w.line(f"{ready} = gl.allocate_shared_memory(gl.int64, [{self.stages}, 1], mbarrier.MBarrierLayout())")
                w.line(f"for {self.slot} in gl.static_range({self.stages}):")
                with w.indent():
                    w.line(f"mbarrier.init({ready}.index({self.slot}), count=1)")
            else:
                w.line(f"{smem} = gl.allocate_shared_memory({descriptor}.dtype, {descriptor}.block_type.shape, "
                       f"{descriptor}.layout)")
                w.line(f"{ready} = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())")
                w.line(f"mbarrier.init({ready}, count=1)")
        if self.ringed:
            w.line(f"{self.tile_count} = 0  # tiles loaded through the rings so far: each slot's barrier phase")

    # ------------------------------------------------------------ TMA
    def _coords(self, st: Staged, loop_start: str | None = None) -> str:
        parts = []
        for kind, value in st.coords:
            if kind == "axis":
                start = self.layout.axes[value].axis.start
                if loop_start is not None:
                    start = renamed(start, lambda n: loop_start if n == st.loop.var else self.names.ir(n))
                    text = index(start)
                else:
                    text = self.index(start) + self._rows_offset(value)
            elif kind == "index":
                text = self.index(value)
            else:
                text = self.texpr(value, None)
            parts.append(f"gl.cast({text}, gl.int32)")
        return ", ".join(parts)

    def _rows_offset(self, axis: str) -> str:
        """What a box's coordinate along `axis` adds to the tile's start: nothing; a warpgroup's
        rows where each takes its own (gluon_ws.py)."""
        return ""

    def _view(self, st: Staged, buffer: str) -> str:
        """The operand as the product takes it: the box's tile dimensions, in the operand's order."""
        view = buffer
        if len(st.box) != 2:
            view += f".reshape([{', '.join(self.tile_text(a) for a in st.tiled)}])"
        if st.tiled != st.order:
            view += ".permute((1, 0))"
        return view

    def _load_before_loop(self, st: Staged, w: Writer):
        key = (st.tensor, st.box)
        coords = self._coords(st)
        if self.loaded.get(key) == coords:
            return
        smem, ready = self.buffers[key]
        descriptor = self.descriptors[key]
        phase = self.phases.get(key, 0)
        self.phases[key] = phase + 1
        w.line(f"mbarrier.expect({ready}, {descriptor}.block_type.nbytes)")
        w.line(f"_tma_load({descriptor}, [{coords}], {ready}, {smem})")
        w.line(f"mbarrier.wait({ready}, {phase % 2})")
        view = self._view(st, smem)
        if key in self.in_registers:
            view = f"{view}.load({self.in_registers[key]})"
        w.line(f"{self.views[key]} = {view}")
        self.loaded[key] = coords

    def _bounds(self, loop: S.For, w: Writer):
        """Write the loop's start and tile count once (a chain's, all before its first loop)."""
        if id(loop) not in self.bounds:
            var = self.names.ir(loop.var)
            start, stop, count = (self.names.fresh(f"{var}_{part}") for part in ("start", "stop", "count"))
            w.line(f"{start} = {self.index(loop.start)}")
            w.line(f"{stop} = {self.index(loop.stop)}")
            w.line(f"{count} = gl.cast(max(0, {stop} - {start} + {loop.step - 1}) // {loop.step}, gl.int32)")
            self.bounds[id(loop)] = (start, count, self.names.fresh(f"{var}_at"))

    def _ring_load(self, operands: tuple[Staged, ...], tile: str, slot: str, w: Writer, after: int = 0):
        """Load tile `tile` of the loop's operands (of the loop `after` loops later in its chain)
        into ring slot `slot`. In a chain, tiles past a loop's own are the next loops' first ones."""
        loop = operands[0].loop
        chain = self.chains.get(id(loop), (loop,))
        loops = chain[chain.index(loop) + after:]
        counts = [self.bounds[id(x)][1] for x in loops]
        tiles = counts[0] if len(loops) == 1 else f"({' + '.join(counts)})"
        values = [f"{self.bounds[id(x)][0]} + ({tile}{''.join(f' - {c}' for c in counts[:i])}) * {x.step}"
                  for i, x in enumerate(loops)]
        if len(loops) == 1:
            at = values[0]
        else:
            at = self.bounds[id(loop)][2]
            for i, value in enumerate(values):
                if i == len(values) - 1:
                    w.line("else:")
                else:
                    w.line(f"{'elif' if i else 'if'} {tile} < {' + '.join(counts[:i + 1])}:")
                with w.indent():
                    w.line(f"{at} = gl.cast({value}, gl.int32)")
        for st in operands:
            smem, ready = self.buffers[(st.tensor, st.box)]
            descriptor = self.descriptors[(st.tensor, st.box)]
            self._await_free(st, tile, slot, w)
            w.line(f"mbarrier.expect({ready}.index({slot}), {descriptor}.block_type.nbytes, pred={tile} < {tiles})")
            w.line(f"_tma_load({descriptor}, [{self._coords(st, at)}], {ready}.index({slot}), {smem}.index({slot}), "
                   f"pred={tile} < {tiles})")

    def _await_free(self, st: Staged, tile: str, slot: str, w: Writer):
        """Before loading into `slot`: nothing (the step's end refills slots it has freed); a
        producer warp (gluon_ws.py) waits for the consumers to free it."""

    def _fill_ring(self, operands: tuple[Staged, ...], w: Writer):
        """Before a chain's first loop: its first tiles into every slot."""
        w.line(f"for {self.tile} in gl.static_range({self.stages}):")
        with w.indent():
            w.line(f"{self.slot} = ({self.tile_count} + {self.tile}) % {self.stages}")
            self._ring_load(operands, self.tile, self.slot, w)

    def _refill(self, operands: tuple[Staged, ...], tile: str, slot: str, w: Writer, after: int = 0):
        """A slot the products are done with takes tile `tile` (of the loop `after` loops later)."""
        if after:
            w.line(f"# the slot is free: the next loop's tile {self.stages} - 1")
        self._ring_load(operands, tile, slot, w, after)

    def _free(self, st: Staged, slot: str, w: Writer):
        """The products are done with `st`'s tile in `slot`: here the step's end refills it;
        a producer warp's twin (gluon_ws.py) signals the slot free."""

    def _ring_view(self, st: Staged, tile: str, slot: str, w: Writer) -> str:
        """Wait for tile `tile` in ring slot `slot`; the name of its view as the product takes it."""
        key = (st.tensor, st.box)
        smem, ready = self.buffers[key]
        w.line(f"mbarrier.wait({ready}.index({slot}), (({self.tile_count} + {tile}) // {self.stages}) & 1)")
        w.line(f"{self.views[key]} = {self._view(st, f'{smem}.index({slot})')}")
        return self.views[key]

    # ------------------------------------------------------------ statements
    def Store(self, s: S.Store, w: Writer):
        """The tile goes to shared memory, and TMA writes the box (the lanes past the tensor's
        end not: the Triton kernel's mask); a tile that is no such box, as the Triton kernel
        stores it."""
        st = self.stored.get(id(s))
        if st is None:
            super().Store(s, w)
            return
        spec = self.pipeline.tensor(s.tensor)
        value, prec = self.texpr(s.value, s.loc), self.prec(s.value)
        if s.value.dtype != spec.dtype:
            value = f"{atom(value, prec)}.to({TL_DTYPE[spec.dtype]})"
        descriptor = self.descriptors[(st.tensor, st.box)]
        smem = self.names.fresh(f"{s.tensor}_smem")
        w.line(f"{smem} = gl.allocate_shared_memory({descriptor}.dtype, {descriptor}.block_type.shape, "
               f"{descriptor}.layout)")
        w.line(f"{self._view(st, smem)}.store({value})")
        w.line("fence_async_shared()  # the tile in shared memory before TMA reads it")
        w.line(f"_tma_store({descriptor}, [{self._coords(st)}], {smem})")
        w.line("tma.store_wait(0)")

    def Assign(self, s: S.Assign, w: Writer):
        if s.name in self.staged and self.staged[s.name].loop is None:
            self._load_before_loop(self.staged[s.name], w)
            return
        w.line(f"{self.names.ir(s.name)} = {self.texpr(s.value, s.loc)}")

    def For(self, s: S.For, w: Writer):
        plan = self.loops.get(id(s))
        if plan is None:
            super().For(s, w)
            return
        var = self.names.ir(s.var)
        chain = self.chains.get(id(s), (s,))
        first, second = s.body[plan.first], s.body[plan.second]
        result1, result2 = self.names.ir(first.name), self.names.ir(second.name)
        a2 = self.names.fresh(f"{result2}_operand")
        acc2 = self.names.fresh(f"{result2}_input")
        staged_a = self.staged[first.value.a.name]
        a1 = self.views[(staged_a.tensor, staged_a.box)]
        step, stages = s.step, self.stages
        first_b, second_b = plan.first_b, plan.second_b
        slot, previous = self.slot, self.previous_slot
        if s is chain[0]:
            if len(chain) > 1:
                w.line(f"# {len(chain)} loops, one stream of tiles: a loop's last steps load the next one's first")
            for loop in chain:
                self._bounds(loop, w)
        start, count, _ = self.bounds[id(s)]
        w.line(f"# {var} walks {count} tiles of {step}: step {self.step} issues its first product,")
        w.line(f"# then step {self.step} - 1's second, and runs its element-wise work while that one runs;")
        w.line(f"# {first_b.tensor} and {second_b.tensor} arrive through {stages}-slot rings")
        if s is chain[0]:
            self._fill_ring((first_b, second_b), w)
        skipped = {plan.zero, plan.first, plan.second} | {i for i, t in enumerate(s.body)
                                                          if isinstance(t, S.Assign) and t.name in self.staged}
        zeros = f"gl.zeros({self.shape_text(first.value.dims)}, gl.float32, layout={self._layout_of(first.value.dims)})"
        operand = self._grid(self.layout.axes[second.value.dims[1]].axis.dim).operand
        # a first operand in registers is the wgmma's until it is waited for
        registers = (staged_a.tensor, staged_a.box) in self.in_registers
        wait1, deps1 = (f"{result1}, {a1}", f"{result1}, {a1}") if registers else (result1, f"{result1},")

        def step_body(t: str, pending: bool):
            w.line(f"{var} = {start} + {t} * {step}")
            for i in range(plan.first):
                if i not in skipped:
                    self.statement(s.body[i], w)
            w.line(f"{slot} = ({self.tile_count} + {t}) % {stages}")
            b1 = self._ring_view(first_b, t, slot, w)
            w.line(f"{result1} = warpgroup_mma({a1}, {b1}, {zeros}, use_acc=False, is_async=True)")
            if pending:
                w.line(f"{previous} = ({self.tile_count} + {t} - 1) % {stages}")
                b2 = self._ring_view(second_b, f"{t} - 1", previous, w)
                w.line(f"{result2} = warpgroup_mma({a2}, {b2}, {acc2}, is_async=True)")
                w.line("# wait for the first product only: the second runs on")
                w.line(f"{wait1} = warpgroup_mma_wait(1, deps=({deps1}))")
            else:
                w.line(f"{wait1} = warpgroup_mma_wait(0, deps=({deps1}))")
            self._free(first_b, slot, w)
            for i in range(plan.first + 1, plan.second):
                if i not in skipped:
                    self.statement(s.body[i], w)
            if pending:
                w.line(f"{result2}, {a2} = warpgroup_mma_wait(0, deps=({result2}, {a2}))")
                self._free(second_b, previous, w)
            w.line(f"{a2} = gl.convert_layout({self.texpr(second.value.a, second.loc)}, {operand})")
            w.line(f"{acc2} = {self.texpr(second.value.acc, second.loc)}")
            for i in range(plan.second + 1, len(s.body)):
                if i not in skipped:
                    self.statement(s.body[i], w)
            self._refill((first_b,), f"{t} + {stages}", slot, w)
            if pending:
                self._refill((second_b,), f"{t} - 1 + {stages}", previous, w)

        w.line(f"if {count} > 0:")
        with w.indent():
            step_body("0", pending=False)
            w.line(f"for {self.step} in range(1, {count}):")
            with w.indent():
                step_body(self.step, pending=True)
            w.line(f"{previous} = ({self.tile_count} + {count} - 1) % {stages}")
            b2 = self._ring_view(second_b, f"{count} - 1", previous, w)
            w.line(f"{result2} = warpgroup_mma({a2}, {b2}, {acc2}, is_async=True)")
            w.line(f"{result2}, {a2} = warpgroup_mma_wait(0, deps=({result2}, {a2}))")
            self._free(second_b, previous, w)
            if s is not chain[-1]:
                self._refill((second_b,), f"{stages} - 1", previous, w, after=1)
        w.line(f"{self.tile_count} += {count}")

    def helper(self, how) -> str:
        self.helpers_used.add(f"{how.name}_gluon")
        return self.helpers[f"{how.name}_gluon"]

    def Dot(self, e: S.Dot, loc=None) -> str:
        raise NotPipelined("a product outside a pipelined loop")  # _plan refuses such kernels first
