"""Test configuration shared by every test module.

Triton-generated code runs on the CPU through Triton's own interpreter when no GPU is
present; TRITON_INTERPRET must be set before anything imports triton, so it is set here.

Tests that run Triton kernels are marked `needs_triton` and skip, with the reason, where
torch or triton is not installed (a CPU-only install: `pip install -e '.[numba,test]'`);
test modules that need them throughout skip at import (`pytest.importorskip`).
"""
import os
import shutil
from importlib.util import find_spec

import pytest


def _has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidiactl")


if not _has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    # the tests marked slow first (the others keep their order): under `pytest -n 2` the long ones
    # then run beside the many short ones, not alone at the end with the other core idle
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    missing = [name for name in ("torch", "triton") if find_spec(name) is None]
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"runs Triton kernels: needs {' and '.join(missing)} "
                                   f"(pip install -e '.[triton]' with the torch build for your machine)")
    for item in items:
        if item.get_closest_marker("needs_triton"):
            item.add_marker(skip)
