"""The dtypes dt supports, by their dt names, with their sizes and their NumPy and torch
counterparts: the one table the runtime, the CLI, the backends, dt.testing and the conformance
suite read. Depends on NumPy (and ml_dtypes for bfloat16) only, so any layer may import it."""
from __future__ import annotations

import numpy as np

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
    FLOAT8_NUMPY = {"f8e4m3": np.dtype(ml_dtypes.float8_e4m3fn), "f8e5m2": np.dtype(ml_dtypes.float8_e5m2)}
except ImportError:  # bf16 and the 8-bit floats then are not available on the CPU backends
    BFLOAT16 = None
    FLOAT8_NUMPY = {}

NAMES = ("f32", "f16", "bf16", "f64")  # the float dtypes: what a program computes in
FLOAT8 = ("f8e4m3", "f8e5m2")  # 8-bit float storage (torch's float8_e4m3fn and float8_e5m2): computed in f32
INTEGERS = ("bool", "i8", "u8", "i16", "i32", "i64")  # integer data: indices, ids, targets, masks
ALL = NAMES + FLOAT8 + INTEGERS  # every dtype a program's inputs may have
ITEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "f8e4m3": 1, "f8e5m2": 1,
              "bool": 1, "i8": 1, "u8": 1, "i16": 2, "i32": 4, "i64": 8}

# The NumPy dtype of each dt dtype this installation has (bf16 needs ml_dtypes), and back.
NUMPY = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "f64": np.dtype(np.float64),
         "bool": np.dtype(np.bool_), "i8": np.dtype(np.int8), "u8": np.dtype(np.uint8), "i16": np.dtype(np.int16),
         "i32": np.dtype(np.int32), "i64": np.dtype(np.int64)}
if BFLOAT16 is not None:
    NUMPY["bf16"] = BFLOAT16
NUMPY.update(FLOAT8_NUMPY)
NUMPY_NAMES = {dtype: name for name, dtype in NUMPY.items()}

# torch dtypes by str(tensor.dtype), so that reading this table needs no torch import.
TORCH_NAMES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float64": "f64",
               "torch.bool": "bool", "torch.int8": "i8", "torch.uint8": "u8", "torch.int16": "i16",
               "torch.int32": "i32", "torch.int64": "i64", "torch.float8_e4m3fn": "f8e4m3",
               "torch.float8_e5m2": "f8e5m2"}
TORCH_BY_NAME = {name: torch_name for torch_name, name in TORCH_NAMES.items()}  # "bf16" -> "torch.bfloat16"


def is_integer(dtype: str) -> bool:
    """Whether `dtype` holds integers ('bool' among them: it indexes and sums as 0 and 1)."""
    return dtype in INTEGERS


def promote_integers(dtypes) -> str:
    """The common dtype of integer dtypes, as torch promotes them: the widest, and i16 for u8 with
    i8 (neither holds the other); bool with any other is that other."""
    kinds = set(dtypes) - {"bool"} or {"bool"}
    if kinds == {"u8", "i8"}:
        return "i16"
    return max(kinds, key=lambda d: (ITEM_BYTES[d], d != "u8"))
