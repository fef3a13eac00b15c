"""Split reductions (f.split(l:chunk)): results against the reference at sizes no chunk or tile
divides, the chunks each program walks, the products that stay matrix-unit dots, and the errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

import dt
from dt.errors import DTScheduleError
from dt.ir.printer import ir_text

ROWS = "Func s;\nIn A;\nVar x;\nRVar y;\ns[x] = {body};\ns.block(x:2);\ns.tensorize(x:2, y:8);\n{split}s.compile();\n"
DECODE = open("examples/llm/decode_split.dt").read()


def _rows(body, split="s.split(y:16);\n"):
    return dt.loads(ROWS.format(body=body, split=split), file="rows.dt")


@pytest.mark.parametrize("backend", ["interp", "numba"])
@pytest.mark.parametrize("body,reference", [
    ("rsum(A[x, y], y)", lambda A: A.sum(1)),
    ("rmax(A[x, y], y) - rmin(A[x, y], y)", lambda A: A.max(1) - A.min(1)),
    ("rsum(A[x, y] * A[x, y], y) / len(y)", lambda A: (A * A).mean(1)),
])
def test_split_rows_match_the_reference(backend, body, reference):
    prog = _rows(body)
    A = np.random.default_rng(0).standard_normal((5, 101)).astype(np.float32)
    np.testing.assert_allclose(prog(A=A, backend=backend), reference(A.astype(np.float64)), rtol=1e-5, atol=1e-5)
    assert prog.checked.kernel_roots[0].startswith("s_chunks")  # the chunks' kernel comes first


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_split_decode_matches_the_unsplit_program(backend):
    rng = np.random.default_rng(1)
    b, h, l, k, d = 2, 3, 5000, 16, 8  # 3 chunks of 2048, the last one partial
    Q, K, V = (rng.standard_normal(s).astype(np.float32) for s in ((b, h, k), (b, h, l, k), (b, h, l, d)))
    split = dt.loads(DECODE, file="decode_split.dt")
    unsplit = dt.load("examples/llm/decode.dt")
    want = unsplit(Q=Q, K=K, V=V, backend=backend)
    np.testing.assert_allclose(split(Q=Q, K=K, V=V, backend=backend), want, rtol=1e-5, atol=1e-6)
    assert split.checked.chunk_dims == {"l_chunk": ("l", 2048)}
    # the three Funcs computed with num are split together, into one kernel that stores their chunks
    assert len(split.checked.kernel_roots) == 2
    assert set(split.checked.stored_fused) == {"row_max_chunks", "row_sum_chunks"}


@pytest.mark.parametrize("backend", ["interp", "numba", pytest.param("triton", marks=pytest.mark.needs_triton)])
@pytest.mark.parametrize("tile", [1, 3])
@pytest.mark.parametrize("bound", ["l >= m", "l > m - 3"])
def test_a_lower_bound_in_a_split_walk_starts_no_chunk_before_the_chunk(backend, tile, bound):
    """A chunk's walk starts at the later of its own first index and the condition's bound: taking
    the condition's alone walked every chunk from m, adding the elements of the chunks before."""
    prog = dt.loads(f"Func o; In A; Var m; RVar l;\no[m] = rsum(where({bound}, A[m, l], 0.0), l);\n"
                    f"o.block(m:1); o.tensorize(l:{tile}); o.split(l:3);\no.compile();", file="lower.dt")
    A = np.random.default_rng(3).standard_normal((6, 10)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(prog(A=A, backend=backend)), prog.reference(A=A), rtol=1e-5, atol=1e-5)


def test_a_chunk_masked_throughout_adds_nothing():
    # causal rows: the chunks past a row's diagonal are -inf throughout; row 0 is -inf everywhere
    prog = dt.loads("""Func out, s, mx, e, dvsr, num;
In Q, K, V;
Var m, n;
RVar k, l;
s[m, l] = where(l < m, rdot(Q[m, k], K[l, k], k), -inf);
mx[m] = rmax(s[m, l], l);
e[m, l] = exp(s[m, l] - mx[m]);
dvsr[m] = rsum(e[m, l], l);
num[m, n] = rdot(e[m, l], V[l, n], l);
out[m, n] = num[m, n] / dvsr[m];
out.block(m:4);
out.tensorize(m:4, n:0, k:0, l:4);
s.inline();
e.inline();
num.fuse_at(out, m);
mx.fuse_at(out, m);
dvsr.fuse_at(out, m);
mx.compute_with(num, l);
dvsr.compute_with(num, l);
num.split(l:8);
out.compile();
""", file="causal.dt")
    rng = np.random.default_rng(2)
    Q, K, V = rng.standard_normal((30, 4)), rng.standard_normal((30, 4)), rng.standard_normal((30, 3))
    Q, K, V = (a.astype(np.float32) for a in (Q, K, V))
    got = prog(Q=Q, K=K, V=V, backend="interp")
    want = prog.reference(Q=Q, K=K, V=V)
    assert np.isnan(got[0]).all() and np.isnan(want[0]).all()
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-5, atol=1e-6)


def test_each_program_walks_only_its_chunk():
    source = _rows("rsum(A[x, y], y)", "s.split(y:32);\n").source("triton")
    chunks = source[source.index("def s_chunks_kernel"):source.index("def s_kernel")]
    # from the chunk's first tile to its end (its whole tiles, then the cut one), and no where for the
    # chunk (its bounds are whole tiles)
    assert re.search(r"range\(max\(0, y_chunk_pid \* 32\) // 8 \* 8, y_whole_end, 8\)", chunks)
    assert re.search(r"range\(y_whole_end, min\(y_SIZE, \(y_chunk_pid \+ 1\) \* 32\), 8\)", chunks)
    assert "y_chunk_pid * 32 + 32" not in chunks
    # a chunk that is not whole tiles keeps the where on its lanes
    uneven = _rows("rsum(A[x, y], y)", "s.split(y:12);\n").source("triton")
    assert "y_offsets >= y_chunk_pid * 12" in uneven and "y_offsets < y_chunk_pid * 12 +" in uneven


def test_a_split_product_stays_a_matrix_unit_dot():
    prog = dt.loads("Func mm;\nIn A, B;\nVar x, y;\nRVar k;\nmm[x, y] = rdot(A[x, k], B[k, y], k);\n"
                    "mm.block(x:16, y:64);\nmm.tensorize(x:16, y:64, k:64);\nmm.split(k:256);\nmm.compile();\n",
                    file="splitk.dt")
    source = prog.source("triton")
    chunks = source[source.index("def mm_chunks_kernel"):source.index("def mm_kernel")]
    assert "tl.dot(A, B" in chunks
    A, B = np.ones((20, 600), np.float32), np.ones((600, 70), np.float32)
    for backend in ("interp", "numba"):  # numba renders the Dot with its micro-kernel
        np.testing.assert_allclose(prog(A=A, B=B, backend=backend), A @ B)


def test_partials_are_kept_in_the_compute_dtype():
    pipeline = _rows("rsum(A[x, y], y)").pipeline("bf16")
    assert {t.name: t.dtype for t in pipeline.temporaries} == {"s_chunks": "f32"}
    assert pipeline.outputs[0].dtype == "bf16"


COLUMNS = """Func dw, db;
In DY, A;
Var k;
RVar x;
dw[k] = rsum(DY[x, k] * A[x, k], x);
db[k] = rsum(DY[x, k], x);
dw.block(k:32);
dw.tensorize(k:32, x:8);
db.fuse_at(dw, k);
dw.split(x:16);
db.split(x:16);
db.compute_with(dw, x);
db.compile();
dw.compile();
"""


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_column_sums_split_together_store_their_chunks_a_row_each(backend):
    """A weight's gradient and its bias's, over [k], split together: each program stores its
    chunk's partial sums along k, the dimension contiguous in memory (stored [k, chunk], each
    lane would write 4 bytes of a sector of its own)."""
    prog = dt.loads(COLUMNS, file="columns.dt")
    assert {t.name: t.dims for t in prog.pipeline("f32").temporaries} == \
        {"dw_chunks_stored": ("x_chunk", "k"), "db_chunks": ("x_chunk", "k")}
    assert not [w for w in prog.lint(sizes={"x": 4096, "k": 4096}) if w.code == "uncoalesced"]
    # consecutive programs take a chunk's consecutive columns (the rows they read are the same)
    assert "let x_chunk_pid = pid // k_BLOCK_COUNT" in ir_text(prog.pipeline("f32"))
    rng = np.random.default_rng(1)
    DY, A = rng.standard_normal((2, 101, 70)).astype(np.float32)
    out = prog(DY=DY, A=A, backend=backend)
    np.testing.assert_allclose(out["dw"], (DY * A).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["db"], DY.sum(0), rtol=1e-5, atol=1e-5)


def test_a_sum_split_apart_from_the_kernel_it_is_fused_into_has_its_chunks_first():
    """db fused into dw's kernel, both split but each walking on its own: db's chunks are a kernel
    that runs before dw's, which reads them (it ran after, and db came out NaN)."""
    prog = dt.loads(COLUMNS.replace("db.compute_with(dw, x);\n", ""), file="columns.dt")
    kernels = [k.func for k in prog.pipeline("f32").kernels]
    assert kernels.index("db_chunks") < kernels.index("dw")
    DY, A = np.random.default_rng(2).standard_normal((2, 50, 9)).astype(np.float32)
    out = prog(DY=DY, A=A, backend="interp")
    np.testing.assert_allclose(out["db"], DY.sum(0), rtol=1e-5, atol=1e-5)


def test_funcs_split_together_each_computed_with_another_is_an_error():
    cycle = COLUMNS.replace("db.compute_with(dw, x);", "db.compute_with(dw, x);\ndw.compute_with(db, x);")
    with pytest.raises(DTScheduleError, match="compute_with makes a cycle|cycle"):
        dt.loads(cycle, file="columns.dt").pipeline("f32")


def test_a_warning_about_the_chunks_kernel_names_the_func_the_user_schedules():
    few = COLUMNS.replace("dw.block(k:32);\ndw.tensorize(k:32, x:8);", "dw.block(k:1024);\ndw.tensorize(k:1024, x:8);")
    prog = dt.loads(few.replace("split(x:16)", "split(x:2048)"), file="columns.dt")
    [warning] = [w for w in prog.lint(sizes={"x": 4096, "k": 4096}) if "dw_chunks_stored_kernel" in w.render()]
    assert "dw.block(...)" in warning.render() and "dw_chunks_stored.block" not in warning.render()


def test_the_chunk_count_is_derived_not_given():
    prog = _rows("rsum(A[x, y], y)")
    with pytest.raises(dt.errors.DTExtentError, match="not a dimension"):
        prog(A=np.ones((2, 40), np.float32), sizes={"y_chunk": 3}, backend="interp")
    source = prog.source("triton")
    assert "y_chunk_SIZE = -(-y_SIZE // 16)" in source and "def program(A, outputs=None)" in source


@pytest.mark.parametrize("split,schedule,message", [
    ("s.split(x:16);", "", "not an RVar"),
    ("s.split(y:0);", "", "from 1 to"),
    ("s.split(y);", "", "one reduction dimension and its chunk size"),
    ("t.split(y:16);", "", "has no reduction over 'y'"),
    ("s.split(y:16);", "t.inline();", None),
])
def test_split_errors(split, schedule, message):
    source = f"Func s, t;\nIn A;\nVar x;\nRVar y;\nt[x] = A[x, 0] * 2.0;\ns[x] = rsum(A[x, y], y) + t[x];\n" \
             f"{split}\n{schedule}\ns.compile();\n"
    if message is None:
        dt.loads(source, file="bad.dt")
        return
    with pytest.raises(DTScheduleError, match=message):
        dt.loads(source, file="bad.dt")


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_split_argmax_picks_torchs_index_across_chunks(backend):
    prog = _rows("rargmax(A[x, y], y)")
    A = np.random.default_rng(2).standard_normal((6, 101))
    A[1] = -np.inf  # -inf throughout: index 0
    A[2, 70] = np.nan  # the first NaN wins
    A[2, 90] = np.nan
    A[3, 20] = A[3, 60] = 9.0  # a tie across chunks: the first
    A[4, :50] = -np.inf  # the chunks before the max lose to it, however masked
    A[5, 100] = 9.0  # the last, partial chunk
    np.testing.assert_array_equal(prog(A=A, backend=backend), np.argmax(A, axis=1))
    assert prog.checked.kernel_roots == ("s_chunks", "s")


def test_unsupported_splits_say_why():
    with pytest.raises(DTScheduleError, match="rargtopk cannot be split yet"):
        dt.loads("Func t;\nIn A;\nVar x, i;\nRVar y;\nt[x, i] = rargtopk(A[x, y], y, i);\nt.block(x:1);\n"
                 "t.split(y:16);\nt.compile();\n", file="bad.dt")
    with pytest.raises(DTScheduleError, match="reads the Func 'e' along 'v'"):
        dt.loads("Func t, e;\nIn A;\nVar x, y;\nRVar v;\ne[x, y] = exp(A[x, y]);\nt[x] = rargmax(e[x, v], v);\n"
                 "t.block(x:1);\nt.split(v:16);\nt.compile();\n", file="bad.dt")
    with pytest.raises(DTScheduleError, match="compiled to one kernel"):
        dt.loads(DECODE.replace("out.compile();", "out.compile_to_kernel();"), file="d.dt")
    with pytest.raises(DTScheduleError, match="split alike"):
        dt.loads(DECODE.replace("num.split(l:2048);", "num.split(l:2048);\nrow_max.split(l:512);"), file="d.dt")
    # a max read by a sum of the same loop in a form other than exp(e - max)
    with pytest.raises(DTScheduleError, match="combines its chunks"):
        dt.loads("Func o, s, m;\nIn A;\nVar x;\nRVar y;\nm[x] = rmax(A[x, y], y);\ns[x] = rsum(A[x, y] - m[x], y);\n"
                 "o[x] = s[x] + m[x];\no.block(x:1);\nm.fuse_at(o, x);\ns.fuse_at(o, x);\nm.compute_with(s, y);\n"
                 "s.split(y:8);\no.compile();\n", file="bad.dt")
