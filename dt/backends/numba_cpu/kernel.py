"""One kernel of the scheduled IR as an `@njit` function of the Numba module: its statements.

The function runs the kernel body for program ids first..last-1. Every tile statement becomes
scalar loops over the *valid* lanes of its axes (masked lanes are never computed, loaded or
stored), with the element-wise work fused into one loop body LLVM vectorises; `KernelPlan`
says which tiles are inlined into their uses and where the others are kept, `ExprRenderer`
renders the values. A `Dot` calls the `_dot` micro-kernel, on operands in memory (a tensor, a
stored tile) in place, on others after packing them into a scratch tile; an a operand in memory
that is the same in every step of a loop around the Dot is packed for it once, before the loop.

A statement's loop nest is written when the next statement comes: a reduction whose only loop
walks the lanes the previous statement's loop just walked (the sum over a row of e after the
row of e) runs in that loop (`merged`), one walk over the row instead of two, also inside outer
loops both walk (each row's sum of a tile of rows). Statements in between (accumulators set to 0)
move before the walk where neither side reads what the other writes.
"""
from __future__ import annotations

from dt.backends.numba_cpu.expr import AS_BITS, ExprRenderer, Level
from dt.backends.numba_cpu.plan import KernelPlan, Storage, is_mask
from dt.backends.pysource import Names, Writer, guarded, loop_bounds
from dt.dtypes import INTEGERS, NUMPY, is_integer
from dt.ir import scheduled as S
from dt.ir.ops import SCANS

# The NumPy dtype of arrays of each dtype, as the module writes it.
NUMPY_DTYPE = {d: "np.bool_" if d == "bool" else f"np.{NUMPY[d].name}" for d in ("f32", "f64", "f16") + INTEGERS}


class KernelRenderer(ExprRenderer):
    """Renders one kernel's function: its statements here, their values through ExprRenderer."""

    def __init__(self, pipeline: S.Pipeline, kernel: S.Kernel, fn: str, module_names: Names):
        super().__init__(KernelPlan(pipeline, kernel, module_names))
        self.fn = fn
        # (name, shape, dtype) of each scratch array: the stored tiles', then the packed Dot operands'
        self.scratch = list(self.plan.scratch)
        # the last statement's loop nest, not written yet, then loop-free statements after it;
        # each with the names it reads and writes
        self.pending: list[tuple[Level, set[str], set[str]]] = []
        # per float Dot's Assign (by id): its room for _dot's copies (name, c, most rows, most steps)
        self.packings: dict[int, tuple[str, str, str, str]] = {}
        self.packed: set[int] = set()  # ids of the Dots' Assigns whose a tile is packed before a loop

    def render(self) -> str:
        plan = self.plan
        body = Writer()
        body.depth = 2
        self.body(body, plan.k.body)  # first: it adds the Dots' operand tiles and packings to the scratch
        w = Writer()
        w.line("@njit(**_KERNEL)")
        w.line(f"def {self.fn}({', '.join(['first', 'last'] + self.args())}):")
        with w.indent():
            where = f" (line {plan.k.loc.line})" if plan.k.loc else ""
            w.line(f'"""Program instances first..last-1 of the kernel computing {plan.k.func}{where}."""')
            if self.scratch:
                w.line("# scratch tiles, reused by every program instance")
            for name, shape, dtype in self.scratch:
                shape_text = f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(shape)})"
                held = dtype if is_integer(dtype) else plan.compute  # floats: in the compute dtype
                w.line(f"{name} = np.empty({shape_text}, {NUMPY_DTYPE[held]})")
            if self.packings:
                w.line("# room for the copies of its operands each product makes, reused by every program instance")
            for name, c, rows, steps in self.packings.values():
                w.line(f"{name} = _dot_packing({c}, {rows}, {steps})")
            w.line(f"for {plan.pid} in range(first, last):")
        w.lines += body.lines
        return w.text()

    def args(self) -> list[str]:
        plan = self.plan
        return [plan.tensor[t] for t in plan.params.tensors] + [plan.scalar[s] for s in plan.params.scalars] \
            + [plan.names.ir(s) for s in plan.params.sizes]

    def body(self, w: Writer, stmts):
        written = len(w.lines)
        for s in stmts:
            self.statement(s, w)
        self.flush(w)
        if len(w.lines) == written:  # nothing, or only tiles inlined into later uses
            w.line("pass")

    # ---- one method per statement class
    def Let(self, s: S.Let, w: Writer):
        self.flush(w)
        w.line(f"{self.plan.names.ir(s.name)} = {self.plan.idx(s.value)}")

    def LetValue(self, s: S.LetValue, w: Writer):
        name = self.plan.names.ir(s.name)
        self.nest(w, (), lambda env: f"{name} = int(", s.value, ")", writes=s.name)
        self.flush(w)

    def For(self, s: S.For, w: Writer):
        self.flush(w)
        if s.kind != "tail":  # a tail runs once at most: nothing to gain
            self.pack_invariant(s, w)
        bounds = loop_bounds(self.plan.idx(s.start), self.plan.idx(s.stop), s.step)
        w.line(f"for {self.plan.names.ir(s.var)} in range({bounds}):")
        with w.indent():
            self.body(w, s.body)

    def Axis(self, a: S.Axis, w: Writer):
        # Indices are uint64: numba then skips its negative-index wraparound, whose selects
        # would keep LLVM from vectorising the lane loops.
        self.flush(w)
        plan = self.plan
        start = plan.idx(a.start)
        self.start[a.name] = plan.names.fresh(f"{a.name}_start")
        w.line(f"{self.start[a.name]} = u64({start})")
        if a.name in plan.count:
            size = plan.idx(a.size)
            if not isinstance(a.start, (S.IVar, S.IConst)):
                start = f"({start})"
            valid = size if a.limit is None else f"min({size}, {plan.idx(a.limit)} - {start})"
            w.line(f"{plan.count[a.name]} = u64({valid})  # valid lanes of {a.dim}")

    def Assign(self, s: S.Assign, w: Writer):
        if s.name in self.plan.inlined or id(s) in self.plan.unfilled:
            return
        store = self.plan.storage[s.name]
        loop = self.plan.filled_if_empty.get(id(s))
        if loop is not None:  # the loop's first step writes over the tile: filled only where it has none
            self.flush(w)
            w.line(f"if {self.plan.idx(loop.start)} >= {self.plan.idx(loop.stop)}:")
            with w.indent():
                self.nest(w, store.dims, lambda env: f"{self.at(store, env)} = ", s.value, writes=s.name)
                self.flush(w)
            return
        if isinstance(s.value, S.Dot):
            self.dot(w, s, store)
            return
        if isinstance(s.value, S.Scan) and not self.plan.single(s.value.axis):
            self.scan(w, s.value, store)
            return
        self.nest(w, store.dims, lambda env: f"{self.at(store, env)} = ", s.value, writes=s.name)

    def Store(self, s: S.Store, w: Writer):
        if id(s) in self.plan.stored_in_place:  # the Dot computed the tile where it is stored
            return
        spec = self.plan.p.tensor(s.tensor)
        tensor = self.plan.tensor[s.tensor]
        convert = f"_f32_to_{spec.dtype}" if spec.dtype in AS_BITS else None
        value = s.value
        if convert:
            self.helpers.add(convert)
            value = self.unrounded(value, spec.dtype)

        def target(env):
            return f"{tensor}[{self.subscript(s.indices, env)}] = " + (f"{convert}(" if convert else "")

        if s.guard:  # its own nest, under the guard
            self.flush(w)
        with guarded(w, s, self.plan.idx):
            self.nest(w, s.indices, target, value, ")" if convert else "", writes=s.tensor)
            if s.guard:
                self.flush(w)

    def Scatter(self, s: S.Scatter, w: Writer):
        """Lane by lane: where every subscript is inside the tensor, its element added to (or
        replaced by) the value. The kernel runs its programs one after another (module.py), so
        adds never race and come in the same order every run."""
        spec = self.plan.p.tensor(s.tensor)
        tensor = self.plan.tensor[s.tensor]
        levels, env = self.lanes(s.value.dims)
        subscripts = [self.texpr(e, env, levels) for e in s.subscripts]
        value = self.texpr(s.value, env, levels)
        element = f"{tensor}[{', '.join(subscripts)}]"
        if spec.dtype in AS_BITS:  # the tensor holds the bits; add in f32, round once
            self.helpers |= {f"_f32_to_{spec.dtype}", f"_{spec.dtype}_to_f32"}
            total = f"_{spec.dtype}_to_f32({element}) + {value}" if s.accumulate else value
            write = f"{element} = _f32_to_{spec.dtype}({total})"
        else:
            write = f"{element} {'+=' if s.accumulate else '='} {value}"
        inside = " and ".join(f"0 <= {i} < {self.plan.idx(n)}" for i, n in zip(subscripts, s.extents))
        levels[-1].lines += [f"if {inside}:", f"    {write}"] if inside else [write]
        reads, gathered = set(), set()
        for e in S.statement_values(s):
            r, g = self.reads(e)
            reads, gathered = reads | r, gathered | g
        self.queue(w, levels[0], reads, gathered | {s.tensor}, {s.tensor})

    def unrounded(self, e: S.TExpr, dtype: str) -> S.TExpr:
        """e without its last step where that is a float's cast to `dtype`, which the store into
        a tensor of that dtype rounds to anyway (rounding twice gives the same bits)."""
        value = e
        while isinstance(value, S.Ref) and value.name in self.plan.inlined:
            value = self.plan.inlined[value.name]
        return value.x if isinstance(value, S.Cast) and value.dtype == dtype and not is_integer(value.x.dtype) else e

    # ---- lane loops
    def nest(self, w: Writer, dims, target, value: S.TExpr, close: str = "", writes: str = ""):
        """target(env) + value + close, for every valid lane of `dims` (loops over those with
        more than one lane, the first outermost); `writes`, the tile or tensor it writes."""
        levels, env = self.lanes(dims)
        text = self.texpr(value, env, levels)
        levels[-1].lines.append(f"{target(env)}{text}{close}")
        self.queue(w, levels[0], *self.reads(value), {writes})

    def lanes(self, dims) -> tuple[list["Level"], dict[str, str]]:
        """The lane-loop nest over `dims` (a loop for each with more than one lane, the first
        outermost) and each axis's lane variable in it."""
        looped = [d for d in dims if not self.plan.single(d)]
        levels = [Level(None)] + [Level(d) for d in looped]
        for outer, inner in zip(levels, levels[1:]):
            outer.inner = inner
        env = {d: self.plan.lane[d] for d in looped}
        env.update({d: "0" for d in dims if self.plan.single(d)})
        return levels, env

    def queue(self, w: Writer, nest: Level, reads: set[str], gathered: set[str], writes: set[str]):
        """Hold back `nest` (reading and writing those tiles and tensors, reading `gathered` at
        computed indices) until the next statement: to run it in the pending nest's loop, or
        to move it before that nest, where that is sound. A tile kept in an output's tile is
        that tensor too: a store into it must not move before a nest reading the tile."""
        kept = self.plan.kept_in
        reads = reads | {kept[n] for n in reads if n in kept}
        writes = writes | {kept[n] for n in writes if n in kept}
        if self.pending:
            (first, first_reads, first_writes), between = self.pending[0], self.pending[1:]
            # a gather reads its tensor at other lanes than its own: not in the loop writing it
            joined = merged(first, nest) if not gathered & first_writes else None
            if joined is not None:
                for level, _, _ in between:  # moved before `first`, which they do not depend on
                    self.emit(w, level)
                every_read = reads.union(*(r for _, r, _ in self.pending))
                every_write = writes.union(*(wr for _, _, wr in self.pending))
                self.pending = [(joined, every_read, every_write)]
                return
            if not (reads & first_writes) and not (writes & (first_reads | first_writes)):
                self.pending.append((nest, reads, writes))
                return
        self.flush(w)
        self.pending = [(nest, reads, writes)]

    def flush(self, w: Writer):
        """Write the pending loop nests."""
        for nest, _, _ in self.pending:
            self.emit(w, nest)
        self.pending = []

    def reads(self, e: S.TExpr) -> tuple[set[str], set[str]]:
        """The tiles and tensors e reads (through the tiles inlined into it), and the tensors
        among them it gathers from."""
        names, gathered, stack = set(), set(), [e]
        while stack:
            for node in S.walk_texpr(stack.pop()):
                if isinstance(node, S.Ref):
                    names.add(node.name)
                    if node.name in self.plan.inlined:
                        stack.append(self.plan.inlined[node.name])
                elif isinstance(node, S.Load):
                    names.add(node.tensor)
                elif isinstance(node, S.Gather):
                    names.add(node.tensor)
                    gathered.add(node.tensor)
        return names, gathered

    def emit(self, w: Writer, level: Level):
        for item in level.lines:
            if isinstance(item, Level):
                self.loop(w, item)
            else:
                w.line(item)
        if level.inner is not None:
            self.loop(w, level.inner)

    def loop(self, w: Writer, level: Level):
        if level.axis is None:
            self.emit(w, level)
            return
        w.line(f"for {self.plan.lane[level.axis]} in range({self.plan.count[level.axis]}):")
        with w.indent():
            self.emit(w, level)

    def counted(self, axis: str) -> str:
        return "u64(1)" if self.plan.single(axis) else self.plan.count[axis]

    # ---- Dot: the micro-kernel reads operands in memory in place, others are packed first
    def pack_invariant(self, loop: S.For, w: Writer):
        """Before `loop`, pack the a tile of each float product in it that is the same in every
        step (attention's Q in the loop over keys): a tensor's tile or a stored tile over axes
        brought into scope outside the loop, which nothing in the loop writes. The product then
        reads the packed tile every step (_dot's a_packed) instead of packing it again."""
        inside = list(S.walk_statements(loop.body))
        moving = {x.name for x in inside if isinstance(x, S.Axis)}
        written = {x.name for x in inside if isinstance(x, S.Assign)} \
            | {x.tensor for x in inside if isinstance(x, (S.Store, S.Scatter))}
        for x in inside:
            if not (isinstance(x, S.Assign) and isinstance(x.value, S.Dot)) or id(x) in self.packed \
                    or is_integer(x.value.acc_dtype):
                continue
            a = self.held(x.value.a)
            if isinstance(a, S.Load):
                source, axes, name = a.tensor, a.indices, a.tensor
            elif isinstance(a, S.Ref):
                storage = self.plan.storage[a.name]
                source, axes, name = a.name, storage.dims, storage.name
            else:
                continue
            dims = (x.value.a.dims[0], x.value.axis)
            found = None if source in written or moving & set(axes) else self.in_memory(a, dims)
            if found is None:
                continue
            self.packed.add(id(x))
            self.helpers.add("_dot_pack_a")
            w.line(f"# {name}'s tile is the same in every step of the loop below: packed once for its product")
            counts = f"{self.counted(dims[0])}, {self.counted(dims[1])}"
            w.line(f"_dot_pack_a({self.packing(x)}, {', '.join(found)}, {counts})")

    def packing(self, s: S.Assign) -> str:
        """The scratch array that float Dot s's micro-kernel copies its operands into."""
        if id(s) not in self.packings:
            plan = self.plan
            d: S.Dot = s.value
            self.helpers.add("_dot_packing")
            target = plan.kept_in.get(s.name, s.name)  # the output whose tile it is computed in, if any
            self.packings[id(s)] = (plan.names.fresh(f"{target}_packing"), plan.storage[s.name].name,
                                    plan.idx(plan.axes[d.a.dims[0]].size), plan.idx(plan.axes[d.axis].size))
        return self.packings[id(s)][0]

    def dot(self, w: Writer, s: S.Assign, store: Storage):
        plan = self.plan
        d: S.Dot = s.value
        i, j, k = d.a.dims[0], d.b.dims[1], d.axis
        assert store.dims == (i, j), (store.dims, i, j)
        integer = is_integer(d.acc_dtype)  # two i8 operands, an i32 product
        packed = id(s) in self.packed
        operands, transposed = [], False
        for operand, dims, side in ((d.a, (i, k), "lhs"), (d.b, (k, j), "rhs")):
            found = self.in_memory(operand, dims)
            if found is None and side == "rhs" and not integer:
                flipped = self.in_memory(operand, (j, k))  # K[l, k] read as [k, l]: _dot copies it so
                if flipped is not None:
                    found, transposed = (flipped[0], flipped[2], flipped[1]), True
            if found is None:
                base = _operand_name(operand) or f"{s.name}_{side}"
                pack = Storage(plan.names.fresh(f"{base}_tile"), dims)
                self.scratch.append((pack.name, tuple(plan.idx(plan.axes[x].size) for x in dims),
                                     operand.dtype if integer else plan.compute))
                self.nest(w, dims, lambda env, pack=pack: f"{self.at(pack, env)} = ", operand)
                found = pack.name, "u64(0)", "u64(0)"
            operands.append(", ".join(found))
        # without an accumulator (or right after its zero fill) _dot writes the product, unread
        accumulate = d.acc is not None and id(s) not in plan.overwriting
        loop = plan.overwriting_first.get(id(s))
        if loop is not None:  # over the zero-filled tile in the loop's first step
            accumulate = f"{plan.names.ir(loop.var)} != {plan.idx(loop.start)}"
        elif accumulate and not (isinstance(d.acc, S.Ref) and d.acc.name == s.name):
            self.nest(w, (i, j), lambda env: f"{self.at(store, env)} = ", d.acc)
        helper = "_dot_int" if integer else "_dot"
        self.helpers.add(helper)
        self.flush(w)
        target = ", ".join((store.name, self.absolute(i, {}), self.absolute(j, {}))) if store.in_tensor \
            else f"{store.name}, u64(0), u64(0)"
        args = [target, *operands, self.counted(i), self.counted(j), self.counted(k), str(accumulate)]
        if not integer:  # _dot copies into the packing what it does not read in place
            args.append(self.packing(s))
        args += ["b_transposed=True"] * transposed + ["a_packed=True"] * packed
        w.line(f"{helper}({', '.join(args)})")

    def scan(self, w: Writer, e: S.Scan, store: Storage):
        """A running value along the scan's axis, walked innermost and in order, for each lane of
        the others: its own nest, written out at once (lanes are read in order, so it joins no
        other statement's loops)."""
        plan = self.plan
        dims = tuple(d for d in store.dims if d != e.axis) + (e.axis,)
        levels = [Level(None)] + [Level(d) for d in dims if not plan.single(d)]
        for outer, inner in zip(levels, levels[1:]):
            outer.inner = inner
        env = {d: plan.lane[d] for d in dims if not plan.single(d)}
        running = plan.names.fresh(f"{store.name}_running")
        x = self.texpr(e.x, env, levels)
        levels[-2].lines.append(f"{running} = {self.const(SCANS[e.op].identity)}")
        levels[-1].lines += [f"{running} = {self.call(SCANS[e.op].combine, running, x)}",
                             f"{self.at(store, env)} = {running}"]
        self.flush(w)
        self.emit(w, levels[0])

    def held(self, e: S.TExpr) -> S.TExpr:
        """Operand e without what does not change its values in the lanes read: masks, casts to
        a dtype it already has, relayouts that keep its dims, tiles inlined into it."""
        plan = self.plan
        while True:
            if isinstance(e, S.Where) and is_mask(e.cond):
                e = e.a  # only valid lanes are read
            elif isinstance(e, S.Cast) and not is_integer(e.x.dtype) \
                    and (e.dtype == plan.compute or plan.exact_in(e.x, e.dtype)):
                e = e.x
            elif isinstance(e, S.Expand) and e.x.dims == e.dims:
                e = e.x
            elif isinstance(e, S.Ref) and e.name in plan.inlined:
                e = plan.inlined[e.name]
            else:
                return e

    def in_memory(self, e: S.TExpr, dims) -> tuple[str, str, str] | None:
        """(array, first row, first column) holding operand e over `dims` as it is, if any: a load
        without conversion, or a stored tile laid out as `dims`."""
        plan = self.plan
        e = self.held(e)
        if isinstance(e, S.Ref) and plan.storage[e.name].dims == tuple(dims):
            return plan.storage[e.name].name, "u64(0)", "u64(0)"
        if isinstance(e, S.Load) and plan.p.tensor(e.tensor).dtype == e.dtype in (plan.compute, "i8"):
            # leading one-lane axes (a head's Q[b, h, m, k]) index a 2-D view, no copy
            lead = len(e.indices) - len(dims)
            if e.indices[lead:] == tuple(dims) and all(plan.single(a) for a in e.indices[:lead]):
                view = plan.tensor[e.tensor]
                if lead:
                    view += f"[{', '.join(self.absolute(a, {}) for a in e.indices[:lead])}]"
                return (view,) + tuple(self.absolute(a, {}) for a in dims)
        return None


def merged(first: Level, second: Level) -> Level | None:
    """One nest doing `first`'s loop and then `second`'s reduction loop in each lane, where
    `first` is a plain loop over the lanes of an axis and `second` a reduction whose one loop walks
    the same lanes: the reduction's accumulators start before the loop and its result is taken
    after. Both may sit in the same outer loops (a sum over l for each m of a tile over m and l,
    just computed): then each lane of those runs `first`'s walk and the reduction together.
    Sound because a lane loop reads stored tiles at its own lane only (no IR node reads a
    tile at another lane), so the reduction's lane reads what the first loop wrote in that lane;
    a Gather reads a tensor at other lanes, and `queue` merges none with the loop writing it."""
    loop = first.inner
    if first.lines or loop is None or loop.axis is None or any(isinstance(x, Level) for x in loop.lines):
        return None
    if loop.inner is not None:  # an outer loop: second must walk it too, with nothing else around it
        outer = second.inner
        if second.lines or outer is None or outer.axis != loop.axis:
            return None
        joined = merged(Level(None, [], loop.inner), Level(None, outer.lines, outer.inner)) if not loop.lines else None
        return None if joined is None else Level(None, [], Level(loop.axis, joined.lines, joined.inner))
    if second.inner is not None:
        return None
    inner = [x for x in second.lines if isinstance(x, Level)]
    if len(inner) != 1 or inner[0].axis != loop.axis or inner[0].inner is not None \
            or any(isinstance(x, Level) for x in inner[0].lines):
        return None
    at = second.lines.index(inner[0])
    walk = Level(loop.axis, loop.lines + inner[0].lines)
    return Level(None, second.lines[:at] + [walk] + second.lines[at + 1:])


def _operand_name(e: S.TExpr) -> str | None:
    """The tile a Dot operand is, under relayouts, casts and masks: what its packed copy is named after."""
    while isinstance(e, (S.Expand, S.BroadcastTo, S.Cast)) or (isinstance(e, S.Where) and is_mask(e.cond)):
        e = e.a if isinstance(e, S.Where) else e.x
    return e.name if isinstance(e, S.Ref) else None
