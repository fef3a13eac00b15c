"""TMA planning for one kernel with `tma()` (Hopper and later): which loads and stores move
through tensor descriptors, and the boxes the launcher makes descriptors of. TMA reads zeros
and drops writes outside the tensor, which is then what the masks did; the launcher checks at
each call that the tensors suit TMA (host_helpers.py's `_tma_ready`), and the kernel moves
its tiles through pointers where they do not."""
from __future__ import annotations

import math

from dt.backends.pysource import Names
from dt.backends.triton.layout import KernelLayout
from dt.dtypes import ITEM_BYTES
from dt.errors import DTScheduleError
from dt.ir import scheduled as S

TMA_MAX_BOX = 256  # a TMA box spans at most 256 elements along each dimension
TMA_MIN_ROW_BYTES = 16  # and at least 16 bytes along the contiguous one
TMA_MAX_RANK = 5
# A loaded box lands in a buffer of shared memory (one a pipeline stage): a larger one goes through
# pointers, so that tma() never asks for more than a GPU has (a split product's chunks combined,
# [64, 16, 64] f32 = 256 KiB, against an H100's 227 KiB); matmul and attention boxes take 8-32 KiB.
# A stored box is not limited: an epilogue's (a 128 x 256 f32 product, 128 KiB) reuses the loop's.
TMA_MAX_BOX_BYTES = 64 * 1024
FLOAT_ITEM_BYTES = max(ITEM_BYTES[d] for d in ("f32", "f16", "bf16"))  # the widest a float program's tiles hold

Box = tuple[str, tuple]  # (tensor, each dimension's tile: an int, or a `{dim}_SIZE` padded at launch)


def _limit(ax: S.Axis, layout: KernelLayout) -> S.IExpr | None:
    """The axis's limit, a Let it names resolved."""
    limit = ax.limit
    return layout.lets[limit.name] if isinstance(limit, S.IVar) and limit.name in layout.lets else limit


def ends_with_tensor(ax: S.Axis, layout: KernelLayout) -> bool:
    """Whether the axis's lanes are valid exactly below its extent, as a TMA box's are (it reads
    zeros past the tensor's end, nowhere else): no limit, the extent, or the block's end there."""
    extent = S.IVar(S.size_name(ax.dim))
    limit = _limit(ax, layout)
    return limit is None or limit == extent or limit == S.imin(S.iadd(ax.start, ax.size), extent)


class TmaPlan:
    """With the kernel's `tma`, every load and store whose tile is a box of its tensor
    (`_candidate`) goes through a tensor descriptor; without it, none does."""

    def __init__(self, kernel: S.Kernel, pipeline: S.Pipeline, layout: KernelLayout, names: Names):
        self.kernel = kernel
        self.pipeline = pipeline
        self.layout = layout
        self.names = names
        self.descriptors: dict[Box, str] = {}  # box -> descriptor
        self.box_dims: dict[Box, list[tuple[str, ...]]] = {}  # the dims indexing each box
        self.box_descriptor: dict[S.Load | S.Store, str] = {}  # what moves by TMA, and through which
        self.loops_around: dict[str, list[S.For]] = {}  # axis -> the tile loops enclosing it
        if kernel.tma:
            self._plan()

    def _plan(self):
        def visit(body, loops):
            for s in body:
                if isinstance(s, S.Axis):
                    self.loops_around[s.name] = loops
                elif isinstance(s, S.For):
                    visit(s.body, loops + [s])
        visit(self.kernel.body, [])
        boxes = 0  # tiles that are boxes, whatever their dtype
        for s in S.walk_statements(self.kernel.body):
            if isinstance(s, S.Store) and s.value.dims == self.tiled(s.indices):
                boxes += self._candidate(s)
            if isinstance(s, (S.Assign, S.Store)):
                for node in S.walk_texpr(s.value):
                    if isinstance(node, S.Load) and sorted(node.order) == sorted(self.tiled(node.indices)):
                        boxes += self._candidate(node)
        if not boxes:
            raise DTScheduleError(
                f"{self.kernel.func}.tma() finds no tile to move through a tensor descriptor in kernel "
                f"'{self.kernel.name}'", self.kernel.loc,
                f"TMA moves a tile that is a box of its tensor: indexed by its dimensions in the tensor's order, "
                f"of 1 to {TMA_MAX_RANK} dimensions, each tiled with a power of two of at most {TMA_MAX_BOX} that is "
                f"the block or divides it, or with the whole of an unblocked extent (tensorize(v:0)), and "
                f"{TMA_MIN_ROW_BYTES} bytes or more along the last (a load's at most {TMA_MAX_BOX_BYTES // 1024} "
                f"KiB in all); or remove {self.kernel.func}.tma()")

    def tiled(self, indices) -> tuple[str, ...]:
        """The tile axes among `indices`: a scalar axis is a box dimension of 1 the tile lacks."""
        return tuple(a for a in indices if not self.layout.axes[a].axis.scalar)

    def _candidate(self, node: S.Load | S.Store) -> bool:
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
        if isinstance(last, int) and last * max(FLOAT_ITEM_BYTES, ITEM_BYTES[spec.dtype]) < TMA_MIN_ROW_BYTES:
            return False  # too narrow in every dtype
        if isinstance(node, S.Load) and math.prod(n for n in box if isinstance(n, int)) * ITEM_BYTES[spec.dtype] > \
                TMA_MAX_BOX_BYTES:
            return True  # a box, but too large for a buffer of shared memory: pointers
        if spec.dtype == "bool":  # Triton's int1 (a byte in memory, a bit in registers): pointers here
            return True
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
        if ends_with_tensor(ax, self.layout):
            return True
        extent = S.IVar(S.size_name(ax.dim))
        limit = _limit(ax, self.layout)
        # A tile loop inside a block: lowering walks range(0, block length, tile), so with the
        # tile dividing the block, every tile ends inside the block.
        if not (isinstance(limit, S.IBin) and limit.op == "min" and limit.b == extent and isinstance(limit.a, S.IBin)
                and limit.a.op == "+" and isinstance(limit.a.b, S.IConst)):
            return False
        block_start, block = limit.a.a, limit.a.b.value
        return any(ax.start == S.iadd(block_start, S.IVar(loop.var)) and loop.start == S.IConst(0)
                   and ax.size == S.IConst(loop.step) and block % loop.step == 0
                   for loop in self.loops_around[ax.name])
