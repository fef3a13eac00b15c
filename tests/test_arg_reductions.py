"""rargmax and rargmin (issue 29): the index of the first max or min along a dimension, NaN
ranked first as torch.argmax ranks it, stored as i64, on every backend; with the max they find
in one loop (compute_with); through the Python API and the debugger."""
import numpy as np
import pytest

import dt
from dt.conformance import arg_reductions as cases
from dt.conformance.case import DOMAINS
from dt.ir import scheduled as S
from test_llm_examples import BACKENDS, run_program

RNG = np.random.default_rng(29)
ROW = "Func out;\nIn A;\nVar x;\nRVar y;\nout[x] = {fn}(A[x, y], y);\n{schedule}"


def specials(*shape):
    values = DOMAINS["specials"](RNG, shape).astype(np.float32)
    values[1, 3], values[1, 40] = np.nan, np.nan  # two NaNs: the first wins
    values[2] = np.nan  # NaN throughout
    values[3] = np.inf  # ties at +inf
    values[4, 50] = np.inf  # +inf against NaN-free numbers
    values[4, 60] = -np.inf
    return values


@pytest.mark.parametrize("schedule", list(cases.ROWS))
@pytest.mark.parametrize("fn,numpy_fn", [("rargmax", np.argmax), ("rargmin", np.argmin)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_first_index_of_the_max_or_min_nan_first(backend, fn, numpy_fn, schedule):
    a = specials(9, 101)
    p = dt.loads(ROW.format(fn=fn, schedule=cases.ROWS[schedule]))
    out = np.asarray(run_program(p, backend, A=a))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, numpy_fn(a, axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_shares_a_loop_with_the_max_it_finds(backend):
    p = dt.loads(f"{cases.WITH_MAX}\n{cases.WITH_MAX_SCHEDULES['shared_loop']}")
    loops = [s for k in p.pipeline("f32").kernels for s in S.walk_statements(k.body) if isinstance(s, S.For)]
    assert [loop.kind for loop in loops] == ["reduction", "tail"]  # one walk: its whole tiles, then the cut one
    a = RNG.integers(-3, 4, (7, 45)).astype(np.float32)
    out = run_program(p, backend, A=a)
    np.testing.assert_array_equal(out["am"], np.argmax(a, axis=1))
    np.testing.assert_array_equal(out["mx"], a.max(axis=1))


def test_an_index_is_an_integer_a_cast_narrows():
    x, y = dt.Var("x"), dt.RVar("y")
    A = dt.In("A")
    out = dt.Func("out")
    out[x] = dt.cast(dt.rargmin(A[x, y], y), "i32")
    out.compile()
    p = dt.program(out)
    a = RNG.standard_normal((5, 33)).astype(np.float32)
    got = p(A=a, backend="interp")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.argmin(a, axis=1))


def test_the_debugger_shows_the_running_index_and_value():
    p = dt.loads(ROW.format(fn="rargmax", schedule=cases.ROWS["tiles"]))
    a = RNG.standard_normal((4, 20)).astype(np.float32)
    seen = {}

    def look(frame):  # every statement of program 0 (rows 0 and 1)
        if frame.pid == 0:
            seen.update({name: np.array(tile) for name, tile in frame.tiles.items()})
            frame.step()
    with dt.debug.break_at(func="out", pid=0, action=look):
        p(A=a)
    assert {"y_accumulator", "y_max", "y_tile_first"} <= set(seen)
    np.testing.assert_array_equal(seen["y_accumulator"], np.argmax(a[:2], axis=1))  # after the last tile
    np.testing.assert_array_equal(seen["y_max"], a[:2].max(axis=1))


@pytest.mark.parametrize("schedule", list(cases.TOPK_SCHEDULES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_top_k_indices_largest_first_and_their_values_gathered(backend, schedule):
    p = dt.loads(f"{cases.TOPK}\n{cases.TOPK_SCHEDULES[schedule]}")
    a = specials(9, 101)
    out = run_program(p, backend, sizes={"i": 5}, A=a)
    want = cases._top(a.astype(np.float64), 5)
    np.testing.assert_array_equal(out["ti"], want["ti"])
    np.testing.assert_array_equal(out["tv"], want["tv"].astype(np.float32))


def test_ranks_past_the_row_are_minus_one():
    p = dt.loads(f"{cases.TOPK}\n{cases.TOPK_SCHEDULES['tiles']}")
    out = p(A=np.array([[3.0, 1.0, 2.0]], np.float32), sizes={"i": 5})
    np.testing.assert_array_equal(out["ti"], [[0, 2, 1, -1, -1]])
    np.testing.assert_array_equal(out["tv"], [[3.0, 2.0, 1.0, 0.0, 0.0]])


@pytest.mark.parametrize("source,error,message", [
    ("Func t;\nIn A;\nVar x, i;\nRVar y;\nt[x, i] = rargtopk(A[x, y], y, i);\nt.tensorize(i:4);\nt.compile();",
     dt.DTScheduleError, "walks 'i' in blocks or tiles"),
    ("Func t;\nIn A;\nVar x, i;\nRVar y;\nt[x] = rargtopk(A[x, y], y, i);\nt.compile();", dt.DTDimensionError,
     "not a dimension of 't'"),
    ("Func t, s;\nIn A;\nVar x;\nt[x] = A[x] * 0.5;\ns[x] = A[t[x]];\ns.compile();", dt.DTTypeError,
     "Func 't' indexes 'A'.*holds f32 values"),
    ("Func t;\nIn A, B;\nVar x, i;\nRVar y;\nt[x, i] = rargtopk(A[x, y] + B[i], y, i);\nt.tensorize(i:0);\n"
     "t.compile();", dt.DTDimensionError, "ranks values that vary along 'i'"),
])
def test_what_rargtopk_and_a_gather_through_a_func_need(source, error, message):
    with pytest.raises(error, match=message):
        dt.loads(source).pipeline("f32")


def test_the_sanitizers_see_the_values_ranked_not_the_empty_ranks():
    p = dt.loads(f"{cases.TOPK}\n{cases.TOPK_SCHEDULES['tiles']}")
    a = RNG.standard_normal((5, 40)).astype(np.float32)
    with dt.debug.sanitize():  # the kept ranks start empty, at -inf: no report
        out = p(A=a, sizes={"i": 4})
    np.testing.assert_array_equal(out["ti"], np.argsort(-a, axis=1, kind="stable")[:, :4])
    a[1, 3] = np.inf
    with pytest.raises(dt.debug.DTNonFiniteError, match="is inf at x=1, y=3"), dt.debug.sanitize():
        p(A=a, sizes={"i": 4})
    causal = dt.loads("Func o;\nIn S;\nVar m, i;\nRVar l;\no[m, i] = rargtopk(where(l <= m, S[m, l], -inf), l, i);\n"
                      "o.tensorize(i:0, l:4);\no.compile();")
    scores = RNG.standard_normal((5, 5)).astype(np.float32)
    with dt.debug.sanitize():  # -inf where the where masks is a value ranked, as rmax would compare it
        ranks = causal(S=scores, sizes={"i": 2})
    np.testing.assert_array_equal(ranks[:, 0], [np.argmax(scores[m, :m + 1]) for m in range(5)])


def test_a_tiles_lanes_are_ranked_in_i32_by_their_place_in_the_tile():
    """Whole rows of 8192 lanes ranked by i64 indices came out wrong on an H100 (Triton 3.6, 4 warps);
    a lane's place in its tile fits i32 (tiles have at most 2**20 lanes), and its tile start makes it
    an index again."""
    p = dt.loads(ROW.format(fn="rargmin", schedule=cases.ROWS["tiles"]))
    firsts = [s for k in p.pipeline("f32").kernels for s in S.walk_statements(k.body)
              if isinstance(s, S.Assign) and s.name == "y_tile_first"]
    assert [s.value.dtype for s in firsts] == ["i32"]
    a = RNG.standard_normal((3, 5000)).astype(np.float32)
    a[1, 4321] = -10.0  # in a late tile: the tile's start turns its place back into an index
    np.testing.assert_array_equal(p(A=a), np.argmin(a, axis=1))


def ordered_rows(n: int) -> np.ndarray:
    """Rows that make the merge work differently: ascending (every tile brings k new entries),
    descending (no tile after the first brings any), all equal (ties by index), in no order,
    NaN last, and -inf but for one number near the end."""
    rows = np.stack([np.arange(n), -np.arange(n), np.full(n, 2.0), RNG.permutation(n), np.arange(n),
                     np.full(n, -np.inf)]).astype(np.float32)
    rows[4, -1] = np.nan
    rows[5, n - 3] = 1.0
    return rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_top_k_whatever_order_a_row_comes_in(backend):
    """Two rows a tile (`tiles`): the tile runs as many rounds as the row that needs the most."""
    p = dt.loads(f"{cases.TOPK}\n{cases.TOPK_SCHEDULES['tiles']}")
    a = ordered_rows(61)
    out = run_program(p, backend, sizes={"i": 6}, A=a)
    want = cases._top(a.astype(np.float64), 6)
    np.testing.assert_array_equal(out["ti"], want["ti"])
    np.testing.assert_array_equal(out["tv"], want["tv"].astype(np.float32))


def test_a_tile_runs_a_round_per_value_that_can_still_enter(monkeypatch):
    """The merge loop's bound is a value of the data (a LetValue): a row in ascending order runs
    k rounds in each of its tiles, one in descending order k in its first tile and none after.
    Counted in the conformance suite's example backend, which walks the IR as it is."""
    example = pytest.importorskip("dt_example_backend")
    p = dt.loads(f"{cases.TOPK}\nti.tensorize(i:0, y:8);\nti.compile();")
    kernel = p.pipeline("f32").kernels[0]
    counts = {s.name for s in S.walk_statements(kernel.body) if isinstance(s, S.LetValue)}
    merges = [s.var for s in S.walk_statements(kernel.body) if isinstance(s, S.For) and S.index_names(s.stop) & counts]
    assert len(counts) == 2 and len(merges) == 2  # in the walk's whole tiles, and in its last, cut one
    rounds = []
    walk = example.Instance.For

    def counted(instance, loop):
        if loop.var in merges:
            rounds.append(S.evaluate_index(loop.stop, instance.ints))
        walk(instance, loop)
    monkeypatch.setattr(example.Instance, "For", counted)
    for row, expected in ((np.arange(64), [4] * 8), (-np.arange(64), [4] + [0] * 7)):
        rounds.clear()
        out = p(A=row[None, :].astype(np.float32), sizes={"i": 4}, backend="example")
        np.testing.assert_array_equal(out, [np.argsort(-row, kind="stable")[:4]])
        assert rounds == expected
