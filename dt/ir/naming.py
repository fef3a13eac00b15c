"""The naming scheme of the scheduled IR: every name is an ASCII Python identifier that generated
code may use as it is (`identifier`). The launcher (the program's name), its kernels'
functions (`{func}_kernel`), the parameters for scalars and tensors (`{tensor}_global`) and the
extents (`{dim}_SIZE`) each get a distinct name (`function_names`, `global_names`), never one
generated code keeps for itself (RESERVED_NAMES); a name already given gets the first free suffix
(`fresh_name`)."""
from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass
from typing import Iterable

# Names that generated code may use for itself at module level: Python's keywords and builtins,
# the modules backends import, the dtype aliases and the interpreter's debugging hooks. No name of
# the IR takes them.
RESERVED_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | frozenset(
    ("np", "rt", "tl", "triton", "torch", "numba", "math", "libdevice", "f32", "f16", "bf16", "f64", "pid", "_dbg",
     "_on", "_post", "outputs"))


def size_name(dim: str) -> str:
    """The IR's name for the extent of `dim` (an IVar), and its key in the sizes a compiled
    pipeline is called with."""
    return f"{dim}_SIZE"


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or the first of `base_2`, `base_3`, ... not in `taken`; taken from then on."""
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def identifier(text: str) -> str:
    """`text` as an ASCII Python identifier: every character but an ASCII letter, digit or '_'
    becomes '_' (Python folds some other letters when it parses source, 'ﬁ' to 'fi', so names
    that differ here could be one name there), and one that cannot start a name gets the prefix
    `dt_`."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return name if name.isidentifier() else f"dt_{name}"


def pointer_name(tensor: str) -> str:
    """What generated code calls a tensor's memory (an array or a pointer), clashes aside."""
    return f"{tensor}_global"


def kernel_name(func: str) -> str:
    """What generated code calls the kernel computing `func`, clashes aside."""
    return f"{func}_kernel"


def function_names(program: str, funcs: Iterable[str], dims: Iterable[str]) -> tuple[str, dict[str, str]]:
    """The launcher's name (the program's) and the name of the kernel computing each of `funcs`:
    identifiers, distinct, none an extent's or reserved."""
    taken = set(RESERVED_NAMES) | {size_name(d) for d in dims}
    launcher = fresh_name(identifier(program), taken)
    return launcher, {f: fresh_name(kernel_name(f), taken) for f in funcs}


@dataclass(frozen=True)
class GlobalNames:
    """What generated code calls the parameters for a pipeline's scalars (`scalars`, by DT name)
    and for its tensors' memory (`tensors`, by DT name): a scalar's DT name, and `{tensor}_global`
    (`pointer_name`), each with the first free suffix `_2`, `_3`, ... where it is reserved or
    already given (to an extent, the launcher, a kernel, or a scalar or tensor before it)."""
    scalars: dict[str, str]
    tensors: dict[str, str]

    def all(self) -> set[str]:
        return set(self.scalars.values()) | set(self.tensors.values())


def global_names(launcher: str, kernels: Iterable[str], dims: Iterable[str], scalars: Iterable[str],
                 tensors: Iterable[str]) -> GlobalNames:
    taken = set(RESERVED_NAMES) | {size_name(d) for d in dims} | {launcher, *kernels}
    scalar_names = {s: fresh_name(s, taken) for s in scalars}
    return GlobalNames(scalar_names, {t: fresh_name(pointer_name(t), taken) for t in tensors})
