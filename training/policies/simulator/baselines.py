"""Non-learned routing policies every evaluation includes (METHODS.md): random, round-robin,
join-shortest-queue, least work left, earliest available, quality-only and RouteBalance's joint
quality–latency–cost assignment (002).

Policies see only what a router could know: each instance's queue and running requests and the
request's *predicted* output length and quality (`Request.est_tokens` / `est_quality`, which fall
back to the truth when a workload carries no predictions: the true-value ablation).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from training.policies.simulator.cluster import Cluster, Request
from training.policies.simulator.instance import Instance


def outstanding(inst: Instance) -> int:
    return inst.n_running + inst.n_waiting


def work_left_s(inst: Instance, requests_by_rid: dict[int, Request] | None = None) -> float:
    """Estimated seconds of work queued on the instance: the running requests' remaining decode
    steps and the waiting requests' prefill plus decode, at the profile's decode speed for the
    current batch (predictions where the router has them)."""
    p = inst.profile
    tpot = p.nominal_tpot(inst.context_tokens)
    remaining = 0.0
    for job in inst.running.values():
        est = requests_by_rid[job.rid].est_tokens(inst.model) if requests_by_rid else job.output_tokens
        remaining = max(remaining, est - inst.generated(job))
    waiting = 0.0
    for job in inst.waiting:
        est = requests_by_rid[job.rid].est_tokens(inst.model) if requests_by_rid else job.output_tokens
        waiting += p.prefill_s_per_token * job.prompt_tokens + est * tpot / max(1, p.max_running)
    return remaining * tpot + waiting


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


@dataclass
class JoinShortestQueue(_PerRequest):
    """The instance with the fewest outstanding requests; `among` restricts the choice (004's
    single-model baselines: shortest queue over the heavy instances only, or the light ones)."""

    among: tuple[int, ...] | None = None

    def choose(self, request, cluster, now):
        among = self.among if self.among is not None else range(len(cluster.instances))
        return min(among, key=lambda i: outstanding(cluster.instances[i]))


@dataclass
class LeastWorkLeft(_PerRequest):
    """The instance with the least estimated work queued (true lengths of running jobs are not
    known to a router; it uses the requests' predicted lengths when `known` lists them)."""

    known: dict[int, Request] = field(default_factory=dict)

    def choose(self, request, cluster, now):
        self.known[request.rid] = request
        return int(np.argmin([work_left_s(i, self.known) for i in cluster.instances]))


@dataclass
class EarliestAvailable(_PerRequest):
    """The instance that can start the request soonest: now where a sequence slot is free and
    nothing waits, else after its estimated work left."""

    known: dict[int, Request] = field(default_factory=dict)

    def choose(self, request, cluster, now):
        self.known[request.rid] = request
        starts = [max(inst.clock - now, 0.0) if inst.n_running < inst.profile.max_running and not inst.waiting
                  else work_left_s(inst, self.known) for inst in cluster.instances]
        return int(np.argmin(starts))


def quality_of(request: Request, inst: Instance) -> float:
    """Predicted quality of the instance's model; 0 where unknown (a trace without labels), so that
    unknown quality ties instead of poisoning comparisons."""
    q = request.est_quality(inst.model)
    return 0.0 if np.isnan(q) else q


class QualityOnly(_PerRequest):
    """argmax predicted quality of the instance's model; ties to the least loaded."""

    def choose(self, request, cluster, now):
        scores = [(quality_of(request, inst), -outstanding(inst)) for inst in cluster.instances]
        return max(range(len(scores)), key=lambda i: scores[i])


@dataclass
class RouteBalance:
    """002's joint assignment: for the batch of waiting requests, longest predicted first (LPT),
    score every instance by w_q · quality − w_l · latency − w_c · cost, each min–max normalised over
    the batch's candidates, and dead-reckon the chosen instance's pending decode tokens locally
    before the next request. Latency is 002's analytic E2E at the instance's TPOT (context-dependent):
    predicted length · TPOT where a sequence slot is free, else (pending decode / running +
    predicted length) · TPOT; plus the prefill. Equal scores (e.g. a weight on a term every
    candidate ties on) go to the lower latency estimate.

    `quality_scale="absolute"` keeps the quality estimates as they are instead of min–max stretching
    them per request: a calibrated estimate (probabilities of a correct answer) then weighs by how
    much the models really differ, where min–max turns a 0.01 difference into the full range."""

    weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)  # quality, latency, cost on the simplex
    price_per_token: tuple[float, ...] | None = None  # per instance; None: no cost term
    quality_scale: str = "minmax"  # 002's per-request min–max, or "absolute"
    known: dict[int, Request] = field(default_factory=dict)

    def assign(self, queue, cluster, now):
        wq, wl, wc = self.weights
        insts = cluster.instances
        self.known |= {r.rid: r for r in queue}

        def left(i: Instance, job) -> float:
            return max(0.0, self.known[job.rid].est_tokens(i.model) - i.generated(job))

        pending = np.array([sum(left(i, j) for j in i.running.values()) + sum(left(i, j) for j in i.waiting)
                            for i in insts], dtype=float)
        running = np.array([max(1, i.n_running) for i in insts], dtype=float)
        out: list[int | None] = [None] * len(queue)
        order = sorted(range(len(queue)), key=lambda k: -max(queue[k].est_tokens(i.model) for i in insts))
        for k in order:
            req = queue[k]
            est = np.array([req.est_tokens(i.model) for i in insts])
            tpot = np.array([i.profile.nominal_tpot(i.context_tokens) for i in insts])
            prefill = np.array([i.profile.prefill_s_per_token * req.prompt_tokens for i in insts])
            free = np.array([i.n_running < i.profile.max_running and not i.waiting for i in insts])
            # 002: predicted_len · TPOT when a decode slot is free, else (pending / running + predicted_len) · TPOT
            latency = np.where(free, est, pending / running + est) * tpot + prefill
            quality = np.array([quality_of(req, i) for i in insts])
            cost = (np.asarray(self.price_per_token) * (req.prompt_tokens + est) if self.price_per_token
                    else np.zeros(len(insts)))
            q = _unit(quality) if self.quality_scale == "minmax" else quality
            score = wq * q - wl * _unit(latency) - wc * _unit(cost)
            choice = int(np.lexsort((latency, -np.round(score, 12)))[0])  # ties: the lower latency
            pending[choice] += est[choice]  # dead reckoning until the next telemetry
            out[k] = choice
        return out


def _unit(x: np.ndarray) -> np.ndarray:
    span = np.ptp(x)
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


BASELINES = {
    "random": RandomPolicy,
    "round_robin": RoundRobin,
    "join_shortest_queue": JoinShortestQueue,
    "least_work_left": LeastWorkLeft,
    "earliest_available": EarliestAvailable,
    "quality_only": QualityOnly,
    "route_balance": RouteBalance,
    "route_balance_absolute": partial(RouteBalance, quality_scale="absolute"),
}
