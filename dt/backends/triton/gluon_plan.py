"""Which kernels get a Gluon twin (gluon.py), and what its loops move and overlap: the products'
operands that TMA brings into shared memory (`Staged`: before a loop, or through a ring in it)
and each loop whose first product's result feeds its second (`Pipelined`). A kernel of another
shape raises `NotPipelined`, its message saying why."""
from __future__ import annotations

from dataclasses import dataclass

from dt.backends.triton.expressions import _axis_of
from dt.backends.triton.layout import KernelLayout
from dt.backends.triton.tma import TMA_MAX_RANK, ends_with_tensor
from dt.ir import scheduled as S
from dt.ir.index_expr import renamed

OPERAND_DTYPES = ("f16", "bf16")  # what the twin's wgmma takes
STORED_DTYPES = ("f16", "bf16", "f32")


class NotPipelined(Exception):
    """This kernel is not of the shape the Gluon renderer writes; the message says why."""


@dataclass(frozen=True)
class Staged:
    """A product's operand that TMA moves into shared memory: `tensor`'s box of `box` (a tile
    size, or 1, along each tensor dimension) starting at `coords`; `tiled`: its tile axes in the
    tensor's order, `order`: the operand's."""
    name: str
    tensor: str
    box: tuple
    coords: tuple  # per tensor dimension: ("axis", a tile axis), ("index", an IExpr) or ("value", a scalar TExpr)
    tiled: tuple[str, ...]
    order: tuple[str, ...]
    loop: S.For | None


@dataclass(frozen=True)
class Pipelined:
    """A loop of two products, the second's first operand computed from the first's result."""
    zero: int  # the body's statement that zeroes the first product's accumulator
    first: int  # the first product
    second: int  # the second product
    first_b: Staged
    second_b: Staged


def _names_set(s) -> set[str]:
    """The names a statement sets: an Assign's or Let's, a loop's variable, an Axis's."""
    if isinstance(s, S.For):
        return {s.var}
    name = getattr(s, "name", None)
    return {name} if name else set()


def _index_names(e: S.TExpr) -> set[str]:
    return {n for node in S.walk_texpr(e) if isinstance(node, S.Index) for n in S.index_names(node.value)}


class GluonPlan:
    """The plan of one kernel's twin: `row_dim` (the products' rows, first in every
    two-dimensional tile), `staged` (by the name of the statement that reads the operand),
    `loops` (by id of the For), `chains`: consecutive loops whose operands come through one
    ring as one stream of tiles, so that a loop's last steps load the next loop's first tiles
    (a causal kernel's loop below the diagonal, then the diagonal's), by id of each loop, and
    `stored`: the box each Store writes through TMA (by id of the Store; the others write
    through pointers)."""

    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, layout: KernelLayout, warps: int):
        self.kernel, self.pipeline, self.layout, self.warps = kernel, pipeline, layout, warps
        self.staged: dict[str, Staged] = {}
        self.loops: dict[int, Pipelined] = {}
        self.chains: dict[int, tuple[S.For, ...]] = {}
        self.stored: dict[int, Staged] = {}  # by id of the Store
        self.row_dim = ""
        self._plan()
        self._chain_loops()

    def _plan(self):
        body = self.kernel.body
        assigns = {s.name: s for s in S.walk_statements(body) if isinstance(s, S.Assign)}
        dots = [s for s in S.walk_statements(body) if isinstance(s, S.Assign) and isinstance(s.value, S.Dot)]
        if not dots:
            raise NotPipelined("no product")
        nested = [node for s in S.walk_statements(body) if isinstance(s, (S.Assign, S.Store))
                  for node in S.walk_texpr(s.value) if isinstance(node, S.Dot) and node is not s.value]
        if nested:
            raise NotPipelined("a product inside an expression")
        row_dims = {self.layout.axes[d.value.a.dims[0]].axis.dim for d in dots}
        if len(row_dims) != 1:
            raise NotPipelined("products of different rows")
        self.row_dim = row_dims.pop()
        if self.warps % 4:
            raise NotPipelined(f"{self.warps} warps (wgmma runs on warpgroups of 4 warps)")
        rows = self.layout.axes[dots[0].value.a.dims[0]].tile
        if not isinstance(rows, int) or rows % (16 * self.warps):
            raise NotPipelined(f"a block of {rows} rows, where {self.warps} warps take a multiple of "
                               f"{16 * self.warps} (wgmma: 16 rows a warp)")
        for d in dots:
            for x in (d.value.a, d.value.b):
                if x.dtype not in OPERAND_DTYPES:
                    raise NotPipelined(f"a product of {x.dtype} operands")
            if d.value.acc_dtype != "f32":
                raise NotPipelined("an accumulator other than f32")
        operands = {}
        for d in dots:
            for x, side in ((d.value.a, "a"), (d.value.b, "b")):
                if isinstance(x, S.Ref) and isinstance(assigns[x.name].value, (S.Load, S.Gather)):
                    operands[x.name] = side
        for s in S.walk_statements(body):
            if isinstance(s, (S.Assign, S.Store)):
                for node in S.walk_texpr(s.value):
                    if isinstance(node, (S.Load, S.Gather)) and not (isinstance(s, S.Assign) and s.value is node
                                                                     and s.name in operands):
                        raise NotPipelined(f"'{s.name if isinstance(s, S.Assign) else s.tensor}' reads a tile that "
                                           "is no product's operand")
                if isinstance(s, S.Assign) and isinstance(s.value, S.BroadcastTo):
                    raise NotPipelined("a broadcast assigned")
                if isinstance(s, S.Assign) and isinstance(s.value, S.SwapPairs):
                    raise NotPipelined("a tile's pairs swapped (pair_swaps.py: tl.split and tl.join)")
                dims = s.value.dims
                if len(dims) > 2:
                    raise NotPipelined(f"a tile of {len(dims)} dimensions")
                staged = isinstance(s, S.Assign) and s.name in operands
                if len(dims) == 2 and not staged and self.layout.axes[dims[0]].axis.dim != self.row_dim:
                    raise NotPipelined("a tile whose first dimension is not the products' rows")
        self._plan_loops(body, assigns, operands)
        for s in S.walk_statements(body):
            if isinstance(s, S.Scatter):
                raise NotPipelined("an indexed write")
            if isinstance(s, S.Store):
                if not any(s is t for t in body):
                    raise NotPipelined("a store in a loop")
                box = self._stored(s)
                if box is not None:
                    self.stored[id(s)] = box
        # One count of the tiles loaded (gluon.py's tiles_loaded) gives every ring's slot and
        # barrier phase: it holds for a ring only if every loop loads its tiles through it.
        rings = {frozenset({(p.first_b.tensor, p.first_b.box), (p.second_b.tensor, p.second_b.box)})
                 for p in self.loops.values()}
        if len(rings) > 1:
            raise NotPipelined("loops whose products' operands arrive through different rings")
        if any(isinstance(s, S.Assign) and isinstance(s.value, S.Dot) for s in body):  # loops don't nest
            raise NotPipelined("a product outside a loop")

    def _plan_loops(self, body, assigns, operands):
        for s in body:
            if isinstance(s, S.For):
                if any(isinstance(t, S.For) for t in s.body):
                    raise NotPipelined("nested loops")
                self._plan_loop(s, assigns, operands)
            elif isinstance(s, S.Assign) and s.name in operands:
                self.staged[s.name] = self._staged(s, None)

    def _plan_loop(self, loop: S.For, assigns, operands):
        body = loop.body
        dots = [i for i, s in enumerate(body) if isinstance(s, S.Assign) and isinstance(s.value, S.Dot)]
        for i, s in enumerate(body):
            if isinstance(s, S.Assign) and s.name in operands:
                self.staged[s.name] = self._staged(s, loop)
        if not dots:
            if any(isinstance(s, S.Assign) and s.name in operands for s in body):
                raise NotPipelined("a loop loads operands but has no product")
            return
        if len(dots) != 2:
            raise NotPipelined(f"a loop of {len(dots)} products (two: the first's result feeds the second)")
        first, second = (body[i] for i in dots)
        a1, b1, acc1 = first.value.a, first.value.b, first.value.acc
        a2, b2 = second.value.a, second.value.b
        zero = next((i for i, s in enumerate(body[:dots[0]]) if isinstance(acc1, S.Ref) and isinstance(s, S.Assign)
                     and s.name == acc1.name and isinstance(s.value, S.Full) and s.value.value == 0.0), None)
        if zero is None or acc1.name != first.name:
            raise NotPipelined("the first product does not start from zero each step")
        if not (isinstance(a1, S.Ref) and a1.name in self.staged and self.staged[a1.name].loop is None):
            raise NotPipelined("the first product's first operand is not loaded before the loop")
        for b in (b1, b2):
            if not (isinstance(b, S.Ref) and b.name in self.staged and self.staged[b.name].loop is loop):
                raise NotPipelined("a product's second operand is not loaded in the loop")
        if isinstance(a2, S.Ref) and a2.name in self.staged:
            raise NotPipelined("the second product's first operand is loaded, not computed")
        feeds = {first.name}
        for s in body[dots[0] + 1:dots[1]]:
            if isinstance(s, S.Assign) and any(isinstance(n, S.Ref) and n.name in feeds
                                               for v in S.statement_values(s) for n in S.walk_texpr(v)):
                feeds.add(s.name)
        if not any(isinstance(n, S.Ref) and n.name in feeds for n in S.walk_texpr(a2)):
            raise NotPipelined("the second product does not take the first's result")
        # The second product of step t runs during step t + 1: only its own accumulator may read it.
        if any(isinstance(n, S.Ref) and n.name == second.name for i, s in enumerate(body) if i != dots[1]
               for v in S.statement_values(s) for n in S.walk_texpr(v)):
            raise NotPipelined("the second product's result is read in the loop")
        if any(isinstance(n, S.Ref) and n.name == second.name for n in S.walk_texpr(a2)):
            raise NotPipelined("the second product's operand reads its result")
        if (self.staged[b1.name].tensor, self.staged[b1.name].box) == (self.staged[b2.name].tensor, self.staged[b2.name].box):
            raise NotPipelined("both products' operands in the loop from one box (one ring barrier would serve two loads)")
        self.loops[id(loop)] = Pipelined(zero, dots[0], dots[1], self.staged[b1.name], self.staged[b2.name])

    def _chain_loops(self):
        """Group consecutive pipelined loops into chains: a loop joins the chain before it when
        nothing between them loops, its bounds and its tiles' coordinates can be computed before
        the chain's first loop starts, and its tiles differ from the chain's only along the loop."""
        chain: list[S.For] = []
        assigned: set[str] = set()  # names set since the chain's first loop started
        for s in self.kernel.body:
            if isinstance(s, S.For) and id(s) in self.loops:
                if chain and self._joins(chain[-1], s, assigned):
                    chain.append(s)
                else:
                    self._close(chain)
                    chain, assigned = [s], set()
            elif isinstance(s, S.For):
                self._close(chain)
                chain, assigned = [], set()
            if chain:
                assigned |= {name for t in S.walk_statements((s,)) for name in _names_set(t)}
        self._close(chain)

    def _close(self, chain: list[S.For]):
        if len(chain) > 1:
            self.chains.update(dict.fromkeys(map(id, chain), tuple(chain)))

    def loads_read(self, loop: S.For) -> set[str]:
        """The names a pipelined loop's bounds and its tiles' coordinates read, other than along the
        loop (an axis's start)."""
        read = S.index_names(loop.start) | S.index_names(loop.stop)
        plan = self.loops[id(loop)]
        for st in (plan.first_b, plan.second_b):
            for kind, value in st.coords:
                if kind == "index":
                    read |= S.index_names(value)
                elif kind == "value":
                    read |= _index_names(value) | {n.name for n in S.walk_texpr(value) if isinstance(n, S.Ref)}
        return read

    def _joins(self, before: S.For, loop: S.For, assigned: set[str]) -> bool:
        mine, theirs = self.loops[id(loop)], self.loops[id(before)]
        return not self.loads_read(loop) & assigned and all(self._along_loop(a) == self._along_loop(b) for a, b in
                                           ((mine.first_b, theirs.first_b), (mine.second_b, theirs.second_b)))

    def _along_loop(self, st: Staged) -> tuple:
        """`st`'s coordinates, its loop's variable written `@`: equal for two loops' tiles of one stream."""
        coords = []
        for kind, value in st.coords:
            if kind == "axis":
                start = self.layout.axes[value].axis.start
                value = renamed(start, lambda n: "@" if n == st.loop.var else n)
            coords.append((kind, value))
        return st.tensor, st.box, tuple(coords)

    def _staged(self, s: S.Assign, loop: S.For | None) -> Staged:
        node = s.value
        if self.pipeline.tensor(node.tensor).dtype not in OPERAND_DTYPES or \
                node.dtype != self.pipeline.tensor(node.tensor).dtype:
            raise NotPipelined(f"an operand of {node.tensor} converted on load")
        axes = list(node.indices) if isinstance(node, S.Load) else [_axis_of(sub) for sub in node.subscripts]
        return self._box(s.name, node.tensor, axes, getattr(node, "subscripts", ()), node.order, loop)

    def _stored(self, s: S.Store) -> Staged | None:
        """The box TMA stores `s`'s tile through: the box's lanes past the tensor's end are not
        written, which is what the Triton kernel's mask does. None where TMA cannot store the
        tile so (a row of statistics a backward reads, a store made by one program of several,
        a dtype TMA does not store): it goes through pointers, as the Triton kernel's does."""
        if self.pipeline.tensor(s.tensor).dtype not in STORED_DTYPES or s.guard:
            return None
        try:
            return self._box(s.tensor, s.tensor, list(s.indices), (), s.value.dims, None)
        except NotPipelined:
            return None

    def _box(self, name: str, tensor: str, axes: list, subscripts: tuple, order: tuple, loop: S.For | None) -> Staged:
        if len(self.pipeline.tensor(tensor).dims) > TMA_MAX_RANK:
            raise NotPipelined(f"a tile of {tensor}, of more than {TMA_MAX_RANK} dimensions (TMA's most)")
        coords, box, tiled = [], [], []
        for i, axis in enumerate(axes):
            lay = self.layout.axes.get(axis) if axis else None
            if lay is not None and not lay.axis.scalar:
                lanes = S.IConst(lay.tile) if isinstance(lay.tile, int) else S.IVar(lay.tile)
                if lay.axis.size != lanes:  # the box would read the padding from the tensor
                    raise NotPipelined(f"a tile of {tensor} padded to {lay.tile} lanes")
                if not ends_with_tensor(lay.axis, self.layout):
                    raise NotPipelined(f"a tile of {tensor} ends inside the tensor")
                coords.append(("axis", axis))
                box.append(lay.tile)
                tiled.append(axis)
            elif lay is not None:
                coords.append(("index", lay.axis.start))
                box.append(1)
            else:
                sub = subscripts[i]
                if sub.dims or (loop is not None and loop.var in _index_names(sub)):
                    raise NotPipelined(f"a computed subscript of {tensor} that moves with the tile")
                coords.append(("value", sub))
                box.append(1)
        if sorted(tiled) != sorted(order) or len(tiled) != 2:
            raise NotPipelined(f"{tensor}'s tile is not a two-dimensional box")
        return Staged(name, tensor, tuple(box), tuple(coords), tuple(tiled), tuple(order), loop)
