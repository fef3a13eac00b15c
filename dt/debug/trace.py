"""Tracing: the tiles of chosen Funcs (or inputs) as the program instances compute them, with
their program id, loop indices and index ranges, and the whole tensors kernels write to
memory; handed back after the run for inspection and plotting.

    with dt.debug.trace("_sum") as t:
        prog(A=a)
    t.tiles("_sum")[0].pid, t.tensor("_sum")
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dt.debug import config
from dt.debug.errors import DTDebugError
from dt.errors import Loc


@dataclass(frozen=True)
class TileRecord:
    name: str  # the Func (or input) the tile holds
    kernel: str
    pid: int
    iters: dict[str, int]  # loop variables, e.g. {'y_iter': 512}
    dims: tuple[str, ...]
    index: dict[str, tuple[int, int]]  # dim -> [start, stop) of the tile's valid lanes
    value: np.ndarray  # the valid lanes only
    loc: Loc | None
    run: int

    def __repr__(self):
        where = ", ".join(f"{d} {a}:{b}" for d, (a, b) in self.index.items())
        iters = "".join(f", {k}={v}" for k, v in self.iters.items())
        return f"<tile of {self.name} [{where}] program {self.pid}{iters}>"


class Trace:
    """Records tiles of `names` (every Func when none given), optionally of chosen program ids,
    while active (as a context manager, or between start() and stop())."""

    def __init__(self, *names: str, pid=None):
        self.names = frozenset(names) or None
        self.pids = None if pid is None else frozenset([pid] if isinstance(pid, int) else pid)
        self.records: list[TileRecord] = []
        self.runs: list[dict] = []  # per run: program, sizes, memory (tensor -> array after its kernel)

    def start(self) -> "Trace":
        config.add_trace(self)
        return self

    def stop(self):
        config.remove_trace(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def wants(self, target, info) -> bool:
        """A Func's own tiles; an input's loaded tiles (a Func's loads by its consumers are not
        its tiles: they are copies of what its kernel stored)."""
        if self.names is None:
            return target.role == "func"
        return target.dt_name in self.names and (target.role == "func" or
                                                 (target.role == "load" and target.dt_name in info.inputs))

    def wants_tensor(self, name: str, info) -> bool:
        return name in info.funcs if self.names is None else name in self.names

    def _start_run(self, program: str, sizes: dict[str, int]) -> int:
        self.runs.append({"program": program, "sizes": dict(sizes), "memory": {}})
        return len(self.runs) - 1

    def _memory(self, run: int, name: str, array: np.ndarray):
        self.runs[run]["memory"][name] = array

    # ------------------------------------------------------------ reading
    def tiles(self, name: str | None = None, *, pid: int | None = None, run: int | None = None) -> list[TileRecord]:
        """The recorded tiles, in execution order, optionally of one name, program id or run."""
        return [r for r in self.records if (name is None or r.name == name) and (pid is None or r.pid == pid)
                and (run is None or r.run == run)]

    def tensor(self, name: str, run: int | None = None) -> np.ndarray:
        """The whole tensor: as its kernel left it in memory, or else assembled from its tiles
        (NaN where no tile covered), axes in the order of the tiles' dims. Default: the last
        run that recorded `name`."""
        if run is None:
            runs = [i for i, r in enumerate(self.runs) if name in r["memory"]] + \
                   [r.run for r in self.records if r.name == name]
            if not runs:
                recorded = sorted({r.name for r in self.records} | {n for r in self.runs for n in r["memory"]})
                raise DTDebugError(f"the trace recorded nothing of '{name}'", None,
                                   f"it recorded: {', '.join(recorded) or 'nothing'} (trace names it, and "
                                   f"did a program run on the interpreter inside it?)")
            run = max(runs)
        memory = self.runs[run]["memory"]
        if name in memory:
            return memory[name].copy()
        tiles = self.tiles(name, run=run)
        if not tiles:
            raise DTDebugError(f"run {run} of the trace recorded nothing of '{name}'", None)
        dims = tiles[0].dims
        sizes = self.runs[run]["sizes"]
        out = np.full([sizes[f"{d}_SIZE"] for d in dims], np.nan, dtype=tiles[0].value.dtype)
        for r in tiles:
            value = r.value.transpose([r.dims.index(d) for d in dims]) if r.dims != dims else r.value
            out[tuple(slice(*r.index[d]) for d in dims)] = value
        return out

    def plot(self, name: str, run: int | None = None, ax=None, outline: bool = True):
        """Show the tensor (imshow for 2-D, a line for 1-D) with each recorded tile outlined and
        labelled with its program id; returns the matplotlib Axes."""
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
        data = self.tensor(name, run)
        if ax is None:
            _, ax = plt.subplots()
        tiles = self.tiles(name, run=run if run is not None else self._last_run(name))
        if data.ndim == 1:
            ax.plot(np.arange(data.shape[0]), data)
            if outline:
                for r in tiles:
                    ax.axvspan(*r.index[r.dims[0]], alpha=0.08)
        else:
            image = ax.imshow(data.reshape(data.shape[0], -1), aspect="auto", interpolation="nearest")
            ax.figure.colorbar(image, ax=ax)
            if outline and data.ndim == 2:
                dims = tiles[0].dims if tiles else ()
                for r in tiles:
                    (r0, r1), (c0, c1) = (r.index[d] for d in dims)
                    ax.add_patch(Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0, r1 - r0, fill=False, linewidth=0.6))
                    ax.text(c0, r0, str(r.pid), fontsize=6, va="top")
        ax.set_title(f"{name}" + (f" ({len(tiles)} tiles)" if tiles else ""))
        return ax

    def _last_run(self, name: str) -> int | None:
        runs = [r.run for r in self.records if r.name == name]
        return max(runs) if runs else None

    def __repr__(self):
        names = ", ".join(sorted(self.names)) if self.names else "every Func"
        return f"<dt.debug.Trace of {names}: {len(self.records)} tiles over {len(self.runs)} run(s)>"
