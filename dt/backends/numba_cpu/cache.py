"""The Numba backend's disk cache: generated modules, and Numba's machine code beside them.

What runs is always the source dt generated, from memory: the module file exists only because
Numba caches only functions defined in a file (it keys its cache by the file's path and
content). A file that differs from the source (missing, truncated, planted) is rewritten
atomically first, and the source is compiled and executed under the file's name, never
imported, so no `.pyc` is read either.

Numba's index and data files (`__pycache__/*.nbi`, `*.nbc`) are pickles and machine code that
cannot be checked against anything, so trust rests on the directory: the cache directory and
its `__pycache__` are created private (0o700) and, before use, must be real directories (not
symbolic links) owned by the current user (or root) that no other user can write. One failing
that is refused with a DTCacheWarning, and the program compiles in a private temporary
directory instead. A corrupted index or data file is compiled again and rewritten.

A module is loaded once per process under a lock of its own and becomes visible (to other
threads, and in sys.modules, where Numba's cache looks it up) only once it has run.
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from types import ModuleType

from numba.core.caching import CompileResultCacheImpl, FunctionCache, InTreeCacheLocator
from numba.core.dispatcher import Dispatcher


class DTCacheWarning(UserWarning):
    """dt did not use the configured cache directory: the program was compiled elsewhere."""


def default_dir() -> Path:
    """$DT_CACHE_DIR/numba, else $XDG_CACHE_HOME/dt/numba, else ~/.cache/dt/numba."""
    root = os.environ.get("DT_CACHE_DIR")
    if root:
        return Path(root) / "numba"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dt" / "numba"


# ---------------------------------------------------------------- the directory
def _untrusted(path: Path) -> tuple[str, str] | None:
    """Why code in `path` (a directory, created private if missing) cannot be trusted, and
    how to fix it; None when it can."""
    try:
        if not os.path.lexists(path):
            os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        return f"it cannot be created ({e.strerror})", "set DT_CACHE_DIR to a directory you can write"
    fresh = "remove it (dt creates it again, private) or set DT_CACHE_DIR to a directory of your own"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link", f"{fresh}, not a link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory", fresh
    if os.name != "posix":  # owners and mode bits are POSIX's; elsewhere the profile directory is per user
        return None
    if st.st_uid not in (os.geteuid(), 0):
        return f"it is owned by user {st.st_uid}, not by you (user {os.geteuid()}) or root", fresh
    if st.st_mode & 0o022:
        return (f"other users can write to it (mode {stat.S_IMODE(st.st_mode):o})",
                f"'chmod go-w {path}' if only you can have written to it, else {fresh}")
    return None


def _refuse(path: Path, reason: str, fix: str):
    warnings.warn(f"dt: the Numba cache directory {path} is not used: {reason}. The program is compiled in a "
                  f"private temporary directory instead, so the next process compiles it again. To fix: {fix}.",
                  DTCacheWarning, stacklevel=2)


_temporary: list[Path] = []  # this process's private fallback directory, made on first need
_temporary_lock = threading.Lock()


def _temporary_dir() -> Path:
    with _temporary_lock:
        if not _temporary:
            path = Path(tempfile.mkdtemp(prefix="dt-numba-"))  # mode 0o700
            (path / "__pycache__").mkdir(mode=0o700)
            atexit.register(shutil.rmtree, path, True)
            _temporary.append(path)
        return _temporary[0]


def _trusted_dir(directory: Path) -> Path:
    """`directory` if it and its __pycache__ pass the checks, else the temporary directory."""
    for path in (directory, directory / "__pycache__"):
        problem = _untrusted(path)
        if problem is not None:
            _refuse(path, *problem)
            return _temporary_dir()
    return directory


# ---------------------------------------------------------------- module files
def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # missing, or not a readable file
        return None


def _write_atomically(path: Path, data: bytes):
    """Write `path` whole or not at all: a reader sees the old file or the new one. A file that
    a concurrent process has just written with the same content is kept, not replaced: Numba
    releases before 2026 key their cache by the file's modification time."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)  # only where there is no file yet
        except FileExistsError:
            if _read(path) != data:
                os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _module_file(source: bytes, directory: Path, filename: str) -> Path:
    """The path of a file holding exactly `source` in `directory` (the temporary directory when
    it cannot be written)."""
    path = directory / filename
    if _read(path) == source:
        return path
    try:
        _write_atomically(path, source)
    except OSError as e:
        if directory in _temporary:
            raise
        _refuse(directory, f"{path.name} cannot be written there ({e.strerror})",
                "make it writable, or give it the modules of the programs you run (see docs/security.md)")
        return _module_file(source, _temporary_dir(), filename)
    return path


# ---------------------------------------------------------------- Numba's machine code
class _PycacheLocator(InTreeCacheLocator):
    """Numba's files go to the `__pycache__` beside the module, which dt checked (whatever
    NUMBA_CACHE_DIR says). No write probe: a read-only cache still loads."""

    def ensure_cache_path(self):
        os.makedirs(self.get_cache_path(), mode=0o700, exist_ok=True)

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file)


class _PycacheImpl(CompileResultCacheImpl):
    _locator_classes = [_PycacheLocator]


class _CheckedFunctionCache(FunctionCache):
    """Numba's function cache, where a file that fails to load is a miss, not an error."""

    _impl_class = _PycacheImpl

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception:  # a truncated or corrupted index or data file (unpickling can raise anything)
            try:  # so that saving the compiled code writes a fresh index
                os.unlink(self._cache_file._index_path)
            except OSError:
                pass
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception:  # a read-only cache, a full disk, an index that cannot be read or removed:
            pass  # the code stays in memory, the next process compiles again


def _use_checked_caches(module: ModuleType):
    for value in vars(module).values():
        if isinstance(value, Dispatcher) and isinstance(value._cache, FunctionCache) \
                and value.py_func.__module__ == module.__name__:
            value._cache = _CheckedFunctionCache(value.py_func)


# ---------------------------------------------------------------- loading
_loaded: dict[str, ModuleType] = {}
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def load(source: str, directory: Path, module_name: str) -> ModuleType:
    """The module `module_name` made of `source`, its file in `directory`: run once per process."""
    module = _loaded.get(module_name)
    if module is not None:
        return module
    with _locks_lock:
        lock = _locks.setdefault(module_name, threading.Lock())
    with lock:
        module = _loaded.get(module_name)
        if module is None:
            path = _module_file(source.encode(), _trusted_dir(directory), f"{module_name}.py")
            module = ModuleType(module_name)
            module.__file__ = str(path)
            exec(compile(source, str(path), "exec"), vars(module))
            _use_checked_caches(module)
            sys.modules[module_name] = module  # Numba's cache imports the module by name
            _loaded[module_name] = module
    return module
