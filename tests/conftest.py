"""Test configuration shared by every test module.

Triton-generated code runs on the CPU through Triton's own interpreter when no GPU is
present; TRITON_INTERPRET must be set before anything imports triton, so it is set here.
"""
import os
import shutil


def _has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidiactl")


if not _has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")
