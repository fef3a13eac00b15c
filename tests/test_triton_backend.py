"""The Triton backend: generated code runs (through Triton's interpreter when there is no GPU,
see conftest.py) and matches the reference on every example, dtype and awkward size; the
generated module is standalone and reads like the talk's; schedule errors name DT lines; and
every generated kernel compiles for an H100 (sm_90) even on a machine without a GPU."""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
# A compiled pipeline or standalone module takes tensors on the device it runs on: the GPU where
# there is one, else the CPU (Triton's interpreter).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

import dt  # noqa: E402
from dt import backends  # noqa: E402
from dt.backends.triton import codegen  # noqa: E402
from dt.errors import DTBackendError, DTInputError, DTScheduleError  # noqa: E402
from dt.ir import scheduled as S  # noqa: E402
from dt.testing import assert_close, random_inputs  # noqa: E402
from example_sizes import SIZES as SHARED_SIZES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.dt"))
DTYPES = ("f32", "f16", "bf16")
# Small sizes that divide no block or tile (partial blocks, padded whole extents), chosen so
# that Triton's interpreter runs each in well under a second.
SIZES = {"add": dict(x=3, y=300), "relu": dict(x=3, y=200), "swish": dict(x=2, y=1100),
         "dyt": dict(x=2, y=2100), "softmax": dict(x=7, y=600), "layernorm": dict(x=3, y=1100),
         "matmul": dict(x=130, y=7, k=33), "mmsigmoid": dict(x=33, y=20, k=40),
         "2mm_outer": dict(m=20, n=70, k=7, l=20), "2mm_inner": dict(m=70, n=65, k=33, l=40),
         "attention": dict(m=20, l=37, k=20, n=20), "attention_talk": dict(m=20, l=37, k=20, n=20)}
# An example added later runs at the shared table's last (dividing-nothing) sizes.
SIZES.update({name: SHARED_SIZES[name][-1] for name in EXAMPLES if name not in SIZES and name in SHARED_SIZES})

# Programs for what the examples do not exercise. Each: (source, extents). Literals only:
# benchmarks/gpu/verify_triton.py reads this table without importing the tests.
PROGRAMS = {
    "functions": ("""
Func e, e2, lg, lg2, sq, rs, sg, th, ab, er, si, co, fl, ce, ng, mx, mn, pw, pw2, pw3;
In A, B;
Var x;
e[x] = exp(A[x]); e2[x] = exp2(A[x]); lg[x] = log(abs(A[x]) + 0.1); lg2[x] = log2(abs(A[x]) + 0.1);
sq[x] = sqrt(abs(A[x])); rs[x] = rsqrt(abs(A[x]) + 0.1); sg[x] = sigmoid(A[x]); th[x] = tanh(A[x] * 3.0);
ab[x] = abs(A[x]); er[x] = erf(A[x]); si[x] = sin(A[x]); co[x] = cos(A[x]); fl[x] = floor(A[x] * 3.0);
ce[x] = ceil(A[x] * 3.0); ng[x] = -A[x]; mx[x] = maximum(A[x], B[x]); mn[x] = minimum(A[x], 0.25);
pw[x] = pow(abs(A[x]) + 0.1, B[x]); pw2[x] = pow(A[x], 3.0); pw3[x] = pow(A[x], 0.5);
e.compile(); e2.compile(); lg.compile(); lg2.compile(); sq.compile(); rs.compile(); sg.compile();
th.compile(); ab.compile(); er.compile(); si.compile(); co.compile(); fl.compile(); ce.compile();
ng.compile(); mx.compile(); mn.compile(); pw.compile(); pw2.compile(); pw3.compile();
""", {"x": 37}),
    # where, comparisons, indices and len; a block of 3 walked one row at a time, and a block
    # of 100 padded to 128 lanes.
    "where": ("""
Func f; In A; Var x, y;
f[x, y] = where(A[x, y] > 0.01 * y, x + len(y), -A[x, y]) + (A[x, y] <= 0);
f.block(x:3, y:100);
f.tensorize(y:0);
f.compile();
""", {"x": 7, "y": 250}),
    # rmax / rmin / rsum, with a reduction tile of 24 (padded to 32) and a whole-extent one.
    "reductions": ("""
Func mx, mn, sm; In A; Var x; RVar r;
mx[x] = rmax(A[x, r], r); mn[x] = rmin(A[x, r], r); sm[x] = rsum(A[x, r] * 2.0, r);
mx.block(x:4); mx.tensorize(x:0, r:24); mn.tensorize(r:0); sm.block(x:2); sm.tensorize(x:2, r:7);
mx.compile(); mn.compile(); sm.compile();
""", {"x": 9, "r": 53}),
    # An arg-reduction walked in tiles: int32 lane indices, the extent bounded by a static assert.
    "argmax": ("""
Func token; In A; Var x; RVar r;
token[x] = rargmax(A[x, r], r);
token.block(x:1); token.tensorize(r:64); token.num_stages(3);
token.compile();
""", {"x": 5, "r": 300}),
    # Tiles under 16: the dot becomes a multiply-and-sum.
    "small_dot": ("""
Func mm; In A, B; Var x, y; RVar k;
mm[x, y] = rdot(A[x, k], B[k, y], k);
mm.block(x:8, y:8); mm.tensorize(x:8, y:8, k:4);
mm.compile();
""", {"x": 13, "y": 10, "k": 9}),
    # A whole-extent reduction tile of 5, padded to tl.dot's minimum of 16.
    "whole_dot": ("""
Func mm; In A, B; Var x, y; RVar k;
mm[x, y] = rdot(A[x, k], B[k, y], k);
mm.block(x:16, y:32); mm.tensorize(x:16, y:32, k:0);
mm.compile();
""", {"x": 20, "y": 40, "k": 5}),
    "rank0": ("""
Func s; In A; RVar x;
s[] = rsum(A[x], x);
s.tensorize(x:16);
s.compile();
""", {"x": 37}),
    "no_inputs": ("""
Func f; Var x, y;
f[x, y] = x * 2.0 + len(y) - y;
f.block(x:2, y:8);
f.tensorize(x:2, y:8);
f.compile();
""", {"x": 5, "y": 11}),
    # Two kernels through a temporary; a scalar; grouped program order with a partial group.
    "temporary": ("""
Func t, out; In A; SIn alpha; Var x; RVar y;
t[x] = rsum(A[x, y], y);
out[x, y] = A[x, y] - t[x] * alpha;
t.tensorize(x:4, y:16); t.block(x:4);
out.block(x:2, y:64); out.tensorize(x:2, y:32);
out.map(y:y1/3, x, y1);
out.compile();
""", {"x": 9, "y": 270}),
    "constants": ("""
Func f, g; In A; SIn alpha; Var x, y;
f[x, y] = alpha;
g[x, y] = 1.5;
f.block(y:16); f.tensorize(y:16);
g.tensorize(x:2, y:4);
f.compile(); g.compile();
""", {"x": 5, "y": 20}),
    "transpose": ("""
Func f; In A, B; Var x, y;
f[x, y] = A[y, x] + B[x, y];
f.block(x:16, y:16); f.tensorize(x:16, y:16);
f.compile();
""", {"x": 20, "y": 30}),
    # A 0-d input; a reduction of a 3-D tile (A[x] * B[y, k] over k is not a matrix product).
    "rank0_input": ("""
Func f, mm; In A, s, B; Var x, y; RVar k;
f[x] = A[x] * s[];
mm[x, y] = rdot(A[x], B[y, k], k) + 0 * y;
f.block(x:8); f.tensorize(x:8);
mm.block(x:16, y:16); mm.tensorize(x:16, y:16, k:16);
f.compile(); mm.compile();
""", {"x": 20, "y": 17, "k": 33}),
    # Persistent programs and TMA descriptors: a grouped matmul walked by 3 programs into a
    # temporary, then rows of it tiled inside blocks by one program per multiprocessor. Every
    # row is 16-byte aligned, so the tiles move through TMA (tma_unaligned: through pointers).
    "persistent_tma": ("""
Func mm, out; In A, B; SIn alpha; Var x, y; RVar k;
mm[x, y] = rdot(A[x, k], B[k, y], k);
out[x, y] = sigmoid(mm[x, y]) * alpha;
mm.block(x:16, y:32); mm.tensorize(x:16, y:32, k:16); mm.map(x:x1/2, y, x1); mm.persistent(3); mm.tma();
out.block(x:8, y:32); out.tensorize(x:4, y:16); out.persistent(); out.tma();
out.compile();
""", {"x": 37, "y": 48, "k": 40}),
    # Flash attention (compute_with) with TMA: whole-extent tiles of k and n are boxes sized at launch.
    "flash_tma": ("""
Func attention, mm, mx, e, dvsr, num; In A, B, C; Var m, n; RVar k, l;
mm[m, l] = rdot(A[m, k], B[k, l], k) / sqrt(len(k));
mx[m] = rmax(mm[m, l], l);
e[m, l] = exp(mm[m, l] - mx[m]);
dvsr[m] = rsum(e[m, l], l);
num[m, n] = rdot(e[m, l], C[l, n], l);
attention[m, n] = num[m, n] / reshape(dvsr[m], m, 1);
attention.block(m:16); attention.tensorize(m:16, n:0, k:0, l:16);
mm.inline(); e.inline(); num.fuse_at(attention, m); mx.fuse_at(attention, m); dvsr.fuse_at(attention, m);
mx.compute_with(num, l); dvsr.compute_with(num, l); attention.tma();
attention.compile_to_kernel();
""", {"m": 40, "l": 56, "k": 16, "n": 24}),
    # Heads and batch as blocks of 1 around a persistent, TMA-fed flash walk with 128-row query blocks:
    # its query tile is loaded before the walk, and Triton's TMA lowering fails on such a block loop
    # flattened (tl.range(..., flatten=True)), so dt does not flatten it
    "heads_persistent_tma": ("""
Func attention, scores, mx, e, dvsr, num; In Q, K, V; Var b, h, m, n; RVar k, l;
scores[b, h, m, l] = rdot(Q[b, h, m, k], K[b, h, l, k], k) * (1.0 / sqrt(len(k)));
mx[b, h, m] = rmax(scores[b, h, m, l], l);
e[b, h, m, l] = exp(scores[b, h, m, l] - mx[b, h, m]);
dvsr[b, h, m] = rsum(e[b, h, m, l], l);
num[b, h, m, n] = rdot(e[b, h, m, l], V[b, h, l, n], l);
attention[b, h, m, n] = num[b, h, m, n] / dvsr[b, h, m];
attention.block(b:1, h:1, m:128, n:32); attention.tensorize(m:128, n:32, k:0, l:32);
scores.inline(); e.inline(); num.fuse_at(attention, m); mx.fuse_at(attention, m); dvsr.fuse_at(attention, m);
mx.compute_with(num, l); dvsr.compute_with(num, l); attention.num_warps(8); attention.num_stages(5);
attention.persistent(); attention.tma(); attention.compile_to_kernel();
""", {"b": 1, "h": 2, "m": 130, "l": 100, "k": 128, "n": 64}),
    "tma_unaligned": ("""
Func out; In A; Var x, y;
out[x, y] = A[x, y] * 2.0;
out.block(x:4, y:16); out.tensorize(x:4, y:16); out.persistent(2); out.tma();
out.compile();
""", {"x": 9, "y": 13}),
    # Row walks with and without num_stages: Triton pipelines a loop without tl.dot only when
    # the loop asks (tl.range's num_stages), so dt writes the kernel's stage count on the loop.
    "staged_walk": ("""
Func staged, plain, by_tma; In A; Var x; RVar y;
staged[x] = rsum(A[x, y] * A[x, y], y);
plain[x] = rmax(A[x, y], y);
by_tma[x] = rsum(A[x, y], y);
staged.block(x:1); staged.tensorize(y:64); staged.num_stages(3);
plain.block(x:1); plain.tensorize(y:64);
by_tma.block(x:1); by_tma.tensorize(y:64); by_tma.persistent(2); by_tma.tma(); by_tma.num_stages(3);
staged.compile(); plain.compile(); by_tma.compile();
""", {"x": 5, "y": 300}),
    # A product of tiles under 16 is a multiply and a sum, not tl.dot: its loop takes the stages.
    # products of two i8 operands (int8 tl.dot, an i32 accumulator): K tiled by 32, K whole (16
    # here: padded to int8's least K of 32 at launch) and K tiled by 16 (under it: multiply and sum)
    "i8_products": ("""
Func tiled, whole, short; In X, W; Var m, n; RVar k;
tiled[m, n] = rdot(X[m, k], W[n, k], k);
whole[m, n] = cast(rdot(X[m, k], W[n, k], k), i32);
short[m, n] = rdot(X[m, k], W[n, k], k) * 0.5;
tiled.block(m:64, n:64); tiled.tensorize(m:64, n:64, k:32);
whole.block(m:64, n:32); whole.tensorize(m:64, n:32, k:0);
short.block(m:16, n:16); short.tensorize(m:16, n:16, k:16);
tiled.compile(); whole.compile(); short.compile();
""", {"m": 70, "n": 40, "k": 16}),
    "staged_small_dot": ("""
Func mm; In A, B; Var x, y; RVar k;
mm[x, y] = rdot(A[x, k], B[k, y], k);
mm.block(x:8, y:8); mm.tensorize(x:8, y:8, k:4); mm.num_stages(3);
mm.compile();
""", {"x": 13, "y": 10, "k": 9}),
    # Reads at computed indices (issue 27): an embedding (rows gathered through int64 ids), a
    # causal convolution (X[c, t - j] off the start), grouped heads (h // 4) and a paged cache
    # read through its block table (a gather whose index is itself a gather).
    "embedding": ("""
Func o; In E, I; Var t, d;
o[t, d] = E[I[t], d];
o.block(t:4, d:64); o.tensorize(t:4, d:64);
o.compile();
""", {"t": 13, "d": 100, "E_axis0": 21}),
    "causal_conv": ("""
Func o; In W, X; Var c, t; RVar j;
o[c, t] = rsum(W[c, j] * X[c, t - j], j);
o.block(c:2, t:32); o.tensorize(c:2, t:32, j:0);
o.compile();
""", {"c": 5, "t": 70, "j": 4}),
    "grouped": ("""
Func o; In Q, K; Var h, l, k;
o[h, l, k] = Q[h, l, k] * K[h // 4, l, k];
o.block(h:1, l:16); o.tensorize(l:16, k:0);
o.compile();
""", {"h": 8, "l": 37, "k": 24, "K_axis0": 2}),
    "paged": ("""
Func o; In Kc, T; Var b, l, k;
o[b, l, k] = Kc[T[b, l // 4], l % 4, k];
o.block(b:1, l:8); o.tensorize(l:8, k:0);
o.compile();
""", {"b": 2, "l": 10, "k": 8, "Kc_axis0": 6, "Kc_axis1": 4, "T_axis1": 3}),
    # Integer arithmetic on dimensions (floor division and remainder of negative numbers) stored
    # as int64, and a float truncated to int32.
    "integers": ("""
Func q, c; In A; Var x;
q[x] = (x - 50) // 7 * 3 + (x - 50) % 7 + maximum(x, 60) - abs(x - 70);
c[x] = cast(A[x] * 10.0, i32);
q.block(x:32); q.tensorize(x:32);
c.block(x:16); c.tensorize(x:16);
q.compile(); c.compile();
""", {"x": 100}),
    # Constant and reversed subscripts: B[2] is one element (its bound a constexpr), A read backwards.
    "constant_index": ("""
Func o; In A, B; Var x;
o[x] = A[x] * B[2] + A[len(x) - 1 - x];
o.block(x:8); o.tensorize(x:8);
o.compile();
""", {"x": 9, "B_axis0": 5}),
    # With tma(), a gather still reads through pointers; the kernel's other tiles are boxes.
    "shift_tma": ("""
Func out; In A, B; Var x, y;
out[x, y] = A[x, y] + B[x, y + 1];
out.block(x:4, y:16); out.tensorize(x:4, y:16); out.tma();
out.compile();
""", {"x": 9, "y": 32}),
    # DT names that are Python keywords, builtins, Triton's module name or look generated.
    "names": ("""
Func tl, float, lambda; In A_ptr, device; SIn x_SIZE2; Var x;
float[x] = A_ptr[x] * 2.0;
tl[x] = float[x] + device[x] * x_SIZE2;
lambda[x] = tl[x] - 1.0;
float.fuse_at(tl, x);
tl.block(x:4); tl.tensorize(x:4);
tl.compile(); lambda.compile();
""", {"x": 7}),
}


def program(name: str) -> dt.Program:
    if name in PROGRAMS:
        return dt.loads(PROGRAMS[name][0], name if name != "names" else "triton")
    return dt.load(ROOT / "examples" / f"{name}.dt")


def extents(name: str) -> dict:
    return PROGRAMS[name][1] if name in PROGRAMS else SIZES[name]


def call_sizes(prog, sizes: dict) -> dict | None:
    """The extents no input binds (passed at call time)."""
    extra = {d: n for d, n in sizes.items() if d not in prog.input_dims}
    return extra or None


def check_against_reference(prog, sizes: dict, dtype: str, seed: int = 0):
    args = random_inputs(prog, sizes, dtype, seed)
    out = prog(backend="triton", sizes=call_sizes(prog, sizes), **args)
    ref = prog.reference(sizes=call_sizes(prog, sizes), **args)
    outs = out if isinstance(out, dict) else {prog.outputs[0]: out}
    refs = ref if isinstance(ref, dict) else {prog.outputs[0]: ref}
    for name in prog.outputs:
        assert_close(outs[name], refs[name], dtype)


def load_standalone(path: Path):
    """Import a generated module from its file, as a user would."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- correctness


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_matches_reference(name, dtype):
    check_against_reference(program(name), SIZES[name], dtype)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_at_extent_one(name):
    prog = program(name)
    check_against_reference(prog, {d: 1 for d in SIZES[name]}, "f32")


@pytest.mark.parametrize("dtype", ("f32", "bf16"))
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_matches_reference(name, dtype):
    check_against_reference(program(name), extents(name), dtype)


def test_tanh_is_accurate_near_zero_and_saturates():
    prog = dt.loads("Func t; In A; Var x; t[x] = tanh(A[x]); t.block(x:16); t.tensorize(x:16); t.compile();")
    a = np.array([0.0, 1e-7, -1e-5, 3e-3, 0.1249, 0.1251, -0.5, 1.0, 5.0, -9.0, 20.0, -50.0, 1e4, np.nan],
                 dtype=np.float32)
    out = prog(backend="triton", A=a)
    with np.errstate(invalid="ignore"):
        rel = np.abs(out.astype(np.float64) - np.tanh(a.astype(np.float64))) / np.maximum(np.abs(np.tanh(a)), 1e-30)
    assert np.nanmax(rel) < 1e-5 and np.isnan(out[-1])


@pytest.mark.parametrize("schedule", ["s.block(x:1); s.tensorize(y:16);", "s.block(x:2); s.tensorize(x:2, y:0);",
                                      "s.split(y:32); s.block(x:1); s.tensorize(y:16);"])
@pytest.mark.parametrize("fn", ["rmax", "rmin"])
def test_a_max_or_min_across_lanes_keeps_nan(fn, schedule):
    """tl.max's own combine drops NaN (max.f32 returns the number): rmax and rmin reduce across
    lanes with a NaN-propagating combine, as NumPy's max and the other backends do."""
    prog = dt.loads(f"Func s; In A; Var x; RVar y;\ns[x] = {fn}(A[x, y], y);\n{schedule} s.compile();")
    assert "tl.max(" not in prog.source("triton") and "tl.min(" not in prog.source("triton")
    a = np.random.default_rng(2).integers(-3, 3, (5, 40)).astype(np.float32)
    a[1, -1], a[3, 0], a[2], a[4, 7] = np.nan, np.nan, -np.inf, np.inf
    want = a.max(axis=1) if fn == "rmax" else a.min(axis=1)
    np.testing.assert_array_equal(np.asarray(prog(backend="triton", A=a)), want)


@pytest.mark.parametrize("value", ["rsum(A[x, y] + 1.0, y)", "rsum(exp(A[x, y]), y)", "rmin(A[x, y] * A[x, y] + 1.0, y)",
                                   "rmax(-1.0 - A[x, y] * A[x, y], y)"])
@pytest.mark.parametrize("tile", [3, 6, 12])
def test_reductions_over_tiles_triton_pads_leave_out_the_padding(value, tile):
    """A tile of 6 lanes is 8 in Triton (tl.arange takes powers of two): lanes 6 and 7 load 0,
    and whatever is computed from that (1.0 and exp(0) in a sum, a min of 1.0 over values above it,
    a max of -1.0 over values below) must not reach the reduction."""
    prog = dt.loads(f"Func s; In A; Var x; RVar y;\ns[x] = {value};\ns.block(x:1); s.tensorize(y:{tile});\n"
                    "s.compile();")
    args = random_inputs(prog, {"x": 3, "y": 4 * tile + 5}, "f32", seed=7)
    assert_close(prog(backend="triton", **args), prog.reference(**args), "f32")


@pytest.mark.parametrize("source", [
    "Func s; In A; Var x; RVar y;\ns[x] = rargmax(-1.0 - A[x, y] * A[x, y], y);\ns.block(x:1); s.tensorize(y:6);\n"
    "s.compile();",
    "Func s; In A; Var x; RVar y;\ns[x] = rsum(exp(A[x, y]), y);\ns.split(y:6); s.block(x:1); s.tensorize(y:3);\n"
    "s.compile();",
    "Func o, m, s; In A; Var x, z; RVar y;\nm[x] = rmax(A[x, y], y);\ns[x] = rsum(exp(A[x, y] - m[x]), y);\n"
    "o[x, z] = exp(A[x, z] - m[x]) / reshape(s[x], x, 1);\no.block(x:1); o.tensorize(z:6, y:6);\n"
    "m.fuse_at(o, x); s.fuse_at(o, x); s.compute_with(m, y); o.compile_to_kernel();",
])
def test_arg_reductions_splits_and_online_statistics_over_padded_tiles(source):
    """The padding of 6- and 3-lane tiles (8 and 4 in Triton) out of an arg-reduction's lanes,
    a split's chunks and the online softmax's running max and sum."""
    prog = dt.loads(source)
    extents = {"x": 3, "y": 13, "z": 13} if "Var x, z" in source else {"x": 3, "y": 13}
    args = random_inputs(prog, extents, "f32", seed=2)
    assert_close(prog(backend="triton", **args), prog.reference(**args), "f32")


def test_top_k_over_padded_tiles_ranks_no_padding_lane():
    """Top-5 over 3-lane tiles (4 in Triton): a padding lane's key is -inf, its code must not
    enter the ranks (it took the place of the row's largest element)."""
    prog = dt.loads("Func ti; In L; Var r, i; RVar v;\nti[r, i] = rargtopk(L[r, v], v, i);\n"
                    "ti.block(r:1); ti.tensorize(i:0, v:3);\nti.compile();")
    L = np.array([[0, 1, 2, 4, 3], [1, 2, 3, -np.inf, -np.inf]], dtype=np.float32)
    got = np.asarray(prog(L=L, sizes={"i": 5}, backend="triton"))
    np.testing.assert_array_equal(got, prog.reference(L=L, sizes={"i": 5}))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("fn", ["rmax", "rmin", "cummax", "cummin"])
def test_the_interpreter_runs_nan_keeping_max_and_min_as_numpy(fn, dtype, monkeypatch):
    """interpreter_fix runs reductions and scans whose combine is dt's NaN-propagating helper as
    NumPy's max / min (Triton's interpreter would call the helper in Python for every pair of
    lanes): it takes that path, and gives the same values, NaN and infinities included."""
    from dt.backends.pysource import load_module
    from dt.backends.triton import interpreter_fix
    numpy_runs = []
    on_floats = interpreter_fix._on_floats
    monkeypatch.setattr(interpreter_fix, "_on_floats", lambda t, compute: numpy_runs.append(t) or on_floats(t, compute))
    scan = fn.startswith("cum")
    lhs, schedule = ("s[x, y]", "s.block(x:2); s.tensorize(x:2, y:0);") if scan else ("s[x]", "s.block(x:1); s.tensorize(y:16);")
    prog = dt.loads(f"Func s; In A; Var x; {'Var' if scan else 'RVar'} y;\n{lhs} = {fn}(A[x, y], y);\n{schedule} s.compile();")
    module = load_module(prog.source("triton", dtype), "test", {"__name__": "dt_test"})
    helper = "_max_with_nan" if "max" in fn else "_min_with_nan"
    assert interpreter_fix._nan_propagating(module[helper]) is (np.maximum if "max" in fn else np.minimum)
    kernel = next(v for k, v in module.items() if hasattr(v, "fn") and k != helper)
    assert interpreter_fix._nan_propagating(kernel) is None
    a = np.random.default_rng(3).normal(size=(5, 40)).astype(np.float32)
    a[1, 7], a[3, 0], a[2], a[4, 5] = np.nan, np.nan, -np.inf, np.inf
    a = torch.from_numpy(a).to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    ufunc = np.maximum if "max" in fn else np.minimum
    values = a.float().numpy()
    want = ufunc.accumulate(values, axis=1) if scan else ufunc.reduce(values, axis=1)
    np.testing.assert_array_equal(prog(backend="triton", A=a).float().numpy(), want)
    assert numpy_runs


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum])
def test_the_interpreters_numpy_max_and_min_read_bfloat16_bits_as_numbers(ufunc):
    """Triton's interpreter holds bfloat16 as uint16 bit patterns (dt's kernels widen their loads
    to float32 before reducing, so no dt program reaches this): compared as numbers, not as bits."""
    from types import SimpleNamespace

    import triton.language as tl

    from dt.backends.triton import interpreter_fix
    values = torch.tensor([[1.5, -2.0, 0.25, -0.0], [-3.0, float("nan"), 7.0, float("inf")],
                           [-1.0, -float("inf"), -0.5, 2.0]], dtype=torch.bfloat16)
    bits = values.view(torch.int16).numpy().view(np.uint16)
    tile = SimpleNamespace(handle=SimpleNamespace(data=bits), dtype=SimpleNamespace(scalar=tl.bfloat16))
    for compute, want in ((lambda x: ufunc.reduce(x, axis=1), ufunc.reduce(values.float().numpy(), axis=1)),
                          (lambda x: ufunc.accumulate(x, axis=1), ufunc.accumulate(values.float().numpy(), axis=1))):
        got = interpreter_fix._on_floats(tile, compute)
        assert got.dtype == np.uint16
        np.testing.assert_array_equal(torch.from_numpy(got.view(np.int16)).view(torch.bfloat16).float().numpy(), want)


def test_tanh_is_libdevice_compiled_and_a_formula_interpreted():
    """The interpreter has no libdevice: the same pipeline renders tanh both ways (the
    compiled one is compiled for sm_90 in test_kernels_compile_for_sm90)."""
    pipeline = dt.loads("Func t; In A; Var x; t[x] = tanh(A[x]); t.compile();").pipeline("f32")
    compiled, interpreted = codegen.render(pipeline).source, codegen.render(pipeline, interpret=True).source
    assert "from triton.language.extra import libdevice" in compiled and "return libdevice.tanh(x)" in compiled
    assert "libdevice" not in interpreted and "tl.exp(-2.0 * tl.abs(x))" in interpreted
    plain = dt.loads("Func t; In A; Var x; t[x] = exp(A[x]); t.compile();").pipeline("f32")
    assert "libdevice" not in codegen.render(plain).source


def test_helpers_are_the_helper_modules_functions():
    """A module carries its helpers as the text of real functions, which import as they are (and
    the host's run)."""
    import inspect

    from dt.backends.triton import device_helpers, host_helpers, libdevice_helpers
    functions, tma = program("functions").pipeline("f32"), program("persistent_tma").pipeline("f16")
    compiled, interpreted = codegen.render(functions).source, codegen.render(functions, interpret=True).source
    assert inspect.getsource(libdevice_helpers._tanh.fn) in compiled
    assert inspect.getsource(device_helpers._tanh.fn) in interpreted
    assert all(inspect.getsource(device_helpers._pow.fn) in s for s in (compiled, interpreted))
    launcher = codegen.render(tma).source
    assert all(inspect.getsource(f) in launcher
               for f in (host_helpers._check, host_helpers._multiprocessors, host_helpers._tma_ready))
    with pytest.raises(ValueError, match="A must be a 2-D torch.float32 tensor on cpu, not a 1-D"):
        host_helpers._check("A", torch.zeros(3), 2, torch.float32, torch.device("cpu"))
    assert host_helpers._multiprocessors(torch.device("cpu")) == torch.get_num_threads()


def test_same_ir_as_interpreter_for_boolean_ops():
    """'not' and 'and' are in the IR contract though no DT syntax produces them yet: run one
    hand-edited pipeline through both backends."""
    prog = program("where")
    pipeline = prog.pipeline("f32")
    kernel = pipeline.kernels[0]

    def edit(stmts):
        out = []
        for s in stmts:
            if isinstance(s, S.For):
                s = dataclasses.replace(s, body=edit(s.body))
            elif isinstance(s, S.Assign) and s.name == "f":
                where = s.value.a
                cond = S.Binary("and", where.cond, S.Unary("not", S.Binary("<", where.b, S.Literal(-1.0, "f32"))))
                s = dataclasses.replace(s, value=dataclasses.replace(where, cond=cond))
            out.append(s)
        return tuple(out)

    pipeline = dataclasses.replace(pipeline, kernels=(dataclasses.replace(kernel, body=edit(kernel.body)),))
    a = random_inputs(prog, extents("where"), "f32")["A"]
    sizes = {"x_SIZE": 7, "y_SIZE": 250}
    want = backends.get("interp").compile(pipeline)({"A": a}, {}, sizes)["f"]
    got = backends.get("triton").compile(pipeline)({"A": torch.from_numpy(a)}, {}, sizes)["f"]
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- the generated module


def test_matmul_reads_like_the_talk():
    src = program("matmul").source("triton")
    for text in ("import torch\nimport triton\nimport triton.language as tl\n",
                 "@triton.jit\ndef mm_kernel(A_ptr, A_x_stride: tl.constexpr, A_k_stride: tl.constexpr, B_ptr,",
                 "x_SIZE: tl.constexpr", "pid = tl.program_id(0).to(tl.int64)",
                 "x_BLOCK_COUNT = (x_SIZE + 127) // 128", "x_block_start = x_pid * 128",
                 "x_arange = tl.arange(0, 128)", "k_accumulator = tl.zeros((128, 128), tl.float32)",
                 "for k_iter in range(0, k_SIZE, 32):",
                 "A = tl.load(A_ptr + x_offsets[:, None] * A_x_stride + k_offsets[None, :] * A_k_stride,",
                 'k_accumulator = tl.dot(A, B, k_accumulator, input_precision="ieee")',
                 "def matmul(A, B, outputs=None):", "num_warps=4, num_stages=3)", "return mm\n"):
        assert text in src, text
    add = program("add").source("triton")
    assert "for y_iter in range(0, y_block_end - y_block_start, 64):" in add  # the block's valid part
    assert "add_out = alpha * (A + B)" in add


def test_module_is_standalone_and_wrapped():
    for name in EXAMPLES:
        src = program(name).source("triton", "bf16")
        imports = [n for n in ast.walk(ast.parse(src)) if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names}
        gluon = "if GLUON:" in src  # a Hopper twin (test_triton_gluon.py): Gluon comes with triton
        assert modules == {"torch", "triton", "triton.language"} | ({"os", "warnings"} if gluon else set())
        from_imports = {(n.module, a.name) for n in imports if isinstance(n, ast.ImportFrom) for a in n.names}
        # the GPU's tanh is CUDA's (libdevice), which comes with triton
        expected = {("triton.language.extra", "libdevice")} if "tanh(" in src else set()
        if gluon:
            # and the errors of a twin Triton cannot build (the Triton kernel runs instead)
            expected |= {("triton.experimental", "gluon"), ("triton.experimental.gluon", "language"),
                         ("triton.experimental.gluon.nvidia.hopper", "TensorDescriptor"),
                         ("triton.compiler.errors", "CompilationError"),
                         ("triton.runtime.errors", "OutOfResources"), ("triton.runtime.errors", "PTXASError")} | \
                {("triton.experimental.gluon.language.nvidia.hopper", n)
                 for n in ("fence_async_shared", "mbarrier", "tma", "warpgroup_mma", "warpgroup_mma_wait")}
        assert from_imports == expected
        assert max(len(line) for line in src.splitlines() if '"' not in line) <= codegen.LINE_WIDTH


@pytest.mark.parametrize("name", EXAMPLES + list(PROGRAMS))
def test_wrapping_keeps_the_code(name):
    pipeline = program(name).pipeline("f16")
    wrapped = codegen.render(pipeline).source
    flat = codegen.render(pipeline, width=None).source
    assert ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(flat))


@pytest.mark.parametrize("name", ["softmax", "attention", "temporary", "no_inputs"])
def test_standalone_module_runs_without_dt(name, tmp_path):
    prog = program(name)
    sizes = extents(name)
    path = tmp_path / f"{name}_kernels.py"
    path.write_text(prog.source("triton", "f16"))
    module = load_standalone(path)
    args = random_inputs(prog, sizes, "f16")
    tensors = {n: torch.from_numpy(a).to(DEVICE) if isinstance(a, np.ndarray) else a for n, a in args.items()}
    extra = call_sizes(prog, sizes) or {}
    out = getattr(module, prog.name)(**tensors, **extra)
    ref = prog.reference(sizes=extra or None, **args)
    outs = out if isinstance(out, dict) else {prog.outputs[0]: out}
    refs = ref if isinstance(ref, dict) else {prog.outputs[0]: ref}
    for n in prog.outputs:
        assert outs[n].dtype == (torch.float16 if prog.inputs else torch.float32)
        assert_close(outs[n], refs[n], "f16")


def test_standalone_module_checks_its_inputs(tmp_path):
    path = tmp_path / "mm.py"
    path.write_text(program("matmul").source("triton"))
    matmul = load_standalone(path).matmul
    a, b = torch.randn(5, 7, device=DEVICE), torch.randn(7, 3, device=DEVICE)
    assert matmul(a, b).shape == (5, 3)
    with pytest.raises(ValueError, match="B has shape"):
        matmul(a, torch.randn(6, 3, device=DEVICE))
    with pytest.raises(ValueError, match="A must be a 2-D torch.float32 tensor"):
        matmul(a.half(), b)
    with pytest.raises(ValueError, match="2-D"):
        matmul(a[0], b)


def test_cli_writes_the_module(tmp_path):
    from dt.cli import main
    out = tmp_path / "softmax_kernels.py"
    assert main(["compile", str(ROOT / "examples" / "softmax.dt"), "--backend", "triton", "-o", str(out)]) == 0
    softmax = load_standalone(out).softmax
    a = torch.randn(5, 600, device=DEVICE)
    torch.testing.assert_close(softmax(a), torch.softmax(a, dim=1), rtol=1e-5, atol=1e-6)


def test_non_contiguous_inputs():
    prog = program("matmul")
    a = torch.randn(33, 40).t()  # strides (1, 40): the kernel takes any strides
    b = torch.randn(33, 9)
    out = prog(backend="triton", A=a, B=b)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- precision and errors


def test_f32_dot_precision_option(monkeypatch):
    prog = program("matmul")
    monkeypatch.setenv("DT_TRITON_F32_DOT", "tf32")
    src = prog.source("triton")
    assert 'input_precision="tf32"' in src and "ieee" not in src.split('"""', 2)[2]
    assert "input_precision" not in prog.source("triton", "f16").split('"""', 2)[2]  # f16 needs no choice
    pipeline = prog.pipeline("f32")
    run = backends.get("triton").compile(pipeline)
    a, b = torch.randn(20, 33, device=DEVICE), torch.randn(33, 9, device=DEVICE)
    out = run({"A": a, "B": b}, {}, {"x_SIZE": 20, "y_SIZE": 9, "k_SIZE": 33})["mm"]
    # On a GPU the product runs in TF32 (10 mantissa bits: about 5e-4 relative per term, a few
    # 1e-3 over these 33); Triton's interpreter computes it in float32.
    torch.testing.assert_close(out, a @ b, rtol=1e-2, atol=2e-2)
    monkeypatch.setenv("DT_TRITON_F32_DOT", "fast")
    with pytest.raises(DTBackendError, match="DT_TRITON_F32_DOT"):
        prog.source("triton")


def test_tile_over_triton_limit_is_a_schedule_error():
    with pytest.raises(DTScheduleError) as e:  # over every backend's limit: refused when checked
        dt.loads("Func f; In A; Var x, y;\nf[x, y] = A[x, y] * 2.0;\n"
                 "f.block(x:1024, y:2048); f.tensorize(x:1024, y:2048);\nf.compile();", "big", "big.dt")
    assert e.value.loc is not None and e.value.loc.line == 3  # the tensorize call
    assert "1024 x 2048 = 2097152 elements" in str(e.value) and "tensorize" in e.value.hint


def test_whole_extent_tile_over_limit_is_refused_at_call():
    # 3 x 262145 elements, within every backend's limit, but Triton pads them to 4 x 524288
    prog = dt.loads("Func s; In A; Var x; RVar y;\ns[x] = rsum(A[x, y], y);\ns.block(x:3);\ns.tensorize(x:0, y:0);\n"
                    "s.compile();", "rows", "rows.dt")
    with pytest.raises(DTScheduleError, match=r"4 x 524288 = 2097152 elements at y=262145") as e:
        prog(backend="triton", A=np.zeros((3, 2 ** 18 + 1), np.float32))
    assert e.value.loc.line == 2


def test_f64_is_refused():
    prog = program("add")
    with pytest.raises(DTInputError, match="does not support dtype f64"):
        prog(backend="triton", A=np.zeros((2, 2)), B=np.zeros((2, 2)), alpha=1.0)
    with pytest.raises(DTBackendError, match="f64"):
        prog.source("triton", "f64")
    cast = dt.loads("Func o;\nIn A;\nVar x;\no[x] = cast(A[x], f64) * 2.0;\no.compile();\n")
    with pytest.raises(DTBackendError, match="cannot compute in f64") as e:
        cast.source("triton")
    assert e.value.loc.line == 4


class _NeedsSharedMemory:
    """Stands in for a @triton.jit kernel whose launch asks for `required` bytes of shared memory."""

    def __init__(self, required: int):
        self.required = required

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton.runtime.errors import OutOfResources
            raise OutOfResources(self.required, 232448, "shared memory")
        return launch


def test_out_of_resources_names_the_kernel_and_suggests_stages():
    prog = program("matmul")  # num_stages(3)
    run = backends.get("triton").compile(prog.pipeline("f32"))
    run.namespace["mm_kernel"] = _NeedsSharedMemory(300000)
    with pytest.raises(DTBackendError, match="kernel 'mm_kernel' needs more shared memory") as e:
        run({"A": torch.zeros(4, 8), "B": torch.zeros(8, 4)}, {}, {"x_SIZE": 4, "y_SIZE": 4, "k_SIZE": 8})
    assert e.value.loc == prog.pipeline("f32").kernels[0].loc
    assert e.value.hint.startswith("try mm.num_stages(2)") and "whole" not in e.value.hint


class _CrashesTritonsCompiler:
    """Stands in for a @triton.jit kernel whose compilation fails in one of Triton's MLIR passes."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise RuntimeError("PassManager::run failed")
        return launch


def test_a_crash_of_tritons_compiler_names_the_kernel_and_the_ways_around_it():
    prog = program("persistent_tma")
    pipeline = prog.pipeline("f16")
    run = backends.get("triton").compile(pipeline)
    kernel = pipeline.kernels[0]
    run.namespace[kernel.name] = _CrashesTritonsCompiler()
    sizes = extents("persistent_tma")
    tensors = {"A": torch.zeros(sizes["x"], sizes["k"], dtype=torch.float16),
               "B": torch.zeros(sizes["k"], sizes["y"], dtype=torch.float16)}
    with pytest.raises(DTBackendError, match=f"Triton's compiler failed on kernel '{kernel.name}'") as e:
        run(tensors, {"alpha": 1.0}, {f"{d}_SIZE": n for d, n in sizes.items()})
    assert e.value.loc == kernel.loc
    assert e.value.hint.startswith("a Triton bug") and f"remove {kernel.func}.tma()" in e.value.hint


def test_out_of_resources_with_whole_extent_tiles_says_stages_may_not_be_enough():
    """The talk's attention holds whole rows of scores: its tiles grow with l, whatever the stages."""
    prog = dt.load("examples/attention_talk.dt")  # num_stages(8), tensorize(l:0)
    run = backends.get("triton").compile(prog.pipeline("f16"))
    run.namespace["attention_kernel"] = _NeedsSharedMemory(477000)
    tensors = {"A": torch.zeros(16, 16, dtype=torch.float16), "B": torch.zeros(16, 70, dtype=torch.float16),
               "C": torch.zeros(70, 64, dtype=torch.float16)}
    with pytest.raises(DTBackendError, match="needs more shared memory") as e:
        run(tensors, {}, {"m_SIZE": 16, "k_SIZE": 16, "l_SIZE": 70, "n_SIZE": 64})
    assert e.value.hint.startswith("try attention.num_stages(4); or its tiles span the whole of 'l'")
    assert "walk 'l' in tiles" in e.value.hint


def test_without_its_packages_it_generates_but_does_not_run(monkeypatch):
    """Without triton the backend is source only (without torch as well: test_triton_source_without_torch.py)."""
    from dt.backends.triton import create
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    backend = create()
    pipeline = program("matmul").pipeline("f32")
    assert backend.source(pipeline) == codegen.render(pipeline).source
    assert backend.capabilities.devices == () and "needs the 'triton' package" in backend.capabilities.notes["mode"]
    with pytest.raises(DTBackendError, match="backend 'triton' is not available: the triton backend needs the "
                                             "'triton' package") as e:
        backend.compile(pipeline)
    assert e.value.hint == "pip install 'dt[triton]' (installs triton and torch)"


def test_without_gpu_or_interpreter_it_generates_but_does_not_run(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from dt.backends.triton import create
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    backend = create()
    pipeline = program("matmul").pipeline("f32")
    assert "def mm_kernel(" in backend.source(pipeline)
    with pytest.raises(DTBackendError, match="cannot run kernels here: no CUDA GPU") as e:
        backend.compile(pipeline)
    assert "TRITON_INTERPRET=1" in e.value.hint


# ---------------------------------------------------------------- compiled for a GPU

SM90_CASES = [(name, "f16") for name in EXAMPLES] + [
    ("functions", "bf16"), ("where", "f32"), ("reductions", "f32"), ("small_dot", "bf16"), ("whole_dot", "f32"),
    ("rank0", "f32"), ("rank0_input", "f16"), ("no_inputs", "f32"), ("temporary", "f32"), ("constants", "f32"),
    ("names", "f32"), ("persistent_tma", "f16"), ("persistent_tma", "bf16"), ("tma_unaligned", "f32"), ("flash_tma", "f16"),
    ("staged_walk", "f32"), ("staged_small_dot", "f32"), ("argmax", "f32"), ("embedding", "f16"), ("causal_conv", "bf16"),
    ("grouped", "f16"), ("paged", "bf16"), ("integers", "f32"), ("shift_tma", "f16"),
    ("constant_index", "bf16"), ("heads_persistent_tma", "bf16"), ("i8_products", "i8")]


def compile_for_sm90(cases, inspect=None, index_dtype: str = "int64") -> dict:
    """Compile the kernels of each (program, dtype) to an sm_90 cubin with Triton's NVIDIA
    backend (no GPU needed): launches are recorded instead of run, then compiled with the
    arguments, constexprs and options they would have had. Runs without TRITON_INTERPRET.
    With `inspect`, also gives inspect(compiled kernel) for each kernel, as
    `{program}-{dtype} {kernel}`. Gather indices (I of E[I[t], d]) are of `index_dtype`."""
    from dt.backends.triton.compiled import H100, compile_launch, record_launches
    from dt.dtypes import NUMPY_NAMES
    results = {}
    for name, dtype in cases:
        prog = program(name)
        sizes = extents(name)
        args = random_inputs(prog, sizes, dtype)  # gather indices are integers whatever `dtype`
        args = {n: a.astype(index_dtype) if isinstance(a, np.ndarray) and a.dtype == np.int64 else a
                for n, a in args.items()}
        pipeline = prog.pipeline({n: NUMPY_NAMES[args[n].dtype] for n in prog.inputs} or dtype)
        module = codegen.render(pipeline)
        inputs = [dt.arrays.to_torch(args[n]) for n in module.inputs]
        launches = record_launches(module, pipeline, inputs, [args[s] for s in module.scalars], sizes)
        try:
            for fn, values, options in launches:
                compiled = compile_launch(fn, values, options, H100)
                if inspect:
                    results[f"{name}-{dtype} {fn.__name__}"] = inspect(compiled)
            results[f"{name}-{dtype}"] = "ok"
        except Exception as e:  # reported to the parent test, which shows every failure
            results[f"{name}-{dtype}"] = f"{type(e).__name__}: {e}"
    return results


def sm90_compiled(call: str) -> dict:
    """The result of `call` (an expression on this module, `t`) in a fresh interpreter without
    TRITON_INTERPRET, so that Triton's NVIDIA backend compiles."""
    pytest.importorskip("triton.backends.nvidia.compiler")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
            f"import test_triton_backend as t; print(json.dumps({call}))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_persistent_block_that_loads_before_its_walk_is_not_flattened():
    """Triton's TMA lowering fails on a flattened walk over blocks whose block loads a tile outside
    its innermost loop (heads_persistent_tma compiles for sm_90 in test_kernels_compile_for_sm90); a
    persistent matmul keeps the flattened loop."""
    assert "flatten=" not in program("heads_persistent_tma").source("triton", "bf16")
    # a block of 256 query rows walked in tiles of 128: the query tile loads between two loops
    walked = PROGRAMS["heads_persistent_tma"][0].replace("block(b:1, h:1, m:128, n:32)", "block(b:1, h:1, m:256, n:32)")
    source = dt.loads(walked).source("triton", "bf16")
    assert "for m_iter in" in source and "flatten=" not in source
    assert "program_count, flatten=USE_TMA):" in program("persistent_tma").source("triton", "f16")


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    results = sm90_compiled("t.compile_for_sm90(t.SM90_CASES)")
    failed = {k: v for k, v in results.items() if v != "ok"}
    assert not failed, failed
    assert len(results) == len(SM90_CASES)


@pytest.mark.slow
def test_num_stages_pipelines_a_walk_without_a_product():
    src = program("staged_walk").source("triton")
    assert src.count("for y_iter in tl.range(0, y_SIZE // 64 * 64, 64, num_stages=3):") == 2  # staged, by_tma
    assert "for y_iter in range(0, y_SIZE // 64 * 64, 64):" in src  # plain
    # a walk's last, cut tile is one iteration: nothing to pipeline
    assert src.count("for y_iter_2 in range(y_SIZE // 64 * 64, y_SIZE, 64):") == 3
    assert "for k_iter in tl.range(0, k_SIZE, 4, num_stages=3):" in program("staged_small_dot").source("triton")
    assert "for k_iter in range(0, k_SIZE, 32):" in program("matmul").source("triton")  # Triton stages tl.dot
    # A pipelined loop keeps its loads in multi-buffered shared memory: cp.async, or TMA by_tma's.
    buffered = sm90_compiled('t.compile_for_sm90([("staged_walk", "f32"), ("staged_small_dot", "f32")], '
                             'lambda kernel: "memdesc<2x" in kernel.asm["ttgir"])')
    assert buffered == {"staged_walk-f32 staged_kernel": True, "staged_walk-f32 plain_kernel": False,
                        "staged_walk-f32 by_tma_kernel": True, "staged_walk-f32": "ok",
                        "staged_small_dot-f32 mm_kernel": True, "staged_small_dot-f32": "ok"}


def test_an_index_value_that_reads_the_program_id_gets_it_defined():
    from dt.backends.triton.layout import KernelLayout
    kernel = S.Kernel("k_kernel", "k", S.IConst(4), (S.Assign("first", S.Index(S.IVar("pid"), "f32")),))
    layout = KernelLayout(kernel)
    assert layout.uses_pid and layout.is_int64(S.IVar("pid"))


def test_int8_products_take_a_reduction_tile_of_32_on_the_matrix_units():
    """int8's tl.dot needs K >= 32: a whole extent is padded to 32 at launch (16 for a 16-bit
    product), a fixed tile of 16 multiplies and sums in i32; i8_products compiles for sm_90 in
    test_kernels_compile_for_sm90."""
    src = program("i8_products").source("triton", "i8")
    assert src.count("out_dtype=tl.int32") == 2 and "max(32, triton.next_power_of_2(k_SIZE))" in src
    assert ".to(tl.int32)[:, None, :] * tl.trans(" in src
    assert "max(16, triton.next_power_of_2(k_SIZE))" in program("i8_products").source("triton", "f16")
