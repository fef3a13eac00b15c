"""The program-id grid: the kernel's program count, each program id decomposed into the block
index of each blocked dimension following `map` (slowest first; the last group of a split may be
partial; descending where that dimension bounds a walk from above: `longest_walks_first`), and
the index range (`Range`) each block covers."""
from __future__ import annotations

from dataclasses import dataclass

from dt.ir import algorithm as A
from dt.ir import scheduled as S
from dt.ir.check.program import MapEntry
from dt.ir.index_expr import IConst, IExpr, IVar, iadd, icdiv, ifloordiv, imin, imul, isub, renamed
from dt.ir.naming import size_name


@dataclass(frozen=True)
class Range:
    """The index range a pure dimension covers in this program instance."""
    start: IExpr
    length: IExpr  # number of valid indices
    size: IExpr  # nominal lanes (block size, or the extent)
    end: IExpr  # start + length
    limit: IExpr | None  # None: every lane of size is valid
    static_size: int | None
    block_index: IExpr | None = None  # the program's block along the dimension (None: the dimension is whole)


class GridLowering:
    """The grid part of a kernel's lowering (dt.ir.lower.kernel.KernelLowering)."""

    def grid(self, root: A.FuncDef, sched) -> tuple[IExpr, dict[str, Range]]:
        counts: dict[str, IExpr] = {}
        program_count: IExpr = IConst(1)  # in terms of extents only: the launcher computes it
        for d in root.dims:
            if d in sched.block:
                count = icdiv(IVar(size_name(d)), sched.block[d])
                counts[d] = self.let(f"{d}_BLOCK_COUNT", count)
                program_count = imul(program_count, count)
        entries = list(sched.map or ())
        named = {e.dim for e in entries}
        default = [MapEntry(d, d, "whole") for d in reversed(root.dims) if d not in named]
        entries = [e for e in default + entries if e.dim in counts]
        position = {(e.dim, e.part): i for i, e in enumerate(entries)}
        values: dict[tuple[str, str], IExpr] = {}
        group_counts: dict[str, IExpr] = {}
        rest: IExpr = IVar("pid")
        split = {e.dim for e in entries if e.part != "whole"}
        for i, e in enumerate(entries):
            # How many programs share this entry's value: the product, over every dimension,
            # of the parts of its block index that vary faster than this entry.
            below: IExpr = IConst(1)
            for d in counts:
                parts = ("outer", "inner") if d in split else ("whole",)
                after = [p for p in parts if position[(d, p)] > i]
                if not after:
                    continue
                if len(after) == len(parts):
                    below = imul(below, counts[d])
                elif position[(d, "outer")] == i:
                    below = imul(below, IConst(e.group))  # all groups but the last are full
                else:
                    below = imul(below, group_counts[d])
            last = i == len(entries) - 1
            name = {"whole": f"{e.dim}_pid", "outer": f"{e.dim}_group_id", "inner": f"{e.name}_pid"}[e.part]
            if e.part == "whole":
                self.block_lets[e.dim] = (len(self.out), counts[e.dim])
            value = self._bind(name, rest if last else ifloordiv(rest, below))
            self.grid_entries_end = len(self.out)
            values[(e.dim, e.part)] = value
            if e.part == "outer":
                group_counts[e.dim] = self.let(f"{e.dim}_group_size", imin(
                    IConst(e.group), isub(counts[e.dim], imul(value, e.group))))
            if not last:
                rest = isub(rest, imul(value, below))
                if i + 1 < len(entries) - 1:
                    rest = self.let("pid_rest", rest)
        ranges: dict[str, Range] = {}
        for d in root.dims:
            if d not in counts:
                continue
            block = sched.block[d]
            if (d, "outer") in values:
                pid = self.let(f"{d}_pid", iadd(imul(values[(d, "outer")], self._group(d, entries)),
                                                values[(d, "inner")]))
            else:
                pid = values[(d, "whole")]
            start = self.let(f"{d}_block_start", imul(pid, block))
            if block == 1:
                ranges[d] = Range(start, IConst(1), IConst(1), iadd(start, 1), None, 1, pid)
                continue
            end = self.let(f"{d}_block_end", imin(iadd(start, block), IVar(size_name(d))))
            ranges[d] = Range(start, isub(end, start), IConst(block), end, end, block, pid)
        return program_count, ranges

    def longest_walks_first(self):
        """Blocks of a dimension bounding a walk from above (causal: `l <= m`, keys up to the
        block's last row) taken in descending order: the programs that walk longest start first,
        and the short ones fill the last wave (FlashAttention 3's causal order; 2-5% on
        attention's grad_Q). A dimension whose blocks `map` groups (`m:m1/8`) keeps its order."""
        # the last entry's first: rewriting it leaves the earlier ones' places in `out` as they were
        for d in sorted(self.longest_first & self.block_lets.keys(), key=lambda d: self.block_lets[d][0], reverse=True):
            i, count = self.block_lets[d]
            let = self.out[i]
            order = self.fresh(f"{d}_order")  # the ascending index: what the ids of the next entries subtract
            rest = [S.Let(s.name, renamed(s.value, lambda n: order if n == let.name else n))
                    for s in self.out[i + 1:self.grid_entries_end]]
            self.out[i:self.grid_entries_end] = [S.Let(order, let.value),
                                                 S.Let(let.name, isub(isub(count, IConst(1)), IVar(order))), *rest]
            self.grid_entries_end += 1

    def _bind(self, name: str, value: IExpr) -> IExpr:
        bound = self.fresh(name)
        self.emit(S.Let(bound, value))
        return IVar(bound)

    @staticmethod
    def _group(dim, entries) -> int:
        return next(e.group for e in entries if e.dim == dim and e.part == "outer")
