"""512-bit vectors on AVX-512 CPUs.

LLVM vectorises loops for 256-bit registers on every AVX-512 CPU it knows of unless told
otherwise (its `prefer-256-bit` tuning: the first AVX-512 chips lowered their clock for 512-bit
instructions). dt's kernels are long loops of arithmetic over rows, as PyTorch's AVX-512 kernels
are, and run faster at the full width (docs/numba.md, "Vector width"). So when numba's CPU target
is first set up in a process, dt asks for the host's features without that tuning — where the
CPU has AVX-512F (and numba has not turned AVX off: NUMBA_ENABLE_AVX), nobody chose numba's
target (NUMBA_CPU_NAME and NUMBA_CPU_FEATURES unset) and DT_NUMBA_VECTOR_WIDTH is not 256.
Numba code compiled in the same process gets the same target; numba's disk cache keys machine
code by these features. The Dot micro-kernel's explicit vectors
(dot.py) are 512-bit either way.
"""
from __future__ import annotations

import numba
from numba.core import registry
from numba.core.codegen import get_host_cpu_features

from dt import env
from dt.errors import DTInputError

ENV = "DT_NUMBA_VECTOR_WIDTH"
PREFER_256 = "-prefer-256-bit"


def wide_features() -> str | None:
    """The features numba should compile for (the host's without LLVM's 256-bit preference), or
    None where dt leaves numba's target alone."""
    width = env.read(ENV) or "512"
    if width not in ("256", "512"):
        raise DTInputError(f"{ENV}={width!r} is not a vector width dt knows", None,
                           f"set {ENV} to 256 (LLVM's choice on AVX-512 CPUs) or 512 (dt's default), or unset it")
    if width == "256":
        return None
    if numba.config.CPU_NAME is not None or numba.config.CPU_FEATURES is not None:
        return None
    # numba's reading of the host: AVX off where NUMBA_ENABLE_AVX=0 or numba turns it off itself
    # (virtual machines that report AVX wrongly), '' where LLVM cannot read the features
    features = get_host_cpu_features()
    return f"{features},{PREFER_256}" if "+avx512f" in features.split(",") else None


def prefer_wide_vectors() -> bool:
    """Set numba's CPU features to `wide_features()` if numba has not set up its CPU target yet in
    this process (afterwards its target machine is made: a change would not apply). True if set."""
    if "_toplevel_target_context" in vars(registry.cpu_target):
        return False
    features = wide_features()
    if features is None:
        return False
    numba.config.CPU_FEATURES = features
    return True
