"""Runtime routing policy: an ONNX network plus the JSON spec of its observation and actions.

`policy.json`: {observation: {size, variant, global, per_instance, scales, ...}, action: {n,
meaning}, output: "q_values" | "logits" | "probabilities"}. `act(observation)` returns the action
index (argmax of Q values or logits); `observation_001(...)` builds 001's observation from the
telemetry a router has, exactly as the training environment did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class RoutingPolicy:
    spec: dict[str, Any]
    session: Any

    @classmethod
    def load(cls, folder: Path) -> RoutingPolicy:
        import onnxruntime as ort

        folder = Path(folder)
        spec = json.loads((folder / "policy.json").read_text())
        return cls(spec, ort.InferenceSession(str(folder / "policy.onnx"), providers=["CPUExecutionProvider"]))

    def scores(self, observations: np.ndarray) -> np.ndarray:
        obs = np.atleast_2d(np.asarray(observations, dtype=np.float32))
        size = self.spec["observation"]["size"]
        if obs.shape[1] != size:
            raise ValueError(f"observation has {obs.shape[1]} features, the policy expects {size}")
        return self.session.run(None, {"observation": obs})[0]

    def act(self, observation: np.ndarray) -> int:
        return int(self.scores(observation)[0].argmax())

    def action_meaning(self, action: int) -> str:
        return self.spec["action"]["meaning"][action]


def observation_001(router_queue: int, prompt_tokens: int, predicted_output_tokens: float,
                    instances: list[dict[str, Any]], spec: dict[str, Any]) -> np.ndarray:
    """001's observation from telemetry. Each instance dict: max_running, kv_utilization, and the
    running requests as a list of {prompt_tokens, predicted_output_tokens, generated_tokens}, plus
    the current TPOT estimate `tpot_s` (and `waiting` for the baseline variant)."""
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
    return np.asarray(obs, dtype=np.float32)
