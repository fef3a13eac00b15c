"""What a kernel reads from outside its own statements: the tensors, scalars and extents its
launcher passes (`kernel_params`), the names its index expressions use (`used_index_names`), and
every name its code may use (`taken_names`), which a pass making a new tile must avoid."""
from __future__ import annotations

from dataclasses import dataclass

from dt.ir.index_expr import index_names
from dt.ir.naming import RESERVED_NAMES, size_name
from dt.ir.scheduled import (Assign, Axis, For, Gather, Index, Kernel, Let, Load, Param, Extent, Pipeline, Scatter,
                             Store, statement_values, walk_statements, walk_texpr)


@dataclass(frozen=True)
class KernelParams:
    tensors: tuple[str, ...]
    scalars: tuple[str, ...]
    sizes: tuple[str, ...]  # `{dim}_SIZE` names


def kernel_params(kernel: Kernel, pipeline: Pipeline) -> KernelParams:
    """What a kernel reads from its launcher, in a stable order (pipeline order)."""
    tensors, scalars, sizes = set(), set(), set()

    def extents_read(e):
        sizes.update(n for n in index_names(e) if n.endswith("_SIZE"))

    def visit_texpr(e):
        for node in walk_texpr(e):
            if isinstance(node, Load):
                tensors.add(node.tensor)
            elif isinstance(node, Gather):
                tensors.add(node.tensor)
                for extent in node.extents:
                    extents_read(extent)
            elif isinstance(node, Param):
                scalars.add(node.name)
            elif isinstance(node, Extent):
                sizes.add(size_name(node.dim))
            elif isinstance(node, Index):
                extents_read(node.value)

    extents_read(kernel.program_count)
    for s in walk_statements(kernel.body):
        if isinstance(s, Let):
            extents_read(s.value)
        elif isinstance(s, (Axis, For)):
            for e in (s.start, s.size, s.limit) if isinstance(s, Axis) else (s.start, s.stop):
                extents_read(e)
        elif isinstance(s, (Store, Scatter)):
            tensors.add(s.tensor)
            for e in s.guard if isinstance(s, Store) else s.extents:
                extents_read(e)
        for value in statement_values(s):
            visit_texpr(value)
    order = [t.name for t in pipeline.inputs + pipeline.temporaries + pipeline.outputs]
    return KernelParams(tuple(t for t in order if t in tensors),
                        tuple(s for s in pipeline.scalars if s in scalars),
                        tuple(size_name(d) for d in pipeline.sizes if size_name(d) in sizes))


def used_index_names(body) -> set[str]:
    """Every name the index expressions of `body` (Lets, Axes, For bounds, Index values) read."""
    used: set[str] = set()
    for s in walk_statements(body):
        if isinstance(s, Let):
            used |= index_names(s.value)
        elif isinstance(s, Axis):
            used |= index_names(s.start) | index_names(s.size) | index_names(s.limit)
        elif isinstance(s, For):
            used |= index_names(s.start) | index_names(s.stop)
        for e in s.guard if isinstance(s, Store) else s.extents if isinstance(s, Scatter) else ():
            used |= index_names(e)
        for node in (n for value in statement_values(s) for n in walk_texpr(value)):
            if isinstance(node, Index):
                used |= index_names(node.value)
            elif isinstance(node, Gather):
                for extent in node.extents:
                    used |= index_names(extent)
    return used


def taken_names(kernel: Kernel) -> set[str]:
    """Every name the kernel's code may use: a new tile must not take any (a scalar input, an
    extent, a loop variable, a module-level name of the generated code)."""
    names = set(RESERVED_NAMES) | index_names(kernel.program_count) | used_index_names(kernel.body)
    for s in walk_statements(kernel.body):
        if isinstance(s, For):
            names.add(s.var)
        elif not isinstance(s, (Store, Scatter)):
            names.add(s.name)
        if isinstance(s, (Assign, Store)):
            for n in walk_texpr(s.value):
                if isinstance(n, Param):
                    names.add(n.name)
                elif isinstance(n, Extent):
                    names.add(size_name(n.dim))
    return names
