"""000's routing environment: at every arrival, drop the request or route it to one of N
heterogeneous experts; QoS-aware reward with the action impact estimator.

QoS of a completed request (000 eq. 1): φ = s · 1[l ≤ L], s its true quality on the expert that
served it, l = (completion − arrival) / output tokens, L the per-token latency requirement. A
dropped or rejected request has φ = 0.

Observation (built by `observation_qos_graph`, the graph's node features flattened,
from what a router sees: `artifacts.deciding.observation`'s scrapes and the router's own sends, so a request's
tokens generated are estimated from its age):
- arrived request: prompt tokens, and per expert its predicted score ŝ and output length d̂;
- expert: KV-cache utilization, running and waiting counts (/ K);
- running and waiting requests, K slots per expert, each: present, prompt tokens, ŝ and d̂ on its
  expert, memory share, tokens generated, latency per token so far (/ L, capped at 10).
The "baseline" variant (000's baseline RL) sees only the expert rows and earns only the QoS of
completions.

Reward after routing request j to expert n (000 §V-C): Σ φ_i of the requests completed since the
previous decision − Σ_{i running on n} ŝ_i · 1[l_i + l⁺_i ≥ L], with the action impact estimate
l⁺_i = (k1 · p_j + k2 · Σ_{k=1..m} (p_j + k)) / d̂_i, m = min(d̂_i − d_i, d̂_j), k1 the tier's prefill
gradient and k2 its decode gradient per context token (METHODS.md).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
from routeforge.artifacts.deciding.policy_inputs.qos_graph import observation_qos_graph, qos_graph_telemetry
from routeforge.training.policies.simulator.cluster import DROP, Cluster, Request
from routeforge.training.policies.simulator.episode_seed import episode_seed
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.policy_environments import POLICY_ENVIRONMENTS
from routeforge.training.policies.simulator.stepper import Stepper

REQUEST_FEATURES = ["present", "prompt_tokens / 1000", "predicted_score", "predicted_output_tokens / 1000",
                    "memory_share x max_running", "generated_tokens / 1000", "latency_per_token / L (<= 10)"]


def qos(job, request: Request, model: int, requirement_s: float) -> float:
    if job.finished is None or job.rejected:
        return 0.0
    per_token = (job.finished - request.arrival) / max(1, job.output_tokens)
    return float(request.quality[model]) if per_token <= requirement_s else 0.0


class QosGraphEnv(gym.Env):
    metadata = {"render_modes": []}
    # what a trainer's `keep_best_round` judges rounds by: the QoS of completions (the step info's
    # "qos"), not the reward, whose action-impact term is shaping the evaluation never counts
    objective = "qos"

    def __init__(self, profiles: list[InstanceProfile], models: list[int], workload, requirement_s: float,
                 variant: str = "han", pad: int = 5, max_decisions: int | None = None,
                 block_tokens: int | None = None):
        """`workload(seed) -> list[Request]`; instances run at most `pad` requests with `pad` waiting,
        so the observation shows every request an expert holds (000's queue capacity 5);
        `block_tokens`: instances cache prompt blocks of that many tokens (None: no prefix cache)."""
        if variant not in ("han", "baseline"):
            raise ValueError(f"variant must be han or baseline, got {variant!r}")
        self.profiles = [dataclasses.replace(p, max_running=pad, buffer=pad) for p in profiles]
        self.models, self.workload, self.requirement_s = list(models), workload, requirement_s
        self.variant, self.pad, self.max_decisions = variant, pad, max_decisions
        self.block_tokens = block_tokens
        self.n = len(profiles)
        spec = self.observation_spec()
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(spec["size"],), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(self.n + 1)  # 0: drop, 1..N: expert
        self.stepper: Stepper | None = None

    def observation_spec(self) -> dict:
        n, k = self.n, self.pad
        sizes = {"arrived": 1 + 2 * n, "experts": n * 3, "running": n * k * len(REQUEST_FEATURES),
                 "waiting": n * k * len(REQUEST_FEATURES)}
        if self.variant == "baseline":
            sizes = {"experts": n * 3}
        return {"size": sum(sizes.values()), "variant": self.variant, "experts": n, "pad": k,
                "requirement_s": self.requirement_s, "layout": sizes,
                "arrived": ["prompt_tokens / 1000"] + [f"predicted_score_{i}" for i in range(n)]
                + [f"predicted_output_tokens_{i} / 1000" for i in range(n)],
                "expert": ["kv_utilization", "running / K", "waiting / K"], "request": REQUEST_FEATURES}

    def action_spec(self) -> dict:
        return {"n": self.n + 1, "kind": "discrete",
                "meaning": ["drop"] + [f"route to expert {i}" for i in range(self.n)]}

    def action_for(self, choice: int) -> int:
        """The action that carries out a simulator decision (an expert index, or DROP)."""
        return 0 if choice == DROP else int(choice) + 1

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        requests = self.workload(episode_seed(self.np_random, seed))
        self.known = {r.rid: r for r in requests}
        self.stepper = Stepper(Cluster(self.profiles, models=self.models, block_tokens=self.block_tokens), requests,
                               decision_interval_s=1.0,
                               max_queue_s=float("inf"))
        self.decisions = 0
        self.stepper.head()
        return self._observe(), {}

    def step(self, action: int):
        s = self.stepper
        choice = DROP if int(action) == 0 else int(action) - 1
        penalty = self.impact(choice) if (choice != DROP and self.variant == "han") else 0.0
        finished = s.act(choice)
        gained = sum(qos(job, self.known[job.rid], s.outcomes[job.rid].model, self.requirement_s) for job in finished)
        self.decisions += 1
        terminated = s.over
        truncated = not terminated and self.max_decisions is not None and self.decisions >= self.max_decisions
        return self._observe(), float(gained - penalty), terminated, truncated, {"qos": gained, "impact": penalty}

    def impact(self, n: int) -> float:
        """000's action impact: the predicted QoS of expert n's running requests that the new
        request would push past the latency requirement."""
        inst, req, now = self.stepper.cluster.instances[n], self.stepper.head(), self.stepper.t
        k1, k2 = inst.profile.prefill_s_per_token, inst.profile.decode_h_s_per_token
        p_j, d_j = req.prompt_tokens, req.est_tokens(inst.model)
        at_risk = 0.0
        for job in inst.running.values():
            other = self.known[job.rid]
            d_i, done = max(1.0, other.est_tokens(inst.model)), inst.generated(job)
            m = max(0.0, min(d_i - done, d_j))
            extra = (k1 * p_j + k2 * (m * p_j + m * (m + 1) / 2)) / d_i
            current = (now - other.arrival) / max(1, done)
            if current + extra >= self.requirement_s:
                at_risk += other.est_quality(inst.model)
        return at_risk

    def telemetry(self) -> tuple[dict, list[dict]]:
        """(the arrived request, the experts) as `observation_qos_graph` takes them, from
        the router's side of the cluster only (`artifacts.deciding.observation`), by the runtime's own function."""
        s = self.stepper
        req, router = s.head(), s.cluster.router(s.t)
        if req is None:  # the episode is over: an empty arrival
            asked, observed = ({"prompt_tokens": 0, "predicted_quality": [0.0] * self.n,
                                "predicted_output_tokens": [0.0] * self.n}, router.instances())
        else:
            asked, observed = router.observe(req)
        return qos_graph_telemetry(observed, asked, s.t, self.pad)

    def _observe(self) -> np.ndarray:
        arrived, experts = self.telemetry()
        return observation_qos_graph(arrived, experts, self.observation_spec())

    def results(self) -> list:
        return self.stepper.results()


@POLICY_ENVIRONMENTS.register("qos_graph")
def _from_spec(spec, profiles, models, workload, block_tokens):
    """000's graph environment (HAN or the baseline RL) for an exported spec."""
    obs = spec["observation"]
    return QosGraphEnv(profiles, models, workload, obs["requirement_s"], variant=obs["variant"], pad=obs["pad"],
                       block_tokens=block_tokens)
