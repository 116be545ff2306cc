"""The `queue_state` observation (`QueueStateBiasEnv`): what a vLLM server's `/metrics` shows per
instance, and the arrival rate of the last slot. The policy's output is a bias per instance for
join-shortest-queue (`ACTION_KINDS["queue_bias"]`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.policy_inputs.base import POLICY_INPUTS, DecisionContext, FleetFacts, LiveInput

VARIANT = "queue_state"


def observation_queue_state(states: list[dict[str, Any]], arrivals_per_s: float, spec: dict[str, Any]) -> np.ndarray:
    """The `queue_state` observation, from what a vLLM server's `/metrics` shows: per instance its
    running and waiting requests over the limits the policy was trained with, and its KV-cache usage
    (0..1); then the arrivals per second of the last slot over `rate_scale_rps`.
    Each state: {running, waiting, kv_usage}."""
    if len(states) != spec["instances"]:
        raise ValueError(f"{len(states)} instances given, the policy was trained for {spec['instances']}")
    if not (np.isfinite(arrivals_per_s) and arrivals_per_s >= 0):
        raise ValueError(f"arrivals_per_s: a finite rate >= 0, got {arrivals_per_s!r}")
    obs = []
    for s, running, waiting in zip(states, spec["max_running"], spec["max_waiting"]):
        obs += [s["running"] / running, s["waiting"] / waiting, min(1.0, max(0.0, s["kv_usage"]))]
    obs.append(arrivals_per_s / spec["rate_scale_rps"])
    return np.asarray(obs, dtype=np.float32)


@POLICY_INPUTS.register(VARIANT)
class QueueStateInput(LiveInput):
    """Biases from the live counts and the arrival rate (counted over the policy's slot from the
    dispatcher's own decisions unless the caller gives it), then join-shortest-queue less the biases."""

    def __init__(self, spec: Mapping[str, Any], fleet: FleetFacts):
        super().__init__(spec, fleet)
        self._recent: deque[float] = deque()  # decision times within the last slot

    @staticmethod
    def matches(spec: Mapping[str, Any]) -> bool:
        return spec.get("variant") == VARIANT

    def choose(self, policy, context: DecisionContext) -> int:
        rate = context.arrivals_per_s
        if rate is None:
            now, slot = time.monotonic(), self.spec["slot_s"]
            self._recent.append(now)
            while self._recent and self._recent[0] < now - slot:
                self._recent.popleft()
            rate = len(self._recent) / slot
        live = [{"running": s.running, "waiting": s.waiting, "kv_usage": s.kv_usage} for s in context.states]
        biases = policy.act(observation_queue_state(live, rate, dict(self.spec)))
        return policy.dispatch(biases, [s.running + s.waiting for s in context.states])
