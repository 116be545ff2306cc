"""004's instances in closed form: each serves one request at a time, first come first served.

Why: 004's environment simulates ~25-45 arrivals per slot decision, and `Instance`'s general engine
(admission checks, a heap of finish steps, decode stretches split at every horizon) was most of the
cost of a step; then the Job, Outcome and queue-entry objects it built per request were. With one
request in service (`max_running = 1`) each request's life is fixed the moment it is queued:

    start  = max(arrival, when the previous request left the engine)
    first token = start + c + k1 · P                          (its prefill step, nothing else decodes)
    finish = first token + Σ_{j=1}^{O−1} (W + H · (P + j))     (O − 1 decode steps of a batch of one)

so `SingleServerFleet` keeps an episode's requests as columns (Python lists of floats, indexed by
position in arrival order), each instance's queue as a deque of positions, and builds `Job` and
`Outcome` objects only when `outcome()` is asked for (evaluation; training never asks).

It keeps `Instance`'s observable rules, so a policy sees the same states: a router that looks at
time t sees every engine step that *starts* before t as applied (a request whose last step began
before t has left, with its true finish time), a request counts as waiting until its prefill step
has started, a request routed to a full buffer (`profile.buffer` waiting) is rejected, and the
KV-cache limits reject a request the same way (larger than the cache when it reaches the head;
outgrowing it after the decode steps that fit). Sums are written as `Instance` writes them; a
decode stretch `Instance` splits at a horizon rounds differently, by ~1e-11 s. It holds for prompts
within one engine step's token budget (`max_num_batched_tokens`) and without prefix caching, 004's
setting: `Instance` chunks a longer prefill and reads its cached context, which this form does not.
"""

from __future__ import annotations

import math
from collections import deque

from routeforge.training.policies.simulator.cluster import Outcome, Request
from routeforge.training.policies.simulator.instance import BUFFER_FULL, OUTGREW, TOO_LARGE, InstanceProfile, Job


def plan(profile: InstanceProfile, prompt: int, out: int, start: float) -> tuple[float, float, float, str | None]:
    """A request's (first token, start of its last step, when the engine is free again, KV
    rejection or None) when its prefill starts at `start` on an otherwise idle engine."""
    p = profile
    if prompt + 1 > p.kv_capacity_tokens:
        return start, start, start, TOO_LARGE
    first = start + (p.prefill_intercept_s + p.prefill_s_per_token * prompt)
    fits = min(out - 1, p.kv_capacity_tokens - prompt - 1)  # decode steps the cache holds
    c0 = prompt + 1  # context before the first decode step
    end = first + _decode(p, fits, c0) if fits > 0 else first
    if fits < out - 1:
        return first, end, end, OUTGREW
    return first, (first + _decode(p, fits - 1, c0) if fits > 0 else start), end, None


def _decode(p: InstanceProfile, steps: int, c0: int) -> float:
    # `Instance._decode_stretch` with one request running
    return (steps * (p.decode_w_s + p.decode_s_per_seq)
            + p.decode_h_s_per_token * (steps * c0 + steps * (steps - 1) / 2))


class SingleServerFleet:
    """One episode on `len(profiles)` single-server instances. Requests are positions 0..n−1 in
    arrival order; `output_tokens[k][i]` is request i's true output length on model k, and
    instance j serves model `models[j]`."""

    def __init__(self, profiles: list[InstanceProfile], models: list[int], arrivals: list[float],
                 prompt_tokens: list[int], output_tokens: list[list[int]]):
        for p in profiles:
            if p.max_running != 1:
                raise ValueError(f"SingleServerFleet serves one request at a time; a profile has max_running "
                                 f"{p.max_running}")
        n, m = len(arrivals), len(profiles)
        self.profiles, self.models = profiles, list(models)
        self.arrival, self.prompt = arrivals, prompt_tokens
        self.out = [output_tokens[k] for k in self.models]  # per instance
        self.instance = [-1] * n  # -1: not routed
        self.start, self.first, self.leaves, self.end = [math.nan] * n, [math.nan] * n, [math.nan] * n, [math.nan] * n
        self.reason: list[str | None] = [None] * n
        self.left = [False] * n  # out of the system (served or rejected) and reported
        self.queues = [deque() for _ in range(m)]  # positions in the system, in arrival order
        self.free_at, self.now = [0.0] * m, [0.0] * m
        self.reported: list[list[int]] = [[] for _ in range(m)]  # left since the last `collect`

    def route(self, positions: range, picks: list[int]) -> None:
        """Queue each request at its arrival on its pick (only that instance is brought up to the
        arrival first: no router reads the others in between)."""
        arrival, start, first, leaves, end = self.arrival, self.start, self.first, self.leaves, self.end
        reason, prompt, queues, free_at, now = self.reason, self.prompt, self.queues, self.free_at, self.now
        for i, j in zip(positions, picks):
            a, q = arrival[i], queues[j]
            self.instance[i] = j
            self._advance(j, a)
            profile = self.profiles[j]
            waiting = len(q) - (1 if q and start[q[0]] < now[j] else 0)
            if profile.buffer is not None and waiting >= profile.buffer:
                reason[i], self.left[i] = BUFFER_FULL, True
                self.reported[j].append(i)
                continue
            s = a if a > free_at[j] else free_at[j]
            start[i] = s
            first[i], leaves[i], end[i], reason[i] = plan(profile, prompt[i], self.out[j][i], s)
            free_at[j] = end[i]
            q.append(i)

    def advance(self, until: float) -> None:
        """Every request whose last step starts before `until` leaves."""
        for j in range(len(self.queues)):
            self._advance(j, until)

    def _advance(self, j: int, until: float) -> None:
        q, leaves = self.queues[j], self.leaves
        while q and leaves[q[0]] < until:
            i = q.popleft()
            self.left[i] = True
            self.reported[j].append(i)
        if until > self.now[j]:
            self.now[j] = until

    def outstanding(self) -> list[int]:
        """Per instance, the requests in it (the one in service included), as join-shortest-queue counts."""
        return [len(q) for q in self.queues]

    def collect(self) -> list[list[int]]:
        """Per instance, the requests that left (finished or rejected) since the previous call."""
        out, self.reported = self.reported, [[] for _ in self.queues]
        return out

    def telemetry(self, t: float) -> list[dict]:
        """Per instance what a router knows at `t`: the ages of its requests (oldest first, the one
        in service included) and the elapsed service time of the one in service."""
        rows = []
        for j, q in enumerate(self.queues):
            in_service = bool(q) and self.start[q[0]] < self.now[j]
            rows.append({"ages_s": [max(0.0, t - self.arrival[i]) for i in q],
                         "elapsed_service_s": max(0.0, t - self.start[q[0]]) if in_service else 0.0})
        return rows

    def outcome(self, i: int, request: Request) -> Outcome:
        """Request i's outcome as `Cluster.route` and the instance's bookkeeping leave it (a
        rejection's reason once it is reported; a request still queued has no times yet)."""
        j = self.instance[i]
        job = Job(request.rid, request.prompt_tokens, self.out[j][i], self.arrival[i])
        reason = self.reason[i]
        if reason == BUFFER_FULL:
            job.rejected = reason
        elif reason == TOO_LARGE:  # never admitted
            job.rejected = reason if self.left[i] else None
        elif self.left[i]:
            job.admitted = self.start[i]
            job.first_token = self.first[i]
            if reason:  # outgrew the cache: its first token and the decode steps that fit were generated
                job.rejected, job.preemptions = reason, 1
                job.generated = self.profiles[j].kv_capacity_tokens - self.prompt[i]
            else:
                job.generated, job.finished = job.output_tokens, self.end[i]
        else:
            q = self.queues[j]
            if q[0] == i and self.start[i] < self.now[j]:
                job.admitted = self.start[i]
        return Outcome(request, j, job, self.arrival[i], job.rejected, model=self.models[j])
