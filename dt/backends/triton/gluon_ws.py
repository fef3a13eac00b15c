"""Warp-specialised Gluon twins (Hopper) of kernels of two warpgroups (8 warps), as FlashAttention-3
runs attention: each warpgroup (a consumer) runs the twin's loop (gluon.py) on its own rows of
the block, in a partition of its own (gl.warp_specialize), and one more warp (the producer)
brings the products' operands into the rings by TMA, each slot as soon as every consumer has
signalled it free. With no barrier between the warpgroups, the warp scheduler runs one's
element-wise work while another's products run. The consumers share the rings: every one walks
the same tiles, so the kernel's loop bounds and the rings' tiles may not depend on the rows."""
from __future__ import annotations

import re

from dt.backends.pysource import Writer
from dt.backends.triton.gluon import GluonKernelRenderer, gluon_text
from dt.backends.triton.gluon_plan import NotPipelined, Staged, _names_set
from dt.ir import scheduled as S

PRODUCER_REGISTERS = 24  # the producer only counts tiles and issues TMA: setmaxnreg's least
CONSUMER_REGISTERS = 240  # a consumer's most, FlashAttention-3's
REGISTER_FILE = 65536  # an SM's 32-bit registers: one program takes them all


class WarpSpecializedRenderer(GluonKernelRenderer):
    """The warp-specialised twin of a kernel of `warps` = 4 x consumers (see the module's
    docstring): the kernel allocates the shared memory and forks into `{name}_consumer` (once
    per warpgroup) and `{name}_producer`. A stored tile without the rows is stored by every
    consumer: the same values (a reduction along the rows, which would differ, is refused)."""
    partitioned = True

    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, f32_dot: str, reserved, helpers, name):
        super().__init__(kernel, pipeline, f32_dot, reserved, helpers, name)
        self.consumers = self.warps // 4
        rows = next(lay.tile for lay in self.layout.axes.values() if lay.axis.dim == self.row_dim and not lay.axis.scalar)
        self.rows_each = rows // self.consumers  # the rows of the block one consumer takes
        for s in S.walk_statements(kernel.body):
            for value in S.statement_values(s):
                for node in S.walk_texpr(value):
                    if isinstance(node, (S.Reduce, S.Scan)) and self.layout.axes[node.axis].axis.dim == self.row_dim:
                        raise NotPipelined("a reduction along the products' rows, which the warpgroups split")
        for st in self.staged.values():
            if st.loop is not None and self._row_positions(st):
                raise NotPipelined("a ring's tiles move with the rows, which the warpgroups split")
        late = self._producer_reads() - {s.name for s in kernel.body if isinstance(s, S.Let)}
        set_in_kernel = {n for s in S.walk_statements(kernel.body) for n in _names_set(s)}
        if late & set_in_kernel:
            raise NotPipelined(f"the loads' bounds or places read {', '.join(sorted(late & set_in_kernel))}, "
                               "which the producer warp does not compute (only the kernel's integer lets)")
        self.warpgroup = self.names.fresh("warpgroup")
        self.free = {key: self.names.fresh(f"{key[0]}_free") for key in self.ringed}
        self.own = {key: (self.names.fresh(f"{key[0]}_smems"), self.names.fresh(f"{key[0]}_readies"))
                    for key in self.buffers if key not in self.ringed}
        self.consumer, self.producer = f"{name}_consumer", f"{name}_producer"
        warps = 4 * (self.consumers + 1)  # the producer's warp takes a warpgroup's registers
        self.max_registers = min(256, REGISTER_FILE // (32 * warps)) // 8 * 8
        share = (self.max_registers * (self.consumers + 1) - PRODUCER_REGISTERS) // self.consumers
        self.consumer_registers = min(CONSUMER_REGISTERS, share // 8 * 8)
        if self.consumers > 2:  # measured on an H200: 4 consumers of 112 registers spill, 3x slower
            raise NotPipelined(f"{self.warps} warps: {self.consumers} consumer warpgroups would get "
                               f"{self.consumer_registers} registers each (two get {CONSUMER_REGISTERS})")

    def _producer_reads(self) -> set[str]:
        """The names the pipelined loops' bounds and their tiles' coordinates read (the loops' own
        variables aside): the producer recomputes them from the kernel's parameters and lets."""
        names = set()
        for loop in (s for s in self.kernel.body if isinstance(s, S.For) and id(s) in self.loops):
            plan = self.loops[id(loop)]
            names |= self.plan.loads_read(loop)
            names |= {n for st in (plan.first_b, plan.second_b) for kind, value in st.coords if kind == "axis"
                      for n in S.index_names(self.layout.axes[value].axis.start)} - {loop.var}
        return names

    def _row_positions(self, st: Staged) -> list[int]:
        return [i for i, (kind, value) in enumerate(st.coords)
                if kind == "axis" and self.layout.axes[value].axis.dim == self.row_dim]

    # ------------------------------------------------------------ what changes on a consumer's rows
    def tile_text(self, axis: str) -> str:
        if self.layout.axes[axis].axis.dim == self.row_dim:
            return str(self.rows_each)
        return super().tile_text(axis)

    def _arange(self, dim: str, size: str, role: str) -> str:
        if dim == self.row_dim:
            return f"{self.warpgroup} * {self.rows_each} + gl.arange(0, {self.rows_each}, layout={role})"
        return super()._arange(dim, size, role)

    def _rows_offset(self, axis: str) -> str:
        return f" + {self.warpgroup} * {self.rows_each}" if self.layout.axes[axis].axis.dim == self.row_dim else ""

    def launch_box(self, key: tuple) -> tuple:
        st = next(s for s in (*self.staged.values(), *self.stored.values()) if (s.tensor, s.box) == key)
        return tuple(self.rows_each if i in self._row_positions(st) else b for i, b in enumerate(key[1]))

    def launch_options(self) -> str:
        return f"{{'num_warps': 4, 'maxnreg': {self.max_registers}}}"

    # ------------------------------------------------------------ the rings: the producer fills them
    def _fill_ring(self, operands, w: Writer):
        pass  # the producer's

    def _refill(self, operands, tile, slot, w: Writer, after: int = 0):
        pass  # the producer's

    def _free(self, st: Staged, slot: str, w: Writer):
        w.line(f"mbarrier.arrive({self.free[(st.tensor, st.box)]}.index({slot}), count=1)")

    def _await_free(self, st: Staged, tile: str, slot: str, w: Writer):
        phase = f"((({self.tile_count} + {tile}) // {self.stages}) & 1) ^ 1"  # a new barrier's phase 1 is done
        w.line(f"mbarrier.wait({self.free[(st.tensor, st.box)]}.index({slot}), {phase})")

    # ------------------------------------------------------------ the three functions
    def render(self) -> list[str]:
        params = [*self.parameters(), *self.descriptors.values(), f"{self.stages}: gl.constexpr"]
        shared = [name for key in self.buffers for name in
                  (self.own[key] if key in self.own else (*self.buffers[key], self.free[key]))]
        consumer = self._consumer()
        self.bounds = {}  # the producer computes them again
        producer = self._producer()
        w = Writer()
        w.line("@gluon.jit")
        w.line(f"def {self.name}({', '.join(params)}):")
        with w.indent():
            w.line(f"# computes {self.kernel.func}: {self.consumers} warpgroups, each on {self.rows_each} of the block's "
                   "rows, and a")
            w.line("# warp that loads their operands, each in a partition of its own (dt/backends/triton/gluon_ws.py)")
            self._allocate(w)
            consumer_args, producer_args = (self._arguments(text, params + shared) for text in (consumer, producer))
            w.line("gl.warp_specialize([")
            for i in range(self.consumers):
                w.line(f"    ({self.consumer}, ({', '.join([str(i), *consumer_args])})),")
            w.line(f"    ({self.producer}, ({', '.join(producer_args)},)),")
            workers = self.consumers - 1
            w.line(f"], [{', '.join(['4'] * workers + ['1'])}], "
                   f"[{', '.join([str(self.consumer_registers)] * workers + [str(PRODUCER_REGISTERS)])}])")
        for text, name, head, used in ((consumer, self.consumer, [f"{self.warpgroup}: gl.constexpr"], consumer_args),
                                       (producer, self.producer, [], producer_args)):
            w.line("")
            w.line("@gluon.jit")
            w.line(f"def {name}({', '.join(head + [p for p in params + shared if p.split(':')[0] in used])}):")
            w.lines.extend("    " + line if line else line for line in text.splitlines())
        return [gluon_text(line) for line in w.lines]

    @staticmethod
    def _arguments(text: str, params: list[str]) -> list[str]:
        """The parameters `text` reads, in order."""
        names = [p.split(":")[0] for p in params]
        return [n for n in names if re.search(rf"\b{n}\b", text)]

    def _allocate(self, w: Writer):
        for key, descriptor in self.descriptors.items():
            if key in self.own:  # loaded before a loop: a box for each consumer
                smems, readies = self.own[key]
                w.line(f"{smems} = gl.allocate_shared_memory({descriptor}.dtype, [{self.consumers}] + "
                       f"{descriptor}.block_type.shape, {descriptor}.layout)")
                w.line(f"{readies} = gl.allocate_shared_memory(gl.int64, [{self.consumers}, 1], mbarrier.MBarrierLayout())")
                w.line(f"for {self.slot} in gl.static_range({self.consumers}):")
                with w.indent():
                    w.line(f"mbarrier.init({readies}.index({self.slot}), count=1)")
            elif key in self.ringed:
                smem, ready = self.buffers[key]
                w.line(f"{smem} = gl.allocate_shared_memory({descriptor}.dtype, [{self.stages}] + "
                       f"{descriptor}.block_type.shape, {descriptor}.layout)")
                for barriers in (ready, self.free[key]):
                    w.line(f"{barriers} = gl.allocate_shared_memory(gl.int64, [{self.stages}, 1], mbarrier.MBarrierLayout())")
                w.line(f"for {self.slot} in gl.static_range({self.stages}):")
                with w.indent():
                    w.line(f"mbarrier.init({ready}.index({self.slot}), count=1)")
                    w.line(f"mbarrier.init({self.free[key]}.index({self.slot}), count={self.consumers})")

    def _consumer(self) -> str:
        w = Writer()
        for key, (smems, readies) in self.own.items():
            smem, ready = self.buffers[key]
            w.line(f"{smem} = {smems}.index({self.warpgroup})")
            w.line(f"{ready} = {readies}.index({self.warpgroup})")
        self._prologue(w)
        if self.ringed:
            w.line(f"{self.tile_count} = 0  # tiles through the rings so far: each slot's barrier phase")
        for s in self.kernel.body:
            self.statement(s, w)
        return "\n".join(w.lines)

    def _producer(self) -> str:
        """The program's indices, each chain's bounds, and a loop over its tiles: wait for the
        slot to be free, load."""
        w = Writer()
        if self.layout.uses_pid:
            w.line(f"{self.names.ir('pid')} = gl.program_id(0).to(gl.int64)")
        w.line(f"{self.tile_count} = 0")
        last = [s for s in self.kernel.body if isinstance(s, S.For) and id(s) in self.loops][-1]
        for s in self.kernel.body:
            if isinstance(s, S.Let):
                self.statement(s, w)
            elif isinstance(s, S.For) and id(s) in self.loops:
                chain = self.chains.get(id(s), (s,))
                if s is not chain[0]:
                    continue
                for loop in chain:
                    self._bounds(loop, w)
                total = " + ".join(self.bounds[id(loop)][1] for loop in chain)
                plan = self.loops[id(s)]
                w.line(f"for {self.tile} in range({total}):")
                with w.indent():
                    w.line(f"{self.slot} = ({self.tile_count} + {self.tile}) % {self.stages}")
                    self._ring_load((plan.first_b, plan.second_b), self.tile, self.slot, w)
                if all(loop is not last for loop in chain):  # the next chain's slots and phases follow on
                    w.line(f"{self.tile_count} += {total}")
        return "\n".join(w.lines)
