"""The generated module's public function: it checks the inputs, infers the extents from
their shapes, allocates outputs and temporaries, and launches the kernels in order over 1-D
grids (with TMA descriptors and persistent program counts where the kernels take them)."""
from __future__ import annotations

import contextlib

from dt.backends.pysource import Names, Writer
from dt.backends.triton.integers import integer_scalars
from dt.backends.triton.expressions import TL_DTYPE
from dt.backends.triton.kernel import KernelRenderer
from dt.ir.index_expr import index_source as index, renamed
from dt.dtypes import TORCH_BY_NAME
from dt.ir import scheduled as S



class Launcher:
    """The public function: checks inputs, infers extents, allocates, launches in order."""

    def __init__(self, pipeline: S.Pipeline, kernels: list[KernelRenderer], function: str, reserved, helpers: dict,
                 least_tiles):
        self.pipeline = pipeline
        self.kernels = kernels
        self.function = function
        self.helpers = helpers
        self.check = helpers["_check"]
        self.least_tiles = least_tiles
        self.names = Names(reserved)
        bound = {d for t in pipeline.inputs for d in t.dims}
        chunked = {d for d, _, _ in pipeline.chunks}
        self.call_extents = tuple(d for d in pipeline.sizes if d not in bound and d not in chunked)
        # DT names first (as they are: inputs, scalars and extents given as arguments are called by
        # their DT names, which differ from one another), then the launcher's own.
        self.args = [self.names.ir(t.name) for t in pipeline.inputs] + [self.names.ir(s) for s in pipeline.scalars] \
            + [self.names.ir(d) for d in self.call_extents]
        for t in pipeline.temporaries + pipeline.outputs:
            self.names.ir(t.name)
        self.sizes = {d: self.names.fresh(S.size_name(d)) for d in pipeline.sizes}
        self.device = self.names.fresh("device")
        self.outputs = self.names.fresh("outputs")  # arrays to write outputs into, by DT name
        self.integer_scalars = integer_scalars(pipeline)

    def render(self, w: Writer):
        p = self.pipeline
        args = list(self.args) + ([f"{self.device}=None"] if not p.inputs else []) + [f"{self.outputs}=None"]
        w.line(f"def {self.function}({', '.join(args)}):")
        with w.indent():
            outs = ", ".join(f"{t.name}[{', '.join(t.dims)}]" for t in p.outputs)
            given = f"; extents {', '.join(self.call_extents)} as arguments" if self.call_extents else ""
            w.line(f'"""Computes {outs}{given}. {self._returns()} {self.outputs}: tensors to write into, by '
                   f'name."""')
            self.bind(w)
            w.line(f"{self.outputs} = {self.outputs} or {{}}")
            for t in p.temporaries + p.outputs:
                shape = ", ".join(self.sizes[d] for d in t.dims)
                shape = f"({shape},)" if len(t.dims) == 1 else f"({shape})"
                given = f'{self.outputs}["{t.name}"] if "{t.name}" in {self.outputs} else ' \
                    if t.role == "output" else ""
                w.line(f"{self.names.ir(t.name)} = {given}torch.empty({shape}, dtype={TORCH_BY_NAME[t.dtype]}, "
                       f"device={self.device})")
            for kr in self.kernels:
                self.launch(w, kr)
            if len(p.outputs) == 1:
                w.line(f"return {self.names.ir(p.outputs[0].name)}")
            else:
                w.line(f"return {{{', '.join(repr(t.name) + ': ' + self.names.ir(t.name) for t in p.outputs)}}}")

    def _returns(self) -> str:
        outs = self.pipeline.outputs
        if len(outs) == 1:
            return f"Returns {outs[0].name} ({TORCH_BY_NAME[outs[0].dtype]})."
        return f"Returns {{{', '.join(repr(t.name) + ': ...' for t in outs)}}}."

    def bind(self, w: Writer):
        p = self.pipeline
        if p.inputs:
            first = self.names.ir(p.inputs[0].name)
            w.line(f"{self.device} = {first}.device")
            w.line(f'if {self.device}.type == "cuda" and {self.device}.index != torch.cuda.current_device():')
            with w.indent():
                w.line(f"with torch.cuda.device({self.device}):  # Triton launches on the current device")
                with w.indent():
                    w.line(f"return {self.function}({', '.join(self.args)}, {self.outputs}={self.outputs})")
        else:
            w.line(f'{self.device} = torch.device({self.device} or ("cuda" if torch.cuda.is_available() else "cpu"))')
        for t in p.inputs:
            w.line(f'{self.check}("{t.name}", {self.names.ir(t.name)}, {len(t.dims)}, {TORCH_BY_NAME[t.dtype]}, '
                   f'{self.device})')
        bound: set[str] = set()
        for t in p.inputs:
            name = self.names.ir(t.name)
            new = [(i, d) for i, d in enumerate(t.dims) if d not in bound]
            if len(new) == len(t.dims) and t.dims:
                targets = ", ".join(self.sizes[d] for d in t.dims)
                w.line(f"{targets}{',' if len(t.dims) == 1 else ''} = {name}.shape")
            else:
                for i, d in new:
                    w.line(f"{self.sizes[d]} = {name}.shape[{i}]")
                # Every extent of this input is known now: its shape must agree with them.
                shape = ", ".join(self.sizes[d] for d in t.dims)
                shape = f"({shape},)" if len(t.dims) == 1 else f"({shape})"
                w.line(f"if {name}.shape != {shape}:")
                with w.indent():
                    w.line(f'raise ValueError(f"{t.name} has shape {{tuple({name}.shape)}}, expected '
                           f'({", ".join(t.dims)}) = {{{shape}}}")')
            bound |= set(t.dims)
        for d in self.call_extents:
            w.line(f"{self.sizes[d]} = int({self.names.ir(d)})")
        for d, split, chunk in p.chunks:
            w.line(f"{self.sizes[d]} = -(-{self.sizes[split]} // {chunk})  # chunks of {chunk} along {split}")

    def launch(self, w: Writer, kr: KernelRenderer):
        k = kr.kernel
        args = []
        for t in kr.params.tensors:
            name = self.names.ir(t)
            args += [name, f"*{name}.stride()"]
        args += [f"{'int' if s in self.integer_scalars else 'float'}({self.names.ir(s)})" for s in kr.params.scalars]
        args += [self.sizes[s[:-len('_SIZE')]] for s in kr.params.sizes]
        tiles = {}
        for size in kr.tiles:
            tile = f"triton.next_power_of_2({self.sizes[size[:-len('_SIZE')]]})"
            tiles[size] = f"max({self.least_tiles[size]}, {tile})" if size in self.least_tiles else tile
            if kr.use_tma:  # named: the TMA boxes use it too
                name = self.names.fresh(kr.tiles[size])
                w.line(f"{name} = {tiles[size]}")
                tiles[size] = name
        args += list(tiles.values())
        tma = None
        if kr.use_tma:
            tma, descriptors = self.tma_descriptors(w, kr, tiles)
            args += descriptors
        options = [f"num_warps={k.num_warps}"] if k.num_warps else []
        options += [f"num_stages={k.num_stages}"] if k.num_stages else []
        grid = self.names.fresh(f"{k.func}_grid")
        count = index(renamed(k.program_count, lambda n: self.sizes[n[:-len('_SIZE')]]))
        if kr.program_count:
            programs = self.names.fresh(f"{k.func}_programs")
            most = k.persistent_programs or f"{self.helpers['_multiprocessors']}({self.device})"
            w.line(f"{programs} = min({count}, {most})")
            w.line(f"{grid} = ({programs},)")
            args.append(programs)
        else:
            w.line(f"{grid} = ({count},)")
        if tma:
            args.append(tma)
        if kr.gluon:  # never persistent nor tma(): the twin takes the arguments so far
            use = self.gluon_launch(w, kr.gluon, grid, args, tiles)
            w.line(f"if not {use}:")
        with w.indent() if kr.gluon else contextlib.nullcontext():
            w.line(f"{kr.name}[{grid}]({', '.join(args + options)})")

    def gluon_launch(self, w: Writer, gk, grid: str, args: list[str], tiles: dict[str, str]) -> str:
        """The Gluon twin's launch where it runs (a Hopper GPU, the twin wanted: _gluon_wanted,
        tensors that suit TMA, Triton builds it); the name of the flag saying whether it ran."""
        boxes = {}
        for key in gk.descriptors:
            boxes[key] = self.names.fresh(f"{key[0]}_box")
            box = gk.launch_box(key)
            w.line(f"{boxes[key]} = [{', '.join(str(b) if isinstance(b, int) else tiles[b] for b in box)}]")
        ready = [f"({self.names.ir(t)}, {boxes[(t, box)]}, "
                 f"({', '.join(self.sizes[d] for d in self.pipeline.tensor(t).dims)},))" for t, box in gk.descriptors]
        use = self.names.fresh(f"{gk.kernel.func}_gluon")
        w.line(f"{use} = GLUON and {self.helpers['_gluon_wanted']}({self.device})")
        w.line(f"if {use}:")
        with w.indent():
            w.line(f"{use} = {self.helpers['_tma_ready']}({self.device}, {', '.join(ready)})")
        w.line(f"if {use}:")
        with w.indent():
            descriptors = []
            for key, box in boxes.items():
                name = self.names.fresh(gk.descriptors[key])
                dtype = TL_DTYPE[self.pipeline.tensor(key[0]).dtype]
                w.line(f"{name} = {self.helpers['_gluon_descriptor']}({self.names.ir(key[0])}, {box}, {dtype})")
                descriptors.append(name)
            stages = self.names.fresh(f"{gk.kernel.func}_stages")
            w.line(f"{stages} = {self.helpers['_gluon_stages']}({gk.stage_request(boxes)})")
            w.line(f"{use} = {stages} > 0  # 0: two stages do not fit at this shape")
            w.line(f"if {use}:")
            with w.indent():
                w.line(f"{use} = {self.helpers['_gluon_launch']}({gk.name}, \"{gk.name}\", {grid}, "
                       f"({', '.join(args + descriptors + [stages])}), {gk.launch_options()})")
        return use

    def tma_descriptors(self, w: Writer, kr: KernelRenderer, tiles: dict[str, str]) -> tuple[str, list[str]]:
        """Whether the tensors suit TMA at this call (the name of that flag, passed as the kernel's
        USE_TMA), and the kernel's descriptors: made where they do, None where they do not."""
        tma = self.names.fresh(f"{kr.kernel.func}_tma")
        boxes = {key: "[" + ", ".join(str(b) if isinstance(b, int) else tiles[b] for b in key[1]) + "]"
                 for key in kr.tma.descriptors}
        ready = []
        for (t, box), text in boxes.items():
            for dims in kr.tma.box_dims[(t, box)]:
                extents = ", ".join(self.sizes[d] for d in dims) + ("," if len(dims) == 1 else "")
                ready.append(f"({self.names.ir(t)}, {text}, ({extents}))")
        w.line(f"{tma} = {self.helpers['_tma_ready']}({self.device}, {', '.join(ready)})")
        descriptors = {key: self.names.fresh(name) for key, name in kr.tma.descriptors.items()}
        w.line(f"{' = '.join(descriptors.values())} = None")
        w.line(f"if {tma}:")
        with w.indent():
            for (t, box), descriptor in descriptors.items():
                tensor = self.names.ir(t)
                w.line(f"{descriptor} = TensorDescriptor({tensor}, {tensor}.shape, {tensor}.stride(), "
                       f"{boxes[(t, box)]})")
        return tma, list(descriptors.values())
