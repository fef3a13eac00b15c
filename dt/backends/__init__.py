"""Backend registry. In-tree backends register here; out-of-tree backends arrive through the
entry-point group `dt.backends` (each entry point names a zero-argument factory returning a
`dt.backends.base.Backend`). A backend that fails to load is recorded with its error, never
silently skipped."""
from __future__ import annotations

import importlib
import threading
from importlib.metadata import entry_points

from dt.backends.base import Backend, BackendUnavailable
from dt.errors import DTBackendError

# name -> "module:factory"; imported only when first used, so optional dependencies stay optional.
_BUILTIN = {
    "interp": "dt.backends.numpy:create",
    "numba": "dt.backends.numba_cpu:create",
    "triton": "dt.backends.triton:create",
}
_loaded: dict[str, Backend] = {}
_failed: dict[str, str] = {}
_entry_points_read = False
# Held while a backend is built, so that threads first asking for one at once share one instance.
# Reentrant: a factory may ask for another backend.
_loading = threading.RLock()


def register(name: str, target: "str | Backend"):
    """Register a backend by factory path ("module:function") or instance."""
    with _loading:
        if isinstance(target, str):
            _BUILTIN[name] = target
        else:
            _loaded[name] = target
        _failed.pop(name, None)


def _read_entry_points():
    global _entry_points_read
    if _entry_points_read:
        return
    for ep in entry_points(group="dt.backends"):
        _BUILTIN.setdefault(ep.name, ep.value)
    _entry_points_read = True  # only now: a thread that sees it set must find every entry point


def names() -> list[str]:
    """Every backend known: built in, registered, or advertised by an entry point."""
    _read_entry_points()
    return sorted(set(_BUILTIN) | set(_loaded))


def get(name: str) -> Backend:
    backend = _loaded.get(name)
    if backend is not None:
        return backend
    with _loading:
        return _load(name)


def _load(name: str) -> Backend:
    _read_entry_points()
    if name in _loaded:  # built by the thread that held the lock before this one
        return _loaded[name]
    if name not in _BUILTIN:
        raise DTBackendError(f"unknown backend '{name}'", None, f"the backends are: {', '.join(names())}")
    if name in _failed:  # tried once in this process: report it again without re-importing
        raise DTBackendError(f"backend '{name}' is not available: {_failed[name]}", None,
                             f"check the package that provides it ({_BUILTIN[name]})")
    module, _, factory = _BUILTIN[name].partition(":")
    try:
        backend = getattr(importlib.import_module(module), factory or "create")()
    except BackendUnavailable as e:
        _failed[name] = str(e)
        raise DTBackendError(f"backend '{name}' is not available: {e}", None, e.hint) from None
    except Exception as e:  # a broken plugin: report it, with its own error
        _failed[name] = f"{type(e).__name__}: {e}"
        raise DTBackendError(f"backend '{name}' failed to load: {type(e).__name__}: {e}", None,
                             f"check the package that provides it ({_BUILTIN[name]})") from e
    _loaded[name] = backend
    return backend


def failures() -> dict[str, str]:
    """Backends that failed to load, with the reason."""
    return dict(_failed)


def available(name: str) -> bool:
    try:
        get(name)
        return True
    except DTBackendError:
        return False
