"""Triton's limit on tile size: at most MAX_TILE elements per tile, padding included. A tile of
fixed size over it is refused when its kernel is generated; a tile spanning a whole extent
(padded at launch to a power of two, `{dim}_TILE`) is checked before each launch, at the
call's extents."""
from __future__ import annotations

import math
from dataclasses import dataclass

from dt.backends.triton.layout import KernelLayout, next_power_of_2
from dt.errors import DTScheduleError, Loc
from dt.ir import scheduled as S
from dt.ir.tiles import MAX_TILE


@dataclass(frozen=True)
class TileCheck:
    """A tile whose element count depends on extents: checked before each launch."""
    factors: tuple  # ints, and `{dim}_SIZE` names standing for that extent's padded tile
    what: str
    loc: Loc | None
    hint: str


def tile_padding(size: int, least: int = 1) -> int:
    """The lanes the launcher gives a whole extent of `size` (`{dim}_TILE`); `least` in a tl.dot."""
    return max(least, next_power_of_2(size))


class TileLimits:
    """The tiles of one kernel: refuses those of fixed size over MAX_TILE, and keeps the checks
    of those spanning whole extents for the launch (`deferred`)."""

    def __init__(self, kernel: S.Kernel, layout: KernelLayout):
        self.kernel = kernel
        self.layout = layout
        self.deferred: list[TileCheck] = []
        self._checked: set[tuple] = set()

    def check_tile(self, axes, unit, loc, what: str):
        """Refuse (now, or at launch for whole-extent tiles) a tile of more than MAX_TILE elements."""
        factors = tuple(self.layout.axes[a].tile for a in axes if a not in unit)
        key = tuple(sorted(map(str, factors)))
        if key in self._checked:
            return
        self._checked.add(key)
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
            self.deferred.append(TileCheck(factors, f"{what} in kernel '{self.kernel.name}'", loc, hint))

    def check_tiles(self, value: S.TExpr, loc, dt_name: str):
        """Every tile computing `value`."""
        for node in S.walk_texpr(value):
            if node.dims:
                self.check_tile(node.dims, node.unit, loc, f"a tile computing '{dt_name}'")


def check_at_launch(checks: tuple[TileCheck, ...], least_tiles: dict[str, int], sizes: dict):
    """Refuse a whole-extent tile that the call's extents (`sizes`, by `{dim}_SIZE`) make too large."""
    for check in checks:
        factors = [f if isinstance(f, int) else tile_padding(sizes[f], least_tiles.get(f, 1)) for f in check.factors]
        numel = math.prod(factors)
        if numel > MAX_TILE:
            extents = ", ".join(f"{f[:-len('_SIZE')]}={sizes[f]}" for f in check.factors if isinstance(f, str))
            raise DTScheduleError(f"{check.what} is a tile of {' x '.join(map(str, factors))} = {numel} elements at "
                                  f"{extents} (whole extents are padded to a power of two); Triton allows at most "
                                  f"{MAX_TILE} (2**20) per tile", check.loc, check.hint)
