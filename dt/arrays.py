"""Arrays in and out of backends: NumPy arrays and torch tensors converted into each other
(bf16 and 8-bit floats through ml_dtypes' arrays over the same bits), and a caller's out=
arrays viewed as a backend's."""
from __future__ import annotations

import numpy as np

from dt.call_checks import is_torch
from dt.dtypes import FLOAT8, NUMPY, NUMPY_NAMES, TORCH_BY_NAME, TORCH_NAMES
from dt.errors import DTInputError


def backend_view(a, wants_torch: bool, backend):
    """A caller's out= array as the backend's array type over the same memory, or None where
    the backend computes elsewhere (a NumPy array for kernels on a GPU, a GPU tensor for a CPU
    backend)."""
    if wants_torch:
        devices = backend.capabilities.devices
        return a if is_torch(a) and a.device.type in devices else None
    return to_numpy(a) if not is_torch(a) or a.device.type == "cpu" else None


def copy_into(target, value):
    """A result copied into the caller's out= array (of the call's kind, checked)."""
    if is_torch(target):
        target.copy_(to_torch(value) if not is_torch(value) else value)
    else:
        np.copyto(target, to_numpy(value))


def to_numpy(a) -> np.ndarray:
    if not is_torch(a):
        return np.asarray(a)
    import torch
    t = a.detach().cpu()
    name = TORCH_NAMES.get(str(t.dtype))
    if name in ("bf16", *FLOAT8):  # NumPy has none of these: ml_dtypes has, over the same bits
        if name not in NUMPY:
            raise DTInputError(f"{t.dtype} tensors need the ml_dtypes package on the CPU backends", None,
                               "pip install ml_dtypes")
        return t.view(torch.int16 if name == "bf16" else torch.uint8).numpy().view(NUMPY[name])
    return t.numpy()


def to_torch(a):
    if is_torch(a):
        return a
    import torch
    a = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray makes 0-d arrays 1-d
    name = NUMPY_NAMES.get(a.dtype)
    if name in ("bf16", *FLOAT8):  # torch cannot take ml_dtypes' arrays: pass their bits
        bits = torch.from_numpy(a.view(np.int16 if name == "bf16" else np.uint8))
        return bits.view(getattr(torch, TORCH_BY_NAME[name].removeprefix("torch.")))
    return torch.from_numpy(a)
