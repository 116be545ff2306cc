"""`toy_load`, the toy policy's own observation: the request's prompt length, then per instance its
requests in the system over its slots and its KV-cache use, all from the router-visible view. Its
builder is registered with the runtime (`POLICY_INPUTS`), so the `Dispatcher` builds it from live
scrapes, and its environment with the simulator (`POLICY_ENVIRONMENTS`, in `policy.py`), so replay
runs it: nothing outside this folder names it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.policy_inputs.base import POLICY_INPUTS, DecisionContext, LiveInput, best_instance

KIND = "toy_load"


def observation_toy_load(prompt_tokens: float, observed: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """[prompt tokens / 1000, then per instance (running + waiting) / slots, KV use]."""
    obs = [prompt_tokens / 1000.0]
    for inst in observed:
        obs += [(len(inst["running"]) + len(inst["waiting"])) / inst["max_running"], inst["kv_utilization"]]
    return np.asarray(obs, dtype=np.float32)


@POLICY_INPUTS.register(KIND)
class ToyLoadInput(LiveInput):
    def choose(self, policy, context: DecisionContext) -> int:
        observation = observation_toy_load(context.request["prompt_tokens"], context.observed)
        return best_instance(policy.scores(observation)[0], 0, self.fleet.instances)
