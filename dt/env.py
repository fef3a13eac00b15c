"""dt's environment variables, read on every call and cheaply.

`os.environ.get` encodes the key and decodes the value each time (about 2 µs); a GPU kernel
call must not spend that several times over. `read` looks the pre-encoded key up in the dict
behind `os.environ`, which `os.environ`'s own setters keep current, so a variable set or
unset from Python still takes effect at the next call.
"""
from __future__ import annotations

import os

_data = getattr(os.environ, "_data", None)
_keys: dict[str, object] = {}


def read(name: str) -> str:
    """The variable's value with surrounding blanks stripped; '' when it is unset."""
    if _data is None:
        return os.environ.get(name, "").strip()
    key = _keys.get(name)
    if key is None:
        key = _keys[name] = os.environ.encodekey(name)
    value = _data.get(key)
    return os.environ.decodevalue(value).strip() if value is not None else ""
