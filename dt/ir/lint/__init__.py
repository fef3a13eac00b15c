"""Performance warnings: what the scheduled IR says about a schedule's speed, at the DT line
that makes it slow (docs/performance-warnings.md lists them).

Each rule is its own module with a `check(facts)` (a kernel's KernelFacts: the kernel, its
pipeline and the context) that yields
`dt.PerformanceWarning`s, and the machines it concerns ('gpu': tiles run by warps of 32 lanes,
matrix units, 32-byte memory sectors; 'cpu'). `RULES` is the table of them; a backend adds its
own (its `lint_rules`: dt.backends.triton.lint has those of Triton's code generation).
`lint(pipeline, context, extra_rules)` runs every rule for the context's machine.

Estimates need extents: with `Context.extents` empty, rules whose cost depends on them (whole
extent tiles, program counts, trip counts) say so symbolically or stay silent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint import matrix_units, memory, programs, recompute, registers, stages
from dt.ir.lint.facts import Context, KernelFacts


@dataclass(frozen=True)
class Rule:
    check: Callable[[KernelFacts], Iterable[PerformanceWarning]]
    machines: frozenset[str]
    codes: tuple[str, ...]  # the warnings it gives


def rule(module) -> Rule:
    """The rule of a module defining check, MACHINES and CODES."""
    return Rule(module.check, frozenset(module.MACHINES), module.CODES)


RULES: dict[str, Rule] = {m.__name__.rsplit(".", 1)[-1]: rule(m)
                          for m in (matrix_units, registers, recompute, memory, programs, stages)}


def lint(pipeline: S.Pipeline, context: Context, extra_rules: dict[str, Rule] | None = None
         ) -> list[PerformanceWarning]:
    """Every warning of every rule for the context's machine, once each, in source order."""
    found: dict[PerformanceWarning, None] = {}
    rules = {**RULES, **(extra_rules or {})}
    for kernel in pipeline.kernels:
        facts = KernelFacts(kernel, pipeline, context)  # once, for every rule
        for check in (r.check for r in rules.values() if context.machine in r.machines):
            for w in check(facts):
                if w.code not in context.allowed:
                    found.setdefault(w)
    return sorted(found, key=lambda w: (w.loc.file, w.loc.line, w.loc.col) if w.loc else ("", 0, 0))
