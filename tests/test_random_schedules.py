"""Property: for random legal schedules and random sizes, every backend equals the reference."""
import pytest
from hypothesis import HealthCheck, given, settings

import dt
from dt import backends
from dt.testing import assert_close, random_inputs
from strategies import cases

# Examples per backend: the interpreter is quick; compiling backends pay per new program.
EXAMPLES = {"interp": 150, "numba": 25, "triton": 25}


@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow),
                                     pytest.param("triton", marks=[pytest.mark.needs_triton, pytest.mark.slow])])
def test_schedule_never_changes_the_meaning(backend):
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")

    @settings(max_examples=EXAMPLES[backend], deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(cases())
    def check(case):
        prog = dt.loads(case.source)
        args = random_inputs(prog, case.extents, case.dtype, seed=1)
        out = prog(backend=backend, **args)
        assert_close(out, prog.reference(**args), case.dtype)

    check()
