"""Device functions a generated module carries when its kernels use them, on a GPU and under
Triton's interpreter alike: Triton has no tanh or pow that runs both compiled and under its
interpreter, so the module brings its own, built from tl.exp / tl.exp2 / tl.log2; and Triton's
integer // and % truncate toward zero, where DT's (Python's) round toward -inf.

The code generator copies each function's source text into the module it writes
(dt/backends/triton/helpers.py reads this file; generating code imports neither it nor
triton). Compiled for a GPU, `_tanh` is libdevice_helpers.py's instead.
"""
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    # (1 - e) / (1 + e) with e = exp(-2|x|) never overflows; it cancels near 0, where the
    # odd Taylor series (error < 1e-12 relative for |x| < 0.125) is used instead.
    e = tl.exp(-2.0 * tl.abs(x))
    large = (1.0 - e) / (1.0 + e)
    x2 = x * x
    small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (
        62.0 / 2835.0 + x2 * (-1382.0 / 155925.0))))))
    return tl.where(tl.abs(x) < 0.125, small, tl.where(x < 0.0, -large, large))


@triton.jit
def _pow(x, y):
    # x ** y as NumPy defines it: |x| ** y signed for a negative x and an odd integral y,
    # NaN for a negative x and a fractional y, and 1 when y == 0 or x == 1.
    magnitude = tl.exp2(y * tl.log2(tl.abs(x)))
    integral = tl.floor(y) == y
    odd = integral & (tl.floor(y * 0.5) * 2.0 != y)
    signed = tl.where(odd, -magnitude, magnitude)
    result = tl.where(x < 0.0, tl.where(integral, signed, float("nan")), magnitude)
    return tl.where((y == 0.0) | (x == 1.0), 1.0, result)


@triton.jit
def _floor_divide(a, b):
    # a // b of integers rounded toward -inf, as Python's: Triton's // truncates toward zero,
    # which is one too high where the remainder is nonzero and of the other sign than b.
    q = a // b
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@triton.jit
def _remainder(a, b):
    # a % b of integers with the sign of b, as Python's: Triton's % takes the sign of a.
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def _max_with_nan(a, b):
    # rmax's and cummax's combine: NaN propagates, as NumPy's max and maximum.accumulate have it
    # (tl.max's own combine drops NaN: max.f32 returns the number)
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _min_with_nan(a, b):
    # rmin's and cummin's combine: NaN propagates, as NumPy's min and minimum.accumulate have it
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
