"""The helper functions a generated module carries, as source text read from the real Python
functions of device_helpers.py, libdevice_helpers.py and host_helpers.py. Those files are read,
never imported: they import triton and torch, which generating a module does not need."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


@cache
def functions(file: str) -> dict[str, str]:
    """Each top-level function of `file` (in this package) by name: its source text, decorators
    and comments included, in the file's order."""
    text = (Path(__file__).parent / file).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            found[node.name] = "".join(lines[first - 1:node.end_lineno])
    return found


def device(interpret: bool) -> dict[str, str]:
    """The kernels' helpers: those for Triton's interpreter (`interpret`), else those compiled
    for a GPU, where libdevice replaces some."""
    portable = functions("device_helpers.py")
    return portable if interpret else {**portable, **functions("libdevice_helpers.py")}


def needing_libdevice() -> frozenset[str]:
    """The device helpers that call libdevice when compiled for a GPU."""
    return frozenset(functions("libdevice_helpers.py"))


def host() -> dict[str, str]:
    """The launcher's helpers."""
    return functions("host_helpers.py")
