"""L2 eviction hints for tiles a program reads more than once.

A Func fused into its consumer's program is recomputed there, so a row-wise kernel reads
its row once per pass (softmax: the sum, then the output; layernorm: mean, variance,
output). When the rows outgrow the registers, the later passes are served by L2 only if
the lines survive the first. So a load of a tensor that the kernel loads again later, at
another site, asks L2 to keep its lines (`evict_last`), and the last such load lets them
go (`evict_first`). Only tiles private to the program and streamed get hints: a load whose
indices include a dimension the program id selects reads lines no other program reads, and
one whose indices advance with every loop around it reads each line once per site. Shared
tiles (a weight vector, a matmul operand) and tiles a loop reads again (an operand of a loop
nested in another it does not advance with) are left to the cache's own policy; two-pass
attention's query block is loaded once before each pass (dt.ir.lower.invariant_loads): kept,
then released.

A tensor read in one pass is left to the cache's policy too, unless the kernel's schedule says
`stream()`: then its loads release their lines as well, where the program reads its own part of
it (every block index of the grid reaches the load's indices, through Lets and the start of the
loops it walks: a split's chunk, not a prefix every program walks from 0) and reads no tile of
it elsewhere (a gather of the same tensor: RoPE's rotated half; a gathered element is one line,
cross-entropy's target logit). L2 keeps what it was not told to drop, so a row read once can
push out lines another program is about to read (Inductor marks such loads `evict_first`); on an
H100 that made argmax over 64 rows 8% faster and cross-entropy over 4096 rows of f32 logits 4%
slower, hence a schedule choice rather than a rule. Tiles TMA moves (`tma()`) take no hint:
Triton's descriptor loads have none.
"""
from __future__ import annotations

from dt.ir import scheduled as S

KEEP, RELEASE = "evict_last", "evict_first"


def eviction_policies(kernel: S.Kernel) -> dict[S.Load, str]:
    """The eviction policy of each load site of `kernel` that gets one."""
    return _policies(kernel, kernel.stream)


def streamed(kernel: S.Kernel) -> list[S.Load]:
    """The loads that `stream()` gives a policy in `kernel` (none: the hint changes nothing)."""
    without = _policies(kernel, False)
    return [load for load in _policies(kernel, True) if load not in without]


def _policies(kernel: S.Kernel, stream: bool) -> dict[S.Load, str]:
    program_names = {"pid"}  # index names whose value depends on the program id
    program_axes: set[str] = set()
    grid = set(kernel.grid_indices)
    reads: dict[str, set[str]] = {}  # each Let, axis and loop variable -> the names its value or start reads
    gathered: set[str] = set()  # tensors a Gather reads tiles of too
    # tensor -> its passes, in order: the load sites that read each part of it once
    passes: dict[str, dict[tuple, list[S.Load]]] = {}
    repeated: set[str] = set()  # tensors a site reads again, unchanged, on a later iteration

    def visit(body, loops: tuple[frozenset, ...], walk):
        ordinal: dict[str, int] = {}  # the sites of each tensor in this loop body, in order
        previous, walk_of_previous, walks = None, None, 0
        for s in body:
            if isinstance(s, S.Let):
                reads[s.name] = S.index_names(s.value)
                if reads[s.name] & program_names:
                    program_names.add(s.name)
            elif isinstance(s, S.Axis):
                reads[s.name] = S.index_names(s.start)
                if reads[s.name] & program_names:
                    program_axes.add(s.name)
            elif isinstance(s, S.For):
                reads[s.var] = S.index_names(s.start)
                # the loop's own axes: those that advance with its variable
                axes = frozenset(a.name for a in s.body if isinstance(a, S.Axis) and s.var in S.index_names(a.start))
                # loops of one walk, one after another (its whole tiles, then its last cut one; a
                # causal walk's parts), read disjoint tiles: their n-th sites make one pass. A walk
                # is named by its place (the n-th walk of the enclosing one), so that walks nested in
                # each loop of one walk are the same walks too.
                same_walk = isinstance(previous, S.For) and previous.dim == s.dim and previous.kind != "tile" \
                    and s.kind in (previous.kind, "tail")
                if not same_walk:
                    walks += 1
                    walk_of_previous = (walk, walks)
                visit(s.body, loops + (axes,), walk_of_previous)
            elif isinstance(s, (S.Assign, S.Store)):
                for node in S.walk_texpr(s.value):
                    if isinstance(node, S.Gather) and node.dims:  # (one element, cross-entropy's target logit: a line)
                        gathered.add(node.tensor)
                    if isinstance(node, S.Load):
                        if any(not axes.intersection(node.indices) for axes in loops):
                            repeated.add(node.tensor)
                        tensor_passes = passes.setdefault(node.tensor, {})
                        if any(node in loads for loads in tensor_passes.values()):
                            continue
                        n = ordinal[node.tensor] = ordinal.get(node.tensor, -1) + 1
                        tensor_passes.setdefault((walk, n) if walk is not None else (node,), []).append(node)
            previous = s

    def own(load: S.Load) -> bool:
        """Whether only this program reads the tile: every block index of the grid reaches its
        indices (a matmul's A[x, k] is read by every program along y)."""
        seen, todo = set(), list(load.indices)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                if name not in grid:  # a block index's own value (pid arithmetic) is every dimension's
                    todo += reads.get(name, ())
        return grid <= seen

    visit(kernel.body, (), None)
    policies = {}
    for tensor, by_pass in passes.items():
        parts = list(by_pass.values())
        loads = [load for part in parts for load in part]
        if tensor in repeated:
            continue
        if len(parts) > 1:
            if all(program_axes.intersection(load.indices) for load in loads):
                policies.update({load: KEEP for part in parts[:-1] for load in part})
                policies.update({load: RELEASE for load in parts[-1]})
        elif stream and tensor not in gathered and all(own(load) for load in loads):
            policies.update({load: RELEASE for load in loads})
    return policies
