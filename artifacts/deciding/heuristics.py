"""Non-learned routing policies as parameterised specs a runtime executes: join-shortest-queue,
least work left, earliest available, quality-only, RouteBalance's joint assignment (002), the
highest quality within the request's SLO, and round-robin.

Why here: the routing gate (`training.policies.gate`) may recommend a heuristic over a learned
policy, so a bundle must carry heuristics a router service can run with NumPy alone. The
simulator's baselines (`training.policies.simulator.baselines`) call the same decision functions,
so the exported spec decides exactly as the policy the evaluation measured.

`policy.json` of a heuristic: {"kind": "heuristic", "heuristic": <name>, "parameters": {...},
"instances": m}. `HeuristicPolicy.route(request, instances)` takes the telemetry a router has:

- request: `prompt_tokens`, and per instance `predicted_output_tokens` and `predicted_quality`
  (the instance's model's estimates; quality may be omitted where unknown);
- each instance: `max_running`, `tpot_s` (current decode step time), `prefill_s_per_token`, its
  `running` requests as {predicted_output_tokens, generated_tokens} and its `waiting` requests as
  {prompt_tokens, predicted_output_tokens}: the router-visible observation
  (`routeforge.artifacts.deciding.observation`), which the simulator and the runtime's dispatcher build alike
  from `/metrics` scrapes and the router's own sends. No engine-internal state (the time left in the
  step in flight, the instance's exact context) is in it, so no heuristic reads any.

The prefix-aware routers people deploy (llm-d, Dynamo, SGLang: `routeforge.artifacts.deciding.deployed_routers`)
also read the request's prompt block ids and each instance's cache and KV state; that module says which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.common.extensions import Registry
from routeforge.artifacts.deciding.components import register_component

# name → decision function `(request, instances, parameters, state) -> instance index`; `state` is the
# policy's own (round-robin's position). A new heuristic is a module with `@HEURISTICS.register(name)`,
# here or named by $ROUTEFORGE_EXTENSIONS; the simulator runs it through the same function
# (training.policies.simulator.baselines.RegisteredHeuristic). What the rest of the pipeline asks of a
# heuristic is declared where it is registered, and read from there only:
#   default=False    an evaluation runs it only where the fleet file names it (default: every evaluation);
#   weights={...}    its features and their default weights, in summing order (`parameters["weights"]`);
#   searchable=True  `training.routing_evaluation.weight_search` may learn those weights (CMA-ES);
#   teaches="load" or "prefix", teacher_order=k   it may teach a learned policy (`training.policies.rl.
#                    teacher`: "prefix" ones only where instances cache prompt blocks), simplest first;
#   typescript=False the TypeScript runtime has no twin of it (default: it does, and tests hold them alike).
HEURISTICS = Registry("heuristic", ("routeforge.artifacts.deciding.heuristics",
                                    "routeforge.artifacts.deciding.deployed_routers"))


def work_left_s(tpot_s: float, prefill_s_per_token: float, max_running: int, running_left_tokens,
                waiting_prompt_tokens, waiting_output_tokens) -> float:
    """Estimated seconds of work queued on an instance: the longest running request's remaining
    decode steps, plus each waiting request's prefill and its share of decode steps at the current
    batch's step time."""
    remaining = max([0.0, *running_left_tokens])
    waiting = sum(prefill_s_per_token * p + est * tpot_s / max(1, max_running)
                  for p, est in zip(waiting_prompt_tokens, waiting_output_tokens))
    return remaining * tpot_s + waiting


def shortest_queue(outstanding, among=None) -> int:
    """The instance with the fewest running + waiting requests (first on ties); `among` restricts
    the candidates."""
    among = range(len(outstanding)) if among is None else among
    return min(among, key=lambda i: outstanding[i])


BIAS_STEP = 0.5  # queue biases act in half requests


def queue_biases(action, bounds=(-10.0, 10.0)) -> np.ndarray:
    """A policy's raw output as the biases `biased_shortest_queue` uses: clipped to `bounds` and rounded
    to the nearest half request. Why rounded: queue counts are whole numbers, so ties are common and a
    bias of ±0.01 would already decide every tie; with halves, an output within a quarter of zero is
    join-shortest-queue exactly (a cloned teacher is), ±0.5 breaks ties toward or away from an
    instance, and ±1 or more moves requests."""
    low, high = bounds
    return np.round(np.clip(np.asarray(action, dtype=np.float64), low, high) / BIAS_STEP) * BIAS_STEP


def biased_shortest_queue(outstanding, bias) -> int:
    """The instance with the fewest running + waiting requests once `bias[i]` is subtracted from
    instance i's count (first on ties): 004's PPO with `dispatch: biased_shortest_queue` sets the
    biases once per slot and this rule routes each of the slot's requests. All-zero biases are
    join-shortest-queue exactly."""
    return min(range(len(outstanding)), key=lambda i: outstanding[i] - bias[i])


def least_work(work_left) -> int:
    return int(np.argmin(work_left))


def earliest_start(free, work_left) -> int:
    """The instance that can start the request soonest: now where a sequence slot is free and nothing
    waits (the first such), else after its estimated work left."""
    return int(np.argmin([0.0 if f else w for f, w in zip(free, work_left)]))


def best_quality(quality, outstanding) -> int:
    """argmax predicted quality (NaN counts as 0, so unknown quality ties); ties to the least loaded."""
    q = [0.0 if np.isnan(x) else float(x) for x in quality]
    return max(range(len(q)), key=lambda i: (q[i], -outstanding[i]))


def route_balance_latency(est_tokens, pending_tokens, running, tpot_s, prefill_s, free) -> np.ndarray:
    """002's analytic E2E per instance: predicted length · TPOT where a decode slot is free, else
    (pending decode tokens / running + predicted length) · TPOT; plus the prefill."""
    est, pending = np.asarray(est_tokens, dtype=float), np.asarray(pending_tokens, dtype=float)
    return (np.where(free, est, pending / np.maximum(1.0, running) + est) * np.asarray(tpot_s, dtype=float)
            + np.asarray(prefill_s, dtype=float))


def joint_choice(quality, latency, cost, weights, quality_scale: str = "minmax") -> int:
    """002's joint score w_q · quality − w_l · latency − w_c · cost, latency and cost min–max
    normalised over the candidates, quality too unless `quality_scale="absolute"` (calibrated
    estimates then weigh by how much the models really differ). Equal scores go to the lower latency."""
    wq, wl, wc = weights
    q = np.nan_to_num(np.asarray(quality, dtype=float))
    latency = np.asarray(latency, dtype=float)
    score = wq * (_unit(q) if quality_scale == "minmax" else q) - wl * _unit(latency) - wc * _unit(np.asarray(cost))
    return int(np.lexsort((latency, -np.round(score, 12)))[0])


def _unit(x: np.ndarray) -> np.ndarray:
    span = np.ptp(x)
    return (x - x.min()) / span if span > 0 else np.zeros_like(x, dtype=float)


def outstanding_of(instances: list[dict[str, Any]]) -> list[int]:
    """Running + waiting requests per instance."""
    return [len(i["running"]) + len(i["waiting"]) for i in instances]


def free_of(instances: list[dict[str, Any]]) -> list[bool]:
    """Whether a sequence slot is free and nothing waits, per instance."""
    return [len(i["running"]) < i["max_running"] and not i["waiting"] for i in instances]


def work_of(instances: list[dict[str, Any]]) -> list[float]:
    """`work_left_s` of each instance, from the predicted lengths its telemetry carries."""
    return [work_left_s(i["tpot_s"], i["prefill_s_per_token"], i["max_running"],
                        [max(0.0, r["predicted_output_tokens"] - r["generated_tokens"]) for r in i["running"]],
                        [r["prompt_tokens"] for r in i["waiting"]],
                        [r["predicted_output_tokens"] for r in i["waiting"]]) for i in instances]


@HEURISTICS.register("round_robin")
def round_robin(request, instances, parameters, state) -> int:
    state["next"] = state.get("next", 0) + 1
    return (state["next"] - 1) % len(instances)


@HEURISTICS.register("join_shortest_queue", teaches="load", teacher_order=0)
def join_shortest_queue(request, instances, parameters, state) -> int:
    return shortest_queue(outstanding_of(instances), parameters.get("among"))


@HEURISTICS.register("quality_only")
def quality_only(request, instances, parameters, state) -> int:
    return best_quality(request.get("predicted_quality", [np.nan] * len(instances)), outstanding_of(instances))


@HEURISTICS.register("least_work_left", teaches="load", teacher_order=2)
def least_work_left(request, instances, parameters, state) -> int:
    return least_work(work_of(instances))


@HEURISTICS.register("earliest_available", teaches="load", teacher_order=1)
def earliest_available(request, instances, parameters, state) -> int:
    return earliest_start(free_of(instances), work_of(instances))


@HEURISTICS.register("route_balance", teaches="load", teacher_order=3)
def route_balance(request, instances, parameters, state) -> int:
    m = len(instances)
    est = np.asarray(request["predicted_output_tokens"], dtype=float)
    pending = [sum(max(0.0, r["predicted_output_tokens"] - r["generated_tokens"]) for r in i["running"])
               + sum(r["predicted_output_tokens"] for r in i["waiting"]) for i in instances]
    latency = route_balance_latency(est, pending, [len(i["running"]) for i in instances],
                                    [i["tpot_s"] for i in instances],
                                    [i["prefill_s_per_token"] * request["prompt_tokens"] for i in instances],
                                    free_of(instances))
    prices = parameters.get("price_per_token")
    cost = np.asarray(prices) * (request["prompt_tokens"] + est) if prices else np.zeros(m)
    return joint_choice(request.get("predicted_quality", [np.nan] * m), latency, cost,
                        parameters.get("weights", (1 / 3, 1 / 3, 1 / 3)), parameters.get("quality_scale", "minmax"))


QUALITY_WITHIN_SLO = {"slo_scale": 5.0}  # the routing evaluation's default SLO: 5 × E2E alone, fastest instance


@HEURISTICS.register("quality_within_slo")
def quality_within_slo(request, instances, parameters, state) -> int:
    """The model and instance chosen together for quality goodput (late requests earn nothing): among
    the instances where the request's predicted E2E meets its SLO, the one whose model has the
    highest predicted quality (ties to the sooner, then the first); where none does, the soonest.
    Predicted E2E on i: its start (earliest-available's: now where a slot is free and nothing
    waits, else its work left) + prefill + predicted length × its step time; the SLO: `slo_scale` ×
    the least of (prefill + predicted length × step time) over the instances, the request's E2E alone
    on the one that would serve it fastest, as the evaluation judges (the step times are the current
    ones, so the bound is approximate)."""
    scale = float(parameters.get("slo_scale", QUALITY_WITHIN_SLO["slo_scale"]))
    est = request["predicted_output_tokens"]
    work, free = work_of(instances), free_of(instances)
    alone = [i["prefill_s_per_token"] * request["prompt_tokens"] + e * i["tpot_s"] for i, e in zip(instances, est)]
    e2e = [(0.0 if f else w) + a for f, w, a in zip(free, work, alone)]
    bound = scale * min(alone)
    quality = [0.0 if q is None or np.isnan(q) else float(q)
               for q in request.get("predicted_quality", [np.nan] * len(instances))]
    within = [k for k in range(len(instances)) if e2e[k] <= bound]
    if not within:
        return min(range(len(instances)), key=lambda k: (e2e[k], k))
    return max(within, key=lambda k: (quality[k], -e2e[k], -k))


@register_component("routing_policy", accepts=lambda config: config.get("policy_kind") == "heuristic")
@dataclass
class HeuristicPolicy:
    """A heuristic routing policy from its spec; `route(request, instances)` returns an instance index."""

    spec: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict, repr=False)  # the heuristic's own (round-robin's position)

    @classmethod
    def load(cls, folder: Path) -> HeuristicPolicy:
        return cls.from_spec(json.loads((Path(folder) / "policy.json").read_text()))

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> HeuristicPolicy:
        if spec.get("kind") != "heuristic":
            raise ValueError(f"policy.json: kind must be 'heuristic', got {spec.get('kind')!r}")
        if spec.get("heuristic") not in HEURISTICS:
            raise ValueError(f"policy.json: heuristic: {HEURISTICS.unknown(str(spec.get('heuristic')))}")
        return cls(spec)

    @property
    def name(self) -> str:
        return self.spec["heuristic"]

    @property
    def parameters(self) -> dict[str, Any]:
        return self.spec.get("parameters", {})

    def route(self, request: dict[str, Any], instances: list[dict[str, Any]]) -> int:
        m = self.spec.get("instances", len(instances))
        if len(instances) != m:
            raise ValueError(f"{len(instances)} instances given, the policy was exported for {m}")
        return HEURISTICS.get(self.name)(request, instances, self.parameters, self.state)


def heuristic_spec(name: str, instances: int, **parameters) -> dict[str, Any]:
    """The `policy.json` of a heuristic (validated by building it)."""
    spec = {"kind": "heuristic", "heuristic": name, "parameters": parameters, "instances": instances,
            # a description no runtime reads, kept as bundles have carried it (byte-equal bundles across the move)
            "telemetry": "routeforge.artifacts.heuristics: request {prompt_tokens, predicted_output_tokens[m], "
                         "predicted_quality[m]}; instances [{max_running, tpot_s, prefill_s_per_token, "
                         "running: [{predicted_output_tokens, generated_tokens}], waiting: [{prompt_tokens, "
                         "predicted_output_tokens}]}]"}
    HeuristicPolicy.from_spec(spec)
    return spec
