"""004's observation (single-server request ages per instance). A router does not keep each
instance's request ages in service order, so the dispatcher cannot build it: the kind is registered
for recognition only (a `PolicyInput`, not a `LiveInput`), and where such a policy is recommended the
dispatcher says so and dispatches with a heuristic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.policy_inputs.base import POLICY_INPUTS, PolicyInput


def observation_slot_distribution(instances: list[dict[str, Any]], spec: dict[str, Any]) -> np.ndarray:
    """004's observation. Each instance dict: `ages_s`, the ages of its requests oldest first (the
    one in service included), and `elapsed_service_s` of the one in service (0 when idle)."""
    if len(instances) != spec["instances"]:
        raise ValueError(f"{len(instances)} instances given, the policy was trained for {spec['instances']}")
    scale, buffer, pad = spec["requirement_s"], spec["buffer"], spec["pad"]
    obs = []
    for k, inst in enumerate(instances):
        ages = list(inst["ages_s"])
        if len(ages) > buffer:
            raise ValueError(f"instance {k}: {len(ages)} requests, more than the buffer of {buffer}")
        one_hot = [0.0] * (buffer + 1)
        one_hot[len(ages)] = 1.0
        obs += one_hot + [inst["elapsed_service_s"] / scale] + [a / scale for a in ages] + [0.0] * (pad - len(ages))
    return np.asarray(obs, dtype=np.float32)


@POLICY_INPUTS.register("slot_distribution")
class SlotDistributionInput(PolicyInput):
    @staticmethod
    def matches(spec: Mapping[str, Any]) -> bool:
        return spec.get("variant") == "004"
