"""Measuring candidates on a Ray cluster (`dt tune --ray [ADDRESS]`, `prog.tune(..., ray=...)`).

One measuring actor per GPU of the cluster for a GPU backend, each holding the search's inputs
and the reference's outputs; each candidate is first compiled by a CPU task on its actor's node
(Triton's and dt's compile caches are on disk, per node), then run, checked and timed by the
actor, so that a node's CPUs compile while its GPUs time. A CPU backend gets one actor per node
holding all its CPUs (two timings on one machine would disturb each other, and the backend's
kernels use every core) and compiles in the actor. The finalists and baselines are timed again
on the first actor only, side by side on one device. Every node needs the same dt, backend and
Python versions; the tuning cache is the driver's.
"""
from __future__ import annotations

from dt.errors import DTError
from dt.tune import evaluate


def _ray():
    try:
        import ray
    except ImportError:
        raise DTError("dt tune --ray needs Ray", None, "pip install 'dt[ray]' (or pip install ray)") from None
    return ray


class Cluster:
    def __init__(self, prog, sizes: dict, dtype: str, backend: str, seed: int, address: str | None):
        ray = self.ray = _ray()
        self.started = not ray.is_initialized()
        if self.started:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.gpu = backend == "triton" and ray.cluster_resources().get("GPU", 0) >= 1
        measurer = ray.remote(max_restarts=-1)(Measurer)
        self.compile = ray.remote(evaluate.compile_once)
        arguments = (prog.ast.source, prog.name, sizes, dtype, backend, seed)
        if self.gpu:
            self.actors = [measurer.options(num_gpus=1, num_cpus=0).remote(*arguments)
                           for _ in range(int(ray.cluster_resources()["GPU"]))]
        else:
            nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
            self.actors = [measurer.options(num_cpus=n["Resources"]["CPU"], scheduling_strategy=self._on(n["NodeID"]))
                           .remote(*arguments) for n in nodes]
        self.nodes = ray.get([a.node.remote() for a in self.actors])
        self.device = f"{ray.get(self.actors[0].device.remote())} x{len(self.actors)} (Ray)"
        self.depth = 2 * len(self.actors) if self.gpu else len(self.actors)  # one compiling, one timing
        self.arguments = arguments
        self.pending: dict = {}  # result reference -> (actor index, candidate)
        self.load = [0] * len(self.actors)

    def _on(self, node: str):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return NodeAffinitySchedulingStrategy(node, soft=False)

    def submit(self, candidate):
        i = self.load.index(min(self.load))
        compiled = None
        if self.gpu:
            source, name, sizes, dtype, backend, _ = self.arguments
            compiled = self.compile.options(scheduling_strategy=self._on(self.nodes[i])).remote(
                candidate.text, name, backend, sizes, dtype)
        self.pending[self.actors[i].measure.remote(candidate, compiled)] = (i, candidate)
        self.load[i] += 1

    def next(self) -> evaluate.Outcome:
        [ready], _ = self.ray.wait(list(self.pending), num_returns=1)
        i, candidate = self.pending.pop(ready)
        self.load[i] -= 1
        try:
            return self.ray.get(ready)
        except self.ray.exceptions.RayActorError as e:
            return evaluate.Outcome(candidate, None, f"broke its measuring actor's GPU context ({type(e).__name__}); "
                                                     "a dt bug: please report it with this schedule")

    def retime(self, candidate) -> float:
        return self.ray.get(self.actors[0].retime.remote(candidate))

    def time(self, name: str, fn) -> float:
        return self.ray.get(self.actors[0].time.remote(name, fn))

    def abandon(self):
        for ref in self.pending:
            self.ray.cancel(ref)
        self.pending.clear()
        self.load = [0] * len(self.actors)

    def close(self):
        for actor in self.actors:
            self.ray.kill(actor)
        if self.started:
            self.ray.shutdown()


class Measurer:
    """A Ray actor: the search's inputs on its device, measuring what it is given."""

    def __init__(self, source: str, name: str, sizes: dict, dtype: str, backend: str, seed: int):
        from dt.runtime import loads
        self.backend = backend
        self.inputs = evaluate.Inputs(loads(source, name=name), sizes, dtype, backend, seed)
        self.runs: dict[str, object] = {}

    def node(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    def device(self) -> str:
        return evaluate.device(self.backend)

    def measure(self, candidate, compiled=None) -> evaluate.Outcome:
        outcome, run, broken = self.inputs.measure(candidate)  # `compiled`: Ray ran the compile task first
        if broken:  # this actor's GPU context is gone: Ray starts it again (max_restarts), the call fails
            import ray
            ray.actor.exit_actor()
        if run is not None:
            self.runs[candidate.name] = run
        return outcome

    def retime(self, candidate) -> float:
        if candidate.name not in self.runs:
            self.measure(candidate)
        return self.inputs.clock(self.runs[candidate.name])

    def time(self, name: str, fn) -> float:
        run = self.runs[name] = lambda: fn(**self.inputs.args)
        return self.inputs.clock(run)
