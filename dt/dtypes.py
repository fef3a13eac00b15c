"""The dtypes dt supports, by their dt names, with their sizes and their NumPy and torch
counterparts: the one table the runtime, the CLI, the backends, dt.testing and the conformance
suite read. Depends on NumPy (and ml_dtypes for bfloat16) only, so any layer may import it."""
from __future__ import annotations

import numpy as np

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bf16 then is not available on the CPU backends
    BFLOAT16 = None

NAMES = ("f32", "f16", "bf16", "f64")  # every dtype a program's inputs may have
ITEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}

# The NumPy dtype of each dt dtype this installation has (bf16 needs ml_dtypes), and back.
NUMPY = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "f64": np.dtype(np.float64)}
if BFLOAT16 is not None:
    NUMPY["bf16"] = BFLOAT16
NUMPY_NAMES = {dtype: name for name, dtype in NUMPY.items()}

# torch dtypes by str(tensor.dtype), so that reading this table needs no torch import.
TORCH_NAMES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float64": "f64"}
