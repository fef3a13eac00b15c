"""The register layouts of a Gluon twin's tiles (gluon.py): one wgmma layout per column
dimension of the products, each product's result in its own (one instruction spans its columns,
up to 256), the first products' the default; every other tile takes the layout of the result
sharing its columns, a row the first product's rows."""
from __future__ import annotations

from typing import NamedTuple

from dt.backends.pysource import Writer
from dt.backends.triton.expressions import TL_DTYPE
from dt.backends.triton.gluon_plan import NotPipelined
from dt.backends.triton.kernel import KernelRenderer
from dt.ir import scheduled as S


class Grid(NamedTuple):
    """The names of one wgmma register layout (a product's result's) and what derives from it."""
    layout: str
    rows: str  # its row slice
    columns: str  # its column slice
    width: str  # MMA_N: the columns of one instruction
    operand: str  # a product's first operand in registers, for a result of this layout
    tiles: list  # the column tiles of the results in it


class GluonLayouts(KernelRenderer):
    """What a Gluon twin's renderer (gluon.py) adds to the Triton renderer's for layouts: `grids`
    (by column dimension) and `default` are set by the twin; each layout spans one warpgroup
    (a partition's)."""
    grids: dict
    default: Grid

    def _grids(self) -> dict[str, Grid]:
        """One wgmma register layout per column dimension of the products (each product's result
        in its own: one instruction spans its columns, up to 256), the first products' first:
        by dimension, the names of the layout, its row and column slices, its instruction's
        width and the layout of a product operand taken from registers."""
        widths: dict[str, list] = {}
        for loop in self.kernel.body:
            if id(loop) in self.loops:
                plan = self.loops[id(loop)]
                for s in (loop.body[plan.first], loop.body[plan.second]):
                    column = self.layout.axes[s.value.b.dims[1]]
                    widths.setdefault(column.axis.dim, []).append(column.tile)
        grids = {}
        for i, (dim, tiles) in enumerate(widths.items()):
            suffix = "" if i == 0 else f"_{dim}"
            names = (f"mma_layout{suffix}", f"rows{suffix}", f"columns{suffix}", f"MMA_N{suffix}",
                     f"operand_layout{suffix}")
            grids[dim] = Grid(*(self.names.fresh(n) for n in names), tiles)
        return grids

    def _layouts(self, w: Writer):
        w.line("# a register layout for each product's result, rows first; every other tile takes the")
        w.line("# layout of the result sharing its columns (the first product's by default), MMA_N the")
        w.line("# columns of one wgmma instruction")
        for layout, rows, columns, width, operand, tiles in self.grids.values():
            ints = sorted({min(t, 256) for t in tiles if isinstance(t, int)})
            texts = ([str(ints[0])] if ints else []) + sorted({self.tiles[t] for t in tiles if not isinstance(t, int)})
            narrowest = texts[0]
            for t in texts[1:]:
                narrowest = f"({t} if {t} < {narrowest} else {narrowest})"
            if not ints:
                narrowest = f"({narrowest} if {narrowest} < 256 else 256)"
            w.line(f"{width}: gl.constexpr = {narrowest}")
            w.line(f"{layout}: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], "
                   f"warps_per_cta=[4, 1], instr_shape=[16, {width}, 16])")
            w.line(f"{rows}: gl.constexpr = gl.SliceLayout(1, {layout})")
            w.line(f"{columns}: gl.constexpr = gl.SliceLayout(0, {layout})")
            w.line(f"{operand}: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent={layout}, k_width=2)")

    def _grid(self, dim: str) -> Grid:
        """The layouts of tiles whose columns run along `dim`."""
        return self.grids.get(dim, self.default)

    def _layout_of(self, axes) -> str:
        """A tile's layout: a product's result's, by its columns; a row the first product's rows."""
        dim = self.layout.axes[axes[-1]].axis.dim
        if len(axes) == 2:
            return self._grid(dim).layout
        return self.default.rows if dim == self.row_dim else self._grid(dim).columns

    def Full(self, e: S.Full, loc=None) -> str:
        value = self.Literal(S.Literal(e.value, e.dtype))
        return f"gl.full({self.shape_text(e.axes)}, {value}, {TL_DTYPE[e.dtype]}, layout={self._layout_of(e.axes)})"

    def BroadcastTo(self, e: S.BroadcastTo, loc=None) -> str:
        if isinstance(e.x, S.Expand) and not e.x.x.dims:  # a scalar filling a whole tile
            return (f"gl.full({self.shape_text(e.dims)}, {self.texpr(e.x.x, loc)}, {TL_DTYPE[e.x.x.dtype]}, "
                    f"layout={self._layout_of(e.dims)})")
        return self.texpr(e.x, loc)  # broadcast where it meets the other operand

    def Expand(self, e: S.Expand, loc=None) -> str:
        if not e.x.dims:
            raise NotPipelined("a scalar expanded to a tile")
        rows = self._grid(self.layout.axes[e.target[-1]].axis.dim).rows
        if len(e.target) == 2 and e.x.dims == e.target[:1] and rows != self.default.rows:
            # every row is in the first product's rows: another result's takes them converted
            return f"gl.convert_layout({self.texpr(e.x, loc)}, {rows})[:, None]"
        return super().Expand(e, loc)

    def along(self, how, combine: str, e, loc) -> str:
        text = super().along(how, combine, e, loc)
        if len(e.x.dims) == 2 and e.x.dims.index(e.axis) == 1 and \
                self._layout_of(e.x.dims) != self.default.layout and isinstance(e, S.Reduce):
            return f"gl.convert_layout({text}, {self.default.rows})"  # a row in the first product's rows
        return text

    def Mask(self, e: S.Mask, loc=None) -> str:
        if e.axis in self.masks:
            return self.masks[e.axis]
        return f"gl.full({self.shape_text((e.axis,))}, 1, gl.int1, layout={self._layout_of((e.axis,))})"
