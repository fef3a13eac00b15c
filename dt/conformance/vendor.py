"""Vendor expectation files: the runs a backend skips or is known to fail, each with a reason.

    # expectations for the "acme" backend
    [[skip]]
    case = "erf"                 # glob over case names (required)
    dtypes = ["bf16"]            # optional: only these dtypes
    reason = "no bf16 erf in the ACME ISA; tracked as acme#12"   # required

    [[xfail]]
    case = "map.*"
    schedule = "x_groups_of_3"   # optional: glob over schedule names
    reason = "partial program-id groups are wrong on ACME (acme#31)"

    [[xfail]]
    case = "rank.1d"
    sizes_at_least = {x = 65537}  # optional: only runs with every named extent this large
    reason = "ACME tiles hold at most 2**16 elements"

A skipped run is not executed. An expected failure is executed: failing (or erroring) is then
not held against the backend, and passing is reported as "xpass", so stale entries surface.
Entries that match no run of the whole catalogue are reported too: they usually mean a typo.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

from dt.dtypes import NAMES as DTYPES

KINDS = ("skip", "xfail")
_KEYS = {"case", "schedule", "dtypes", "sizes_at_least", "reason"}


class VendorFileError(Exception):
    """A vendor file that cannot be used as written."""


@dataclass(frozen=True)
class Entry:
    kind: str  # 'skip' | 'xfail'
    case: str
    schedule: str | None
    dtypes: tuple[str, ...] | None
    reason: str
    where: str  # "FILE: xfail entry 2", for messages
    sizes_at_least: tuple[tuple[str, int], ...] = ()

    def matches(self, run) -> bool:
        return (fnmatchcase(run.case.name, self.case)
                and (self.schedule is None or fnmatchcase(run.schedule, self.schedule))
                and (self.dtypes is None or run.dtype in self.dtypes)
                and all(run.extents.get(d, -1) >= n for d, n in self.sizes_at_least))

    def __str__(self):
        parts = [f"case = {self.case!r}"]
        if self.schedule is not None:
            parts.append(f"schedule = {self.schedule!r}")
        if self.dtypes is not None:
            parts.append(f"dtypes = {list(self.dtypes)!r}")
        if self.sizes_at_least:
            parts.append("sizes_at_least = {" + ", ".join(f"{d} = {n}" for d, n in self.sizes_at_least) + "}")
        return f"{self.where} ({', '.join(parts)})"


@dataclass(frozen=True)
class Expectations:
    entries: tuple[Entry, ...] = ()

    def lookup(self, run) -> Entry | None:
        """The entry deciding this run: a skip wins over an xfail, then file order."""
        matching = [e for e in self.entries if e.matches(run)]
        return next((e for e in matching if e.kind == "skip"), matching[0] if matching else None)

    def unmatched(self, runs) -> list[Entry]:
        runs = list(runs)
        return [e for e in self.entries if not any(e.matches(r) for r in runs)]


def load(path: str | Path) -> Expectations:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise VendorFileError(f"{path}: cannot read it: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise VendorFileError(f"{path}: not valid TOML: {e}") from None
    unknown = sorted(set(data) - set(KINDS))
    if unknown:
        raise VendorFileError(f"{path}: unknown table(s) {', '.join(unknown)}; use [[skip]] and [[xfail]]")
    entries = []
    for kind in KINDS:
        items = data.get(kind, [])
        if not isinstance(items, list):
            raise VendorFileError(f"{path}: '{kind}' must be an array of tables, written [[{kind}]]")
        for i, item in enumerate(items, 1):
            entries.append(_entry(kind, item, f"{path}: {kind} entry {i}"))
    return Expectations(tuple(entries))


def _entry(kind: str, item: dict, where: str) -> Entry:
    unknown = sorted(set(item) - _KEYS)
    if unknown:
        raise VendorFileError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(_KEYS))}")
    reason = item.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise VendorFileError(f"{where}: every entry needs a reason = \"...\" saying why")
    case = item.get("case")
    if not isinstance(case, str) or not case:
        raise VendorFileError(f"{where}: needs case = \"<case name or glob>\"")
    schedule = item.get("schedule")
    if schedule is not None and not isinstance(schedule, str):
        raise VendorFileError(f"{where}: schedule must be a string")
    dtypes = item.get("dtypes")
    if dtypes is not None:
        if not isinstance(dtypes, list) or not dtypes or any(d not in DTYPES for d in dtypes):
            raise VendorFileError(f"{where}: dtypes must be a non-empty list of {', '.join(DTYPES)}")
        dtypes = tuple(dtypes)
    sizes = item.get("sizes_at_least", {})
    if not isinstance(sizes, dict) or not all(isinstance(d, str) and isinstance(n, int) and not isinstance(n, bool)
                                              for d, n in sizes.items()):
        raise VendorFileError(f"{where}: sizes_at_least must be a table of extents, e.g. {{x = 1048577}}")
    return Entry(kind, case, schedule, dtypes, reason.strip(), where, tuple(sorted(sizes.items())))
