"""001's routing environment (Gymnasium): route the request at the head of the router queue to one
of m instances, or wait one decision interval (0.02 s).

Observation (3 + 6·m; 27 for 4 instances), normalised as written in `observation_spec()`, built from
what a router sees (`routeforge.artifacts.deciding.observation`: scrapes of `/metrics` and its own sends, so
its running requests' generated tokens are estimated from their age, and another client's requests
are as long as the router's own on average) by the function the runtime's `Dispatcher` calls:
- router queue length; the next request's prompt tokens and its predicted decode bucket;
- per instance: running requests with short / long prompts, with short / long predicted outputs,
  free KV-cache share, and the estimated time until its earliest running request completes.
  With `observe_waiting` also its waiting requests (3 + 7·m): an addition to 001, whose
  observation cannot tell an instance with a queue behind a full batch from one without. With
  `observe_full` also whether its waiting queue is full (a request sent there is rejected), which
  the DDQN masks (`DdqnSettings.mask_full`, `ddqn_workload_guided.model.MaskFull`).
  With `observe_prefix` also the share of the next request's prompt blocks the instance holds as a
  leading run in its prefix cache (`prefix_overlap`; the environment's instances cache blocks of
  `block_tokens` when given, as a Mooncake-format trace's requests carry block ids): what llm-d's,
  Dynamo's and SGLang's routers score. With `observe_quality` also the next request's predicted
  quality on the instance's model (`predicted_quality`): choosing the instance then chooses the
  model with the request's own quality in view, as RouteBalance's joint decision does (002).
  Both are departures from 001, whose instances serve one model and cache nothing.
The "baseline RL" variant sees only the queue length, the next prompt and each instance's running
and waiting counts (3 + 2·m).

Reward per decision: +60 − E2E (seconds) per request completed since the previous decision (001
gives +60 per completion; without the E2E term every policy that serves all requests earns the
same, and a penalty on time in the system per step would favour the shortest steps, i.e. waiting),
− the router queue length (001's queue penalty), and for the workload-guided variant
− λ_k · s · r_mixing of the chosen instance, where
001's mixing impact is r_mixing = α·r_p + (1 − α)·r_d with T_p = grad_p · (p_new + Σ_running (p_j +
d_j)) penalised beyond ε as r_p = max(0, T_p − ε) / T_p (bounded, unlike T_p itself, which on a
busy 70B instance reaches tens of seconds and drowns every other reward) and r_d = running tokens /
KV capacity; s = `guidance_scale` (10, against the queue penalty's units); the guidance weight
λ_k = e^(−0.5 k) decays over training episodes k (set by the trainer).
With `reward="in_system"` the E2E term is paid as it accrues, −∫ N(t) dt over each step (N: the
requests in the router queue or on an instance), instead of in one lump at completion: the same
total over an episode, with the cost of a decision arriving while the decision is still recent.
With `reward="first_token"` the latency charged is each request's TTFT, paid when its first token
comes, instead of its E2E: the objective of a prefix-cache-aware router (llm-d's and Dynamo's
published gains are in TTFT).
With `quality_reward` w > 0 each completion also earns w × its true quality on the model that
served it (the simulator's label; quality goodput is what the evaluation reports beside goodput).
`wait_action=False` removes the wait action (every request is routed on arrival): an ablation of
what the wait action does to learning.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from routeforge.artifacts.deciding.policy_inputs.workload_aware import (
    observation_workload_aware,
    workload_aware_telemetry,
)
from routeforge.training.policies.simulator.cluster import WAIT, Cluster, Request
from routeforge.training.policies.simulator.episode_seed import episode_seed
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.policy_environments import POLICY_ENVIRONMENTS
from routeforge.training.policies.simulator.stepper import Stepper

PROMPT_SPLIT = 512  # tokens: short vs long prompts
DECODE_SPLIT = 256  # predicted output tokens: short vs long decodes
COMPLETION_REWARD = 60.0


class WorkloadAwareEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, profiles: list[InstanceProfile], workload, variant: str = "guided",
                 decision_interval_s: float = 0.02, alpha: float = 0.5, epsilon_s: float = 0.1,
                 guidance_scale: float = 10.0, models: list[int] | None = None, reward: str = "completion",
                 wait_action: bool = True, observe_waiting: bool = False, observe_full: bool = False,
                 block_tokens: int | None = None, observe_prefix: bool = False, observe_quality: bool = False,
                 quality_reward: float = 0.0, scrape_interval_s: float = 0.0):
        """`workload(seed) -> list[Request]` gives a fresh episode's requests; `models[i]` is instance
        i's model (an index into the requests' label arrays; default 0 everywhere).
        `observe_waiting` adds each instance's waiting requests to the aware / guided observation
        (001's shows running requests only, so a request queued behind a full batch is invisible).
        `block_tokens`: every instance caches prompt blocks of that many tokens (None: no prefix cache).
        `scrape_interval_s`: how old an instance's `/metrics` scrape may get before the router scrapes
        it again (the evaluation's `routing_evaluation.scrape_interval_s`)."""
        if reward not in ("completion", "in_system", "first_token"):
            raise ValueError(f"reward must be completion, in_system or first_token, got {reward!r}")
        self.reward = reward
        if variant not in ("baseline", "aware", "guided"):
            raise ValueError(f"variant must be baseline, aware or guided, got {variant!r}")
        self.profiles, self.workload, self.variant = profiles, workload, variant
        self.models = models
        self.dt, self.alpha, self.epsilon_s, self.guidance_scale = decision_interval_s, alpha, epsilon_s, guidance_scale
        self.m = len(profiles)
        self.guidance = 1.0 if variant == "guided" else 0.0
        self.observe_waiting = observe_waiting and variant != "baseline"  # the baseline's has it already
        self.observe_full = observe_full and variant != "baseline"
        self.observe_prefix = observe_prefix and variant != "baseline"
        self.observe_quality = observe_quality and variant != "baseline"
        if not (math.isfinite(quality_reward) and quality_reward >= 0):
            raise ValueError(f"quality_reward must be a finite weight >= 0, got {quality_reward!r}")
        self.block_tokens, self.quality_reward = block_tokens, float(quality_reward)
        self.scrape_interval_s = scrape_interval_s
        self._buffers = [p.buffer for p in profiles]  # each waiting queue's limit, as the router is configured
        size = 3 + len(self._per_instance()) * self.m
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)
        self.wait_action = wait_action
        self.action_space = gym.spaces.Discrete(self.m + int(wait_action))  # m instances, then wait
        self.stepper: Stepper | None = None
        self.known: dict[int, Request] = {}

    def _per_instance(self) -> list[str]:
        """The features of each instance's row, in order."""
        if self.variant == "baseline":
            return ["running", "waiting"]
        return (["running_short_prompt", "running_long_prompt", "running_short_decode", "running_long_decode",
                 "free_kv_share", "earliest_completion_s"] + (["waiting"] if self.observe_waiting else [])
                + (["full"] if self.observe_full else []) + (["prefix_overlap"] if self.observe_prefix else [])
                + (["predicted_quality"] if self.observe_quality else []))

    def observation_spec(self) -> dict:
        per = self._per_instance()
        return {"size": int(self.observation_space.shape[0]), "variant": self.variant,
                "global": ["router_queue / 10", "next_prompt_tokens / 1000", "next_decode_bucket"],
                "per_instance": per, "instances": self.m,
                "scales": {"counts": "/ max_running", "earliest_completion_s": "/ 10 s"},
                "prompt_split_tokens": PROMPT_SPLIT, "decode_split_tokens": DECODE_SPLIT,
                "actions": [f"route to instance {i}" for i in range(self.m)] + (["wait"] if self.wait_action else [])}

    def action_spec(self) -> dict:
        return {"n": int(self.action_space.n), "kind": "discrete", "meaning": self.observation_spec()["actions"]}

    def action_for(self, choice: int | None) -> int:
        """The action that carries out a simulator decision (an instance index, or WAIT)."""
        return self.m if choice is WAIT else int(choice)

    def set_episode(self, k: int) -> None:
        """The guidance weight of training episode k: λ_k = e^(−0.5 k) (guided variant only)."""
        self.guidance = math.exp(-0.5 * k) if self.variant == "guided" else 0.0

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        requests = self.workload(episode_seed(self.np_random, seed))
        self.known = {r.rid: r for r in requests}
        self.stepper = Stepper(Cluster(self.profiles, models=self.models, block_tokens=self.block_tokens,
                                       scrape_interval_s=self.scrape_interval_s), requests, self.dt)
        self.active: dict[int, float] = {}  # rid -> arrival of the requests in the system
        self._awaiting: dict = {}  # rid -> outcome of the routed requests still without a first token
        self._tracked = 0  # arrivals added to `active` so far
        self.stepper.head()
        return self._observe(), {}

    def step(self, action: int):
        s = self.stepper
        choice = WAIT if action == self.m else int(action)
        penalty = self.guidance * self._mixing(choice) if choice is not WAIT else 0.0
        t0, routed = s.t, s.head().rid
        done_jobs = s.act(choice)
        e2e = [j.finished - s.outcomes[j.rid].request.arrival for j in done_jobs if j.finished is not None]
        completed = len(e2e)
        # the quality earned by this step's completions (a bonus, so it enters as a negative penalty)
        penalty -= self.quality_reward * sum(self._true_quality(j) for j in done_jobs if j.finished is not None)
        if self.reward == "in_system":
            time_in_system = self._in_system(t0, done_jobs)
            reward = COMPLETION_REWARD * completed - time_in_system - len(s.queue) - penalty
        elif self.reward == "first_token":
            reward = (COMPLETION_REWARD * completed - self._first_tokens(None if choice is WAIT else routed)
                      - len(s.queue) - penalty)
        else:
            reward = COMPLETION_REWARD * completed - sum(e2e) - len(s.queue) - penalty
        terminated = s.over
        return self._observe(), float(reward), terminated, False, {"completed": completed}

    def results(self) -> list:
        return self.stepper.results()

    def _first_tokens(self, routed: int | None) -> float:
        """The TTFTs of the requests whose first token came since the previous decision (`routed`, the
        request just routed, included when its prefill already ran)."""
        if routed is not None and self.stepper.outcomes[routed].job is not None:
            self._awaiting[routed] = self.stepper.outcomes[routed]
        total = 0.0
        for rid in [r for r, o in self._awaiting.items() if o.job.first_token is not None or o.job.rejected]:
            outcome = self._awaiting.pop(rid)
            if outcome.job.first_token is not None:
                total += outcome.job.first_token - outcome.request.arrival
        return total

    def _true_quality(self, job) -> float:
        """The completed request's true quality on the model that served it (0 where unknown)."""
        outcome = self.stepper.outcomes[job.rid]
        q = float(outcome.request.quality[outcome.model])
        return q if math.isfinite(q) else 0.0

    def _in_system(self, t0: float, done_jobs: list) -> float:
        """∫ N(t) dt over the step just taken: the request-seconds spent in the system (router queue
        or instance) since `t0`. Summed over an episode it is Σ E2E, but it is paid while requests
        wait, not in one lump at their completion. A request rejected leaves at its dispatch; one
        timed out in the router queue keeps counting until the episode ends (a penalty for it)."""
        s = self.stepper
        for r in s.arrivals[self._tracked:s.n_arrived]:
            self.active[r.rid] = r.arrival
        self._tracked = s.n_arrived
        left = {j.rid: (j.finished if j.finished is not None else s.outcomes[j.rid].dispatched or t0)
                for j in done_jobs}
        end = s.t if math.isfinite(s.t) else max(left.values(), default=t0)  # the last step runs to the end
        total = 0.0
        for rid, arrival in self.active.items():  # a finish reported up to one engine step early counts whole
            total += max(0.0, left.get(rid, end) - max(t0, arrival))
        for rid in left:
            self.active.pop(rid, None)
        return total

    def _mixing(self, i: int) -> float:
        inst, req = self.stepper.cluster.instances[i], self.stepper.head()
        held = inst.context_tokens + sum(self.known[j.rid].est_tokens(inst.model) for j in inst.running.values())
        t_p = inst.profile.prefill_s_per_token * (req.prompt_tokens + held)
        r_p = max(0.0, t_p - self.epsilon_s) / t_p if t_p > 0 else 0.0  # in [0, 1): bounded, grows with T_p
        r_d = inst.context_tokens / inst.profile.kv_capacity_tokens
        return self.guidance_scale * (self.alpha * r_p + (1 - self.alpha) * r_d)

    def telemetry(self) -> list[dict]:
        """What the router sees of each instance (`artifacts.deciding.observation`: each instance's `/metrics`
        scrape, at most `scrape_interval_s` old, and the router's own sends), in the form
        `observation_workload_aware` takes, built by the runtime's own function;
        `prefix_overlap` (from the router's own prefix index) and `predicted_quality` are of the request
        at the head of the queue. Nothing here reads an instance: what the policy learns from, a
        deployed router can have."""
        head, router = self.stepper.head(), self.stepper.cluster.router(self.stepper.t)
        observed = router.instances()
        quality = [head.est_quality(m) if head is not None else 0.0 for m in router.models]  # NaN read as 0
        overlaps = router.prefix_overlaps(head.hash_ids) if head is not None and self.observe_prefix else None
        return workload_aware_telemetry(observed, quality, overlaps, self._buffers)

    def _predicted_tokens(self, req: Request) -> float:
        """The next request's predicted output length: on the fleet's one model (001), or the mean
        over the models of a heterogeneous fleet."""
        return float(np.mean([req.est_tokens(m) for m in sorted(set(self.models or [0]))]))

    def _observe(self) -> np.ndarray:
        """Built by the runtime's own function, so a served policy sees what it was trained on."""
        req = self.stepper.head()
        return observation_workload_aware(len(self.stepper.queue), req.prompt_tokens if req else 0,
                               self._predicted_tokens(req) if req else 0.0, self.telemetry(), self.observation_spec())


@POLICY_ENVIRONMENTS.register("workload_aware")
def _from_spec(spec, profiles, models, workload, block_tokens):
    """001's environment for an exported spec: its variant, wait action and the optional per-instance
    features it lists (a trace without block ids shares nothing, overlap 0; a trace's requests carry
    no quality labels, 1 on every model, which the policy then sees)."""
    obs = spec["observation"]
    per = obs["per_instance"]
    return WorkloadAwareEnv(profiles, workload, variant=obs["variant"], models=models,
                            wait_action=spec["action"]["n"] > obs["instances"], observe_waiting="waiting" in per,
                            observe_full="full" in per, observe_prefix="prefix_overlap" in per,
                            observe_quality="predicted_quality" in per, block_tokens=block_tokens)
