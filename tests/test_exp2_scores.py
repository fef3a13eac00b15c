"""exp(scores - max) as flash attention computes it: the lowering takes a max of scaled scores
from the unscaled tile (every backend), and the Triton backend writes the exponential of
products it computes as one fused multiply-add before exp2, in 16-bit programs only, never for
values read from memory (a mask constant minus itself must stay exactly 0)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dt
from dt.ir.printer import ir_text
from dt.testing import assert_close, random_inputs

ROOT = Path(__file__).resolve().parent.parent
LOG2E = "1.4426950408889634"

# attention's one-pass schedule with its scores scaled by {scale}
SCALED_ATTENTION = (ROOT / "examples" / "attention_safe_onepass.dt").read_text().replace(
    "/ sqrt(len(k))", "* {scale}")

MASKED_SOFTMAX = """
Func out, m, s;
In A, Valid;
Var x;
RVar y;
m[x] = rmax(where(Valid[x, y] > 0.0, A[x, y], -1e30) * 0.1, y);
s[x] = rsum(exp(where(Valid[x, y] > 0.0, A[x, y], -1e30) * 0.1 - m[x]), y);
out[x, y] = exp(where(Valid[x, y] > 0.0, A[x, y], -1e30) * 0.1 - m[x]) / s[x];
out.block(x:2);
out.tensorize(x:0, y:16);
m.fuse_at(out, x);
s.fuse_at(out, x);
s.compute_with(m, y);
out.compile_to_kernel();
"""


def _ir(prog, dtype="f32") -> str:
    return ir_text(prog.pipeline(dtype))


def test_the_max_of_scaled_scores_is_taken_before_the_scale():
    attention = dt.load(ROOT / "examples" / "attention_safe_onepass.dt")
    ir = _ir(attention)
    assert "rmax(where(expand(valid(l), [m, l]), k_accumulator, -inf), l) / sqrt(len(k))" in ir
    assert "exp(((k_accumulator / sqrt(len(k))) - expand(l_shift, [m, l])))" in ir
    causal = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    ir = _ir(causal)
    assert "rmax(k_accumulator, l) * (1.0 / sqrt(len(k)))" in ir  # the tiles below the diagonal
    # the diagonal's tiles: the mask stays on the unscaled scores (-inf scaled is -inf)
    assert "where((expand(indices(l_2), [m, l_2]) <= expand(indices(m), [m, l_2])), k_accumulator_2, neg(inf))" in ir


def test_only_a_moderate_positive_scale_moves_to_the_max():
    """A negative scale turns the max around; one that overflows float32 (1e60) or underflows it
    would make the max inf or 0 where scaling each lane does not."""
    for scale in ("-0.5", "(1e30 * 1e30)", "(1e-30 * 1e-30)", "(1.0 / 0.0)"):
        assert "k_accumulator, -inf), l) *" not in _ir(dt.loads(SCALED_ATTENTION.format(scale=scale))), scale
    assert "k_accumulator, -inf), l) * (0.5 * sqrt(len(k)))" in _ir(dt.loads(SCALED_ATTENTION.format(
        scale="(0.5 * sqrt(len(k)))")))


@pytest.mark.parametrize("scale", ["0.5", "-0.5"])
@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_scaled_maxima_match_the_reference(scale, backend):
    """A negative scale is left as written (and still right)."""
    prog = dt.loads(SCALED_ATTENTION.format(scale=scale))
    assert ("k_accumulator, -inf), l) * 0.5" in _ir(prog)) == (scale == "0.5")
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal(shape).astype(np.float32) for shape in ((70, 16), (16, 90), (90, 16)))
    assert_close(prog(A=a, B=b, C=c, backend=backend), prog.reference(A=a, B=b, C=c), "f32")


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_a_loaded_tile_with_a_finite_mask_keeps_its_rounded_scale(backend):
    """where(mask, A, -1e30) * 0.1 over a fully masked row: each lane and the max are the same
    rounded -1e29, so exp(lane - max) is exactly 1. Scaling the max alone would leave a fused
    multiply-add (numba contracts) with the rounding error of -1e29: exp of 1e21, inf."""
    prog = dt.loads(MASKED_SOFTMAX)
    ir = _ir(prog)
    assert "neg(1e+30)) * 0.1)" in ir and "rmax(y_max_input, y)" in ir  # the whole tiles: no mask
    assert "rmax(where(expand(valid(y_2), [x, y_2]), y_max_input_2, -inf), y_2)" in ir  # the last, cut tile
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 40)).astype(np.float32)
    valid = np.ones((4, 40), np.float32)
    valid[1] = 0.0
    got = np.asarray(prog(A=a, Valid=valid, backend=backend))
    assert np.isfinite(got).all()
    assert_close(got, prog.reference(A=a, Valid=valid), "f32")


def test_minus_inf_stays_a_python_float_on_the_interpreter():
    """np.negative(np.inf) is a float64 scalar, which made where(c, float32 tile, -inf) float64."""
    src = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt").source("interp")
    assert "np.negative(np.inf)" not in src and "(-np.inf)" in src


def test_exp_of_computed_scores_is_one_fused_multiply_add():
    causal = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    bf16 = causal.source("triton", "bf16")
    assert (f"tl.exp2(k_accumulator * ({LOG2E} * (1.0 / tl.sqrt(float(k_SIZE)))) -\n"
            f"                        (l_shift * {LOG2E})[:, None])") in bf16  # the row scaled, then broadcast
    assert "exp(scores - b) of products computed here is written exp2" in bf16.replace("\n", " ")
    f32 = causal.source("triton", "f32")
    assert "tl.exp2(" not in f32 and "tl.exp(" in f32 and "exp2" not in f32.split('"""')[1]


@pytest.mark.parametrize("path", ["examples/softmax_safe.dt", "examples/llm/cross_entropy.dt",
                                  "benchmarks/gpu/schedules/paged_decode_split.dt"])
def test_values_read_from_memory_keep_their_exp(path):
    """Softmax's inputs, cross-entropy's logits, a paged decode's chunk maxima (-1e30 where a
    chunk's keys are all masked) and scores masked with a finite constant."""
    src = dt.load(ROOT / path).source("triton", "bf16")
    assert "tl.exp(" in src and "tl.exp2(" not in src


@pytest.mark.needs_triton
def test_fused_exp2_attention_matches_the_reference_in_bf16():
    torch = pytest.importorskip("torch")
    from dt.arrays import to_torch
    causal = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    sizes = dict(b=1, h=2, m=150, l=150, k=16, n=16)
    inputs = random_inputs(causal, sizes, "bf16")
    want = causal.reference(**inputs)
    if torch.cuda.is_available():
        inputs = {k: to_torch(v).cuda() for k, v in inputs.items()}
    assert_close(causal(**inputs, backend="triton"), want, "bf16")
