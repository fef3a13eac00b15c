"""Which schedule to try next: a learned cost model guiding an evolutionary search (the approach
of TVM's Ansor and Halide's autoscheduler: measure a few, learn, breed from the best).

Each candidate is a point of the space's slots (a dimension's block, a reduction's tile, the
program order, warps, stages, launch hints; `Candidate.choices`). The first `SAMPLE` tried are
a seeded random sample of the whole space. After that, the fastest `PARENTS` measured breed:
their mutants (one slot changed) and crossings (each slot from one of two parents) that the
space holds and nobody tried yet are ranked by the cost model, and the cheapest predicted is
tried; one pick in `EXPLORE` is a random untried point instead, so that the search never
settles on one corner. The cost model is a ridge regression of log time on the slots' values
(one-hot), refitted on every measurement: cheap, and enough to rank the neighbours of a good
schedule. When breeding finds nothing new, the rest of the space follows in random order, so
a budget that allows it tries every candidate (exhaustive on small spaces).

A hand-rolled search rather than a library's (Optuna's TPE, say): the space is a finite list
of legal, pruned points whose legality a sampler over independent parameters cannot know, and
it is small enough that a model over its slots plus neighbourhoods of the best is the whole
method.
"""
from __future__ import annotations

import math
import random

import numpy as np

SAMPLE = 12  # random points measured before the model breeds
PARENTS = 4
EXPLORE = 5  # one pick in this many is random
RIDGE = 0.3  # the regression's regulariser


class Strategy:
    def __init__(self, candidates: list, seed: int = 0):
        self.rng = random.Random(seed)
        self.order = list(candidates)
        self.rng.shuffle(self.order)
        self.by_choices = {c.choices: c for c in self.order}
        self.values: dict[str, list[str]] = {}  # slot -> the values the space holds
        for c in self.order:
            for slot, value in c.choices:
                if value not in self.values.setdefault(slot, []):
                    self.values[slot].append(value)
        self.features = {(slot, v): i for i, (slot, v) in
                         enumerate((s, v) for s, vs in self.values.items() for v in vs)}
        self.picked: set[str] = set()
        self.measured: dict[str, tuple] = {}  # name -> (candidate, log ms)
        self.picks = 0

    def next(self):
        """The next candidate to try, or None when every one was picked."""
        self.picks += 1
        choice = None
        if len(self.measured) >= SAMPLE and self.picks % EXPLORE:
            choice = self._bred()
        if choice is None:
            choice = next((c for c in self.order if c.name not in self.picked), None)
        if choice is not None:
            self.picked.add(choice.name)
        return choice

    def tell(self, candidate, ms: float | None):
        """A measurement (None: the candidate failed; it is not bred from)."""
        if ms is not None and ms > 0:
            self.measured[candidate.name] = (candidate, math.log(ms))

    def predict(self, candidates: list) -> np.ndarray:
        """The model's log time for each candidate (fitted on what was measured)."""
        rows = list(self.measured.values())
        x = self._encode([c for c, _ in rows])
        y = np.array([t for _, t in rows])
        mean = y.mean()
        weights = np.linalg.solve(x.T @ x + RIDGE * np.eye(x.shape[1]), x.T @ (y - mean))
        return mean + self._encode(candidates) @ weights

    def _bred(self):
        parents = [c for c, _ in sorted(self.measured.values(), key=lambda m: m[1])[:PARENTS]]
        children = {}
        for parent in parents:
            for i, (slot, value) in enumerate(parent.choices):
                for other in self.values[slot]:
                    if other != value:
                        self._offer(children, parent.choices[:i] + ((slot, other),) + parent.choices[i + 1:])
        for _ in range(4 * len(parents)):
            a, b = self.rng.sample(parents, 2) if len(parents) > 1 else (parents[0], parents[0])
            if len(a.choices) == len(b.choices):
                self._offer(children, tuple(self.rng.choice(pair) for pair in zip(a.choices, b.choices)))
        if not children:
            return None
        pool = list(children.values())
        return pool[int(np.argmin(self.predict(pool)))]

    def _offer(self, children: dict, choices: tuple):
        c = self.by_choices.get(choices)
        if c is not None and c.name not in self.picked:
            children[c.name] = c

    def _encode(self, candidates: list) -> np.ndarray:
        x = np.zeros((len(candidates), len(self.features)))
        for row, c in enumerate(candidates):
            for pair in c.choices:
                x[row, self.features[pair]] = 1.0
        return x
