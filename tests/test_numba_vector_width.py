"""512-bit vectors on AVX-512 CPUs (dt/backends/numba_cpu/vector_width.py): dt sets numba's CPU
features to the host's without LLVM's 256-bit preference where the CPU has AVX-512F, nobody chose
numba's target and numba has not set it up yet; each case runs in a fresh process."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

from numba.core.codegen import get_host_cpu_features  # noqa: E402  ('' where LLVM cannot read them)

AVX512 = "+avx512f" in get_host_cpu_features().split(",")

PROBE = """
import json, sys
{before}
import numba
from numba.core import registry
import dt.backends.numba_cpu
import dt, numpy as np
prog = dt.loads("In A; Var x; Func y;\\ny[x] = exp(A[x]) * 2.0;\\ny.block(x:4096); y.tensorize(x:4096); y.compile();")
a = np.linspace(-3, 3, 5000, dtype=np.float32)
out = prog(A=a, backend="numba")
machine = registry.cpu_target.target_context.codegen().magic_tuple()[2]

@numba.njit(fastmath=True)
def scale(x, y):
    for i in range(x.size):
        y[i] = x[i] * 3.0 + 1.0

scaled = np.empty_like(a)
scale(a, scaled)
assembly = "".join(scale.inspect_asm().values())
right = np.allclose(out, np.exp(a.astype(np.float64)) * 2, rtol=1e-6) and np.allclose(scaled, a * 3 + 1, atol=1e-6)
print(json.dumps(dict(features=numba.config.CPU_FEATURES, machine=machine, zmm=assembly.count("zmm"),
                      right=bool(right))))
"""


def probe(env: dict, before: str = "") -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU", "DT_NUMBA_VECTOR"))}
    result = subprocess.run([sys.executable, "-c", PROBE.format(before=before)], env={**environ, **env},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_avx512_host_compiles_for_512_bit_vectors_and_others_as_numba_would():
    got = probe({})
    assert got["right"]
    if AVX512:  # a plain loop of the user's in the same process is vectorised 512 bits wide too
        assert got["features"].endswith(",-prefer-256-bit") and got["machine"].endswith(",-prefer-256-bit")
        assert got["zmm"] > 0
    else:
        assert got["features"] is None and "-prefer-256-bit" not in got["machine"] and got["zmm"] == 0


@pytest.mark.parametrize("env, before", [({"DT_NUMBA_VECTOR_WIDTH": "256"}, ""),
                                         ({"NUMBA_CPU_FEATURES": "+sse2"}, ""),
                                         ({"NUMBA_ENABLE_AVX": "0"}, ""),
                                         ({}, "import numba\n@numba.njit\ndef first(x): return x")],
                         ids=["DT_NUMBA_VECTOR_WIDTH=256", "NUMBA_CPU_FEATURES set", "NUMBA_ENABLE_AVX=0",
                              "numba set up first"])
def test_dt_leaves_numba_s_target_alone_where_asked_or_too_late(env, before):
    got = probe(env, before)
    assert got["right"] and "-prefer-256-bit" not in got["machine"]
    assert got["features"] == env.get("NUMBA_CPU_FEATURES")
    if env.get("NUMBA_ENABLE_AVX") == "0":  # numba's AVX switch holds: no AVX-512 turned back on
        assert "+avx512f" not in got["machine"] and got["zmm"] == 0


def test_an_unknown_vector_width_is_an_input_error_naming_the_variable(monkeypatch):
    from dt.backends.numba_cpu.vector_width import wide_features
    from dt.errors import DTInputError
    monkeypatch.setenv("DT_NUMBA_VECTOR_WIDTH", "128")
    with pytest.raises(DTInputError, match="DT_NUMBA_VECTOR_WIDTH='128' is not a vector width dt knows") as info:
        wide_features()
    assert "256" in info.value.hint and "512" in info.value.hint
    monkeypatch.setenv("DT_NUMBA_VECTOR_WIDTH", "256")
    assert wide_features() is None
