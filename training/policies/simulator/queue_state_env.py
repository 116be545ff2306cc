"""The learned routing policy a live router can run: every slot of τ seconds, a bias per instance
from what each vLLM server's `/metrics` shows (requests running and waiting, KV-cache usage) and
the arrival rate of the last slot; each request of the slot then goes to the instance with the
fewest running + waiting requests less its bias (all-zero biases are join-shortest-queue exactly).

Why this and not 004's environment as it is: 004 observes every request's age on single-server
instances, which no vLLM server exposes, and its batch-size-1 instances are not the fleet's. Here
the instances are the fleet's own continuous-batching ones (batch limit, buffer, KV cache, as the
evaluation simulates them), the observation is the one `Dispatcher` builds from live `/metrics`
(`artifacts.deciding.policy_inputs.queue_state.observation_queue_state`), and a request is late past its own SLO
(`slo_scale` × its E2E alone on the idle instance `slo_reference` names: the one that would serve it
fastest, the same wherever it goes, or the one it went to; the evaluation's goodput). The
reward keeps 004's shape, r = −late − α·rejected + β·Σ_i g_i·ν_i (ν_i: completions within their SLO
at instance i, g_i its model's mean quality), so quality counts beside latency as in RouteBalance.
PPO trains it from join-shortest-queue (`PpoSettings.teacher: shortest_queue`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from routeforge.artifacts.deciding.policy_inputs.queue_state import observation_queue_state
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.policy_environments import POLICY_ENVIRONMENTS
from routeforge.training.policies.simulator.slot_distribution_env import SlotDistributionEnv

VARIANT = "queue_state"


class QueueStateBiasEnv(SlotDistributionEnv):
    metadata = {"render_modes": []}

    def __init__(self, profiles: list[InstanceProfile], models: list[int], accuracy: list[float], workload,
                 rate_scale_rps: float, slo_scale: float = 5.0, slot_s: float = 0.5, alpha: float = 1.0,
                 beta: float = 1.0, max_slots: int | None = None, bias_bound: float = 8.0,
                 slo_reference: str = "serving", block_tokens: int | None = None):
        """`rate_scale_rps`: what the arrival-rate feature is divided by (the fleet's sustainable rate);
        `bias_bound`: biases are clipped to ±this many requests."""
        if not (rate_scale_rps > 0 and slo_scale >= 1 and slot_s > 0 and bias_bound > 0):
            raise ValueError("QueueStateBiasEnv: rate_scale_rps > 0, slo_scale >= 1, slot_s > 0 and bias_bound > 0 "
                             f"required, got {rate_scale_rps}, {slo_scale}, {slot_s}, {bias_bound}")
        super().__init__(profiles, models, accuracy, workload, requirement_s=1.0, slot_s=slot_s, alpha=alpha,
                         beta=beta, max_slots=max_slots, engine="batching", dispatch="biased_shortest_queue",
                         block_tokens=block_tokens)
        self.profiles = list(profiles)  # the fleet's instances as they are, not 004's single servers
        self.rate_scale_rps, self.slo_scale = float(rate_scale_rps), float(slo_scale)
        self.slo_reference = slo_reference
        self._last_rate = 0.0  # arrivals per second of the slot just routed
        self.observation_space = gym.spaces.Box(0.0, np.inf, shape=(3 * self.m + 1,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-bias_bound, bias_bound, shape=(self.m,), dtype=np.float32)
        # built once: every observation reads it (`observation_queue_state`)
        waiting = [p.buffer if p.buffer is not None else p.max_running for p in self.profiles]
        self._spec = {"size": int(self.observation_space.shape[0]), "variant": VARIANT, "instances": self.m,
                      "max_running": [float(p.max_running) for p in self.profiles],
                      "max_waiting": [float(w) for w in waiting],
                      "rate_scale_rps": self.rate_scale_rps, "slot_s": self.slot_s, "slo_scale": self.slo_scale,
                      "per_instance": ["running / max_running", "waiting / max_waiting", "kv_usage"],
                      "global": ["arrivals in the last slot per second / rate_scale_rps"]}

    def observation_spec(self) -> dict:
        return dict(self._spec)

    def reset(self, *, seed: int | None = None, options=None):
        self._last_rate = 0.0
        return super().reset(seed=seed, options=options)

    def _route_biased(self, first: int, last: int, bias: list[float]) -> list[int]:
        """As the base routes a slot's arrivals, noting their rate for the observation that follows."""
        self._last_rate = (last - first) / self.slot_s
        return super()._route_biased(first, last, bias)

    def _limit(self, i: int, j: int) -> float:
        """Arrival i's SLO at instance j: `slo_scale` × its E2E alone on the fastest idle instance for it,
        or (`slo_reference="serving"`) on j itself (the evaluation's)."""
        req = self.request(i)
        if self.slo_reference == "fastest":
            return self.slo_scale * min(p.unloaded_e2e(req.prompt_tokens, float(req.output_tokens[m]))
                                        for p, m in zip(self.profiles, self.models))
        tokens = float(req.output_tokens[self.models[j]])
        return self.slo_scale * self.profiles[j].unloaded_e2e(req.prompt_tokens, tokens)

    def live_states(self) -> list[dict]:
        """Per instance what its `/metrics` scrape shows (requests running and waiting, KV-cache usage),
        taken through the router's side of the cluster (`Cluster.router`), as the `Dispatcher` reads it."""
        return [{"running": s.running, "waiting": s.waiting, "kv_usage": s.kv_usage}
                for s in self.fleet.cluster.router(self.t).scrapes()]

    def _observe(self) -> np.ndarray:
        if self.fleet is None:
            return np.zeros(self.observation_space.shape, dtype=np.float32)
        return observation_queue_state(self.live_states(), self._last_rate, self._spec)


@POLICY_ENVIRONMENTS.register(VARIANT)
def _from_spec(spec, profiles, models, workload, block_tokens):
    """The queue-state environment for an exported spec: biases from live counts, clipped to the
    spec's bounds; the reward's qualities play no part in replay (all 0)."""
    obs = spec["observation"]
    return QueueStateBiasEnv(profiles, models, [0.0] * len(models), workload, obs["rate_scale_rps"], obs["slo_scale"],
                             obs["slot_s"], bias_bound=float(spec["action"]["bounds"][1]), block_tokens=block_tokens)
