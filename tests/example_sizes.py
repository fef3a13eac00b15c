"""Small extents for every example in examples/: sizes that the schedules' blocks and tiles
divide, and sizes that divide nothing."""
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"

SIZES = {
    "add": [dict(x=4, y=512), dict(x=1, y=1), dict(x=7, y=257)],
    "relu": [dict(x=4, y=256), dict(x=33, y=7)],
    "swish": [dict(x=2, y=2048), dict(x=3, y=1025)],
    "dyt": [dict(x=2, y=4096), dict(x=5, y=2049)],
    "softmax": [dict(x=8, y=1024), dict(x=1, y=1), dict(x=7, y=1031)],
    "softmax_safe": [dict(x=8, y=1024), dict(x=1, y=1), dict(x=7, y=1031)],
    "layernorm": [dict(x=4, y=2048), dict(x=3, y=1027)],
    "matmul": [dict(x=256, y=128, k=64), dict(x=1, y=1, k=1), dict(x=33, y=257, k=7)],
    "mmsigmoid": [dict(x=128, y=256, k=32), dict(x=7, y=130, k=33)],
    "2mm_outer": [dict(m=32, n=128, k=32, l=32), dict(m=17, n=65, k=7, l=33)],
    "2mm_inner": [dict(m=64, n=64, k=64, l=64), dict(m=33, n=1, k=31, l=65)],
    "attention": [dict(m=64, l=128, k=16, n=32), dict(m=17, l=33, k=7, n=65)],
    "attention_talk": [dict(m=32, l=64, k=16, n=64), dict(m=17, l=33, k=7, n=65)],
    "attention_onepass": [dict(m=64, l=128, k=16, n=32), dict(m=17, l=33, k=7, n=65)],
    "attention_safe": [dict(m=64, l=128, k=16, n=32), dict(m=17, l=33, k=7, n=65)],
    "attention_safe_onepass": [dict(m=64, l=128, k=16, n=32), dict(m=17, l=33, k=7, n=65)],
}


def example_path(name: str) -> Path:
    return EXAMPLES_DIR / f"{name}.dt"


def cases():
    """(example name, extents) for every example and size."""
    return [(name, sizes) for name in sorted(SIZES) for sizes in SIZES[name]]
