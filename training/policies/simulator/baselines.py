"""Non-learned routing policies every evaluation includes (METHODS.md): random, round-robin,
join-shortest-queue, least work left, earliest available, quality-only and RouteBalance's joint
quality–latency–cost assignment (002).

Policies see only what a router could know, and from one place: the router's side of the cluster
(`router_side.RouterSide`), whose observation (`routeforge.artifacts.deciding.observation`) is built from the
instances' `/metrics` scrapes and the router's own sends, with each request's *predicted* output
length and quality (`Request.est_tokens` / `est_quality`, which fall back to the truth when a workload
carries no predictions: the true-value ablation). Every heuristic here runs its registered decision
function (`routeforge.artifacts.deciding.heuristics`) on that observation, so the simulator measures exactly
what a bundle's spec runs; RouteBalance's batch assignment reads the same observation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from routeforge.artifacts.deciding import heuristics
from routeforge.core.kinds import SIMULATED_BASELINES
from routeforge.training.policies.simulator.cluster import Request
from routeforge.training.policies.simulator.router_side import RouterSide


class _PerRequest(ABC):
    """A policy that decides each queued request on its own, in arrival order."""

    def assign(self, queue: list[Request], router: RouterSide, now: float) -> list[int | None]:
        return [self.choose(r, router, now) for r in queue]

    @abstractmethod
    def choose(self, request: Request, router: RouterSide, now: float) -> int | None:
        """An instance index, WAIT or DROP for `request` at `now`."""


@dataclass
class RandomPolicy(_PerRequest):
    seed: int = 0
    rng: np.random.Generator = field(init=False)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)

    def choose(self, request, router, now):
        return int(self.rng.integers(len(router)))


@dataclass
class JoinShortestQueue(_PerRequest):
    """The instance with the fewest outstanding requests (the router's own in-flight count); `among`
    restricts the choice (004's single-model baselines: shortest queue over the heavy instances only,
    or the light ones). The registered function's decision, without building the observation."""

    among: tuple[int, ...] | None = None

    @classmethod
    def from_parameters(cls, params: dict) -> JoinShortestQueue:
        return cls(among=tuple(params["among"]) if params.get("among") is not None else None)

    def choose(self, request, router, now):
        return heuristics.shortest_queue(router.outstanding(), self.among)

    def parameters(self) -> dict:
        return {} if self.among is None else {"among": list(self.among)}


@dataclass
class RouteBalance:
    """002's joint assignment: for the batch of waiting requests, longest predicted first (LPT),
    score every instance by w_q · quality − w_l · latency − w_c · cost (`routeforge.artifacts.deciding.heuristics.
    joint_choice`), and dead-reckon the chosen instance's pending decode tokens locally before the
    next request. Latency is 002's analytic E2E at the instance's TPOT (`route_balance_latency`), all
    of it from the router's observation.

    `quality_scale="absolute"` keeps the quality estimates as they are instead of min–max stretching
    them per request: a calibrated estimate (probabilities of a correct answer) then weighs by how
    much the models really differ, where min–max turns a 0.01 difference into the full range."""

    weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)  # quality, latency, cost on the simplex
    price_per_token: tuple[float, ...] | None = None  # per instance; None: no cost term
    quality_scale: str = "minmax"  # 002's per-request min–max, or "absolute"

    @classmethod
    def from_parameters(cls, params: dict) -> RouteBalance:
        prices = params.get("price_per_token")
        return cls(weights=tuple(params.get("weights", (1 / 3, 1 / 3, 1 / 3))),
                   price_per_token=tuple(prices) if prices else None,
                   quality_scale=params.get("quality_scale", "minmax"))

    def parameters(self) -> dict:
        return {"weights": list(self.weights), "quality_scale": self.quality_scale,
                "price_per_token": None if self.price_per_token is None else list(self.price_per_token)}

    def assign(self, queue, router, now):
        observed = router.instances(now)
        models = router.models
        pending = np.array([sum(max(0.0, r["predicted_output_tokens"] - r["generated_tokens"]) for r in i["running"])
                            + sum(r["predicted_output_tokens"] for r in i["waiting"]) for i in observed], dtype=float)
        running = np.array([len(i["running"]) for i in observed], dtype=float)
        tpot = [i["tpot_s"] for i in observed]
        free = heuristics.free_of(observed)
        out: list[int | None] = [None] * len(queue)
        order = sorted(range(len(queue)), key=lambda k: -max(queue[k].est_tokens(m) for m in models))
        for k in order:
            req = queue[k]
            est = np.array([req.est_tokens(m) for m in models])
            latency = heuristics.route_balance_latency(
                est, pending, running, tpot, [i["prefill_s_per_token"] * req.prompt_tokens for i in observed], free)
            cost = (np.asarray(self.price_per_token) * (req.prompt_tokens + est) if self.price_per_token
                    else np.zeros(len(observed)))
            choice = heuristics.joint_choice([req.est_quality(m) for m in models], latency, cost,
                                             self.weights, self.quality_scale)
            pending[choice] += est[choice]  # dead reckoning until the next telemetry
            out[k] = choice
        return out


@dataclass
class RegisteredHeuristic(_PerRequest):
    """A heuristic of `routeforge.artifacts.deciding.heuristics.HEURISTICS` in the simulator: each decision hands
    its registered function the router's observation (`RouterSide.observe`), so the simulator measures
    exactly the function a bundle's spec runs, on what a router service would see."""

    name: str = ""
    parameters_: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)

    def choose(self, request, router, now):
        asked, observed = router.observe(request, now)
        return heuristics.HEURISTICS.get(self.name)(asked, observed, self.parameters_, self.state)

    def parameters(self) -> dict:
        return dict(self.parameters_)


NATIVE = {
    "random": RandomPolicy,
    "round_robin": partial(RegisteredHeuristic, "round_robin"),
    "join_shortest_queue": JoinShortestQueue,
    "least_work_left": partial(RegisteredHeuristic, "least_work_left"),
    "earliest_available": partial(RegisteredHeuristic, "earliest_available"),
    "quality_only": partial(RegisteredHeuristic, "quality_only"),
    "route_balance": RouteBalance,
    "route_balance_absolute": partial(RouteBalance, quality_scale="absolute"),
}
RoundRobin, QualityOnly = NATIVE["round_robin"], NATIVE["quality_only"]  # the names other modules build by
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


# every baseline: the simulator's own classes where a batch needs one (RouteBalance) or speed does
# (join-shortest-queue: equal to its runtime function, tests hold it to it), and every other registered
# heuristic through its runtime function
BASELINES = _Registered(lambda names: {**NATIVE, **{n: partial(RegisteredHeuristic, n) for n in names
                                                    if n not in NATIVE}})

def untrained_baselines() -> list[str]:
    """Every baseline that runs as registered: all but the heuristics whose parameters are fitted on
    training windows first (`trained_by=`, llm-d's latency model), which an evaluation trains."""
    return [n for n in BASELINES if n not in heuristics.HEURISTICS
            or not heuristics.HEURISTICS.entry(n).metadata.get("trained_by")]


def default_baselines() -> list[str]:
    """The baselines an evaluation runs when its fleet file names none: every one but the heuristics
    registered with `default=False` (a fleet file that names them gets them)."""
    return [n for n in BASELINES if n not in heuristics.HEURISTICS
            or heuristics.HEURISTICS.entry(n).metadata.get("default", True)]


# the simulator's variants of a registered heuristic, each with its base (exported as the base's spec with
# the variant's parameters)
VARIANTS = {"route_balance_absolute": "route_balance"}
# the baselines a bundle can carry as heuristic specs (`artifacts.deciding.heuristics`): every deterministic one
EXPORTABLE = _Registered(lambda names: {**{n: n for n in names}, **VARIANTS})


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
    if native is None or isinstance(native, partial):
        return RegisteredHeuristic(policy.name, params)
    from_parameters = getattr(native, "from_parameters", None)  # a class whose spec carries parameters
    return from_parameters(params) if from_parameters else native()
