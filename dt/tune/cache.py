"""The tuning cache: the fastest schedule `tune` found, kept per algorithm (not per schedule:
any schedule of the same algorithm finds it), shape bucket (each extent rounded up to a power
of two), dtype, backend, device and the versions of dt and its compilers. One JSON file an
entry in `$DT_TUNE_CACHE`, else `$DT_CACHE_DIR/tuned`, else `~/.cache/dt/tuned`: a directory a
team can copy or commit and point DT_TUNE_CACHE at. An entry is used only when its algorithm
is the program's and its schedule checks; a speed-up, not the record (tuned schedules are
committed as DT text)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from importlib import metadata
from pathlib import Path

from dt.errors import DTError
from dt.ir.check.schedule import PRIMITIVES
from dt.ir.lint.facts import next_power_of_2

# what the program's outputs are (compile, compile_to_kernel, save) belongs to the algorithm's key
HOW = [p for p in PRIMITIVES if not p.startswith("compile") and p != "save"]
SCHEDULE_STATEMENT = re.compile(rf"^\s*\w+\s*\.\s*({'|'.join(HOW)})\s*\(.*?\)\s*;", re.MULTILINE)


def directory() -> Path:
    if os.environ.get("DT_TUNE_CACHE"):
        return Path(os.environ["DT_TUNE_CACHE"])
    root = os.environ.get("DT_CACHE_DIR")
    if root:
        return Path(root) / "tuned"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dt" / "tuned"


def algorithm(source: str) -> str:
    """A program's algorithm: its text without comments, blank space and the schedule statements
    that say how, not what (all but `compile`, `compile_to_kernel` and `save`, which name its outputs)."""
    text = SCHEDULE_STATEMENT.sub("", re.sub(r"#[^\n]*", "", source))
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def bucket(extents: dict[str, int]) -> dict[str, int]:
    return {d: next_power_of_2(n) for d, n in sorted(extents.items())}


def versions() -> dict[str, str]:
    import dt
    found = {"dt": dt.__version__}
    for package in ("triton", "torch", "numba"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def key(source: str, extents: dict[str, int], dtype: str | dict[str, str], backend: str, device: str,
        made_with: dict[str, str] | None = None) -> str:
    """The entry's file name: a hash of the algorithm, the shape bucket, dtype, backend, device
    and the versions (this process's, or `made_with`). An entry's stored algorithm is hashed as
    it is (`_key`): `algorithm` of an algorithm is not always the same text."""
    return _key(algorithm(source), extents, dtype, backend, device, made_with or versions())


def _key(algorithm_text: str, extents: dict[str, int], dtype: str | dict[str, str], backend: str, device: str,
         made_with: dict[str, str]) -> str:
    fields = {"algorithm": algorithm_text, "bucket": bucket(extents), "dtype": dtype, "backend": backend,
              "device": device, "versions": made_with}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


def lookup(prog, extents: dict[str, int], dtype: str | dict[str, str], backend: str, device: str) -> dict | None:
    """The entry for this program's algorithm at this shape bucket, or None (none, or one
    that is not for this algorithm or does not check)."""
    return _valid(prog, directory() / f"{key(prog.ast.source, extents, dtype, backend, device)}.json", extents, dtype)


def nearest(prog, extents: dict[str, int], dtype: str | dict[str, str], backend: str, device: str) -> dict | None:
    """The entry at this shape bucket, else the one for the same algorithm, dtype, backend,
    device and versions whose bucket is nearest (the fewest doublings and halvings of the
    extents apart; ties to the larger shape), else None."""
    exact = lookup(prog, extents, dtype, backend, device)
    if exact is not None:
        return exact
    wanted, want = algorithm(prog.ast.source), bucket(extents)
    same = {"dtype": dtype, "backend": backend, "device": device, "versions": versions()}
    found = []
    for entry in entries():
        try:
            if entry["algorithm"] != wanted or any(entry[k] != v for k, v in same.items()):
                continue
            have = bucket(entry["extents"])
        except (KeyError, TypeError, AttributeError):
            continue
        if have.keys() == want.keys():
            distance = sum(abs(have[d].bit_length() - want[d].bit_length()) for d in want)
            found.append((distance, -sum(have.values()), entry["path"]))
    for _, _, path in sorted(found):
        entry = _valid(prog, Path(path), extents, dtype)
        if entry is not None:
            return entry
    return None


def _valid(prog, path: Path, extents: dict[str, int], dtype: str | dict[str, str]) -> dict | None:
    """The entry at `path`, where it is for this program's algorithm and its schedule checks at
    these extents (an entry tuned at another shape may tile past a limit here); else None."""
    from dt.runtime import loads
    try:
        entry = json.loads(path.read_text())
        if entry["algorithm"] != algorithm(prog.ast.source) or algorithm(entry["schedule"]) != entry["algorithm"]:
            return None
        loads(entry["schedule"], name=prog.name).check_extents(extents, dtype)
    except (OSError, ValueError, KeyError, TypeError, DTError):
        return None
    return {**entry, "path": str(path)}


def store(prog, extents: dict[str, int], dtype: str | dict[str, str], backend: str, device: str, schedule: str,
          name: str, ms: float) -> Path:
    """Keep the fastest schedule of a search."""
    entry = {"algorithm": algorithm(prog.ast.source), "schedule": schedule, "name": name, "ms": ms,
             "extents": extents, "dtype": dtype, "backend": backend, "device": device, "versions": versions()}
    return _write(key(prog.ast.source, extents, dtype, backend, device), entry)


def _write(name: str, entry: dict) -> Path:
    """The entry as DIR/name.json, written atomically: a reader sees the old file or the new one."""
    folder = directory()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as f:
        json.dump(entry, f, indent=1)
    os.replace(f.name, folder / f"{name}.json")
    return folder / f"{name}.json"


def entries() -> list[dict]:
    """Every entry of the cache directory (unreadable files skipped), each with its `path`."""
    found = []
    for path in sorted(directory().glob("*.json")):
        try:
            found.append({**json.loads(path.read_text()), "path": str(path)})
        except (OSError, ValueError):
            continue
    return found


FIELDS = ("algorithm", "schedule", "name", "ms", "extents", "dtype", "backend", "device", "versions")


def export(file) -> int:
    """Write every entry into one JSON file (a list): what a team commits and shares. Returns
    how many."""
    found = [{k: e[k] for k in FIELDS} for e in entries() if all(k in e for k in FIELDS)]
    Path(file).write_text(json.dumps(found, indent=1) + "\n")
    return len(found)


def merge(file) -> int:
    """Add the entries of an exported file to the cache directory, each under the key its own
    fields give (an entry for another device or versions is kept, and found only there); an
    entry already there is replaced. Returns how many."""
    try:
        found = json.loads(Path(file).read_text())
        if not isinstance(found, list) or not all(isinstance(e, dict) and all(k in e for k in FIELDS) for e in found):
            raise ValueError("not a list of dt tune's entries")
    except (OSError, ValueError) as e:
        raise DTError(f"cannot read the tuning entries in {str(file)!r}: {e}", None,
                      "give a file written by `dt cache export`") from None
    for e in found:
        _write(_key(e["algorithm"], e["extents"], e["dtype"], e["backend"], e["device"], e["versions"]),
               {k: e[k] for k in FIELDS})
    return len(found)
