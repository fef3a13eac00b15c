"""Generating Triton source needs neither torch nor triton: in a Python where importing either
fails, the code generator's modules import, `backends.get("triton").source(...)` gives the same
module as here, and running refuses with the error naming the missing package and its install."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import dt
from dt import backends

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [str(ROOT / "examples" / f"{name}.dt") for name in ("matmul", "attention")]

BLOCKED = textwrap.dedent('''
    import json, sys

    class Blocked:
        """Makes `import torch` and `import triton` (and their submodules) fail."""
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "triton"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocked())
    import numpy as np
    import dt
    from dt import backends
    from dt.errors import DTBackendError
    import dt.backends.triton.codegen, dt.backends.triton.kernel, dt.backends.triton.launcher
    import dt.backends.triton.expressions, dt.backends.triton.integers
    import dt.backends.triton.tma, dt.backends.triton.limits, dt.backends.triton.helpers

    sources = {}
    for file in sys.argv[1:]:
        pipeline = dt.load(file).pipeline("f16")
        sources[file] = [backends.get("triton").source(pipeline),
                         backends.get("triton").source(pipeline, interpret=True)]
    matmul = dt.load(sys.argv[1])
    try:
        matmul(A=np.ones((2, 3), np.float32), B=np.ones((3, 2), np.float32), backend="triton")
        refused = None
    except DTBackendError as e:
        refused = [e.message, e.hint]
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "triton"))
    print(json.dumps({"sources": sources, "refused": refused, "loaded": loaded}))
''')


def test_source_is_generated_without_torch_or_triton():
    done = subprocess.run([sys.executable, "-c", BLOCKED, *EXAMPLES], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["loaded"] == []
    for file in EXAMPLES:
        pipeline = dt.load(file).pipeline("f16")
        here = [backends.get("triton").source(pipeline), backends.get("triton").source(pipeline, interpret=True)]
        assert result["sources"][file] == here
        assert "@triton.jit" in here[0]
    message, hint = result["refused"]
    assert "backend 'triton' is not available: the triton backend needs the 'torch' package" in message
    assert hint == "pip install 'dt[triton]' (installs triton and torch)"
