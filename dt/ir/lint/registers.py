"""A tile too large for its warps. A GPU program's tiles live in the registers of its
num_warps x 32 threads; a thread has at most 255, and fewer in a large program (a
multiprocessor's 65,536 registers shared by its threads: 64 each in 32 warps). A tile that needs
more than half of them alone leaves too few for the rest (the tiles it is computed from,
addresses, masks), so the kernel spills to local memory (a 65,536-lane row in 4 warps: 512
values a thread, 3,100 spill stores on an H100)."""
from __future__ import annotations

from dt.dtypes import ITEM_BYTES
from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint.facts import WARP, KernelFacts, computed, statements_with_values

MACHINES = ("gpu",)
CODES = ("registers",)
MAX_REGISTERS = 255
REGISTERS_PER_SM = 65536
MAX_WARPS = 32


def budget(warps: int) -> int:
    """The registers a thread of a program of `warps` warps can have."""
    return min(MAX_REGISTERS, REGISTERS_PER_SM // (warps * WARP))


def fits(need: int, warps: int) -> bool:
    """Whether one tile of `need` registers a thread leaves enough for the rest."""
    return 2 * need <= budget(warps) + 1  # half of 255 rounds up: 128 of 255 is fine


def registers(lanes: int, dtype: str, warps: int) -> int:
    """32-bit registers a thread holds of a tile of `lanes` lanes spread over `warps` warps."""
    return -(-lanes * max(ITEM_BYTES.get(dtype, 4), 4) // (4 * warps * WARP))


def check(facts: KernelFacts):
    kernel, context = facts.kernel, facts.context
    operands = _product_operands(kernel)
    worst = None
    for s, value in statements_with_values(kernel.body):
        if isinstance(s, S.Assign) and s.name in operands:
            continue
        for node in S.walk_texpr(value):
            if node in operands.values():
                continue
            lanes = facts.tile_lanes(node) if node.dims else None
            if lanes is None:
                continue
            need = registers(lanes, node.dtype, facts.warps)
            if worst is None or need > worst[0]:
                worst = (need, lanes, node, s)
    if worst is None or fits(worst[0], facts.warps):
        return
    need, lanes, node, s = worst
    func = kernel.schedule_func
    shape = "x".join(str(facts.lanes(a, padded=True)) for a in node.dims if a not in node.unit)
    warps = facts.warps
    while warps < MAX_WARPS and not fits(registers(lanes, node.dtype, warps), warps):
        warps *= 2
    dims = ", ".join(dict.fromkeys(facts.dim_of(a) for a in node.dims if a not in node.unit))
    fixes = [f"{func}.num_warps({warps})"] if fits(registers(lanes, node.dtype, warps), warps) else []
    fixes.append(f"smaller tiles along {dims} with a loop over them ({func}.tensorize(...))")
    loc = context.schedule_loc(func, "num_warps", "tensorize") or s.loc
    yield PerformanceWarning(
        "registers", f"a {shape} tile of '{computed(s)}' in kernel '{kernel.name}' needs {need} registers a "
        f"thread in {facts.warps} warps", loc,
        cost=f"{need} of a thread's {budget(facts.warps)} registers (in {facts.warps} warps) for this tile alone: the "
             f"kernel spills to local memory",
        hint=" or ".join(fixes), func=func, notes=(("the tile is computed here", s.loc),) if loc is not s.loc else ())


def _product_operands(kernel: S.Kernel) -> dict[str, S.TExpr]:
    """The tiles that are operands of a matrix product (by the name assigned them): they go to
    shared memory for the matrix units, not to registers."""
    found = {}
    for s in S.walk_statements(kernel.body):
        if isinstance(s, (S.Assign, S.Store)):
            for node in S.walk_texpr(s.value):
                if isinstance(node, S.Dot):
                    for x in (node.a, node.b):
                        if isinstance(x, S.Ref):
                            found[x.name] = x
    return found
