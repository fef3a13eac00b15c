"""Source text of the helper functions a generated module may carry: float32 transcendentals
LLVM can vectorise, float16 / bfloat16 conversions on uint16 bits and 8-bit float ones on uint8
bits, NaN-propagating maximum and minimum (for rmax / rmin as LLVM intrinsics, which vectorise),
and the register-blocked micro-kernel behind every Dot (dot.py). The code generator copies the ones a
pipeline uses into its module, so the module needs numpy and numba only.

Helpers compile with their own fastmath flags (`_HELPER`: contraction into FMAs, no
reassociation) so that LLVM cannot regroup the exact range reductions and scalings below; each is
one flat function, small enough for LLVM to inline into the kernels' lane loops, where they then
vectorise. (numba's own `inline='always'` would re-lower them under the kernels' flags.)
"""
from __future__ import annotations

from dt.backends.numba_cpu.dot import DOT_HELPERS, DOT_REQUIRES

# exp(z) for float32 z, as lines that leave the result in `{out}`. z = n*ln2 + r with |r| <= ln2/2:
# r is computed in two steps (ln2 split into a short head, exact in float32 times n, and a tail),
# exp(r) by its Taylor series to r**7 (truncation below 2**-27), and 2**n applied by _pow2_scale so
# that results down to the subnormal range round once. Max error 1 ulp; z is first clamped to
# [-104, 88.8], beyond which exp is 0 or inf in float32.
_EXP_F32_LINES = """\
{z}c = min(max({z}, f32(-104.0)), f32(88.8))
{z}n = np.floor({z}c * f32(1.4426950408889634) + f32(0.5))
{z}r = {z}c - {z}n * f32(0.693359375)
{z}r = {z}r + {z}n * f32(2.1219444005469057e-04)
{z}p = f32(1.0 / 5040.0)
{z}p = {z}p * {z}r + f32(1.0 / 720.0)
{z}p = {z}p * {z}r + f32(1.0 / 120.0)
{z}p = {z}p * {z}r + f32(1.0 / 24.0)
{z}p = {z}p * {z}r + f32(1.0 / 6.0)
{z}p = {z}p * {z}r + f32(0.5)
{z}p = {z}p * {z}r + f32(1.0)
{z}p = {z}p * {z}r + f32(1.0)
{out} = _pow2_scale({z}p, {z}n)
"""


def _exp_lines(z: str, out: str, indent: str = "    ") -> str:
    return "".join(indent + line + "\n" for line in _EXP_F32_LINES.format(z=z, out=out).splitlines())


HELPERS: dict[str, str] = {}

HELPERS["_cpu_features"] = '''\
def _cpu_features():
    """The features numba compiles for: its configured ones (dt's 512-bit vectors set them), else the host's."""
    features = numba.config.CPU_FEATURES
    return set((get_host_cpu_features() if features is None else features).split(","))
'''

# p * 2**n for float32 p and integral n, rounded once (down to the subnormals): one vscalefps a
# vector where numba compiles for AVX-512 and its LLVM has llvm.ldexp (17 on); else two exact
# power-of-two factors made in the exponent bits (n in [-252, 254]): ten instructions a vector,
# about a quarter of the whole exp.
HELPERS["_has_scalef"] = '''\
def _has_scalef():
    """Whether _pow2_scale compiles to AVX-512's vscalefps (llvm.ldexp, LLVM 17 on)."""
    return llvm_version_info >= (17,) and "+avx512f" in _cpu_features()
'''

HELPERS["_pow2_scale"] = '''\
@intrinsic
def _pow2_scale(typingctx, p, n):
    """p * 2**n in float32 for an integral float32 n, rounded once."""
    if p != numba.float32 or n != numba.float32:
        return None

    def codegen(context, builder, signature, args):
        f32, i32 = ir.FloatType(), ir.IntType(32)
        k = builder.fptosi(args[1], i32)
        if _has_scalef():
            ldexp = builder.module.declare_intrinsic("llvm.ldexp", [f32, i32], ir.FunctionType(f32, [f32, i32]))
            return builder.call(ldexp, [args[0], k])
        half = builder.ashr(k, ir.Constant(i32, 1))

        def power(e):  # 2**e, built in the exponent bits
            return builder.bitcast(builder.shl(builder.add(e, ir.Constant(i32, 127)), ir.Constant(i32, 23)), f32)
        return builder.fmul(builder.fmul(args[0], power(half)), power(builder.sub(k, half)))

    return numba.float32(p, n), codegen
'''

HELPERS["_exp_f32"] = f'''\
@njit(**_HELPER)
def _exp_f32(x):
    """exp(x) in float32 (max error 1 ulp): inf above 88.72, NaN for NaN."""
{_exp_lines("x", "y")}\
    y = f32(np.inf) if x > f32(88.72283935546875) else y
    return x if x != x else y
'''

HELPERS["_sigmoid_f32"] = f'''\
@njit(**_HELPER)
def _sigmoid_f32(x):
    """1 / (1 + exp(-x)) in float32 (max error 2.5 ulp); exp(-x) overflowing to inf gives 0."""
    z = -x
{_exp_lines("z", "e")}\
    e = f32(np.inf) if z > f32(88.72283935546875) else e
    return x if x != x else f32(1.0) / (f32(1.0) + e)
'''

# tanh: for |x| < 0.625 the odd polynomial x + x**3 * q(x**2), q fitted (least squares, relative
# error 5e-9) for this module; above it (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.29, which
# neither overflows nor cancels. Max error 1.5 ulp.
HELPERS["_tanh_f32"] = f'''\
@njit(**_HELPER)
def _tanh_f32(x):
    """tanh(x) in float32 (max error 1.5 ulp)."""
    a = abs(x)
    t = a * a
    q = f32(-0.005691935767)
    q = q * t + f32(0.02062624867)
    q = q * t + f32(-0.05373530610)
    q = q * t + f32(0.1333138121)
    q = q * t + f32(-0.3333327920)
    small = a + a * t * q
    z = f32(-2.0) * a
{_exp_lines("z", "e")}\
    large = (f32(1.0) - e) / (f32(1.0) + e)
    y = small if a < f32(0.625) else large
    return x if x != x else (-y if x < f32(0.0) else y)
'''

HELPERS["_sigmoid_f64"] = '''\
@njit(**_HELPER)
def _sigmoid_f64(x):
    return 1.0 / (1.0 + math.exp(-x))
'''

# NumPy's maximum / minimum: a NaN in either operand gives NaN.
HELPERS["_maximum"] = '''\
@njit(**_HELPER)
def _maximum(a, b):
    return a if a >= b or a != a else b
'''

HELPERS["_minimum"] = '''\
@njit(**_HELPER)
def _minimum(a, b):
    return a if a <= b or a != a else b
'''

# rmax / rmin accumulate with LLVM's maximum / minimum (IEEE 754-2019 maximum / minimum: NaN if
# either operand is NaN, -0 below +0), which the loop vectoriser turns into vector reductions.
# A NaN-propagating compare-and-select, as _maximum, may vectorise only under 'nnan', which
# would let LLVM drop the NaNs: such a reduction stays a scalar loop, 10x slower. Only the sign
# of a zero maximum can differ from NumPy's max (whose own choice depends on its SIMD path).
_REDUCE_LINES = """\
@intrinsic
def {name}(typingctx, a, b):
    \"\"\"llvm.{op}(a, b) of two floats, in the wider of their types.\"\"\"
    if not (isinstance(a, numba.types.Float) and isinstance(b, numba.types.Float)):
        return None
    t = typingctx.unify_types(a, b)

    def codegen(context, builder, signature, args):
        value = context.get_value_type(t)
        fn = builder.module.declare_intrinsic("llvm.{op}", [value], ir.FunctionType(value, [value, value]))
        return builder.call(fn, [context.cast(builder, v, vt, t) for v, vt in zip(args, signature.args)])

    return t(a, b), codegen
"""
HELPERS["_reduce_max"] = _REDUCE_LINES.format(name="_reduce_max", op="maximum")
HELPERS["_reduce_min"] = _REDUCE_LINES.format(name="_reduce_min", op="minimum")

# float16 and bfloat16 tensors reach the kernels as their uint16 bits (numba has no float16
# arithmetic on the CPU); they are widened to float32 on load and rounded, to nearest even, on
# store. Every conversion is bit-exact with NumPy's and ml_dtypes' (checked over all inputs).
# numba widens unsigned arithmetic to 64 bits, hence the u32(...) around every step.
HELPERS["_f16_to_f32"] = '''\
@njit(**_HELPER)
def _f16_to_f32(h):
    """float16 bits -> float32: rebias normals, scale subnormals exactly, widen inf and NaN."""
    b = u32(h)
    sign = u32(u32(b & u32(0x8000)) << u32(16))
    em = u32(b & u32(0x7FFF))
    normal = u32(u32(em << u32(13)) + u32(0x38000000))
    special = u32(u32(em << u32(13)) | u32(0x7F800000))
    small = f32(f32(em) * f32(5.9604644775390625e-08)).view(u32)
    bits = special if em >= u32(0x7C00) else (normal if em >= u32(0x0400) else small)
    return u32(bits | sign).view(f32)
'''

HELPERS["_f32_to_f16"] = '''\
@njit(**_HELPER)
def _f32_to_f16(x):
    """float32 -> float16 bits, rounded to nearest even."""
    u = f32(x).view(u32)
    sign = u32(u32(u >> u32(16)) & u32(0x8000))
    a = u32(u & u32(0x7FFFFFFF))
    # normal halves: drop 13 mantissa bits rounding half to even and rebias the exponent; a
    # carry out of the mantissa moves into the exponent, up to inf from 65520 on
    normal = u32(u32(a + u32(0x0FFF) + u32(u32(a >> u32(13)) & u32(1)) - u32(0x38000000)) >> u32(13))
    # subnormal halves are the multiples of 2**-24: scale exactly, round half to even
    small = u32(np.rint(u32(a).view(f32) * f32(16777216.0)))
    nan = u32(u32(0x7E00) | u32(u32(a >> u32(13)) & u32(0x01FF)))
    bits = small if a < u32(0x38800000) else (normal if a < u32(0x47800000) else u32(0x7C00))
    bits = nan if a > u32(0x7F800000) else bits
    return u16(u32(bits | sign))
'''

HELPERS["_bf16_to_f32"] = '''\
@njit(**_HELPER)
def _bf16_to_f32(h):
    return u32(u32(h) << u32(16)).view(f32)
'''

HELPERS["_f32_to_bf16"] = '''\
@njit(**_HELPER)
def _f32_to_bf16(x):
    """float32 -> bfloat16 bits, rounded to nearest even; NaN stays a (quiet) NaN."""
    u = f32(x).view(u32)
    rounded = u32(u32(u + u32(0x7FFF) + u32(u32(u >> u32(16)) & u32(1))) >> u32(16))
    nan = u32(u32(u >> u32(16)) | u32(0x0040))
    return u16(nan if u32(u & u32(0x7FFFFFFF)) > u32(0x7F800000) else rounded)
'''

HELPERS["_round_f16"] = '''\
@njit(**_HELPER)
def _round_f16(x):
    return _f16_to_f32(_f32_to_f16(x))
'''

HELPERS["_round_bf16"] = '''\
@njit(**_HELPER)
def _round_bf16(x):
    return _bf16_to_f32(_f32_to_bf16(x))
'''

HELPERS["_round_f32"] = '''\
@njit(**_HELPER)
def _round_f32(x):
    return np.float64(np.float32(x))
'''

# 8-bit floats (float8_e4m3fn, float8_e5m2) reach the kernels as their uint8 bits, widened to
# float32 on load and rounded to nearest even on store, bit-exact with ml_dtypes' astype (checked
# over all inputs): NaN loads as float32's quiet NaN with the sign kept, and a store saturates as
# ml_dtypes does, to NaN for e4m3fn (it has no infinities) and to inf for e5m2. The loads are
# integer arithmetic and selects, as for float16: a 256-entry float32 table would be as exact,
# but LLVM vectorises its lookups as gathers, which measured 4x slower in a lane loop on AVX-512
# (AMD EPYC), where the arithmetic runs as fast as a float32 load.
HELPERS["_f8e4m3_to_f32"] = '''\
@njit(**_HELPER)
def _f8e4m3_to_f32(b):
    """float8_e4m3fn bits -> float32: rebias normals, scale subnormals exactly; NaN (0x7F, 0xFF) stays NaN."""
    x = u32(b)
    sign = u32(u32(x & u32(0x80)) << u32(24))
    em = u32(x & u32(0x7F))
    normal = u32(u32(em << u32(20)) + u32(0x3C000000))
    small = f32(f32(em) * f32(0.001953125)).view(u32)
    bits = u32(0x7FC00000) if em == u32(0x7F) else (normal if em >= u32(0x08) else small)
    return u32(bits | sign).view(f32)
'''

HELPERS["_f8e5m2_to_f32"] = '''\
@njit(**_HELPER)
def _f8e5m2_to_f32(b):
    """float8_e5m2 bits -> float32: rebias normals, scale subnormals exactly, widen inf and NaN."""
    x = u32(b)
    sign = u32(u32(x & u32(0x80)) << u32(24))
    em = u32(x & u32(0x7F))
    normal = u32(u32(em << u32(21)) + u32(0x38000000))
    small = f32(f32(em) * f32(1.52587890625e-05)).view(u32)
    special = u32(0x7F800000) if em == u32(0x7C) else u32(0x7FC00000)
    bits = special if em >= u32(0x7C) else (normal if em >= u32(0x04) else small)
    return u32(bits | sign).view(f32)
'''

# float32 -> 8 bits as float16 above: normals drop their low mantissa bits rounding half to even
# (a carry moves into the exponent), subnormals are scaled exactly and rounded by np.rint. A
# float64 value is first rounded to float32, as ml_dtypes' astype from float64 does.
HELPERS["_f32_to_f8e4m3"] = '''\
@njit(**_HELPER)
def _f32_to_f8e4m3(x):
    """float32 -> float8_e4m3fn bits, rounded to nearest even; beyond 464 (and inf, NaN): NaN."""
    u = f32(x).view(u32)
    sign = u32(u32(u >> u32(24)) & u32(0x80))
    a = u32(u & u32(0x7FFFFFFF))
    normal = u32(u32(a + u32(0x7FFFF) + u32(u32(a >> u32(20)) & u32(1)) - u32(0x3C000000)) >> u32(20))
    small = u32(np.rint(u32(a).view(f32) * f32(512.0)))  # subnormals: the multiples of 2**-9
    bits = small if a < u32(0x3C800000) else min(normal, u32(0x7F))  # 0x7F: NaN, past the largest, 448
    return np.uint8(u32(bits | sign))
'''

HELPERS["_f32_to_f8e5m2"] = '''\
@njit(**_HELPER)
def _f32_to_f8e5m2(x):
    """float32 -> float8_e5m2 bits, rounded to nearest even; from 61440 on: inf; NaN stays NaN."""
    u = f32(x).view(u32)
    sign = u32(u32(u >> u32(24)) & u32(0x80))
    a = u32(u & u32(0x7FFFFFFF))
    normal = u32(u32(a + u32(0xFFFFF) + u32(u32(a >> u32(21)) & u32(1)) - u32(0x38000000)) >> u32(21))
    small = u32(np.rint(u32(a).view(f32) * f32(65536.0)))  # subnormals: the multiples of 2**-16
    bits = small if a < u32(0x38800000) else min(normal, u32(0x7C))  # 0x7C: inf
    bits = u32(0x7E) if a > u32(0x7F800000) else bits
    return np.uint8(u32(bits | sign))
'''

HELPERS["_round_f8e4m3"] = '''\
@njit(**_HELPER)
def _round_f8e4m3(x):
    return _f8e4m3_to_f32(_f32_to_f8e4m3(x))
'''

HELPERS["_round_f8e5m2"] = '''\
@njit(**_HELPER)
def _round_f8e5m2(x):
    return _f8e5m2_to_f32(_f32_to_f8e5m2(x))
'''

REQUIRES = {f"_round_{d}": (f"_{d}_to_f32", f"_f32_to_{d}") for d in ("f16", "bf16", "f8e4m3", "f8e5m2")}
REQUIRES |= {name: ("_pow2_scale",) for name in ("_exp_f32", "_sigmoid_f32", "_tanh_f32")}
REQUIRES |= {"_pow2_scale": ("_has_scalef",), "_has_scalef": ("_cpu_features",)}

HELPERS.update(DOT_HELPERS)
REQUIRES.update(DOT_REQUIRES)


def closure(names) -> list[str]:
    """The helpers `names` need, each after the helpers it calls, in a stable order."""
    out: list[str] = []

    def add(name):
        for dep in REQUIRES.get(name, ()):
            add(dep)
        if name not in out:
            out.append(name)

    for name in sorted(names):
        add(name)
    return out
