"""A tile loaded again, in another layout or dtype, is the first load's, not a second load.

Attention's `grad_K` reads each block of `Q` twice in one step: transposed, for the scores
(`K · Qᵀ`), and as it lies, for the product that sums over the rows (`dSᵀ · Q`). The later read
becomes the earlier tile, permuted in registers (`tl.trans`) and converted where the dtypes
differ (from a float32 or wider first load only): one load. It applies
where the earlier load is in scope (before it, in the same loop body or one around it), both read
the same axes of the tensor, nothing in the kernel writes the tensor and the earlier variable is
assigned once. Single elements are loaded again (see invariant_loads).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from dt.ir import scheduled as S


def share_repeated_loads(kernel: S.Kernel) -> S.Kernel:
    statements = list(S.walk_statements(kernel.body))
    written = {s.tensor for s in statements if isinstance(s, (S.Store, S.Scatter))}
    assigned = Counter(s.name for s in statements if isinstance(s, S.Assign))
    return replace(kernel, body=_body(kernel.body, {}, written, assigned))


def _body(stmts, available: dict, written, assigned) -> tuple:
    available = dict(available)  # (tensor, indices) -> the load in scope: (variable, order, dtype)
    out = []
    for s in stmts:
        if isinstance(s, S.For):
            s = replace(s, body=_body(s.body, available, written, assigned))
        elif isinstance(s, S.Assign) and isinstance(s.value, S.Load) and s.value.order \
                and s.value.tensor not in written:
            load = s.value
            key = (load.tensor, load.indices)
            if key in available and _exact(available[key][2], load.dtype):
                name, order, dtype = available[key]
                value = S.Ref(name, order, dtype)
                value = value if order == load.order else S.Expand(value, load.order)
                s = replace(s, value=value if dtype == load.dtype else S.Cast(value, load.dtype))
            elif assigned[s.name] == 1:
                available[key] = (s.name, load.order, load.dtype)
        out.append(s)
    return tuple(out)


def _exact(earlier: str, later: str) -> bool:
    """Whether the earlier load's values convert to the later's dtype as a load would: the same
    dtype, or a float32 (or wider) first load (an f32 temporary first read as a bf16 product
    operand must not feed an f32 read)."""
    return earlier == later or earlier == "f64" or earlier == "f32" and later != "f64"
