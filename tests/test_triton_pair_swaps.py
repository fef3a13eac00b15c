"""Neighbour reads in pairs (dt/backends/triton/pair_swaps.py): `where(d % 2 == 0, f(X[d + 1]),
g(X[d - 1]))` reads the loaded tile of X with its lanes swapped in pairs, where that holds lane
for lane; the kernels compute the reference either way. The speed is measured on the GPU
(docs/performance.md)."""
from __future__ import annotations

import pytest

import dt
from dt.backends.triton import codegen
from dt.backends.triton.pair_swaps import with_pair_swaps
from dt.ir import scheduled as S
from dt.testing import assert_close, random_inputs


def _program(value: str, schedule: str = "o.block(x:1); o.tensorize(d:0);", dims="o[x, d]") -> dt.Program:
    return dt.loads(f"""Func o; In X; Var x, d;
{dims} = {value};
{schedule}
o.compile();""")


ROTATE = "X[x, d] * 0.5 + where(d % 2 == 0, -X[x, d + 1], X[x, d - 1])"


def _swaps(prog: dt.Program) -> list[S.SwapPairs]:
    return [s.value for k in prog.pipeline("f32").kernels for s in S.walk_statements(with_pair_swaps(k).body)
            if isinstance(s, S.Assign) and isinstance(s.value, S.SwapPairs)]


def _gathers(kernel: S.Kernel) -> list[S.Gather]:
    return [n for s in S.walk_statements(kernel.body) for v in S.statement_values(s)
            for n in S.walk_texpr(v) if isinstance(n, S.Gather)]


def test_interleaved_rope_reads_each_element_once():
    source = codegen.render(dt.load("examples/llm/rope_interleaved.dt").pipeline("bf16")).source
    assert "Q_even, Q_odd = tl.split(tl.reshape(Q, (h_TILE, d_TILE // 2, 2)))" in source
    assert "Q_pairs = tl.reshape(tl.join(Q_odd, Q_even), (h_TILE, d_TILE))" in source
    assert "tl.where((d_arange % 2 == 0)[None, :], -Q_pairs, Q_pairs)" in source
    assert "d_arange + 1" not in source and "d_arange - 1" not in source  # no shifted loads left
    assert "max(2, triton.next_power_of_2(d_SIZE))" in source  # an extent of 1 still makes a pair


@pytest.mark.parametrize("value", [
    ROTATE,
    "where(d % 2 == 1, X[x, d - 1], X[x, d + 1] * 2.0)",
    "where(d % 2 != 0, exp(X[x, d - 1]), -X[x, d + 1])",
    "where(d % 2 != 1, X[x, d + 1], X[x, d - 1]) + X[x, d]",
])
def test_each_parity_test_picks_the_partner(value):
    prog = _program(value)
    kernel = with_pair_swaps(prog.pipeline("f32").kernels[0])
    assert len([s for s in kernel.body if isinstance(s, S.Assign) and isinstance(s.value, S.SwapPairs)]) == 1
    assert not _gathers(kernel)


@pytest.mark.parametrize("value", [
    # dt.grad's form: each partner's read under the parity of d + 1 or d - 1, and guarded to the row
    "where((d + 1) % 2 == 0, 0.0, X[x, d + 1]) - where((d - 1) % 2 == 0, X[x, d - 1], 0.0)",
    "where((d - 1) % 2 != 0, X[x, d + 1], X[x, d - 1] * 3.0)",
])
def test_a_parity_test_of_a_shifted_lane_picks_the_partner(value):
    kernel = with_pair_swaps(_program(value).pipeline("f32").kernels[0])
    assert len([s for s in kernel.body if isinstance(s, S.Assign) and isinstance(s.value, S.SwapPairs)]) == 1
    assert not _gathers(kernel)


def test_the_gradient_of_interleaved_rope_reads_each_gradient_once():
    backward = dt.grad(dt.load("examples/llm/rope_interleaved.dt"), wrt=("Q", "K"))
    source = codegen.render(backward.pipeline("bf16")).source
    assert source.count("tl.split(") == 2 and "grad_q_out_ptr + grad_q_out_b_index" not in source


@pytest.mark.parametrize("value,schedule,dims", [
    (ROTATE, "o.block(x:1, d:3); o.tensorize(d:3);", "o[x, d]"),  # odd tiles: a pair would straddle two
    ("where(d % 2 == 0, X[x, d - 1], X[x, d + 1])", "o.block(x:1); o.tensorize(d:0);", "o[x, d]"),  # not partners
    ("where(d % 3 == 0, X[x, d + 1], X[x, d - 1])", "o.block(x:1); o.tensorize(d:0);", "o[x, d]"),
    ("where(d % 2 == 0, X[d + 1, x], X[d - 1, x])", "o.block(x:2); o.tensorize(x:2, d:0);", "o[d, x]"),  # d first
])
def test_reads_that_are_not_partners_lane_for_lane_stay_gathers(value, schedule, dims):
    assert not _swaps(_program(value, schedule, dims))


def test_a_neighbour_also_read_outside_the_where_keeps_its_gather():
    prog = _program("where(d % 2 == 0, X[x, d + 1], X[x, d - 1]) + X[x, d + 1]")
    kernel = with_pair_swaps(prog.pipeline("f32").kernels[0])
    assert len(_gathers(kernel)) == 1  # d + 1 for the sum; d - 1 went


def _runs() -> bool:
    from dt import backends
    return backends.available("triton")


@pytest.mark.parametrize("dims,value,schedule,sizes,swapped", [
    ("o[x, d]", ROTATE, "o.block(x:1); o.tensorize(d:0);", {"x": 3, "d": 8}, True),
    ("o[x, d]", ROTATE, "o.block(x:1); o.tensorize(d:0);", {"x": 2, "d": 7}, True),  # the last partner is past the row
    ("o[x, d]", ROTATE, "o.block(x:1); o.tensorize(d:0);", {"x": 2, "d": 1}, True),
    ("o[x, d]", ROTATE, "o.block(x:2, d:4); o.tensorize(x:2, d:4);", {"x": 3, "d": 11}, True),  # blocks end at min(even, d)
    ("o[x, d]", ROTATE, "o.block(x:1); o.tensorize(d:4);", {"x": 2, "d": 10}, True),  # a loop of 4-lane tiles
    ("o[x, d]", ROTATE, "o.block(x:1, d:3); o.tensorize(d:3);", {"x": 2, "d": 10}, False),  # odd tiles
    ("o[b, x, d]", "where(d % 2 == 1, X[b, x, d - 1], X[b, x, d + 1] * 2.0)",
     "o.block(b:2, x:2); o.tensorize(b:2, x:2, d:0);", {"b": 3, "x": 3, "d": 9}, True),
    ("o[x]", "rsum(where(d % 2 == 0, -X[x, d + 1], X[x, d - 1]) * X[x, d], d)",
     "o.block(x:2); o.tensorize(x:2, d:4);", {"x": 3, "d": 13}, True),  # whole tiles, then the cut one
    ("o[x, d]", "where((d + 1 >= 0) * (d + 1 < len(d)), where((d + 1) % 2 == 0, 0.0, X[x, d + 1]), 0.0)"
     " - where((d - 1) % 2 == 0, X[x, d - 1], 0.0)", "o.block(x:1); o.tensorize(d:0);", {"x": 2, "d": 7}, True),
])
def test_kernels_with_swapped_pairs_match_the_reference(dims, value, schedule, sizes, swapped):
    pytest.importorskip("torch")
    if not _runs():
        pytest.skip("Triton kernels run on a GPU or under TRITON_INTERPRET=1")
    outer = ", ".join(v for v in ("b", "x") if v in sizes)
    d = "Var" if "d]" in dims else "RVar"  # a reduction over d where the output lacks it
    prog = dt.loads(f"""Func o; In X; Var {outer}; {d} d;
{dims} = {value};
{schedule}
o.compile();""")
    assert ("tl.split(" in prog.source("triton", "f32")) == swapped
    args = random_inputs(prog, sizes, "f32", seed=3)
    assert_close(prog(backend="triton", **args), prog.reference(**args), "f32")
