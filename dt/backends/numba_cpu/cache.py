"""The Numba backend's disk cache: generated modules, and Numba's machine code beside them.

What runs is always the source dt generated, from memory: the module file exists only because
Numba caches only functions defined in a file (it keys its cache by the file's path and
content). A file that differs from the source (missing, truncated, planted) is rewritten
atomically first, and the source is compiled and executed under the file's name, never
imported, so no `.pyc` is read either.

Numba's index and data files (`__pycache__/*.nbi`, `*.nbc`) are pickles and machine code that
cannot be checked against anything, so trust rests on the directory: the cache directory and
its `__pycache__` are created private (0o700) and, before use, must be real directories (not
symbolic links) owned by the current user (or root) that no other user can write. Every
directory on the way to them (symbolic links followed, as the system follows them) must be
owned by the user or root and writable by no other user (group included) unless sticky (like
/tmp), and every symbolic link on the way owned by the user or root, else another user could
put a directory of their own in the cache's place after the check: the rule of OpenSSH's
StrictModes. Missing directories are created private. A directory failing a check is refused
with a DTCacheWarning, and the program compiles in a private temporary directory instead
(itself under directories that pass, else a DTBackendError). A corrupted index or data file is
compiled again and rewritten.

A module is loaded once per process under a lock of its own and becomes visible (to other
threads, and in sys.modules, where Numba's cache looks it up) only once it has run.
"""
from __future__ import annotations

import atexit
import errno
import hashlib
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

from dt.errors import DTBackendError


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
_FRESH = "remove it (dt creates it again, private) or set DT_CACHE_DIR to a directory of your own"
_ELSEWHERE = "set DT_CACHE_DIR to a directory of your own under your home directory"
_WRITABLE = "set DT_CACHE_DIR to a directory you can write"
_MAX_SYMLINKS = 40  # Linux's limit on one path


def _foreign(uid: int) -> str | None:
    """Why a file owned by `uid` may have been put there by another user; None when it is the
    current user's or root's."""
    me = os.geteuid()
    return None if uid in (me, 0) else f"owned by user {uid}, not by you (user {me}) or root"


def _writable_by_others(st: os.stat_result, sticky_allowed: bool) -> bool:
    """Whether other users can rename or remove entries of the directory of status `st` (in a
    sticky one, like /tmp, they can add entries but not rename or remove those of others).
    Group write counts as others' even for a group of one's own: see docs/security.md."""
    return bool(st.st_mode & 0o022) and not (sticky_allowed and st.st_mode & stat.S_ISVTX)


def _mode(st: os.stat_result) -> str:
    return f"mode {stat.S_IMODE(st.st_mode):o}"


def _parent_problem(directory: str, st: os.stat_result) -> tuple[str, str] | None:
    """Why another user could rename the entries of `directory`, a directory above the cache,
    of status `st`, and how to fix it; None when only the current user and root can."""
    owner = _foreign(st.st_uid)
    if owner is None and not _writable_by_others(st, sticky_allowed=True):
        return None
    swap = "so another user could put a directory of their own in its place"
    if owner is not None:
        return f"the directory {directory} above it is {owner}, {swap}", _ELSEWHERE
    return (f"other users can write to the directory {directory} above it ({_mode(st)}, not sticky), {swap}",
            f"'chmod go-w {directory}' if only you can have written to it, else {_ELSEWHERE}")


def _untrusted_way(path: Path) -> tuple[str, str] | None:
    """Why another user could replace the directory `path` by renaming a directory on the way
    to it, and how to fix it; None when no one but the current user and root can. Walks from /
    to the parent of `path` as the system does (symbolic links followed, `..` taken after
    them), creating missing directories private, and checks each directory passed through
    and each symbolic link."""
    if os.name != "posix":  # owners and mode bits are POSIX's: only create what is missing
        try:
            os.makedirs(path.parent, exist_ok=True)
        except OSError as e:
            return f"{path.parent} cannot be created ({e.strerror})", _WRITABLE
        return None
    pending = list(reversed(Path(os.getcwd(), path).parent.parts[1:]))
    current, links = "/", 0
    problem = _parent_problem(current, os.stat(current))
    while problem is None and pending:
        name = pending.pop()
        if name == "..":  # `current` holds no link, and every directory above it was checked
            current = os.path.dirname(current)
            continue
        entry = os.path.join(current, name)
        try:
            try:
                st = os.lstat(entry)
            except FileNotFoundError:  # made in a directory that passed: no one else can replace it
                try:
                    os.mkdir(entry, 0o700)
                except FileExistsError:  # by another process just now
                    pass
                st = os.lstat(entry)
            target = os.readlink(entry) if stat.S_ISLNK(st.st_mode) else None
        except OSError as e:
            return f"{entry} on its path cannot be reached or created ({e.strerror})", _WRITABLE
        if target is None:
            if not stat.S_ISDIR(st.st_mode):
                return f"{entry} on its path is not a directory", _ELSEWHERE
            current = entry
            problem = _parent_problem(current, st)
            continue
        owner = _foreign(st.st_uid)
        if owner is not None:  # whoever owns a link in a sticky directory can replace it
            return f"the symbolic link {entry} on its path is {owner}", _ELSEWHERE
        links += 1
        if links > _MAX_SYMLINKS:
            return f"the symbolic links on its path form a loop (at {entry})", _ELSEWHERE
        if os.path.isabs(target):
            current = "/"  # checked first
        pending.extend(reversed([part for part in Path(target).parts if part != "/"]))
    return problem


def _untrusted(path: Path) -> tuple[str, str] | None:
    """Why code in `path` (a directory, created private if missing, whose parent passed
    `_untrusted_way`) cannot be trusted, and how to fix it; None when it can."""
    try:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
    except OSError as e:
        return f"it cannot be created ({e.strerror})", _WRITABLE
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link", f"{_FRESH}, not a link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory", _FRESH
    if os.name != "posix":  # owners and mode bits are POSIX's; elsewhere the profile directory is per user
        return None
    owner = _foreign(st.st_uid)
    if owner is not None:
        return f"it is {owner}", _FRESH
    if _writable_by_others(st, sticky_allowed=False):
        return (f"other users can write to it ({_mode(st)})",
                f"'chmod go-w {path}' if only you can have written to it, else {_FRESH}")
    return None


_DT_PACKAGE = str(Path(__file__).parents[2]) + os.sep  # as code objects name their files


def _warn(message: str):
    """Warn with a DTCacheWarning that points at the first caller outside dt (the user's call)."""
    frame, level = sys._getframe(), 1
    while frame is not None and frame.f_code.co_filename.startswith(_DT_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DTCacheWarning, stacklevel=level)


def _refuse(path: Path, reason: str, fix: str):
    _warn(f"the Numba cache directory {path} is not used: {reason}. The program is compiled in a private "
          f"temporary directory instead, so the next process compiles it again. To fix: {fix}.")


_temporary: list[Path] = []  # this process's private fallback directory, made on first need
_temporary_lock = threading.Lock()


def _temporary_dir() -> Path:
    with _temporary_lock:
        if not _temporary:
            parent = Path(tempfile.gettempdir())
            problem = _untrusted_way(parent / "dt-numba")
            if problem is not None:
                raise DTBackendError(f"the Numba backend cannot compile in a temporary directory under {parent}: "
                                     f"{problem[0]}", hint="set TMPDIR to a directory only you can write")
            try:
                path = Path(tempfile.mkdtemp(prefix="dt-numba-"))  # mode 0o700
                (path / "__pycache__").mkdir(mode=0o700)
            except OSError as e:
                raise DTBackendError(f"the Numba backend cannot create a temporary directory in {parent} "
                                     f"({e.strerror})", hint="set TMPDIR to a directory you can write") from None
            atexit.register(shutil.rmtree, path, True)
            _temporary.append(path)
        return _temporary[0]


def _trusted_dir(directory: Path) -> Path:
    """`directory` if the way to it, it and its __pycache__ pass the checks, else the temporary
    directory."""
    problem = _untrusted_way(directory)
    if problem is not None:
        _refuse(directory, *problem)
        return _temporary_dir()
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
            raise DTBackendError(f"the Numba backend cannot write the program's module {path} ({e.strerror})",
                                 hint=_write_fix(e, "TMPDIR", directory.parent)) from None
        fix = "make it writable, or give it the modules of the programs you run (see docs/security.md)" \
            if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else _write_fix(e, "DT_CACHE_DIR", directory)
        _refuse(directory, f"{path.name} cannot be written there ({e.strerror})", fix)
        return _module_file(source, _temporary_dir(), filename)
    return path


def _write_fix(e: OSError, variable: str, directory: Path) -> str:
    """What to do when a file cannot be written in `directory`, which the environment variable
    `variable` chooses."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free some space in {directory} (or raise your quota there), or set {variable} to a directory " \
               f"on another file system"
    if e.errno == errno.ENAMETOOLONG:
        return f"set {variable} to a directory with a shorter path"
    return f"set {variable} to another directory you can write"


# ---------------------------------------------------------------- Numba's machine code
_FILENAME_BASE_BYTES = 150  # Numba adds `.<n>.nbc.tmp.<16 hex>` at most: well within 255 bytes


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

    def get_filename_base(self, fullname, abiflags):
        """Numba's name for a function's files, `<module>.<function>-<line>.py<version>`, cut
        where a long function (Func) name would pass 255 bytes with the suffixes Numba adds
        (`.nbi`, `.<n>.nbc`, `.tmp.<16 hex>`); a hash of the whole keeps cut names apart."""
        base = super().get_filename_base(fullname, abiflags)
        if len(base.encode()) <= _FILENAME_BASE_BYTES:
            return base
        digest = hashlib.sha256(base.encode()).hexdigest()[:20]
        return f"{base.encode()[:_FILENAME_BASE_BYTES - 21].decode(errors='ignore')}-{digest}"


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
