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

SCALED_SOFTMAX = """
Func out, m, s;
In A;
Var x;
RVar y;
m[x] = rmax(A[x, y] * {scale}, y);
s[x] = rsum(exp(A[x, y] * {scale} - m[x]), y);
out[x, y] = exp(A[x, y] * {scale} - m[x]) / s[x];
out.block(x:2);
out.tensorize(x:0, y:64);
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


@pytest.mark.parametrize("scale", ["0.5", "-0.5"])
@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_scaled_maxima_match_the_reference(scale, backend):
    """A negative scale turns the max around: it is left as written (and still right)."""
    prog = dt.loads(SCALED_SOFTMAX.format(scale=scale))
    assert ("A, -inf), y) * 0.5)" in _ir(prog)) == (scale == "0.5")
    rng = np.random.default_rng(3)
    a = (20 * rng.standard_normal((5, 300))).astype(np.float32)
    assert_close(prog(A=a, backend=backend), prog.reference(A=a), "f32")


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
