"""Measuring candidates on a Ray cluster (`dt tune --ray [ADDRESS]`, `prog.tune(..., ray=...)`).

One measuring actor per GPU of the cluster for a GPU backend, each holding the search's inputs
and the reference's outputs, compiling, checking and timing the candidates it is given (one at
a time: a restart would fail a call queued behind the culprit). A CPU backend gets one actor
per node holding all its CPUs (two timings on one machine would disturb each other, and the
backend's kernels use every core). An actor whose
GPU context a candidate broke, or that ran past evaluate.TIMEOUT, is restarted by Ray and the
candidate fails. The finalists and baselines are timed again on the first actor only, side by
side on one device. Every node needs the same dt, backend and Python versions; the tuning cache
is the driver's, keyed by one device's name (as a search on one GPU of that kind).
"""
from __future__ import annotations

import os
import time

from dt.errors import DTError
from dt.tune import evaluate


def _ray():
    try:
        import ray
    except ImportError:
        raise DTError("dt tune --ray needs Ray", None, "pip install 'dt[ray]' (or pip install ray)") from None
    return ray


class Cluster:
    def __init__(self, prog, sizes: dict, dtype: str, backend: str, seed: int, address: str | None, scalars: dict):
        ray = self.ray = _ray()
        self.started = not ray.is_initialized()
        if self.started:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.actors = []
        try:
            self._start_actors(evaluate.Setup(prog.ast.source, prog.name, sizes, dtype, backend, seed, scalars))
        except BaseException:
            self.close()
            raise

    def _start_actors(self, setup: evaluate.Setup):
        ray = self.ray
        self.gpu = setup.backend == "triton" and ray.cluster_resources().get("GPU", 0) >= 1
        measurer = ray.remote(max_restarts=-1)(Measurer)
        if self.gpu:
            self.actors = [measurer.options(num_gpus=1, num_cpus=0).remote(setup)
                           for _ in range(int(ray.cluster_resources()["GPU"]))]
        else:
            nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
            self.actors = [measurer.options(num_cpus=n["Resources"]["CPU"], scheduling_strategy=self._on(n["NodeID"]))
                           .remote(setup) for n in nodes]
        self.nodes = ray.get([a.node.remote() for a in self.actors])
        self.device_name = ray.get(self.actors[0].device.remote())  # the cache's key: one device's name
        self.device = f"{self.device_name} x{len(self.actors)} (Ray)"
        # one call in flight an actor: a restart fails the calls queued behind the culprit too
        self.depth = len(self.actors)
        self.pending: dict = {}  # result reference -> (actor index, candidate, when submitted)
        self.load = [0] * len(self.actors)

    def _on(self, node: str):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return NodeAffinitySchedulingStrategy(node, soft=False)

    def submit(self, candidate):
        i = self.load.index(min(self.load))
        self.pending[self.actors[i].measure.remote(candidate)] = (i, candidate, time.monotonic())
        self.load[i] += 1

    def next(self) -> evaluate.Outcome:
        oldest = min(begun for _, _, begun in self.pending.values())
        wait = max(oldest + evaluate.TIMEOUT - time.monotonic(), 0)
        done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=wait)
        # none in time: the oldest call has run past TIMEOUT (however busy the other actors were)
        ready = done[0] if done else min(self.pending, key=lambda ref: self.pending[ref][2])
        i, candidate, _ = self.pending.pop(ready)
        self.load[i] -= 1
        if not done:  # Ray cannot cancel an actor's running call: the actor is restarted
            self.ray.kill(self.actors[i], no_restart=False)
            return evaluate.Outcome(candidate, None, f"it ran for more than {evaluate.TIMEOUT} s; a dt bug: please "
                                                     "report it with this schedule")
        try:
            return self.ray.get(ready)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as e:
            return evaluate.Outcome(candidate, None, f"broke its measuring actor's GPU context ({type(e).__name__}); "
                                                     "a dt bug: please report it with this schedule")

    def measure_now(self, candidate, timeout: float = evaluate.TIMEOUT) -> evaluate.Outcome:
        try:
            return self.ray.get(self.actors[0].measure.remote(candidate), timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:  # the actor is restarted, as for any call that runs too long
            self.ray.kill(self.actors[0], no_restart=False)
            return evaluate.Outcome(candidate, None, f"it ran for more than {timeout:g} s", late=True)
        except self.ray.exceptions.RayError as e:
            return evaluate.Outcome(candidate, None, f"the measuring actor failed: {e}")

    def retime(self, candidate) -> float:
        return self._first(self.actors[0].retime.remote(candidate))

    def time(self, name: str, fn) -> float:
        return self._first(self.actors[0].time.remote(name, fn))

    def _first(self, ref, timeout: float = evaluate.TIMEOUT):
        """The first actor's answer, within `timeout` seconds."""
        try:
            return self.ray.get(ref, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            self.ray.kill(self.actors[0], no_restart=False)
            raise DTError(f"the first measuring actor did not answer in {timeout:g} s", None,
                          "a dt bug: please report it with the program and shape") from None

    def abandon(self):
        """Drop the calls under way (the budget ran out): their actors are restarted, so that
        the final rounds do not wait behind a compile."""
        for i, _, _ in self.pending.values():
            self.ray.kill(self.actors[i], no_restart=False)
        self.pending.clear()
        self.load = [0] * len(self.actors)

    def close(self):
        for actor in self.actors:
            self.ray.kill(actor)
        if self.started:
            self.ray.shutdown()


class Measurer(evaluate.InProcess):
    """A Ray actor: the search's inputs on its device, measuring what it is given."""

    def __init__(self, setup: evaluate.Setup):
        super().__init__(setup)
        self.backend = setup.backend

    def node(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def device(self) -> str:
        return evaluate.device(self.backend)

    def measure(self, candidate) -> evaluate.Outcome:
        outcome, broken = self.attempt(candidate)
        if broken:  # this actor's GPU context is gone: a crash, which Ray restarts (max_restarts); the call fails
            os._exit(1)
        return outcome
