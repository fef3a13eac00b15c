"""The suite on a CPU-only install (`pip install -e '.[numba,test]'`: no torch, no triton):
every test module still loads, and the tests that need torch or triton skip with the reason."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# pytest in a process where `import torch` and `import triton` fail as if neither were installed.
WITHOUT_TORCH_OR_TRITON = textwrap.dedent("""\
    import sys
    import pytest
    sys.modules["torch"] = sys.modules["triton"] = None
    sys.exit(pytest.main(sys.argv[1:]))
""")


@pytest.mark.slow  # loads every test module
def test_without_torch_or_triton_the_suite_loads_and_their_tests_skip():
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH_OR_TRITON, "-q", "-p", "no:cacheprovider", "-m",
                           "needs_triton", "-rs", "tests", "benchmarks/tests"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert " skipped" in summary and "passed" not in summary and "error" not in summary, summary
    assert "SKIPPED [1] tests/test_triton_backend.py" in done.stdout  # whole modules skip at import
    assert "runs Triton kernels: needs torch and triton" in done.stdout  # marked tests, with the reason
