"""dt.grad's default schedule (dt/ir/grad/schedule.py) for sums across rows and convolution taps:
a weight's gradient summed over batches and positions walks each channel's rows in memory order,
one program a channel, its taps in the tile; the bias's gradient, the same sums without the taps,
is computed in that kernel; a Func read at computed indices by one kernel joins the kernel reading
it at its own indices."""
import pytest

import dt
from test_grad import ROOT, gradient_errors


def _schedule_lines(prog) -> list[str]:
    return [line for line in prog.dt_source().splitlines() if "." in line and line.endswith(");")]


def test_conv1d_weight_and_bias_gradients_walk_each_channels_rows_once():
    """dW[c, j] took blocks of 32 taps (of 4) and 32 x 128 x 128 tiles in 2,048 / 32 programs, and
    dB[c] a kernel of its own: on an H200, 1.16-1.48x slower than one program a channel walking
    its rows with its four taps in the tile and dB beside them (docs/performance.md)."""
    backward = dt.grad(dt.load(ROOT / "examples" / "llm" / "conv1d.dt"))
    lines = _schedule_lines(backward)
    assert "grad_W.block(c:1);" in lines and "grad_W.tensorize(j:4, t:1024, b:1);" in lines
    assert "grad_B.fuse_at(grad_W, c);" in lines and not any(line.startswith("grad_B.block") for line in lines)
    kernels = [k.name for k in backward.pipeline("f32").kernels]
    assert "grad_B_kernel" not in kernels and "grad_W_kernel" in kernels


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_conv1d_gradient_matches_finite_differences(backend):
    sizes = {"b": 2, "c": 5, "t": 37, "j": 4}
    errors = gradient_errors(dt.load(ROOT / "examples" / "llm" / "conv1d.dt"), sizes, backend=backend)
    assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize("reduction", ["rsum(X[m, k] * W[n, k], k)", "rdot(X[m, k], W[n, k], k)"])
def test_a_bias_gradient_joins_only_a_kernel_that_keeps_the_extra_dimension_whole(reduction):
    """dB[n] summed like dW[n, k] over m, where the forward walks k in tiles of 32, or of 16 in a
    product (a matrix product's depth, not a convolution's taps): in dW's kernel, blocked along k,
    dB would be computed again in every program along k, so it keeps a kernel of its own."""
    depth = 16 if "rdot" in reduction else 32
    prog = dt.loads(f"Func o;\nIn X, W, B;\nVar m, n;\nRVar k;\no[m, n] = {reduction} + B[n];\n"
                    f"o.block(m:64, n:64);\no.tensorize(m:64, n:64, k:{depth});\no.compile();\n")
    lines = _schedule_lines(dt.grad(prog, wrt=("W", "B")))
    assert not any(line.startswith("grad_B.fuse_at(grad_W") for line in lines), lines


def test_nested_sums_across_rows_walk_one_of_them_in_a_wide_tile():
    """RoPE's cos-table gradient sums over b, kh and h: each walked 128 at a time, its tile had
    32 x 128^3 lanes (no GPU holds it); the sum nearest the rows in memory (a head, not the batch)
    walks 128 rows, the others one at a time. A product's depth keeps its tile beside them (GQA's
    grad_K: the sum over the heads and the product over m)."""
    rope = dt.load(ROOT / "examples" / "llm" / "rope.dt")
    lines = _schedule_lines(dt.grad(rope))
    assert "grad_C.tensorize(d:32, b:1, kh:128, h:1);" in lines, [line for line in lines if "grad_C" in line]
    gqa = _schedule_lines(dt.grad(dt.load(ROOT / "examples" / "llm" / "gqa_attention.dt")))
    assert "grad_K.tensorize(k:32, h:128, m:128);" in gqa, [line for line in gqa if "grad_K" in line]
    errors = gradient_errors(rope, {"b": 2, "s": 3, "h": 2, "kh": 1, "d": 4}, backend="numba")
    assert max(errors.values()) < 1e-5, errors
