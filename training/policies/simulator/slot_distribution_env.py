"""004's routing environment (RL-PO): every slot of τ seconds the policy gives a distribution over
the instances (a point on the simplex) and the arrivals of that slot are routed by sampling it.

Instances serve one request at a time, first come first served, with a buffer of `buffer` requests
including the one in service (004 §3.1: batch size 1); a request routed to a full buffer is
rejected. Observation per instance (004 §3.1.3, built by `artifacts.policy.observation_slot_distribution`): the
number of requests l one-hot over 0..buffer, the elapsed service time ω of the request in service,
and the ages of the `pad` oldest requests, zero-padded; times are divided by the latency
requirement L. Action: m real numbers, mapped to the simplex by softmax (so a Gaussian policy of
any RL library can produce it). Reward per slot: r = −v − α·b + β·Σ_i g_i·ν_i, with v the
completions later than L, b the rejections, ν_i the completions within L at instance i and g_i its
model's validation accuracy.

The instances are `SingleServerInstance`s: with one request in service each request's life is
known when it is queued, which is exact and several times faster than the general engine
(`engine="batching"` runs `Instance`, the reference the closed form is tested against).
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np

from artifacts.policy import observation_slot_distribution
from training.policies.simulator.cluster import Cluster, Outcome
from training.policies.simulator.episode_seed import episode_seed
from training.policies.simulator.instance import Instance, InstanceProfile
from training.policies.simulator.single_server import SingleServerInstance


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return z / z.sum()


class SlotDistributionEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, profiles: list[InstanceProfile], models: list[int], accuracy: list[float], workload,
                 requirement_s: float, slot_s: float = 1.0, buffer: int = 15, pad: int = 16,
                 alpha: float = 1.0, beta: float = 1.0, max_slots: int | None = None,
                 engine: str = "single_server"):
        """`workload(seed) -> list[Request]`; `accuracy[i]` is g_i of instance i; `max_slots` truncates
        training episodes (None: run until every request has left); `engine`: "single_server"
        (closed form) or "batching" (`Instance`, the same dynamics stepped through)."""
        if len(profiles) != len(models) or len(profiles) != len(accuracy):
            raise ValueError("SlotDistributionEnv: profiles, models and accuracy need one entry per instance")
        engines = {"single_server": SingleServerInstance, "batching": Instance}
        if engine not in engines:
            raise ValueError(f"SlotDistributionEnv: engine {engine!r} is not one of {sorted(engines)}")
        self.instance_class = engines[engine]
        if buffer < 1 or pad < buffer:
            raise ValueError(f"SlotDistributionEnv: buffer >= 1 and pad >= buffer required, got {buffer}, {pad}")
        # 004's instances: one request in service, buffer − 1 waiting
        self.profiles = [dataclasses.replace(p, max_running=1, buffer=buffer - 1) for p in profiles]
        self.models, self.accuracy, self.workload = list(models), np.asarray(accuracy, float), workload
        self.requirement_s, self.slot_s, self.buffer, self.pad = requirement_s, slot_s, buffer, pad
        self.alpha, self.beta, self.max_slots = alpha, beta, max_slots
        self.m = len(profiles)
        size = self.m * (buffer + 1 + 1 + pad)
        self.observation_space = gym.spaces.Box(0.0, np.inf, shape=(size,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-10.0, 10.0, shape=(self.m,), dtype=np.float32)
        self.cluster: Cluster | None = None
        self.outcomes: dict[int, Outcome] = {}

    def observation_spec(self) -> dict:
        return {"size": int(self.observation_space.shape[0]), "variant": "004", "instances": self.m,
                "buffer": self.buffer, "pad": self.pad, "requirement_s": self.requirement_s,
                "per_instance": [f"requests == {k}" for k in range(self.buffer + 1)]
                + ["elapsed_service_s / requirement_s"] + [f"age_{k}_s / requirement_s" for k in range(self.pad)],
                "slot_s": self.slot_s}

    def action_spec(self) -> dict:
        return {"n": self.m, "kind": "simplex", "transform": "softmax",
                "meaning": [f"probability of routing a request of the next slot to instance {i}"
                            for i in range(self.m)]}

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        seed = episode_seed(self.np_random, seed)
        self.requests = sorted(self.workload(seed), key=lambda r: r.arrival)
        self._arrivals = np.fromiter((r.arrival for r in self.requests), dtype=np.float64, count=len(self.requests))
        self.cluster = Cluster(self.profiles, models=self.models, instance_class=self.instance_class)
        self.outcomes, self.t, self.slots, self._next = {}, 0.0, 0, 0
        self._seen = [0] * self.m
        self.rng = np.random.default_rng(seed)
        self.routed = np.zeros(self.m)  # requests sent to each instance (004's heavy scheduling ratio)
        return self._observe(), {}

    def step(self, action):
        probs = softmax(action)
        end = self.t + self.slot_s
        last = int(np.searchsorted(self._arrivals, end, side="left"))  # the slot's arrivals: arrival < end
        # one draw for the whole slot: the same uniforms, in the same order, as one draw per request
        picks = self.rng.choice(self.m, size=last - self._next, p=probs).tolist() if last > self._next else []
        instances = self.cluster.instances
        for req, i in zip(self.requests[self._next:last], picks):
            # only the chosen instance must be brought up to the arrival before it queues the request;
            # the others catch up at the slot's end (no router reads them in between)
            instances[i].advance(req.arrival)
            self.outcomes[req.rid] = self.cluster.route(req, i, req.arrival)
        self.routed += np.bincount(picks, minlength=self.m)
        self._next = last
        self.slots += 1
        terminated = self._next == len(self.requests)
        self.cluster.advance(math.inf if terminated else end)
        self.t = end
        late, rejected, on_time = self._settle()
        reward = -late - self.alpha * rejected + self.beta * float(self.accuracy @ on_time)
        truncated = not terminated and self.max_slots is not None and self.slots >= self.max_slots
        return self._observe(), float(reward), terminated, truncated, {
            "late": late, "rejected": rejected, "on_time": on_time.tolist(), "probabilities": probs.tolist()}

    def _settle(self) -> tuple[int, int, np.ndarray]:
        """Count the completions and rejections reported since the previous slot."""
        late = rejected = 0
        on_time = np.zeros(self.m)
        for i, inst in enumerate(self.cluster.instances):
            for job in inst.done[self._seen[i]:]:
                if job.rejected:
                    rejected += 1
                    self.outcomes[job.rid].reason = job.rejected
                elif job.finished - self.outcomes[job.rid].request.arrival <= self.requirement_s:
                    on_time[i] += 1
                else:
                    late += 1
            self._seen[i] = len(inst.done)
        return late, rejected, on_time

    def telemetry(self) -> list[dict]:
        """Per instance what a router knows: the ages of its requests (oldest first, the one in
        service included) and the elapsed service time of the one in service."""
        out = []
        for inst in self.cluster.instances:
            jobs = list(inst.running.values()) + list(inst.waiting)
            arrivals = [self.outcomes[j.rid].request.arrival for j in jobs]
            in_service = next(iter(inst.running.values()), None)
            elapsed = max(0.0, self.t - in_service.admitted) if in_service is not None else 0.0
            out.append({"ages_s": sorted((max(0.0, self.t - a) for a in arrivals), reverse=True),
                        "elapsed_service_s": elapsed})
        return out

    def _observe(self) -> np.ndarray:
        return observation_slot_distribution(self.telemetry(), self.observation_spec())

    def results(self) -> list[Outcome]:
        return [self.outcomes[r.rid] for r in self.requests if r.rid in self.outcomes]
