"""What checking produces: each Func's resolved schedule (`FuncSchedule`, `MapEntry`) and the
`CheckedProgram` the lowering and the reference evaluator take."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from dt.errors import Loc
from dt.ir import algorithm as A
from dt.ir.check.subscripts import call_divisor
from dt.ir.check.uses import uses
from dt.ir.tiles import Tile


@dataclass(frozen=True)
class MapEntry:
    """One entry of f.map(...): a whole block index, or the outer / inner part of a split."""
    name: str  # the name shown in generated code: 'x' or the inner name 'x1'
    dim: str
    part: str  # 'whole' | 'outer' | 'inner'
    group: int = 0  # group size of a split


@dataclass
class FuncSchedule:
    block: dict[str, int] = field(default_factory=dict)
    tensorize: dict[str, int] = field(default_factory=dict)
    map: tuple[MapEntry, ...] | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    persistent: bool = False  # programs walk the blocks (one program per multiprocessor, or persistent_programs)
    persistent_programs: int | None = None
    tma: bool = False  # load and store tiles through tensor descriptors where the hardware has them
    stream: bool = False  # tensors the kernel reads once pass through L2 without staying (evict first)
    fuse_at: tuple[str, str] | None = None
    compute_with: tuple[str, str] | None = None  # (sibling Func, reduction dim): share its loop
    split: tuple[str, int] | None = None  # (reduction dim, chunk): the reduction in chunks over programs
    inline: bool = False
    compiled: str | None = None  # None | 'compile' | 'compile_to_kernel'
    saved: bool = False  # save(): an output stored in the compute dtype (a statistic kept for a backward)
    # a split's partials kernel: the Func whose schedule it takes; a partial summed in a walk: the Func it splits
    taken_from: str | None = None
    # a split's partial summed in a Func's walk over one of its pure dimensions: (that Func, the dimension)
    walked_in: tuple[str, str] | None = None
    locs: dict[str, Loc | None] = field(default_factory=dict)  # primitive -> where it was written
    dim_locs: dict[tuple[str, str], Loc | None] = field(default_factory=dict)  # (primitive, dim)


@dataclass(frozen=True)
class CheckedProgram:
    program: A.Program
    funcs: dict[str, A.FuncDef]  # computed Funcs (inlined ones substituted away), topological order
    inputs: tuple[str, ...]
    scalars: tuple[str, ...]
    dim_kinds: dict[str, str]  # dim -> 'Var' | 'RVar'
    schedules: dict[str, FuncSchedule]
    outputs: tuple[str, ...]
    kernel_roots: tuple[str, ...]  # Funcs computed at root, in launch order
    fused: dict[str, tuple[str, str]]  # producer -> (consumer, loop dim)
    input_ranks: dict[str, int]
    # (sibling, reduction dim) -> Funcs whose reductions over that dim run in the sibling's loop; the
    # sibling is the end of each chain of compute_with, so it is computed with none over that dim
    computed_with: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    tiles: tuple[Tile, ...] = ()  # every tile shape of every kernel (dt.ir.tiles)
    # The definitions as written (before inlining) of every Func the outputs need: their accesses
    # bind the extents, those of inlined Funcs too (an inlined Func read at a shifted index is
    # masked by its own extents)
    written: dict[str, A.FuncDef] = field(default_factory=dict)
    # Outputs that are inlined (with what they use inlined): stored where a kernel reads them at
    # plain dimensions (A.Stored); not in `funcs`
    inlined_outputs: dict[str, A.FuncDef] = field(default_factory=dict)
    # Split reductions (dt.ir.check.split): each chunk dimension -> (the reduction dimension it
    # splits, the chunk size): its extent is ceil(len(dim) / chunk); and the Funcs holding the
    # chunks' partial results, stored in the compute dtype by the kernel computing them
    chunk_dims: dict[str, tuple[str, int]] = field(default_factory=dict)
    partials: tuple[str, ...] = ()
    unsplit: dict[str, A.FuncDef] = field(default_factory=dict)  # `funcs` before the split: what the reference evaluates

    @property
    def algorithm(self) -> dict[str, A.FuncDef]:
        """The computed Funcs as the algorithm defines them, splits undone: the reference's."""
        return self.unsplit or self.funcs

    @cached_property  # computed once: every call of a program checks its extents against it
    def needed_dims(self) -> tuple[str, ...]:
        """The dimensions whose extents running the program needs, in the order it first uses them:
        every Func's own, those it indexes, reduces over, takes the len of or uses as a value; not a
        split's chunks, whose extents follow from the split dimension's."""
        dims: dict[str, None] = {}
        for f in (*self.funcs.values(), *self.inlined_outputs.values()):
            dims.update(dict.fromkeys(f.dims))
            for e in (n for x in f.exprs for n in A.walk(x)):
                if isinstance(e, A.Access) and e.kind == "input":
                    dims.update(dict.fromkeys(self.input_axes[e.name]))
                elif isinstance(e, (A.Len, A.DimRef, A.Reduce)):
                    dims[e.dim] = None
        return tuple(d for d in dims if d not in self.chunk_dims)

    @cached_property
    def func_reads(self) -> tuple[tuple[A.Access, int, str, str], ...]:
        """(access, axis, dimension read along, the Func's own dimension there) for each read of a
        Func along another dimension than its own (`e[z, y]` for `e[x, y]`): they pass extents."""
        return tuple((a, axis, sub.dim, self.written[a.name].dims[axis])
                     for f in self.written.values() for x in f.exprs for a in A.walk(x)
                     if isinstance(a, A.Access) and a.kind == "func" and a.name in self.written
                     for axis, sub in enumerate(a.subscripts)
                     if isinstance(sub, A.DimRef) and sub.dim != self.written[a.name].dims[axis])

    @cached_property
    def input_bindings(self) -> tuple[tuple[A.Access, tuple[str | None, ...]], ...]:
        """Every access of an input in the written definitions (gathers' index reads included),
        with the dimension each subscript binds (binding; the reduction dimensions there are
        the RVars its definition does not write along; a weak binding only where no subscript
        binds its dimension strongly): what binds extents when the program is called."""
        found = []
        for f in self.written.values():
            reduced = frozenset(d for d, kind in self.dim_kinds.items() if kind == "RVar" and d not in f.dims)
            found += [(e, tuple(binding(s, reduced) for s in e.subscripts))
                      for x in f.exprs for e in A.walk(x) if isinstance(e, A.Access) and e.kind == "input"]
        strong = {b[0] for _, bindings in found for b in bindings if b is not None and b[1]}

        def bound(b: tuple[str, bool] | None) -> str | None:
            return b[0] if b is not None and (b[1] or b[0] not in strong) else None
        return tuple((e, tuple(bound(b) for b in bindings)) for e, bindings in found)

    @cached_property
    def input_accesses(self) -> tuple[A.Access, ...]:
        return tuple(access for access, _ in self.input_bindings)

    def subscript_nodes(self):
        """(access, axis, node) for every expression inside every subscript of the written
        definitions: what reads or computes an index."""
        for f in self.written.values():
            for access in (n for x in f.exprs for n in A.walk(x)):
                if isinstance(access, A.Access):
                    for axis, sub in enumerate(access.subscripts):
                        for node in A.walk(sub):
                            yield access, axis, node

    @cached_property
    def index_inputs(self) -> dict[str, str]:
        """Each input read inside a subscript (I of E[I[t], d]) -> the dimension of the axis it
        indexes."""
        found: dict[str, str] = {}
        for access, axis, node in self.subscript_nodes():
            if isinstance(node, A.Access) and node.kind == "input":
                axes = self.input_axes[access.name] if access.kind == "input" else self.written[access.name].dims
                found.setdefault(node.name, axes[axis])
        return found

    @cached_property
    def index_scalars(self) -> frozenset[str]:
        """The scalars read inside subscripts (start in K[l + start]): integers by necessity."""
        return frozenset(node.name for _, _, node in self.subscript_nodes() if isinstance(node, A.ScalarRef))

    @cached_property
    def computed_subscripts(self) -> tuple[tuple[A.Access, A.Expr], ...]:
        """(access, subscript) for each subscript computed from dimensions, lens, constants and
        scalars (no gather) beyond a dimension alone: its arithmetic must stay within i64 at the
        extents and scalars of a call (call_checks.index_arithmetic)."""
        return tuple((access, s) for f in self.written.values() for x in f.exprs for access in A.walk(x)
                     if isinstance(access, A.Access) for s in access.subscripts
                     if not isinstance(s, A.DimRef) and not any(isinstance(n, A.Access) for n in A.walk(s)))

    @cached_property
    def call_divisors(self) -> tuple[tuple[A.Access, A.Binary], ...]:
        """(access, `//` or `%`) for each subscript's division by what is not positive by its form
        (`l // p`, `d % (len(d) // 2)`): checked when the program is called."""
        return tuple((access, node) for access, _, node in self.subscript_nodes() if call_divisor(node))

    @cached_property
    def input_axes(self) -> dict[str, tuple[str, ...]]:
        """The dimension each axis of each input spans: the first dimension an access binds to it
        (binding: `A[x]`, `X[t - j]`), else one of its own, `{input}_axis{i}`, that only the
        tensor passed gives an extent (`E[I[t], d]`: the rows of E); a Var declared by that name is
        that dimension (dt.grad's `grad_X[X_axis0]`)."""
        binding: dict[str, list[str | None]] = {}
        for e, dims in self.input_bindings:
            axes = binding.setdefault(e.name, [None] * len(e.subscripts))
            for i, dim in enumerate(dims):
                axes[i] = axes[i] or dim
        taken = {d.name for d in self.program.declarations}
        result = {}
        for name, axes in binding.items():
            dims = []
            for i, dim in enumerate(axes):
                if dim is None:
                    dim = f"{name}_axis{i}"
                    while dim in taken and self.dim_kinds.get(dim) != "Var":
                        dim += "_"
                    taken.add(dim)
                dims.append(dim)
            result[name] = tuple(dims)
        return result

    @cached_property
    def reads(self) -> dict[str, tuple]:
        """Each computed Func's uses (dt.ir.check.uses.uses of its expression, and of an update's
        written access: `g[r, idx[r]] += ...` reads idx), walked once."""
        return {n: tuple(u for x in f.exprs for u in uses(x) if u.name != (f.update.target if f.update else None))
                for n, f in self.funcs.items()}

    @cached_property
    def stored_fused(self) -> tuple[str, ...]:
        """The Funcs fused into a kernel and read by another (a split's partials, read by their
        combination; a gradient's row statistics, computed in one kernel and read by the next):
        the kernel computing them stores them, as it stores an output fused into it, and the
        others load them."""
        read_by = {}  # Func -> the kernels (roots) that read it
        for f, reads in self.reads.items():
            for u in reads:
                read_by.setdefault(u.name, set()).add(self.root_of(f))
        # in the order of the Funcs: generated code is stable
        return tuple(p for p in self.funcs if p in self.fused and read_by.get(p, set()) - {self.root_of(p)})

    @cached_property
    def walk_sums(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(root Func, one of its pure dimensions) -> the split partials that sum in its walk over
        that dimension (dt.ir.check.split): accumulated tile by tile, stored after the walk."""
        found: dict[tuple[str, str], tuple[str, ...]] = {}
        for name in self.funcs:
            walked_in = self.schedules[name].walked_in
            if walked_in is not None:
                found[walked_in] = found.get(walked_in, ()) + (name,)
        return found

    def root_of(self, func: str) -> str:
        while func in self.fused:
            func = self.fused[func][0]
        return func

    def reduction_dims(self, func: str) -> tuple[str, ...]:
        seen: list[str] = []
        for e in A.walk(self.funcs[func].expr):
            if isinstance(e, A.Reduce) and e.dim not in seen:
                seen.append(e.dim)
        return tuple(seen)

    def kernel_dims(self, root: str) -> tuple[str, ...]:
        """Every dimension the kernel of `root` loops over: root's dims first."""
        dims: list[str] = []
        for f in self.kernel_funcs(root):
            for d in self.funcs[f].dims + self.reduction_dims(f):
                if d not in dims:
                    dims.append(d)
        return tuple(dims)

    def kernel_funcs(self, root: str) -> tuple[str, ...]:
        return (root,) + tuple(f for f in self.funcs if f != root and self.root_of(f) == root)


def binding(subscript: A.Expr, reduced: frozenset[str]) -> tuple[str, bool] | None:
    """(the dimension a subscript binds to its tensor axis's extent, whether strongly): `d` or `d`
    plus or minus constants and lens binds `d` strongly (`x`, `x + 1`); `d` plus or minus also
    dimensions `reduced` where the subscript is (`t - j` inside a reduction over `j`, bound
    elsewhere) weakly: only where no subscript binds `d` strongly (conv1d's `X[c, t - j]` gives
    `t` X's length, but its gradient's `X[c, t + j - (len(j) - 1)]` inside a sum over `t` leaves `j`
    the width `W[c, j]` gives). None for anything else (`h // 4`, `2 * i`, `g * len(cg) + cg`,
    `x - y` with `y` a dimension of the left-hand side, a gather) and when two readings compete."""
    terms = A.signed_terms(subscript)
    found = []
    for i, (sign, term) in enumerate(terms):
        if sign != 1 or not isinstance(term, A.DimRef):
            continue
        rest = [t for j, (_, t) in enumerate(terms) if j != i]
        if all(not any(isinstance(n, A.Access) for n in A.walk(t)) and
               (isinstance(t, A.DimRef) or not A.free_dims(t)) and
               all(d in reduced and d != term.dim for d in A.free_dims(t)) for t in rest):
            found.append((term.dim, not any(A.free_dims(t) for t in rest)))
    return found[0] if len(found) == 1 else None
