"""004's routing environment (RL-PO): every slot of τ seconds the policy gives a distribution over
the instances (a point on the simplex) and the arrivals of that slot are routed by sampling it.

Instances serve one request at a time, first come first served, with a buffer of `buffer` requests
including the one in service (004 §3.1: batch size 1); a request routed to a full buffer is
rejected. Observation per instance (004 §3.1.3, built by `observation_slot_distribution`): the
number of requests l one-hot over 0..buffer, the elapsed service time ω of the request in service,
and the ages of the `pad` oldest requests, zero-padded; times are divided by the latency
requirement L. Action: m real numbers, mapped to the simplex by softmax (so a Gaussian policy of
any RL library can produce it). Reward per slot: r = −v − α·b + β·Σ_i g_i·ν_i, with v the
completions later than L, b the rejections, ν_i the completions within L at instance i and g_i its
model's validation accuracy.

`dispatch="biased_shortest_queue"` (not 004's; an option) gives the action another meaning: m
biases (rounded to half requests, `routeforge.artifacts.deciding.heuristics.queue_biases`), and each arrival of the
slot goes to the instance with the fewest requests less its bias
(`routeforge.artifacts.deciding.heuristics.biased_shortest_queue`). Why: a distribution per slot cannot balance the
requests within a slot as join-shortest-queue does request by request, and in 004's setting
shortest queue beats every distribution PPO found (docs/results.md). With biases the policy keeps
that per-request balance and learns only how far to lean toward some instances, slot by slot
(all-zero biases are join-shortest-queue exactly, the teacher `shortest_queue` clones).

The instances are a `SingleServerFleet`: with one request in service each request's life is known
when it is queued, so an episode is simulated in closed form over columns, which is exact and
several times faster than the general engine (`engine="batching"` runs `Instance`s, the reference
the closed form is tested against). A workload that returns a `RequestBatch` (`RequestPool.requests`
does) is read as columns; `Request` objects are built only for `results()`.
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
from routeforge.artifacts.deciding.heuristics import biased_shortest_queue, queue_biases
from routeforge.artifacts.deciding.policy_inputs.slot_distribution import observation_slot_distribution
from routeforge.training.policies.simulator.cluster import Cluster, Outcome, Request
from routeforge.training.policies.simulator.episode_seed import episode_seed
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.single_server import SingleServerFleet
from routeforge.training.policies.simulator.workloads import RequestBatch

DISPATCH = ("sample", "biased_shortest_queue")


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return z / z.sum()


class SlotDistributionEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, profiles: list[InstanceProfile], models: list[int], accuracy: list[float], workload,
                 requirement_s: float, slot_s: float = 1.0, buffer: int = 15, pad: int = 16,
                 alpha: float = 1.0, beta: float = 1.0, max_slots: int | None = None,
                 engine: str = "single_server", dispatch: str = "sample", block_tokens: int | None = None):
        """`workload(seed) -> list[Request]`; `accuracy[i]` is g_i of instance i; `max_slots` truncates
        training episodes (None: run until every request has left); `engine`: "single_server"
        (closed form) or "batching" (`Instance`, the same dynamics stepped through); `dispatch`: "sample"
        (004: the action is a routing distribution) or "biased_shortest_queue" (the action is a bias
        per instance)."""
        if len(profiles) != len(models) or len(profiles) != len(accuracy):
            raise ValueError("SlotDistributionEnv: profiles, models and accuracy need one entry per instance")
        if engine not in ("single_server", "batching"):
            raise ValueError(f"SlotDistributionEnv: engine {engine!r} is not one of ['batching', 'single_server']")
        self.engine = engine
        self.block_tokens = block_tokens  # the batching engine's prefix-cache block (None: no cache)
        if dispatch not in DISPATCH:
            raise ValueError(f"SlotDistributionEnv: dispatch {dispatch!r} is not one of {sorted(DISPATCH)}")
        self.dispatch = dispatch
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
        self.fleet: SingleServerFleet | _BatchingFleet | None = None

    def observation_spec(self) -> dict:
        return {"size": int(self.observation_space.shape[0]), "variant": "004", "instances": self.m,
                "buffer": self.buffer, "pad": self.pad, "requirement_s": self.requirement_s,
                "per_instance": [f"requests == {k}" for k in range(self.buffer + 1)]
                + ["elapsed_service_s / requirement_s"] + [f"age_{k}_s / requirement_s" for k in range(self.pad)],
                "slot_s": self.slot_s}

    def action_spec(self) -> dict:
        if self.dispatch == "biased_shortest_queue":
            low, high = float(self.action_space.low[0]), float(self.action_space.high[0])
            return {"n": self.m, "kind": "queue_bias", "bounds": [low, high], "dispatch": "biased_shortest_queue",
                    "rounding": "nearest half request (routeforge.artifacts.deciding.heuristics.queue_biases)",
                    "meaning": [f"bias of instance {i}: each request of the next slot goes to the instance with "
                                "the fewest running + waiting requests minus its bias (first on ties)"
                                for i in range(self.m)]}
        return {"n": self.m, "kind": "simplex", "transform": "softmax",
                "meaning": [f"probability of routing a request of the next slot to instance {i}"
                            for i in range(self.m)]}

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        seed = episode_seed(self.np_random, seed)
        requests = self.workload(seed)
        if isinstance(requests, RequestBatch):  # columns: no Request objects unless results() asks
            order = np.argsort(requests.times, kind="stable")
            arrivals, prompt = requests.times[order], requests.prompt_tokens[order]
            output = requests.output_tokens[order]
        else:
            requests = sorted(requests, key=lambda r: r.arrival)
            order = np.arange(len(requests))
            arrivals = np.fromiter((r.arrival for r in requests), dtype=np.float64, count=len(requests))
            prompt = np.fromiter((r.prompt_tokens for r in requests), dtype=np.int64, count=len(requests))
            output = (np.array([r.output_tokens for r in requests], dtype=np.int64) if requests
                      else np.zeros((0, max(self.models) + 1), dtype=np.int64))
        self._requests, self._order, self.arrivals = requests, order, arrivals
        self._arrival_list = arrivals.tolist()
        if self.engine == "single_server":
            self.fleet = SingleServerFleet(self.profiles, self.models, self._arrival_list, prompt.tolist(),
                                           [output[:, k].tolist() for k in range(output.shape[1])])
        else:
            self.fleet = _BatchingFleet(self.profiles, self.models, [self.request(i) for i in range(len(order))],
                                        self.block_tokens)
        self.t, self.slots, self._next = 0.0, 0, 0
        self.rng = np.random.default_rng(seed)
        self.routed = np.zeros(self.m)  # requests sent to each instance (004's heavy scheduling ratio)
        return self._observe(), {}

    def request(self, i: int) -> Request:
        """The i-th arrival of the episode as a `Request`."""
        return self._requests[int(self._order[i])]

    def step(self, action):
        end = self.t + self.slot_s
        last = int(np.searchsorted(self.arrivals, end, side="left"))  # the slot's arrivals: arrival < end
        if self.dispatch == "biased_shortest_queue":
            bias = queue_biases(action, (float(self.action_space.low[0]), float(self.action_space.high[0])))
            picks, probs = self._route_biased(self._next, last, bias.tolist()), None
        else:
            probs = softmax(action)
            # one draw for the whole slot: the same uniforms, in the same order, as one draw per request
            picks = self.rng.choice(self.m, size=last - self._next, p=probs).tolist() if last > self._next else []
            self.fleet.route(range(self._next, last), picks)
        self.routed += np.bincount(picks, minlength=self.m)
        self._next = last
        self.slots += 1
        terminated = self._next == len(self._arrival_list)
        self.fleet.advance(math.inf if terminated else end)
        self.t = end
        late, rejected, on_time = self._settle()
        reward = -late - self.alpha * rejected + self.beta * float(self.accuracy @ on_time)
        truncated = not terminated and self.max_slots is not None and self.slots >= self.max_slots
        info = {"late": late, "rejected": rejected, "on_time": on_time.tolist()}
        info |= {"probabilities": probs.tolist()} if probs is not None else {"bias": bias.tolist()}
        return self._observe(), float(reward), terminated, truncated, info

    def _route_biased(self, first: int, last: int, bias: list[float]) -> list[int]:
        """Route arrivals first..last−1 one at a time, each on the counts every instance shows at its
        arrival (join-shortest-queue's view, so zero biases decide as `JoinShortestQueue` does)."""
        picks = []
        for i in range(first, last):
            self.fleet.advance(self._arrival_list[i])
            pick = biased_shortest_queue(self.fleet.outstanding(), bias)
            self.fleet.route(range(i, i + 1), [pick])
            picks.append(pick)
        return picks

    def _settle(self) -> tuple[int, int, np.ndarray]:
        """Count the completions and rejections reported since the previous slot."""
        late = rejected = 0
        on_time = np.zeros(self.m)
        reason, finish, arrival = self.fleet.reason, self.fleet.end, self._arrival_list
        for j, left in enumerate(self.fleet.collect()):
            for i in left:
                if reason[i]:
                    rejected += 1
                elif finish[i] - arrival[i] <= self._limit(i, j):
                    on_time[j] += 1
                else:
                    late += 1
        return late, rejected, on_time

    def _limit(self, i: int, j: int) -> float:
        """The latency within which arrival i, served at instance j, is on time: 004's L for all."""
        return self.requirement_s

    def telemetry(self) -> list[dict]:
        """Per instance what a router knows: the ages of its requests (oldest first, the one in
        service included) and the elapsed service time of the one in service."""
        return self.fleet.telemetry(self.t)

    def _observe(self) -> np.ndarray:
        return observation_slot_distribution(self.telemetry(), self.observation_spec())

    def results(self) -> list[Outcome]:
        """The outcome of every request routed so far, in arrival order."""
        return [self.fleet.outcome(i, self.request(i)) for i in range(self._next)]


class _BatchingFleet:
    """`SingleServerFleet`'s interface over `Instance`s (`engine="batching"`): the general engine,
    stepped through, that the closed form is tested against."""

    def __init__(self, profiles: list[InstanceProfile], models: list[int], requests: list[Request],
                 block_tokens: int | None = None):
        self.cluster = Cluster(profiles, models=models, block_tokens=block_tokens)
        self.requests, self.position = requests, {r.rid: i for i, r in enumerate(requests)}
        self.outcomes: dict[int, Outcome] = {}
        self.reason: list[str | None] = [None] * len(requests)
        self.end = [math.nan] * len(requests)
        self._seen = [0] * len(profiles)

    def route(self, positions: range, picks: list[int]) -> None:
        for i, j in zip(positions, picks):
            req = self.requests[i]
            self.cluster.instances[j].advance(req.arrival)
            self.outcomes[i] = self.cluster.route(req, j, req.arrival)

    def advance(self, until: float) -> None:
        self.cluster.advance(until)

    def outstanding(self) -> list[int]:
        return [inst.n_running + inst.n_waiting for inst in self.cluster.instances]

    def collect(self) -> list[list[int]]:
        out = []
        for j, inst in enumerate(self.cluster.instances):
            left = []
            for job in inst.done[self._seen[j]:]:
                i = self.position[job.rid]
                left.append(i)
                self.reason[i] = self.outcomes[i].reason = job.rejected
                self.end[i] = job.finished if job.finished is not None else math.nan
            self._seen[j] = len(inst.done)
            out.append(left)
        return out

    def telemetry(self, t: float) -> list[dict]:
        out = []
        for inst in self.cluster.instances:
            jobs = list(inst.running.values()) + list(inst.waiting)
            in_service = next(iter(inst.running.values()), None)
            out.append({"ages_s": sorted((max(0.0, t - self.requests[self.position[j.rid]].arrival) for j in jobs),
                                         reverse=True),
                        "elapsed_service_s": max(0.0, t - in_service.admitted) if in_service is not None else 0.0})
        return out

    def outcome(self, i: int, request: Request) -> Outcome:
        return self.outcomes[i]
