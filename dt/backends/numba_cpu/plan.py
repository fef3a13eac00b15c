"""The plan of one kernel of the Numba module, made before any of it is rendered: the names of
its parameters, axes and tiles, the lanes of each axis, and which tile assignments become loops.

A tile assigned once and used where it is computed is *inlined* into its uses (its value is
rendered again wherever it is read); the others (accumulators, tiles used twice or in a deeper
loop, Dot results) are *stored*: in a scratch array over their looped axes, allocated once per
call of the kernel function, or in a scalar where every axis has one lane. A Dot result whose
only use is its store into an output tensor is kept in that tensor's tile instead (no scratch
tile to copy out), and a Dot right after its target's zero fill writes the target instead of
adding to it (no fill), as does the first step of a loop of Dots adding onto a tile zero-filled
right before the loop (the fill then runs only where the loop runs no step). Likewise an
element-wise tile the output is then computed from, lane by lane (softmax's e = exp(A - max),
summed, then divided by the sum), is kept in the output's tile.
"""
from __future__ import annotations

from dataclasses import dataclass

from dt.backends.pysource import Names
from dt.ir import scheduled as S
from dt.ir import uses
from dt.ir.index_expr import IConst, IVar, index_source as index, renamed
from dt.ir.naming import size_name
from dt.ir.nesting import MAX_NESTING


@dataclass
class Storage:
    """Where a materialised tile lives: a scratch array over `dims` (of the tile's dtype, a float
    in the compute dtype), a scalar (no dims), or, `in_tensor`, the tile of the tensor parameter
    `name` at the axes' starts."""
    name: str
    dims: tuple[str, ...]
    in_tensor: bool = False


class KernelPlan:
    """What the renderer of one kernel works from: the kernel's names, its axes with their lane
    counts and lane variables, and for each tile whether it is `inlined` (its value) or kept
    (its `storage`)."""

    def __init__(self, pipeline: S.Pipeline, kernel: S.Kernel, module_names: Names):
        self.p = pipeline
        self.k = kernel
        self.compute = pipeline.compute_dtype
        # The kernel's IR names first (as they are), then the names it derives (`x_valid`, `sum_y`).
        self.names = Names(module_names.taken | {"first", "last"})
        self.params = uses.kernel_params(kernel, pipeline)
        self.pid = self.names.ir("pid")
        global_names = pipeline.global_names
        self.tensor = {t: self.names.ir(global_names.tensors[t]) for t in self.params.tensors}  # its parameter
        self.scalar = {s: self.names.ir(global_names.scalars[s]) for s in self.params.scalars}
        for size in self.params.sizes:
            self.names.ir(size)
        self.axes: dict[str, S.Axis] = {}
        self.assigns: dict[str, list[S.Assign]] = {}
        for s in S.walk_statements(kernel.body):
            if isinstance(s, S.Axis):
                self.axes[s.name] = s
            elif isinstance(s, S.Assign):
                self.assigns.setdefault(s.name, []).append(s)
            if isinstance(s, (S.Let, S.LetValue, S.Assign)):
                self.names.ir(s.name)
            elif isinstance(s, S.For):
                self.names.ir(s.var)
        # per looped axis: its number of valid lanes and its lane variable
        self.count: dict[str, str] = {}
        self.lane: dict[str, str] = {}
        for a in self.axes.values():
            if not self.single(a.name):
                self.count[a.name] = self.names.fresh(f"{a.name}_valid")
                self.lane[a.name] = self.names.fresh(f"{a.name}_i")
        self.dot_targets = {s.name for ss in self.assigns.values() for s in ss if isinstance(s.value, S.Dot)}
        self.inlined: dict[str, S.TExpr] = {}
        self.storage: dict[str, Storage] = {}
        self.scratch: list[tuple[str, tuple[str, ...], str]] = []  # (name, shape, dtype): stored tiles' arrays
        self.stored_in_place: set[int] = set()  # ids of the Stores of Dot results kept in their tensor
        self.kept_in: dict[str, str] = {}  # tile kept in an output's tile: that tensor (the renderer's reads and writes)
        self.unfilled: set[int] = set()  # ids of zero fills the Dot after them makes needless
        self.overwriting: set[int] = set()  # ids of those Dots: they write their target, not add to it
        # a zero fill right before a loop whose every step adds a Dot onto the filled tile: the
        # fill's id -> that loop (the fill runs only where the loop runs no step), and the Dot's id
        # -> the loop too (its first step writes the product over the tile, the others add to it)
        self.filled_if_empty: dict[int, S.For] = {}
        self.overwriting_first: dict[int, S.For] = {}
        self.plan()

    def single(self, axis: str) -> bool:
        """An axis of one lane that is always valid: no loop, lane 0."""
        a = self.axes[axis]
        return a.size == S.IConst(1) and a.limit is None

    def idx(self, e: S.IExpr) -> str:
        """An index expression in the kernel's names."""
        return index(renamed(e, self.names.ir))

    def plan(self):
        """Which tiles are inlined into their uses, and where the others are kept."""
        order = []  # statements in program order with their enclosing loops
        def visit(body, loops):
            for s in body:
                order.append((s, loops))
                if isinstance(s, S.For):
                    visit(s.body, loops + (id(s),))
        visit(self.k.body, ())
        writes: dict[str, list[int]] = {}
        for i, (s, _) in enumerate(order):
            if isinstance(s, S.Assign):
                writes.setdefault(s.name, []).append(i)
        uses: dict[str, list[tuple[int, tuple, tuple[str, ...]]]] = {}
        for i, (s, loops) in enumerate(order):
            for value in S.statement_values(s):
                for name, lanes in self.refs(value, self.lanes_of(value)):
                    uses.setdefault(name, []).append((i, loops, lanes))
        reads: dict[str, set[str]] = {}  # the stored tiles an inlined tile's value reads
        for i, (s, loops) in enumerate(order):
            if not isinstance(s, S.Assign):
                continue
            own = {r for r, _ in self.refs(s.value, ())}
            reads[s.name] = set().union(*(reads.get(r, {r}) for r in own)) if own else set()
            if self.inlinable(s, i, loops, writes, uses.get(s.name, []), reads[s.name], order):
                self.inlined[s.name] = s.value
            else:
                reads[s.name] = {s.name}
        touched: dict[str, int] = {}  # tensor: how often the kernel reads or writes it
        for s, _ in order:
            if isinstance(s, (S.Store, S.Scatter)):
                touched[s.tensor] = touched.get(s.tensor, 0) + 1
            for value in S.statement_values(s):
                for node in S.walk_texpr(value):
                    if isinstance(node, (S.Load, S.Gather)):
                        touched[node.tensor] = touched.get(node.tensor, 0) + 1
        loops_of = {id(s): loops for s, loops in order}
        in_place = self.dots_into_outputs(order, uses, touched, loops_of)
        in_place |= self.tiles_into_outputs(order, touched, loops_of, {tensor for tensor, _ in in_place.values()})
        self.kept_in = {name: tensor for name, (tensor, _) in in_place.items()}
        self.zero_fills(self.k.body)
        for name, ss in self.assigns.items():
            if name in self.inlined:
                continue
            if name in in_place:
                tensor, axes = in_place[name]
                self.storage[name] = Storage(self.tensor[tensor], axes, in_tensor=True)
                continue
            value = ss[0].value
            if name in self.dot_targets:
                dims = value.dims
            else:
                dims = tuple(d for d in value.dims if d not in value.unit and not self.single(d))
            self.storage[name] = Storage(self.names.ir(name), dims)
            if dims:
                shape = tuple(self.idx(self.axes[d].size) for d in dims)
                self.scratch.append((self.names.ir(name), shape, value.dtype))

    def dots_into_outputs(self, order, uses, touched, loops_of) -> dict[str, tuple[str, tuple[str, ...]]]:
        """{Dot target: (tensor, the store's axes)} for the Dot results kept in an output tensor's
        tile: those whose one use (besides their Dots' own accumulators) is an unguarded store of exactly their
        tile into a tensor of the compute dtype that the kernel reads nowhere and writes nowhere
        else, so that nothing sees the tile before it is complete; and computed in the loops of
        that store, or one whole block of the output's rows (contiguous, as a scratch tile is):
        a 256 x 512 tile summed over k's tiles in the rows of a 2048 x 2048 output, 8 KB apart,
        falls into a quarter of the L2's sets and ran 5-8% slower than in a scratch tile."""
        found = {}
        for s, loops in order:
            if not isinstance(s, S.Store) or s.guard or touched[s.tensor] != 1 \
                    or self.p.tensor(s.tensor).dtype != self.compute:
                continue
            value = s.value
            while isinstance(value, S.Ref) and value.name in self.inlined and len(uses.get(value.name, ())) == 1:
                value = self.inlined[value.name]
            if not (isinstance(value, S.Ref) and value.name in self.dot_targets):
                continue
            name, ss = value.name, self.assigns[value.name]
            onto_itself = [a for a in ss if isinstance(a.value, S.Dot) and isinstance(a.value.acc, S.Ref)
                           and a.value.acc.name == name]
            fresh = [a for a in ss if isinstance(a.value, S.Full) or isinstance(a.value, S.Dot) and a.value.acc is None]
            if ss[0].value.dims == s.indices and len(onto_itself) + len(fresh) == len(ss) \
                    and len(uses.get(name, ())) == len(onto_itself) + 1 \
                    and (all(loops_of[id(a)] == loops for a in ss) or self.whole_rows(s)):
                found[name] = s.tensor, s.indices
                self.stored_in_place.add(id(s))
        return found

    def tiles_into_outputs(self, order, touched, loops_of, taken: set[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
        """{tile: (tensor, the store's axes)} for the element-wise tiles kept in an output
        tensor's tile: a tile of the compute dtype assigned once, over the lanes of an unguarded
        store into a tensor of that dtype that the kernel reads nowhere and writes nowhere else, in
        the store's loops, and read last by that store, itself or through the tiles inlined into
        it (a reduction of it is a tile of its own, computed before; a tile inlined into a
        statement after the store would read the output's values instead). Writing softmax's
        exp(A - max) into the output and dividing it there ran 1.3x faster than through a row of
        scratch on an AVX-512 Xeon."""
        # tiles a product or a scan reads: their renderers take a scratch tile's address
        operands = {n for s, _ in order for value in S.statement_values(s) for node in S.walk_texpr(value)
                    if isinstance(node, (S.Dot, S.Scan)) for n in self.stored_refs(node)}
        # the last statement reading each stored tile, itself or through a tile inlined into it
        # (an inlined tile is rendered where it is used, which may be after the store)
        last_read: dict[str, int] = {}
        for j, (s, _) in enumerate(order):
            if not (isinstance(s, S.Assign) and s.name in self.inlined):
                for value in S.statement_values(s):
                    for n in self.stored_refs(value):
                        last_read[n] = j
        found = {}
        for i, (s, loops) in enumerate(order):
            if not isinstance(s, S.Store) or s.guard or touched[s.tensor] != 1 or id(s) in self.stored_in_place \
                    or self.p.tensor(s.tensor).dtype != self.compute or s.tensor in taken:
                continue
            lanes = tuple(a for a in s.indices if not self.single(a))
            if not lanes:  # a tile of one lane is a scalar, in a register
                continue
            for name in self.stored_refs(s.value):
                ss = self.assigns.get(name, ())
                if name in self.inlined or name in found or len(ss) != 1 or self.lanes_of(ss[0].value) != lanes \
                        or ss[0].value.dtype != self.compute or isinstance(ss[0].value, (S.Dot, S.Scan)) \
                        or loops_of[id(ss[0])] != loops or last_read.get(name, i) > i \
                        or name in operands:
                    continue
                found[name] = s.tensor, s.indices
                break
        return found

    def stored_refs(self, e: S.TExpr) -> list[str]:
        """The stored tiles e reads, itself or through the tiles inlined into it, in order."""
        found: list[str] = []
        for node in S.walk_texpr(e):
            if isinstance(node, S.Ref):
                inner = self.stored_refs(self.inlined[node.name]) if node.name in self.inlined else [node.name]
                found += [n for n in inner if n not in found]
        return found

    def whole_rows(self, s: S.Store) -> bool:
        """The store writes whole rows of its tensor: its last axis spans the last dimension."""
        last = self.axes[s.indices[-1]]
        dim = self.p.tensor(s.tensor).dims[-1]
        return last.start == IConst(0) and last.size == IVar(size_name(dim)) and last.limit is None

    def zero_fills(self, body):
        """Find the zero fills of Dot targets followed by a Dot onto them with nothing in between
        that the kernel renders (axes, inlined tiles and index values aside)."""
        for n, s in enumerate(body):
            if isinstance(s, S.For):
                self.zero_fills(s.body)
            if not (isinstance(s, S.Assign) and s.name in self.dot_targets and isinstance(s.value, S.Full)
                    and s.value.value == 0):
                continue
            for after in body[n + 1:]:
                if isinstance(after, S.Assign) and after.name == s.name:
                    d = after.value
                    if isinstance(d, S.Dot) and isinstance(d.acc, S.Ref) and d.acc.name == s.name \
                            and s.name not in self.stored_refs(d.a) + self.stored_refs(d.b):
                        self.unfilled.add(id(s))
                        self.overwriting.add(id(after))
                    break
                if isinstance(after, S.For):
                    dot = self.first_write_in(after.body, s.name)
                    if dot is not None:
                        self.filled_if_empty[id(s)] = self.overwriting_first[id(dot)] = after
                    break
                rendered = not isinstance(after, (S.Axis, S.Let)) \
                    and not (isinstance(after, S.Assign) and after.name in self.inlined)
                if rendered:
                    break

    def first_write_in(self, body, name: str) -> S.Assign | None:
        """The Dot adding onto tile `name` in `body`, where nothing before it in `body` reads or
        writes `name` (axes, index values and other tiles' assignments that do not read it) and it
        reads `name` only as its accumulator; else None."""
        for s in body:
            if isinstance(s, (S.Axis, S.Let)):
                continue
            if not isinstance(s, S.Assign):
                return None
            if s.name == name:
                d = s.value
                own = isinstance(d, S.Dot) and isinstance(d.acc, S.Ref) and d.acc.name == name
                return s if own and name not in self.stored_refs(d.a) + self.stored_refs(d.b) else None
            if name in self.stored_refs(s.value):
                return None
        return None

    def inlinable(self, s: S.Assign, i, loops, writes, uses, reads, order) -> bool:
        if len(writes[s.name]) > 1 or any(isinstance(n, (S.Reduce, S.Dot, S.Scan)) for n in S.walk_texpr(s.value)):
            return False
        cheap = self.cheap(s.value)
        if not cheap:
            if len(uses) > 1:
                return False
            value_lanes = tuple(sorted(self.lanes_of(s.value)))
            if any(use_loops != loops or tuple(sorted(lanes)) != value_lanes for _, use_loops, lanes in uses):
                return False  # it would be recomputed per iteration of a loop, or per lane of an axis
        for j, use_loops, _ in uses:
            entered = set(use_loops) - set(loops)
            for w in (w for r in reads for w in writes.get(r, ())):
                if i < w < j or entered & set(order[w][1]):
                    return False  # what it reads changes before the use, or in a loop around the use
        # the lowering split deep expressions into tiles (dt.ir.nesting): inlining must not join them again
        return self.inlined_nesting(s.value) <= MAX_NESTING

    def inlined_nesting(self, e: S.TExpr) -> int:
        """How deep e nests with the tiles inlined into it."""
        if isinstance(e, S.Ref) and e.name in self.inlined:
            return self.inlined_nesting(self.inlined[e.name])
        return 1 + max((self.inlined_nesting(c) for c in S.texpr_children(e)), default=0)

    def cheap(self, e: S.TExpr) -> bool:
        """Costs no more to recompute than to keep: loads, references, constants, relayouts."""
        if isinstance(e, (S.Load, S.Literal, S.Param, S.Extent, S.IndexOf, S.Mask, S.Full)):
            return True
        if isinstance(e, S.Ref):
            return e.name not in self.inlined or self.cheap(self.inlined[e.name])
        if isinstance(e, (S.Expand, S.BroadcastTo)):
            return self.cheap(e.x)
        if isinstance(e, S.Cast):
            return e.dtype == self.compute and self.cheap(e.x)
        return False

    def lanes_of(self, e: S.TExpr) -> tuple[str, ...]:
        """The axes whose lanes a value is computed over."""
        return tuple(d for d in e.dims if d not in e.unit and not self.single(d))

    def refs(self, e: S.TExpr, lanes):
        """(tile name, axes of the loops it is evaluated in) for every Ref in e."""
        if isinstance(e, S.Ref):
            yield e.name, lanes
            return
        if isinstance(e, S.Reduce):
            yield from self.refs(e.x, self.lanes_of(e.x))
            return
        if isinstance(e, S.Dot):
            yield from self.refs(e.a, self.lanes_of(e.a))
            yield from self.refs(e.b, self.lanes_of(e.b))
            if e.acc is not None:
                yield from self.refs(e.acc, lanes)
            return
        for c in S.texpr_children(e):
            yield from self.refs(c, lanes)

    def deps(self, e: S.TExpr) -> set[str]:
        """The looped axes a value varies along."""
        if isinstance(e, S.Load):
            return {a for a in e.indices if not self.single(a)}
        if isinstance(e, S.IndexOf):
            return set() if self.single(e.axis) else {e.axis}
        if isinstance(e, S.Ref):
            if e.name in self.inlined:
                return self.deps(self.inlined[e.name])
            return {d for d in self.storage[e.name].dims if not self.single(d)}
        if isinstance(e, S.Reduce):
            return self.deps(e.x) - {e.axis}
        out: set[str] = set()
        for c in S.texpr_children(e):
            out |= self.deps(c)
        return out

    def exact_in(self, e: S.TExpr, dtype: str) -> bool:
        """e's values are already representable in `dtype` (a load of a tensor of that dtype)."""
        while True:
            if isinstance(e, (S.Expand, S.BroadcastTo)):
                e = e.x
            elif isinstance(e, S.Where) and is_mask(e.cond):
                e = e.a
            elif isinstance(e, S.Ref) and e.name in self.inlined:
                e = self.inlined[e.name]
            else:
                return isinstance(e, S.Load) and dtype in (e.dtype, self.p.tensor(e.tensor).dtype)


def is_mask(e: S.TExpr) -> bool:
    """e is a Mask, relaid out or not: true wherever a lane is computed."""
    return isinstance(S.without_layout(e), S.Mask)
