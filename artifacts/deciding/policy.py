"""Runtime routing policy: an ONNX network plus the JSON spec of its observation and actions.

`policy.json`: {observation: {size, variant, ...}, action: {n, kind, meaning}, output: "q_values" |
"logits" | "probabilities" | "bias"}. `act(observation)` returns the action index (argmax of Q values or
logits) or, for a simplex action (004), the routing distribution itself, or for a `queue_bias` action
the bias per instance, clipped and rounded to half requests as in training; `dispatch(biases,
outstanding)` then routes each request of the slot by biased shortest queue
(`routeforge.artifacts.deciding.heuristics.biased_shortest_queue`). `observation_workload_aware(...)`,
`observation_slot_distribution(...)` and `observation_qos_graph(...)` build each paper's observation from the
telemetry a router has, exactly as the training environments do; `observation_queue_state(...)` builds the
one a live router has from vLLM's `/metrics` (the PPO queue-bias policy of the fleet evaluation).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
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


def observation_queue_state(states: list[dict[str, Any]], arrivals_per_s: float, spec: dict[str, Any]) -> np.ndarray:
    """The `queue_state` observation (`QueueStateBiasEnv`), from what a vLLM server's `/metrics` shows:
    per instance its running and waiting requests over the limits the policy was trained with, and
    its KV-cache usage (0..1); then the arrivals per second of the last slot over `rate_scale_rps`.
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
