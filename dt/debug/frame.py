"""What a stop shows: the DT place, the program instance, the loop indices and every tile in
scope under its DT name, as NumPy masked arrays whose masked lanes are the ones outside the
tensor (never loaded, never stored)."""
from __future__ import annotations

import linecache
import sys

import numpy as np

from dt.debug.info import Statement, TileVar


class Tile(np.ma.MaskedArray):
    """A tile as the debugger shows it: a NumPy masked array whose masked lanes lie outside the
    tensor. Prints compactly (6 significant digits, masked lanes as --); results of NumPy
    operations on it are Tiles too."""

    def __repr__(self):
        return format_tile(self)

    __str__ = __repr__


class Frame:
    """One stop of a DT program: `pid`, `iters`, `tiles`, `where()`, `show()`, `step()`."""

    def __init__(self, session, st: Statement, scope: dict, breakpoint=None):
        info = session.info
        self.statement_info = st
        self.kernel = info.kernel_names[st.kernel]
        self.func = info.pipeline.kernels[st.kernel].func  # the Func this kernel computes and stores
        self.pid = session.pid
        self.program_count = session.counts.get(st.kernel)
        self.loc = st.loc
        self.statement = st.text  # the tile statement about to run (generated Python)
        self.iters = {f.var: scope[f.var] for f in st.loops}
        self.breakpoint = breakpoint
        self.stepping = False
        self._scope = scope
        self._vars: dict[str, TileVar] = dict(st.live)
        self.tiles = {name: self._masked(var) for name, var in st.live}
        # the performance warnings a GPU would give that point at this statement's line
        self.warnings = [w for w in session.warnings if _concerns(w, st.loc)]

    # ------------------------------------------------------------ values
    def _spans(self, var: TileVar):
        return [self._scope[a] for a in var.axes]

    def _masked(self, var: TileVar) -> Tile:
        value = np.asarray(self._scope[var.name])
        spans = self._spans(var)
        invalid = np.zeros(value.shape, dtype=bool)
        if value.ndim == len(spans):
            for axis, (_, size, valid) in enumerate(spans):
                if value.shape[axis] == size and valid < size:
                    lanes = np.arange(size) >= valid
                    invalid |= lanes.reshape([-1 if i == axis else 1 for i in range(value.ndim)])
        return Tile(value, mask=invalid, copy=False)

    def raw(self, name: str) -> np.ndarray:
        """The tile as the kernel holds it, masked lanes included (what the hardware computes there)."""
        return np.asarray(self._scope[self._var(name).name])

    def index(self, name: str) -> dict[str, tuple[int, int, int]]:
        """For each axis of the tile: (first index, end of the valid lanes, end of all lanes)."""
        var = self._var(name)
        return {d: (s, s + v, s + n) for d, (s, n, v) in zip(var.dims, self._spans(var))}

    def meaning(self, name: str) -> str:
        return self._var(name).meaning

    def _var(self, name: str) -> TileVar:
        if name not in self._vars:
            raise KeyError(f"no tile '{name}' in scope here; tiles: {', '.join(self._vars) or 'none'}")
        return self._vars[name]

    @property
    def ranges(self) -> dict[str, tuple[int, int, int]]:
        """Every axis in scope, innermost per dimension: (first index, end of valid, end of lanes)."""
        out = {}
        for dim, axis in self.statement_info.dims.items():
            s, n, v = self._scope[axis.name]
            out[dim] = (s, s + v, s + n)
        return out

    # ------------------------------------------------------------ control
    def step(self):
        """Stop again before the next tile statement that runs (after this stop returns)."""
        self.stepping = "statement"

    def next(self):
        """Stop again before the next tile statement of another DT line: steps over the rest of
        this line's statements (its loads, reduction loop, ...), so the Func it computes is in
        scope at the next stop."""
        self.stepping = "line"

    # ------------------------------------------------------------ display
    def context(self) -> str:
        count = f" of {self.program_count}" if self.program_count is not None else ""
        iters = "".join(f", {k}={v}" for k, v in self.iters.items())
        return f"{self.kernel} (Func {self.func}), program {self.pid}{count}{iters}"

    def where(self, context_lines: int = 1) -> str:
        """The DT source around this statement, marked, with the program instance and loop indices."""
        lines = [f"{self.loc if self.loc else '<no DT location>'} in {self.context()}"]
        if self.loc is not None:
            width = len(str(self.loc.line + context_lines))
            for n in range(max(1, self.loc.line - context_lines), self.loc.line + context_lines + 1):
                text = self.loc.text if n == self.loc.line and self.loc.text else linecache.getline(self.loc.file, n)
                if not text and n != self.loc.line:
                    continue
                mark = "->" if n == self.loc.line else "  "
                lines.append(f"{mark} {n:>{width}} | {text.rstrip()}".rstrip())
                if n == self.loc.line and self.loc.col:
                    lines.append(f"   {' ' * width} | {' ' * (self.loc.col - 1)}{'^' * max(self.loc.length, 1)}")
        lines.append(f"next tile statement: {self.statement}")
        if self.ranges:
            lines.append("axes: " + "; ".join(_range_text(d, r) for d, r in self.ranges.items()))
        lines.append("tiles: " + (", ".join(self.tiles) if self.tiles else "none yet"))
        for w in self.warnings:
            lines.append(f"performance warning [{w.code}] at {w.loc}: {w.message}; hint: {w.hint}")
        return "\n".join(lines)

    def table(self) -> str:
        """One line per tile in scope: name, meaning, lanes, dtype, valid min/max."""
        if not self.tiles:
            return "no tiles in scope yet"
        rows = []
        for name, tile in self.tiles.items():
            var = self._vars[name]
            axes = ", ".join(_range_text(d, r) for d, r in self.index(name).items()) or "scalar"
            valid = tile.compressed()
            stats = f"min {valid.min():.6g} max {valid.max():.6g}" if valid.size else "no valid lane"
            rows.append((name, var.meaning, axes, str(tile.dtype), stats))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)

    def show(self, *names: str, file=None):
        """Print tiles (all in scope if none named), masked lanes as --."""
        file = file or sys.stdout
        for name in names or tuple(self.tiles):
            var, tile = self._var(name), self.tiles[name]
            axes = ", ".join(_range_text(d, r) for d, r in self.index(name).items()) or "scalar"
            print(f"{name} = {var.meaning} [{axes}] {tile.dtype}", file=file)
            print(format_tile(tile), file=file)

    def __repr__(self):
        return f"<dt.debug.Frame {self.loc} in {self.context()}>"


def format_tile(tile: np.ma.MaskedArray) -> str:
    """Values with 6 significant digits, masked lanes as --, long axes summarised."""
    data = np.asarray(tile.data).astype(np.float64)
    if data.ndim == 0:
        return "--" if np.ma.getmaskarray(tile).item() else f"{data.item():.6g}"
    text = np.array([f"{v:.6g}" for v in data.ravel()], dtype=object).reshape(data.shape)
    text[np.ma.getmaskarray(tile)] = "--"
    width = max(len(t) for t in text.ravel())
    return np.array2string(text, formatter={"all": lambda t: t.rjust(width)}, separator=" ", threshold=200,
                           edgeitems=4, max_line_width=110)


def _range_text(dim: str, r: tuple[int, int, int]) -> str:
    start, valid_end, end = r
    if valid_end == end:
        return f"{dim} {start}:{end}"
    return f"{dim} {start}:{end} ({valid_end - start} of {end - start} lanes valid)"


def _concerns(warning, loc) -> bool:
    """Whether a warning, or one of its notes, points at the line of `loc`."""
    if loc is None:
        return False
    places = [warning.loc] + [where for _, where in warning.notes]
    return any(p is not None and p.line == loc.line and p.file == loc.file for p in places)
