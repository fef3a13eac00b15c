"""The float32 dot precision, read from DT_TRITON_F32_DOT ("ieee", the default, "tf32" or
"tf32x3") each time a pipeline is compiled, its source generated or its warnings given."""
from __future__ import annotations

import os

F32_DOT_ENV = "DT_TRITON_F32_DOT"


def f32_dot_precision() -> str:
    return os.environ.get(F32_DOT_ENV, "ieee").strip().lower() or "ieee"
