"""One kernel's lowering: the Func computed at root and the producers fused into it, in one walk
over the algorithm: the program-id grid (grid), the loop nests (loops), the expressions
(expressions), the reductions (reductions) and the online statistics of shared loops
(online_statistics), each a part of `KernelLowering`, built with KernelBuilder (builder)."""
from __future__ import annotations

from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir import uses
from dt.ir.check.compute_with import runs_after
from dt.ir.check.program import CheckedProgram
from dt.ir.check.uses import reachable
from dt.ir.index_expr import IExpr, IVar
from dt.ir.lower.builder import KernelBuilder
from dt.ir.lower.dtypes import dot_dtype_of
from dt.ir.lower.expressions import ExpressionLowering
from dt.ir.lower.grid import GridLowering
from dt.ir.lower.loops import LoopNestLowering
from dt.ir.lower.online_statistics import OnlineStatistics
from dt.ir.lower.types import Types
from dt.ir.lower.reductions import ReductionLowering
from dt.ir.lower.ranks import RankLowering
from dt.ir.lower.scans import ScanLowering
from dt.ir.lower.walk_sums import WalkSums
from dt.ir.naming import RESERVED_NAMES, size_name


class KernelLowering(GridLowering, LoopNestLowering, WalkSums, ExpressionLowering, ReductionLowering,
                     OnlineStatistics, ScanLowering, RankLowering, KernelBuilder):
    """Lowers the kernel computing one root Func. Its parts share the state set here: the names
    taken, the statements emitted and their scopes, the axes, the producers fused at each loop and
    the reductions already accumulated in a sibling's loop."""

    def __init__(self, cp: CheckedProgram, root: str, compute: str, storage: str, name: str, taken: set[str],
                 types: Types, stored: set[str]):
        """Lowers the kernel computing `root`, called `name`; its own names avoid `taken`; `types`
        gives each expression's static type and each Func's dtype; `stored`: the inlined outputs
        stored already (by earlier kernels), to which this one adds those it stores."""
        self.cp = cp
        self.types = types
        self.root = root
        self.name = name
        self.compute = compute
        self.storage = storage
        self.dot_dtype = dot_dtype_of(storage, compute)
        # One namespace for every generated name; scalars, extents and the pipeline's names keep their own.
        self.used: set[str] = set(cp.scalars) | RESERVED_NAMES | {size_name(d) for d in cp.dim_kinds} | taken
        self.dim_order = self._dim_order()
        self.axes: dict[str, S.Axis] = {}
        self.out: list = []
        self.products: set[str] = set()  # tiles assigned a Dot (online_statistics.positive_scale)
        self.scopes: list[dict] = [{}]
        self.fused_at: dict[tuple[str, str], list[str]] = {}
        for p in cp.funcs:  # topological: producers before their users; not a split's partials summed in a walk
            if p in cp.fused and cp.schedules[p].walked_in is None:
                self.fused_at.setdefault(cp.fused[p], []).append(p)
        for key, producers in self.fused_at.items():
            self.fused_at[key] = self.in_loop_order(producers)
        # Reductions accumulated in a sibling's loop (compute_with): the A.Reduce's id -> its result
        self.shared_reductions: dict[int, S.Ref] = {}
        self.arg_values: dict[int, S.Ref] = {}  # an arg-reduction's id -> its value accumulator
        self.carries: dict[int, S.Ref] = {}  # a scan's id -> its running value across the loop over its dim
        self.known_true: list[A.Expr] = []  # index conditions that hold on every lane of the tiles walked
        self.walking_funcs = self._walking_funcs()
        self.accumulator_stems = self._accumulator_stems()
        self.reads: list[str] = []
        self.load_dtypes: dict[str, str] = {}  # tile variables holding a Load, and its dtype
        self.block_lets: dict[str, tuple[int, IExpr]] = {}  # dim -> (its block index's Let in out, block count)
        self.grid_entries_end = 0  # where in out the statements deriving block indices from pid end
        self.longest_first: set[str] = set()  # dims whose blocks bound a walk from above
        self.open_loops: list[tuple] = []  # (dim, loop variable, start) of each loop being built, outermost first
        self.writes: list[str] = [root]  # the root, then the outputs fused or inlined into this kernel
        self.stored_inline = stored

    def lower(self) -> S.Kernel:
        root = self.cp.funcs[self.root]
        sched = self.cp.schedules[self.root]
        program_count, ranges = self.grid(root, sched)
        self.block_ranges = ranges
        self.emit_func(self.root, {}, ranges)
        self.longest_walks_first()
        return S.Kernel(self.name, self.root, program_count, prune_lets(tuple(self.out)), sched.num_warps,
                        sched.num_stages, tuple(self.reads), tuple(dict.fromkeys(self.writes)), root.loc,
                        persistent=sched.persistent, persistent_programs=sched.persistent_programs, tma=sched.tma,
                        stream=sched.stream, scheduled_by=sched.taken_from or "",
                        grid_indices=tuple(r.block_index.name for r in ranges.values() if isinstance(r.block_index, IVar)))

    def _dim_order(self) -> list[str]:
        """The order tiles lay their axes out in: the root's dimensions, each other pure dimension
        of a Func of the kernel just before the next of that Func's own (k_out[b, s, kh, d] fused
        into q_out[b, s, h, d]'s kernel: kh before d, so that its tiles need no transposing);
        reduction dimensions are appended as their loops come."""
        order = list(self.cp.funcs[self.root].dims)
        for f in self.cp.kernel_funcs(self.root):
            dims = self.cp.funcs[f].dims
            for i, d in enumerate(dims):
                if d not in order:
                    order.insert(next((order.index(e) for e in dims[i + 1:] if e in order), len(order)), d)
        return order

    def _walking_funcs(self) -> dict[str, set[str]]:
        """dim -> the Funcs of this kernel that walk it in reduction loops of their own, nested
        in another reduction's loop or not (a Func computed with another reduces in that one's loop)."""
        in_kernel = {self.root}
        for p in reversed(list(self.cp.funcs)):  # consumers before their producers
            if p in self.cp.fused and self.cp.fused[p][0] in in_kernel:
                in_kernel.add(p)
        followers = {(g, dim) for (_, dim), gs in self.cp.computed_with.items() for g in gs}
        walking: dict[str, set[str]] = {}

        for f in in_kernel:
            stack = [(self.cp.funcs[f].expr, False)]  # (expression, inside a sibling's loop)
            while stack:
                e, in_sibling_loop = stack.pop()
                # a follower's reduction, and whatever it nests, runs in its sibling's loops
                if isinstance(e, A.Reduce):
                    in_sibling_loop = in_sibling_loop or (f, e.dim) in followers
                    if not in_sibling_loop:
                        walking.setdefault(e.dim, set()).add(f)
                stack += ((child, in_sibling_loop) for child in A.children(e))
        return walking

    def _accumulator_stems(self) -> dict[str, dict[str, str]]:
        """dim -> Func -> what its accumulators over dim are named after: `_sum` -> `sum`, unless
        another Func named there (walking dim, or computed with a sibling over it) would read the same."""
        named = {dim: set(funcs) for dim, funcs in self.walking_funcs.items()}
        for (_, dim), followers in self.cp.computed_with.items():
            named.setdefault(dim, set()).update(followers)
        stems = {}
        for dim, funcs in named.items():
            short = [f.lstrip("_") or f for f in funcs]
            stems[dim] = {f: s if short.count(s) == 1 else f for f, s in zip(funcs, short)}
        return stems

    def in_loop_order(self, producers: list[str]) -> list[str]:
        """Producers fused at one loop (in topological order), reordered so that a loop shared by
        compute_with runs after whatever its members' reductions read, and each member after
        the loop (compute_with.runs_after; the check rejects the orders that cannot be met)."""
        pool = set(producers)
        needs: dict[str, set[str]] = {}
        for f in producers:
            needs[f] = set()
            for g, _, shared in runs_after(f, self.cp.computed_with, self.cp.funcs):
                # a Func accumulated in g's loop follows g itself; any other g, through what it uses
                needs[f] |= {g} if shared else reachable(self.cp.funcs, {g}, stop=pool) & pool
        order: list[str] = []
        pending = list(producers)
        while pending:
            f = next((f for f in pending if needs[f] <= set(order)), None)
            assert f is not None, f"no order for {pending} (the checker rejects compute_with cycles)"
            pending.remove(f)
            order.append(f)
        return order


def prune_lets(body: tuple) -> tuple:
    """Drop Let statements nothing reads (e.g. a block count no map needs)."""
    while True:
        used = uses.used_index_names(body)
        pruned = _drop_lets(body, used)
        if pruned == body:
            return body
        body = pruned


def _drop_lets(body, used):
    out = []
    for s in body:
        if isinstance(s, S.Let) and s.name not in used:
            continue
        if isinstance(s, S.For):
            s = S.For(s.var, s.start, s.stop, s.step, _drop_lets(s.body, used), s.dim, s.kind, s.loc)
        out.append(s)
    return tuple(out)
