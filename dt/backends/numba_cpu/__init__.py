"""The `numba` backend: the scheduled IR as a standalone Python module compiled by Numba for
the CPU, parallel over program instances.

Compilation is cached on disk. Numba cannot cache functions made with `exec`, so the module is
written to `<cache dir>/dt_<name>_<hash of the source>.py` and imported from there; its
functions are `@njit(cache=True)`, so numba keeps their machine code in `__pycache__` beside it
and a second process loads it instead of compiling. The cache directory is `$DT_CACHE_DIR/numba`,
else `$XDG_CACHE_HOME/dt/numba`, else `~/.cache/dt/numba`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from dt.backends.base import BackendUnavailable, Capabilities
from dt.ir.scheduled import Pipeline

try:
    import numba
except ImportError as e:  # an optional dependency: the registry reports it
    raise BackendUnavailable(f"numba is not installed ({e})", "pip install 'dt[numba]'") from None

from dt.backends.numba_cpu.codegen import entry_name, render  # noqa: E402
from dt.backends.numpy.runtime import BFLOAT16  # noqa: E402


def cache_dir() -> Path:
    root = os.environ.get("DT_CACHE_DIR")
    if root:
        return Path(root) / "numba"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dt" / "numba"


def module_path(source: str, name: str) -> Path:
    """Where `source` lives in the cache: named by a hash of the source and of numba's version."""
    digest = hashlib.sha256(f"{numba.__version__}\n{source}".encode()).hexdigest()[:20]
    stem = name if name.startswith("dt_") else f"dt_{name}"
    return cache_dir() / f"{stem}_{digest}.py"


def load_source(source: str, name: str):
    """Import `source` as a module from its file in the cache, writing the file first if needed."""
    path = module_path(source, name)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written once, atomically: numba's cache index records the file's modification time,
        # so a file rewritten by a concurrent process would invalidate the machine code.
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    module_name = path.stem
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # numba's cache resolves functions through their module
        spec.loader.exec_module(module)
    return module


class NumbaBackend:
    name = "numba"

    def __init__(self):
        dtypes = {"f32", "f16", "f64"} | ({"bf16"} if BFLOAT16 is not None else set())
        self.capabilities = Capabilities(
            dtypes=frozenset(dtypes), array="numpy", devices=("cpu",),
            notes={"threads": "one prange over each kernel's program instances; NUMBA_NUM_THREADS threads",
                   "f16/bf16": "loaded as uint16 bits, computed in f32, rounded to nearest even on store",
                   "exp/tanh/sigmoid": "f32: own vectorisable approximations, max error 1 / 1.5 / 2.5 ulp",
                   "cache": "machine code cached on disk, see dt.backends.numba_cpu.cache_dir()"})

    def source(self, pipeline: Pipeline) -> str:
        return render(pipeline)

    def module(self, pipeline: Pipeline):
        """The compiled module of `pipeline` (its functions compile on first call, or load from
        numba's cache)."""
        return load_source(self.source(pipeline), pipeline.name)

    def entry(self, pipeline: Pipeline):
        """The module's entry function: (inputs, scalars, extents, outputs=None) -> outputs by name."""
        return getattr(self.module(pipeline), entry_name(pipeline))

    def compile(self, pipeline: Pipeline):
        entry = self.entry(pipeline)
        order = [t.name for t in pipeline.inputs], list(pipeline.scalars), [f"{d}_SIZE" for d in pipeline.sizes]

        def run(tensors: dict, scalars: dict, sizes: dict) -> dict:
            return entry(*(tensors[n] for n in order[0]), *(scalars[n] for n in order[1]),
                         *(sizes[n] for n in order[2]))

        return run


def create() -> NumbaBackend:
    return NumbaBackend()
