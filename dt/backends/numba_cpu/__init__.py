"""The `numba` backend: the scheduled IR as a standalone Python module compiled by Numba for
the CPU, parallel over program instances.

Compilation is cached on disk. Numba caches only functions defined in a file, so the module is
written to `<cache dir>/dt_<name>_<hash of the name and source>.py` (the name cut to 64 bytes);
its functions are `@njit(cache=True)`, so numba keeps their machine code in `__pycache__`
beside it and a second process loads it instead of compiling. What runs is the source
generated here, never the file's content: see `cache.py` for what is checked. The cache
directory is `$DT_CACHE_DIR/numba`, else `$XDG_CACHE_HOME/dt/numba`, else `~/.cache/dt/numba`.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from dt.backends.base import BackendUnavailable, Capabilities
from dt.ir.scheduled import Pipeline

try:
    import numba
except ImportError as e:  # an optional dependency: the registry reports it
    raise BackendUnavailable(f"numba is not installed ({e})", "pip install 'dt[numba]'") from None

from dt.backends.numba_cpu.vector_width import prefer_wide_vectors  # noqa: E402

prefer_wide_vectors()  # before anything here decorates a function: that sets up numba's CPU target

from dt.backends.numba_cpu import cache  # noqa: E402
from dt.backends.numba_cpu.cache import DTCacheWarning  # noqa: E402,F401  (re-exported)
from dt.backends.numba_cpu.expr import SUPPORTED_OPS  # noqa: E402
from dt.backends.numba_cpu.module import entry_name, render  # noqa: E402
from dt.dtypes import BFLOAT16, FLOAT8_NUMPY, INTEGERS  # noqa: E402


def cache_dir() -> Path:
    """Where modules and their machine code are cached, when that directory passes the checks."""
    return cache.default_dir()


# A file name holds at most 255 bytes: the program's name is cut to its first 64 (UTF-8) bytes
# in the file and module name, which the hash, covering the whole name, keeps apart.
NAME_BYTES = 64


def module_path(source: str, name: str) -> Path:
    """Where `source`, the module of the program `name`, lives in the cache: named by the
    name's first bytes and a hash of the name, the source and numba's version."""
    digest = hashlib.sha256(f"{numba.__version__}\n{name}\n{source}".encode()).hexdigest()[:20]
    stem = name if name.startswith("dt_") else f"dt_{name}"
    stem = stem.encode()[:NAME_BYTES].decode(errors="ignore")  # a prefix of an identifier is one
    return cache_dir() / f"{stem}_{digest}.py"


def load_source(source: str, name: str):
    """The module made of `source`, run once per process (thread-safe), its file in the cache."""
    path = module_path(source, name)
    return cache.load(source, path.parent, path.stem)


class NumbaBackend:
    name = "numba"

    def __init__(self):
        # bfloat16 and the 8-bit floats are NumPy dtypes only with ml_dtypes installed
        dtypes = {"f32", "f16", "f64", *INTEGERS} | ({"bf16"} if BFLOAT16 is not None else set()) | set(FLOAT8_NUMPY)
        self.capabilities = Capabilities(
            dtypes=frozenset(dtypes), ops=SUPPORTED_OPS, array="numpy", gathers=True, scatters=True, devices=("cpu",),
            given_outputs=True,
            notes={"threads": "a launch's program instances run in chunks on a pool of NUMBA_NUM_THREADS threads",
                   "f16/bf16": "loaded as uint16 bits, computed in f32, rounded to nearest even on store",
                   "f8e4m3/f8e5m2": "loaded as uint8 bits, computed in f32 (products too), rounded to nearest even "
                                    "on store, saturating as ml_dtypes does",
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

        single = pipeline.outputs[0].name if len(pipeline.outputs) == 1 else None

        def run(tensors: dict, scalars: dict, sizes: dict, outputs: dict | None = None) -> dict:
            out = outputs.get(single) if outputs and single else outputs  # the entry's out=: an array, or a dict
            return entry(*(tensors[n] for n in order[0]), *(scalars[n] for n in order[1]),
                         *(sizes[n] for n in order[2]), out=out)

        return run


def create() -> NumbaBackend:
    return NumbaBackend()
