"""000's QoS-graph observation (`QosGraphEnv`): the arrived request, each expert (instance) and its
running and waiting requests as graph nodes, flattened. The policy's action 0 drops the request,
1..N route it to an expert."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.policy_inputs.base import POLICY_INPUTS, DecisionContext, LiveInput, best_instance


def qos_graph_telemetry(observed: Sequence[Mapping[str, Any]], request: Mapping[str, Any], now: float,
                        pad: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the arrived request, the experts) as `observation_qos_graph` takes them, from the router-visible
    observation (`routeforge.artifacts.deciding.observation`) and the request as the router is asked it
    (`prompt_tokens`, and per instance `predicted_quality` and `predicted_output_tokens`), by the
    function the simulator's environment and the runtime's `Dispatcher` both call. A request's age is
    the time since the router sent it; the first `pad` of an instance's running and of its waiting
    requests are shown (the graph has that many slots: a stale scrape or another client's requests
    can make the router count more)."""

    def row(entry: Mapping[str, Any]) -> dict[str, Any]:
        return {"prompt_tokens": entry["prompt_tokens"], "predicted_score": entry["predicted_quality"],
                "predicted_output_tokens": entry["predicted_output_tokens"],
                "generated_tokens": entry.get("generated_tokens", 0.0), "age_s": max(0.0, now - entry["sent_at"])}

    arrived = {"prompt_tokens": request["prompt_tokens"],
               "predicted_score": [q if math.isfinite(q) else 0.0 for q in map(float, request["predicted_quality"])],
               "predicted_output_tokens": list(request["predicted_output_tokens"])}
    experts = [{"kv_utilization": inst["kv_utilization"], "kv_capacity_tokens": inst["kv_capacity_tokens"],
                "max_running": inst["max_running"], "running": [row(e) for e in inst["running"][:pad]],
                "waiting": [row(e) for e in inst["waiting"][:pad]]} for inst in observed]
    return arrived, experts


def observation_qos_graph(arrived: dict[str, Any], experts: list[dict[str, Any]], spec: dict[str, Any]) -> np.ndarray:
    """000's graph features, flattened in the order arrived | experts | running slots | waiting
    slots (K per expert, zero rows for empty slots). `arrived`: prompt_tokens and per expert
    predicted_score / predicted_output_tokens; each expert: kv_utilization, kv_capacity_tokens,
    max_running and its running and waiting requests, each {prompt_tokens, predicted_score,
    predicted_output_tokens, generated_tokens, age_s}. The baseline variant keeps the expert rows only."""
    n, k, limit = spec["experts"], spec["pad"], spec["requirement_s"]
    if len(experts) != n:
        raise ValueError(f"{len(experts)} experts given, the policy was trained for {n}")
    expert_rows = [[e["kv_utilization"], len(e["running"]) / k, len(e["waiting"]) / k] for e in experts]
    if spec["variant"] == "baseline":
        return np.asarray(expert_rows, dtype=np.float32).ravel()
    head = [arrived["prompt_tokens"] / 1000.0, *arrived["predicted_score"],
            *(t / 1000.0 for t in arrived["predicted_output_tokens"])]
    slots = {"running": [], "waiting": []}
    for i, e in enumerate(experts):
        share = e["max_running"] / e["kv_capacity_tokens"]
        for queue, rows in slots.items():
            if len(e[queue]) > k:
                raise ValueError(f"expert {i}: {len(e[queue])} {queue} requests, more than the {k} slots")
            for r in e[queue]:
                per_token = r["age_s"] / max(1, r["generated_tokens"]) / limit
                rows.append([1.0, r["prompt_tokens"] / 1000.0, r["predicted_score"],
                             r["predicted_output_tokens"] / 1000.0,
                             (r["prompt_tokens"] + r["generated_tokens"]) * share,
                             r["generated_tokens"] / 1000.0, min(10.0, per_token)])
            rows += [[0.0] * 7] * (k - len(e[queue]))
    parts = [head, *expert_rows, *slots["running"], *slots["waiting"]]
    return np.asarray([x for part in parts for x in part], dtype=np.float32)

@POLICY_INPUTS.register("qos_graph")
class QosGraphInput(LiveInput):
    """Built by `qos_graph_telemetry` over the router's view, as the training environment builds it; the
    drop action is set aside (the dispatcher decides each request as it comes)."""

    @staticmethod
    def matches(spec: Mapping[str, Any]) -> bool:
        return "experts" in spec

    def choose(self, policy, context: DecisionContext) -> int:
        arrived, experts = qos_graph_telemetry(context.observed, context.request, context.now, self.spec["pad"])
        scores = policy.scores(observation_qos_graph(arrived, experts, dict(self.spec)))[0]
        return best_instance(scores, 1, self.fleet.instances)  # action 0: drop
