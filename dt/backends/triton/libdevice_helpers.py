"""Device functions that replace device_helpers.py's in a module compiled for a GPU: each
calls libdevice, which Triton's interpreter lacks. Compiled, tanh is CUDA's tanhf (what
torch.compile's kernels call): fewer instructions than the exp formula, it made bf16 DyT 4-7%
faster on an H100.

The code generator copies each function's source text into the module it writes
(dt/backends/triton/helpers.py reads this file; generating code imports neither it nor triton).
"""
import triton
from triton.language.extra import libdevice


@triton.jit
def _tanh(x):
    # CUDA's tanhf: 2 ulp at most, and cheaper than the exp formula the interpreter uses.
    return libdevice.tanh(x)
