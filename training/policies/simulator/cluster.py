"""The cluster: instances behind one router, driven by an arrival stream and a routing policy.

The router holds a queue. At every arrival (and, while requests wait in the queue, every
`decision_interval_s`) the policy sees the queue and the instances and answers per request: an
instance index, `WAIT` (stay in the router queue; 001's wait action) or `DROP` (000's drop action).
A request left in the router queue longer than `max_queue_s` is dropped with that reason.

What the policy is handed is the router's side (`router_side.RouterSide`): the cluster keeps the
router's view (`artifacts.deciding.observation.RouterView`) as a router would: each request routed is a send,
each completion or rejection ends it, and each instance is scraped at a decision once its last scrape
is `scrape_interval_s` old. Only a policy with `reads_simulator_state = True` (the clairvoyant
references, the load calibration's closed loop) gets the cluster itself.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from routeforge.artifacts.deciding.observation import InstanceFacts, RouterView
from routeforge.training.policies.simulator.instance import Instance, InstanceProfile, Job
from routeforge.training.policies.simulator.router_side import RouterSide

WAIT, DROP = None, -1


@dataclass(slots=True)
class Request:
    """A request with its true labels on every model (per-model arrays) and what the router is told."""

    rid: int
    arrival: float
    prompt_tokens: int
    output_tokens: np.ndarray  # true output length on each model
    quality: np.ndarray  # true quality on each model (NaN where unknown)
    task: str = ""
    predicted_tokens: np.ndarray | None = None  # the predictor's estimate per model (None: truth)
    predicted_quality: np.ndarray | None = None
    hash_ids: tuple[int, ...] = ()  # the prompt's block ids (a Mooncake-format trace's); empty: none known

    def est_tokens(self, model: int) -> float:
        return float((self.output_tokens if self.predicted_tokens is None else self.predicted_tokens)[model])

    def est_quality(self, model: int) -> float:
        return float((self.quality if self.predicted_quality is None else self.predicted_quality)[model])


class Policy(Protocol):
    def assign(self, queue: list[Request], router: RouterSide, now: float) -> list[int | None]: ...


@dataclass(slots=True)
class Outcome:
    request: Request
    instance: int  # -1 when dropped by the router
    job: Job | None
    dispatched: float | None
    reason: str | None = None  # why it was not served
    model: int = -1  # the chosen instance's model (index into the request's label arrays)

    @property
    def served(self) -> bool:
        return self.job is not None and self.job.finished is not None

    @property
    def e2e(self) -> float:
        return self.job.finished - self.request.arrival if self.served else math.nan

    @property
    def ttft(self) -> float:
        return self.job.first_token - self.request.arrival if self.served else math.nan

    @property
    def tpot(self) -> float:
        if not self.served or self.job.output_tokens < 2:
            return math.nan
        return (self.job.finished - self.job.first_token) / (self.job.output_tokens - 1)


def facts_of(profile: InstanceProfile) -> InstanceFacts:
    """What a router is configured with about an instance of `profile`."""
    return InstanceFacts(profile.max_running, profile.prefill_intercept_s, profile.prefill_s_per_token,
                         profile.decode_w_s, profile.decode_h_s_per_token, float(profile.kv_capacity_tokens))


class Cluster:
    """`block_tokens`: every instance caches prompt blocks of that many tokens in its KV pool
    (`Instance.pool`); None: no prefix caching (requests' block ids unused).
    `scrape_interval_s`: how old an instance's `/metrics` scrape may get before a decision takes a new
    one (0: every decision sees the counts as they are)."""

    def __init__(self, profiles: list[InstanceProfile], models: list[int] | None = None,
                 names: list[str] | None = None, block_tokens: int | None = None, scrape_interval_s: float = 0.0):
        models = models or [0] * len(profiles)
        names = names or [f"i{i}" for i in range(len(profiles))]
        self.instances = [Instance(n, p, m) for n, p, m in zip(names, profiles, models)]
        if not (math.isfinite(scrape_interval_s) and scrape_interval_s >= 0):
            raise ValueError(f"Cluster: scrape_interval_s must be a finite number ≥ 0, got {scrape_interval_s!r}")
        self.scrape_interval_s = scrape_interval_s
        self.view = RouterView([facts_of(p) for p in profiles], block_tokens=block_tokens or 0)
        self._seen = [0] * len(self.instances)
        # per instance: (rid, time, ended) of first tokens and ends the router has not seen yet
        self._events: list[list[tuple[int, float, bool]]] = [[] for _ in self.instances]
        if block_tokens is not None:
            if not block_tokens >= 1:
                raise ValueError(f"Cluster: block_tokens must be at least 1, got {block_tokens!r}")
            for inst in self.instances:
                inst.enable_prefix_caching(block_tokens)
        self.block_tokens = block_tokens
        self.now = 0.0

    def advance(self, t: float) -> None:
        """Run every instance to `t`, and tell the router's view what a router sees by then: each stream
        whose first token has come and each response that has ended (an instance applies its step in
        flight early; what that step does after `t` is held back until its time)."""
        for k, inst in enumerate(self.instances):
            inst.advance(t)
            events = self._events[k]
            events += [(rid, at, False) for rid, at in inst.first_tokens]
            inst.first_tokens.clear()
            events += [(job.rid, -1.0 if job.finished is None else job.finished, True)  # a rejection: at once
                       for job in inst.done[self._seen[k]:]]
            self._seen[k] = len(inst.done)
            if events:
                for rid, at, ended in events:
                    if at > t:
                        continue
                    if ended:
                        self.view.finished(rid)
                    else:
                        self.view.first_token(rid, at)
                self._events[k] = [e for e in events if e[1] > t]
        self.now = max(self.now, t)

    def router(self, now: float) -> RouterSide:
        """The router's side at `now`, each instance scraped anew where its last scrape is
        `scrape_interval_s` old (or none was taken)."""
        for k, inst in enumerate(self.instances):
            last = self.view.scrapes[k]
            if last is None or now - last.at >= self.scrape_interval_s:
                self.view.scraped(k, inst.scrape(now))
        return RouterSide(self.view, [i.model for i in self.instances], self.block_tokens, now)

    def handed_to(self, policy, now: float):
        """What `policy` decides from at `now`: the router's side, or the cluster for a policy that
        says it reads the simulator's state."""
        return self if getattr(policy, "reads_simulator_state", False) else self.router(now)

    def run(self, requests: list[Request], policy: Policy, decision_interval_s: float = 0.02,
            max_queue_s: float = 60.0) -> list[Outcome]:
        """Simulate until every request is served, rejected or dropped."""
        outcomes: dict[int, Outcome] = {}
        queue: deque[Request] = deque()

        def dispatch(now: float) -> None:
            decisions = policy.assign(list(queue), self.handed_to(policy, now), now)
            kept = deque()
            for req, choice in zip(list(queue), decisions):
                if choice is WAIT:
                    if now - req.arrival > max_queue_s:
                        outcomes[req.rid] = Outcome(req, DROP, None, None, "timed out in the router queue")
                    else:
                        kept.append(req)
                else:
                    outcomes[req.rid] = self.route(req, choice, now)
            queue.clear()
            queue.extend(kept)

        next_tick = math.inf
        for req in sorted(requests, key=lambda r: r.arrival):
            while queue and next_tick < req.arrival:
                self.advance(next_tick)
                dispatch(next_tick)
                next_tick += decision_interval_s
            self.advance(req.arrival)
            queue.append(req)
            dispatch(req.arrival)
            if not queue:
                next_tick = math.inf
            elif math.isinf(next_tick) or next_tick <= req.arrival:
                next_tick = req.arrival + decision_interval_s
        while queue:
            self.advance(next_tick)
            dispatch(next_tick)
            next_tick += decision_interval_s
        self.advance(math.inf)
        for inst in self.instances:
            for job in inst.done:
                if job.rejected:
                    outcomes[job.rid].reason = job.rejected
        return [outcomes[r.rid] for r in requests]

    def route(self, req: Request, choice: int, now: float) -> Outcome:
        """Carry out a DROP or an instance choice for `req` at `now`."""
        if choice == DROP:
            return Outcome(req, DROP, None, now, "dropped by the policy")
        inst = self.instances[choice]
        job = Job(req.rid, req.prompt_tokens, int(req.output_tokens[inst.model]), now, hash_ids=req.hash_ids)
        outcome = Outcome(req, choice, job, now, model=inst.model)
        self.view.sent(choice, req.rid, req.prompt_tokens, req.est_tokens(inst.model), now,
                       req.hash_ids if self.block_tokens else (), req.est_quality(inst.model))
        if not inst.enqueue(job, now):
            outcome.reason = job.rejected
            self.view.finished(req.rid)
        return outcome
