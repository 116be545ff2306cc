"""Runtime routing policy: an ONNX network plus the JSON spec of its observation and actions.

`policy.json`: {observation: {size, variant, ...}, action: {n, kind, meaning}, output: "q_values" |
"logits" | "probabilities" | "bias"}. `act(observation)` returns the action index (argmax of Q values or
logits) or, for a simplex action (004), the routing distribution itself, or for a `queue_bias` action
the bias per instance, clipped and rounded to half requests as in training; `dispatch(biases,
outstanding)` then routes each request of the slot by biased shortest queue
(`routeforge.artifacts.deciding.heuristics.biased_shortest_queue`). What the network takes is built by
its observation's kind (`routeforge.artifacts.deciding.policy_inputs`), the function its training
environment calls too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.common.extensions import Registry
from routeforge.artifacts.deciding.components import register_component
from routeforge.artifacts.deciding.heuristics import biased_shortest_queue, queue_biases

# How a policy's network output becomes its action, by `policy.json`'s `action.kind`: each kind
# registers `act(output, spec, rng) -> action`; `dispatches`: the action is per-instance biases that
# `RoutingPolicy.dispatch` turns into one instance per request. A new kind is one registration here or
# in a module `$ROUTEFORGE_EXTENSIONS` names (with its training environment's `action_spec`).
ACTION_KINDS: Registry[Callable[[np.ndarray, dict, np.random.Generator | None], Any]] = Registry(
    "policy action kind", ("routeforge.artifacts.deciding.policy",))


@ACTION_KINDS.register("discrete")
def _discrete(out: np.ndarray, spec: dict, rng: np.random.Generator | None) -> int:
    """One of `n` actions: the argmax, or with `rng` a sample from softmax(logits) for a policy whose
    output is logits (SAC)."""
    if rng is not None and spec["output"] == "logits":
        z = np.exp(out.astype(np.float64) - out.max())
        return int(rng.choice(len(z), p=z / z.sum()))
    return int(out.argmax())


@ACTION_KINDS.register("simplex")
def _simplex(out: np.ndarray, spec: dict, rng: np.random.Generator | None) -> np.ndarray:
    """004's routing distribution over the instances, the network's (softmaxed) output itself."""
    return out


@ACTION_KINDS.register("queue_bias", dispatches=True)
def _queue_bias(out: np.ndarray, spec: dict, rng: np.random.Generator | None) -> np.ndarray:
    """A bias per instance, clipped and rounded to half requests as in training."""
    return queue_biases(out, tuple(spec["action"].get("bounds", (-10.0, 10.0))))


@register_component("routing_policy")
@dataclass
class RoutingPolicy:
    spec: dict[str, Any]
    session: Any

    @classmethod
    def load(cls, folder: Path) -> RoutingPolicy:
        import onnxruntime as ort

        folder = Path(folder)
        spec = json.loads((folder / "policy.json").read_text())
        options = ort.SessionOptions()
        options.log_severity_level = 3  # graph policies' masked edges make ORT warn about symbolic shapes
        return cls(spec, ort.InferenceSession(str(folder / "policy.onnx"), options, providers=["CPUExecutionProvider"]))

    def scores(self, observations: np.ndarray) -> np.ndarray:
        obs = np.atleast_2d(np.asarray(observations, dtype=np.float32))
        size = self.spec["observation"]["size"]
        if obs.shape[1] != size:
            raise ValueError(f"observation has {obs.shape[1]} features, the policy expects {size}")
        return self.session.run(None, {"observation": obs})[0]

    def act(self, observation: np.ndarray, rng: np.random.Generator | None = None) -> int | np.ndarray:
        """The greedy action; with `rng`, a policy whose output is logits (SAC) samples its action
        from softmax(logits) instead. `spec["act"]` says which the policy was evaluated with
        ("sample" or "greedy"; absent in bundles before it was recorded: sample for logits)."""
        return self._act(self.scores(observation)[0], self.spec, rng)

    @cached_property
    def _act(self):
        """The registered action function, looked up once (`act` runs on every routing decision)."""
        return ACTION_KINDS.get(self.action_kind)

    @property
    def action_kind(self) -> str:
        """The action's kind in `ACTION_KINDS`; specs of discrete policies name none."""
        return self.spec["action"].get("kind", "discrete")

    def dispatch(self, biases: np.ndarray, outstanding: list[int]) -> int:
        """For a `queue_bias` policy: the instance a request goes to, given the biases `act` returned
        for this slot and each instance's running + waiting requests now."""
        if not ACTION_KINDS.entry(self.action_kind).metadata.get("dispatches"):
            able = [e.name for e in ACTION_KINDS.entries() if e.metadata.get("dispatches")]
            raise ValueError(f"dispatch needs a policy whose action is {' or '.join(able)}; this one's action is "
                             f"{self.action_kind!r}")
        return biased_shortest_queue(outstanding, np.asarray(biases, dtype=np.float64).tolist())

    def action_meaning(self, action: int) -> str:
        return self.spec["action"]["meaning"][action]

