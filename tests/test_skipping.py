"""Skipped tiles (issue 28): a reduction loop masked by an index condition walks only the tiles
some lane of the block needs, where every reduction of the loop gets its identity on the masked
lanes (dt.ir.lower.skipping); anything else walks the whole extent. Results never change."""
import numpy as np
import pytest

import dt
from dt.ir import scheduled as S
from test_llm_examples import BACKENDS, LLM, normal, run_program

ROWS = "Func out;\nIn A;\nVar m;\nRVar l;\nout[m] = {expr};\nout.block(m:16); out.tensorize(m:16, l:16); out.compile();"


def reduction_steps(prog, **extents) -> list[int]:
    """How many tiles each program's loop over l walks: its For's bounds, evaluated per program."""
    kernel = prog.pipeline("f32").kernels[0]
    sizes = {S.size_name(d): n for d, n in extents.items()}
    count = S.evaluate_index(kernel.program_count, sizes)
    steps = []
    for pid in range(count):
        names = dict(sizes, pid=pid)
        for s in kernel.body:
            if isinstance(s, S.Let):
                names[s.name] = S.evaluate_index(s.value, names)
            elif isinstance(s, S.For):
                steps.append(len(range(S.evaluate_index(s.start, names), S.evaluate_index(s.stop, names), s.step)))
    return steps


@pytest.mark.parametrize("expr, steps", [
    ("rsum(where(l <= m, A[m, l], 0.0), l)", [1, 2, 3, 4]),  # causal: up to the block's diagonal tile
    ("rmax(where(l < m, A[m, l], -inf), l)", [1, 2, 3, 4]),
    ("rsum(where(l <= m, where(l > m - 5, A[m, l], 0.0), 0.0), l)", [1, 2, 2, 2]),  # a sliding window
    ("rsum(where(m >= l + 20, A[m, l], 0.0), l)", [0, 1, 2, 3]),  # block 0 is masked throughout
    ("rmax(where(l <= m, A[m, l], 0.0), l)", [4, 4, 4, 4]),  # 0 is no identity of max
    ("rsum(where(l <= m, A[m, l], -1e30), l)", [4, 4, 4, 4]),  # -1e30 is not 0
    ("rsum(where(l <= m, A[m, l], 0.0), l) + rmax(A[m, l], l)", [1, 4, 2, 4, 3, 4, 4, 4]),  # the sum's loop only
])
def test_a_loop_walks_the_tiles_its_condition_leaves(expr, steps):
    prog = dt.loads(ROWS.format(expr=expr))
    assert reduction_steps(prog, m=64, l=64) == steps
    a = normal(64, 64)
    np.testing.assert_allclose(prog(A=a, backend="interp"), prog.reference(A=a), rtol=1e-5, atol=1e-5)


def test_causal_attention_walks_half_the_keys():
    causal, full = (dt.load(LLM / f"{name}.dt") for name in ("causal_mha", "mha"))
    extents = dict(b=1, h=1, m=1024, l=1024, k=64, n=64)
    assert reduction_steps(full, **extents) == [16] * 8
    assert reduction_steps(causal, **extents) == [2 * (i + 1) for i in range(8)]  # 72 of 128 tiles


@pytest.mark.parametrize("backend", BACKENDS)
def test_skipping_keeps_rows_masked_throughout(backend):
    """l < m masks row 0 entirely: its max is -inf with or without the skipped tiles."""
    prog = dt.loads(ROWS.format(expr="rmax(where(l < m, A[m, l], -inf), l)"))
    a = normal(37, 45)
    want = np.array([-np.inf] + [a[i, :i].max() for i in range(1, 37)], np.float32)
    np.testing.assert_array_equal(run_program(prog, backend, A=a), want)
