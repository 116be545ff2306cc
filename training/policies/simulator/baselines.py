"""Non-learned routing policies every evaluation includes (METHODS.md): random, round-robin,
join-shortest-queue, least work left, earliest available, quality-only and RouteBalance's joint
quality–latency–cost assignment (002).

Policies see only what a router could know: each instance's queue and running requests and the
request's *predicted* output length and quality (`Request.est_tokens` / `est_quality`, which fall
back to the truth when a workload carries no predictions: the true-value ablation).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from routeforge.artifacts import heuristics
from routeforge.core.kinds import SIMULATED_BASELINES
from routeforge.training.policies.simulator.cluster import Cluster, Request
from routeforge.training.policies.simulator.instance import Instance


def outstanding(inst: Instance) -> int:
    return inst.n_running + inst.n_waiting


def work_left_s(inst: Instance, requests_by_rid: dict[int, Request] | None = None) -> float:
    """Estimated seconds of work queued on the instance (`routeforge.artifacts.heuristics.work_left_s`), from
    the requests' predicted lengths where the router has them, else the true ones."""
    p = inst.profile

    def est(job) -> float:
        return requests_by_rid[job.rid].est_tokens(inst.model) if requests_by_rid else job.output_tokens

    return heuristics.work_left_s(p.nominal_tpot(inst.context_tokens), p.prefill_s_per_token, p.max_running,
                                  [est(j) - inst.generated(j) for j in inst.running.values()],
                                  [j.prompt_tokens for j in inst.waiting], [est(j) for j in inst.waiting])


class _PerRequest(ABC):
    """A policy that decides each queued request on its own, in arrival order."""

    def assign(self, queue: list[Request], cluster: Cluster, now: float) -> list[int | None]:
        return [self.choose(r, cluster, now) for r in queue]

    @abstractmethod
    def choose(self, request: Request, cluster: Cluster, now: float) -> int | None:
        """An instance index, WAIT or DROP for `request` at `now`."""


@dataclass
class RandomPolicy(_PerRequest):
    seed: int = 0
    rng: np.random.Generator = field(init=False)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)

    def choose(self, request, cluster, now):
        return int(self.rng.integers(len(cluster.instances)))


@dataclass
class RoundRobin(_PerRequest):
    next: int = 0

    def choose(self, request, cluster, now):
        i = self.next % len(cluster.instances)
        self.next += 1
        return i

    def parameters(self) -> dict:
        return {}


@dataclass
class JoinShortestQueue(_PerRequest):
    """The instance with the fewest outstanding requests; `among` restricts the choice (004's
    single-model baselines: shortest queue over the heavy instances only, or the light ones)."""

    among: tuple[int, ...] | None = None

    @classmethod
    def from_parameters(cls, params: dict) -> JoinShortestQueue:
        return cls(among=tuple(params["among"]) if params.get("among") is not None else None)

    def choose(self, request, cluster, now):
        return heuristics.shortest_queue([outstanding(i) for i in cluster.instances], self.among)

    def parameters(self) -> dict:
        return {} if self.among is None else {"among": list(self.among)}


@dataclass
class LeastWorkLeft(_PerRequest):
    """The instance with the least estimated work queued (true lengths of running jobs are not
    known to a router; it uses the requests' predicted lengths when `known` lists them)."""

    known: dict[int, Request] = field(default_factory=dict)

    def choose(self, request, cluster, now):
        self.known[request.rid] = request
        return heuristics.least_work([work_left_s(i, self.known) for i in cluster.instances])

    def parameters(self) -> dict:
        return {}


@dataclass
class EarliestAvailable(_PerRequest):
    """The instance that can start the request soonest: now where a sequence slot is free and
    nothing waits, else after its estimated work left."""

    known: dict[int, Request] = field(default_factory=dict)

    def choose(self, request, cluster, now):
        self.known[request.rid] = request
        insts = cluster.instances
        return heuristics.earliest_start([i.n_running < i.profile.max_running and not i.waiting for i in insts],
                                         [max(i.clock - now, 0.0) for i in insts],
                                         [work_left_s(i, self.known) for i in insts])

    def parameters(self) -> dict:
        return {}


class QualityOnly(_PerRequest):
    """argmax predicted quality of the instance's model; ties to the least loaded."""

    def choose(self, request, cluster, now):
        return heuristics.best_quality([request.est_quality(i.model) for i in cluster.instances],
                                       [outstanding(i) for i in cluster.instances])

    def parameters(self) -> dict:
        return {}


@dataclass
class RouteBalance:
    """002's joint assignment: for the batch of waiting requests, longest predicted first (LPT),
    score every instance by w_q · quality − w_l · latency − w_c · cost (`routeforge.artifacts.heuristics.
    joint_choice`), and dead-reckon the chosen instance's pending decode tokens locally before the
    next request. Latency is 002's analytic E2E at the instance's TPOT (`route_balance_latency`).

    `quality_scale="absolute"` keeps the quality estimates as they are instead of min–max stretching
    them per request: a calibrated estimate (probabilities of a correct answer) then weighs by how
    much the models really differ, where min–max turns a 0.01 difference into the full range."""

    weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)  # quality, latency, cost on the simplex
    price_per_token: tuple[float, ...] | None = None  # per instance; None: no cost term
    quality_scale: str = "minmax"  # 002's per-request min–max, or "absolute"
    known: dict[int, Request] = field(default_factory=dict)

    @classmethod
    def from_parameters(cls, params: dict) -> RouteBalance:
        prices = params.get("price_per_token")
        return cls(weights=tuple(params.get("weights", (1 / 3, 1 / 3, 1 / 3))),
                   price_per_token=tuple(prices) if prices else None,
                   quality_scale=params.get("quality_scale", "minmax"))

    def parameters(self) -> dict:
        return {"weights": list(self.weights), "quality_scale": self.quality_scale,
                "price_per_token": None if self.price_per_token is None else list(self.price_per_token)}

    def assign(self, queue, cluster, now):
        insts = cluster.instances
        self.known |= {r.rid: r for r in queue}

        def left(i: Instance, job) -> float:
            return max(0.0, self.known[job.rid].est_tokens(i.model) - i.generated(job))

        pending = np.array([sum(left(i, j) for j in i.running.values()) + sum(left(i, j) for j in i.waiting)
                            for i in insts], dtype=float)
        running = np.array([i.n_running for i in insts], dtype=float)
        out: list[int | None] = [None] * len(queue)
        order = sorted(range(len(queue)), key=lambda k: -max(queue[k].est_tokens(i.model) for i in insts))
        for k in order:
            req = queue[k]
            est = np.array([req.est_tokens(i.model) for i in insts])
            latency = heuristics.route_balance_latency(
                est, pending, running, [i.profile.nominal_tpot(i.context_tokens) for i in insts],
                [i.profile.prefill_s_per_token * req.prompt_tokens for i in insts],
                [i.n_running < i.profile.max_running and not i.waiting for i in insts])
            cost = (np.asarray(self.price_per_token) * (req.prompt_tokens + est) if self.price_per_token
                    else np.zeros(len(insts)))
            choice = heuristics.joint_choice([req.est_quality(i.model) for i in insts], latency, cost,
                                             self.weights, self.quality_scale)
            pending[choice] += est[choice]  # dead reckoning until the next telemetry
            out[k] = choice
        return out


def router_telemetry(cluster: Cluster, request: Request, known: dict[int, Request],
                     now: float) -> tuple[dict, list[dict]]:
    """What a router service knows at `now`, in the runtime heuristics' form (`routeforge.artifacts.
    heuristics`, `routeforge.artifacts.deployed_routers`): the request's predicted lengths and
    qualities and its prompt block ids, and per instance its slots, step time, running and waiting
    requests (their lengths as predicted where `known` has them), KV use as vLLM's /metrics show it
    and the prompt's cached blocks as KV events show them."""
    insts = cluster.instances

    def est(i: Instance, job) -> float:
        return known[job.rid].est_tokens(i.model) if job.rid in known else job.output_tokens

    hashes = request.hash_ids if cluster.block_tokens else ()
    telemetry = [{"max_running": i.profile.max_running, "tpot_s": i.profile.nominal_tpot(i.context_tokens),
                  "prefill_s_per_token": i.profile.prefill_s_per_token, "busy_for_s": max(i.clock - now, 0.0),
                  "running": [{"predicted_output_tokens": est(i, j), "generated_tokens": i.generated(j)}
                              for j in i.running.values()],
                  "waiting": [{"prompt_tokens": j.prompt_tokens, "predicted_output_tokens": est(i, j)}
                              for j in i.waiting],
                  "kv_utilization": i.kv_utilization(), "kv_capacity_tokens": i.profile.kv_capacity_tokens,
                  "active_tokens": i.context_tokens + sum(j.prompt_tokens for j in i.waiting),
                  "cached_prefix_blocks": i.cached_prefix_blocks(hashes)} for i in insts]
    asked = {"prompt_tokens": request.prompt_tokens,
             "predicted_output_tokens": [request.est_tokens(i.model) for i in insts],
             "predicted_quality": [request.est_quality(i.model) for i in insts],
             "hash_ids": list(hashes), "block_tokens": cluster.block_tokens or 0}
    return asked, telemetry


@dataclass
class RegisteredHeuristic(_PerRequest):
    """A heuristic of `routeforge.artifacts.heuristics.HEURISTICS` that has no simulator class of its own
    (one a module adds): each decision hands its registered function the telemetry a router service
    would (the request's predicted lengths and qualities, each instance's slots, step time, running and
    waiting requests), so the simulator measures exactly the function a bundle's spec runs."""

    name: str = ""
    parameters_: dict = field(default_factory=dict)
    known: dict[int, Request] = field(default_factory=dict)
    state: dict = field(default_factory=dict)

    def choose(self, request, cluster, now):
        self.known[request.rid] = request
        asked, telemetry = router_telemetry(cluster, request, self.known, now)
        return heuristics.HEURISTICS.get(self.name)(asked, telemetry, self.parameters_, self.state)

    def parameters(self) -> dict:
        return dict(self.parameters_)


NATIVE = {
    "random": RandomPolicy,
    "round_robin": RoundRobin,
    "join_shortest_queue": JoinShortestQueue,
    "least_work_left": LeastWorkLeft,
    "earliest_available": EarliestAvailable,
    "quality_only": QualityOnly,
    "route_balance": RouteBalance,
    "route_balance_absolute": partial(RouteBalance, quality_scale="absolute"),
}
for _name, _policy in NATIVE.items():  # the names a fleet file's `policies` may give (`core.kinds.ROUTING_POLICIES`)
    SIMULATED_BASELINES.add(_name, _policy, __name__, f"NATIVE[{_name!r}]")


class _Registered(Mapping):
    """A mapping read from the heuristics registry at each use (a module named by $ROUTEFORGE_EXTENSIONS
    later is seen): `build(names)` gives its items."""

    def __init__(self, build):
        self._build = build

    def _items(self) -> dict:
        return self._build(heuristics.HEURISTICS.names())

    def __getitem__(self, name):
        return self._items()[name]

    def __iter__(self):
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())


# every baseline: the simulator's own classes (fast, and equal to the runtime's functions: tests hold them
# to it), and any other registered heuristic through its runtime function
BASELINES = _Registered(lambda names: {**NATIVE, **{n: partial(RegisteredHeuristic, n) for n in names
                                                    if n not in NATIVE}})

def default_baselines() -> list[str]:
    """The baselines an evaluation runs when its fleet file names none: every one but the heuristics
    registered with `default=False` (a fleet file that names them gets them)."""
    return [n for n in BASELINES if n not in heuristics.HEURISTICS
            or heuristics.HEURISTICS.entry(n).metadata.get("default", True)]


# the baselines a bundle can carry as heuristic specs (`routeforge.artifacts.heuristics`): every deterministic one
EXPORTABLE = _Registered(lambda names: {**{n: n for n in names}, "route_balance_absolute": "route_balance"})


def parameters_of(name: str, chosen: dict | None = None) -> dict:
    """Baseline `name`'s parameters: its own, with `chosen` (what `tune` picked) over them."""
    return {**BASELINES[name]().parameters(), **(chosen or {})}


def tuned_baseline(name: str, chosen: dict) -> RegisteredHeuristic:
    """Heuristic `name` in the simulator with `chosen` over its own parameters, through the registered
    function a bundle's spec runs (`heuristic_spec_of` with the same `chosen` exports it)."""
    return RegisteredHeuristic(name, parameters_of(name, chosen))


def heuristic_spec_of(name: str, instances: int, chosen: dict | None = None) -> dict:
    """The exported spec of baseline `name` (as the evaluation builds it; `chosen`: what tuning picked)."""
    return heuristics.heuristic_spec(EXPORTABLE[name], instances, **parameters_of(name, chosen))


def from_spec(spec: dict):
    """The simulator policy that executes a bundle's heuristic spec (the CLI's `policies evaluate`)."""
    policy = heuristics.HeuristicPolicy.from_spec(spec)
    params = dict(policy.parameters)
    native = NATIVE.get(policy.name)
    if native is None:
        return RegisteredHeuristic(policy.name, params)
    from_parameters = getattr(native, "from_parameters", None)  # a class whose spec carries parameters
    return from_parameters(params) if from_parameters else native()
