"""001's workload-aware observation (`WorkloadAwareEnv`): the router's queue and the next request,
then per instance its running requests by prompt and decode length, free KV share and earliest
completion (and, where the spec lists them, waiting requests, a full queue, the request's prefix
overlap there and its predicted quality on the instance's model). The policy scores each instance
(and, last, a wait)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.policy_inputs.base import (
    POLICY_INPUTS,
    DecisionContext,
    FleetFacts,
    LiveInput,
    best_instance,
)
from routeforge.artifacts.deciding.prefix_index import PrefixIndex

VARIANTS = ("baseline", "aware", "guided")


def observation_workload_aware(router_queue: int, prompt_tokens: int, predicted_output_tokens: float,
                    instances: list[dict[str, Any]], spec: dict[str, Any]) -> np.ndarray:
    """001's observation from telemetry. Each instance dict: max_running, kv_utilization, and the
    running requests as a list of {prompt_tokens, predicted_output_tokens, generated_tokens}, plus
    the current TPOT estimate `tpot_s` (and `waiting` for the baseline variant, or where the spec's
    per-instance features list it; `full`, whether its waiting queue is full, where they list that;
    `prefix_overlap`, the share of this request's prompt blocks the instance caches as a leading run
    (0 where unknown), and `predicted_quality`, this request's predicted quality on the instance's
    model, where they list those)."""
    obs = [router_queue / 10.0, prompt_tokens / 1000.0, float(predicted_output_tokens > spec["decode_split_tokens"])]
    if len(instances) != spec["instances"]:
        raise ValueError(f"{len(instances)} instances given, the policy was trained for {spec['instances']}")
    for inst in instances:
        scale, jobs = inst["max_running"], inst["running"]
        if spec["variant"] == "baseline":
            obs += [len(jobs) / scale, inst["waiting"] / scale]
            continue
        est = [j["predicted_output_tokens"] for j in jobs]
        left = [max(0.0, e - j["generated_tokens"]) for e, j in zip(est, jobs)]
        obs += [sum(j["prompt_tokens"] <= spec["prompt_split_tokens"] for j in jobs) / scale,
                sum(j["prompt_tokens"] > spec["prompt_split_tokens"] for j in jobs) / scale,
                sum(e <= spec["decode_split_tokens"] for e in est) / scale,
                sum(e > spec["decode_split_tokens"] for e in est) / scale,
                1.0 - inst["kv_utilization"], (min(left) * inst["tpot_s"] / 10.0) if left else 0.0]
        if "waiting" in spec["per_instance"]:  # specs written before the option lack it
            obs.append(inst["waiting"] / scale)
        if "full" in spec["per_instance"]:  # its waiting queue is full: a policy that masks it never sends there
            obs.append(1.0 if inst.get("full") else 0.0)
        if "prefix_overlap" in spec["per_instance"]:  # the share of the request's blocks it caches
            obs.append(float(inst.get("prefix_overlap", 0.0)))
        if "predicted_quality" in spec["per_instance"]:  # the request's quality on its model
            obs.append(float(inst["predicted_quality"]))
    return np.asarray(obs, dtype=np.float32)


def workload_aware_telemetry(observed: Sequence[Mapping[str, Any]], predicted_quality: Sequence[float],
                             overlaps: Sequence[float] | None = None,
                             buffers: Sequence[float | None] | None = None) -> list[dict[str, Any]]:
    """The instances as `observation_workload_aware` takes them, from the router-visible observation
    (`routeforge.artifacts.deciding.observation`: an `ObservedInstance` per instance) and nothing else: the
    simulator's environment and the runtime's `Dispatcher` both call this, so a policy is served what
    it was trained on. `predicted_quality`: the request's on each instance's model (NaN: 0);
    `overlaps`: the share of its prompt's blocks the router's own prefix index places on each instance
    (None: 0); `buffers`: each instance's waiting-queue limit the router is configured with (None: no
    limit), against which `full` counts the observation's waiting requests."""
    out = []
    for i, inst in enumerate(observed):
        waiting, buffer = len(inst["waiting"]), (buffers[i] if buffers is not None else None)
        quality = float(predicted_quality[i])
        out.append({"max_running": inst["max_running"], "kv_utilization": inst["kv_utilization"],
                    "tpot_s": inst["tpot_s"], "running": inst["running"], "waiting": waiting,
                    "full": buffer is not None and waiting >= buffer,
                    "prefix_overlap": float(overlaps[i]) if overlaps is not None else 0.0,
                    "predicted_quality": quality if math.isfinite(quality) else 0.0})
    return out

@POLICY_INPUTS.register("workload_aware")
class WorkloadAwareInput(LiveInput):
    """Built by `workload_aware_telemetry` over the router's view, as the training environment builds it;
    a policy that observes prefix overlap reads it from an index of what this dispatcher sent where,
    within each instance's KV space. The router's queue is always empty (it decides each request as
    it comes) and the predicted output is the mean over the models some instance serves."""

    def __init__(self, spec: Mapping[str, Any], fleet: FleetFacts):
        super().__init__(spec, fleet)
        self._prefix: PrefixIndex | None = None  # made at the first request with block ids

    @staticmethod
    def matches(spec: Mapping[str, Any]) -> bool:
        return spec.get("variant") in VARIANTS and "per_instance" in spec and "experts" not in spec

    def choose(self, policy, context: DecisionContext) -> int:
        request, overlaps = context.request, None
        if "prefix_overlap" in self.spec["per_instance"] and request.get("hash_ids"):
            if self._prefix is None:
                self._prefix = PrefixIndex([max(1, int(kv) // request["block_tokens"]) for kv in self.fleet.kv_tokens])
            ids = request["hash_ids"]
            overlaps = [blocks / len(ids) for blocks in self._prefix.overlaps(ids)]
        telemetry = workload_aware_telemetry(context.observed, request["predicted_quality"], overlaps)
        predicted = float(np.mean(context.output_tokens[list(self.fleet.served_models)]))
        observation = observation_workload_aware(0, request["prompt_tokens"], predicted, telemetry, dict(self.spec))
        return best_instance(policy.scores(observation)[0], 0, self.fleet.instances)  # the last action: wait

    def sent(self, instance: int, context: DecisionContext) -> None:
        if self._prefix is not None and context.request.get("hash_ids"):
            self._prefix.record(instance, list(context.request["hash_ids"]))
