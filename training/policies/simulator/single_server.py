"""004's instance in closed form: one request in service at a time, first come first served.

Why: 004's environment simulates ~45 arrivals per slot decision, and `Instance`'s general engine
(admission checks, a heap of finish steps, decode stretches split at every horizon) was most of the
cost of a step. With one request in service (`max_running = 1`) each request's service is fixed
the moment it is queued, so its whole life is known then:

    start  = max(arrival, when the previous request left the engine)
    first token = start + c + k1 · P                          (its prefill step, nothing else decodes)
    finish = first token + Σ_{j=1}^{O−1} (W + H · (P + j))     (O − 1 decode steps of a batch of one)

It keeps `Instance`'s observable rules, so a policy sees the same states: a router that looks at
time t sees every engine step that *starts* before t as applied (a request whose last step began
before t has left, with its true finish time), a request counts as waiting until its prefill step
has started, a request routed to a full buffer (`profile.buffer` waiting) is rejected, and the
KV-cache limits reject a request the same way (larger than the cache when it reaches the head;
outgrowing it after the decode steps that fit). Sums are written as `Instance` writes them; a
decode stretch `Instance` splits at a horizon rounds differently, by ~1e-11 s.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from training.policies.simulator.instance import InstanceProfile, Job


@dataclass(slots=True)
class _Planned:
    job: Job
    start: float  # when its prefill step starts
    first_token: float
    leaves: float  # the start of its last step (or when it is rejected at the head)
    end: float  # when the engine is free for the next request
    reason: str | None = None  # a KV-cache rejection


@dataclass
class SingleServerInstance:
    """`Instance` for `profile.max_running == 1` (`Cluster(instance_class=...)`), with the part of its
    interface that 004's environment and the queue-length baselines read: `enqueue`, `advance`,
    `running`, `waiting`, `n_running`, `n_waiting`, `done`. No KV utilisation or context counts."""

    name: str
    profile: InstanceProfile
    model: int = 0
    now: float = 0.0  # the latest horizon the instance was advanced to
    free_at: float = 0.0  # when the last queued request leaves the engine
    planned: deque = field(default_factory=deque)  # in the system, in arrival order
    done: list = field(default_factory=list)
    busy_s: float = 0.0

    def __post_init__(self):
        if self.profile.max_running != 1:
            raise ValueError(f"SingleServerInstance serves one request at a time; profile.max_running is "
                             f"{self.profile.max_running}")

    # ---- state a router may read (as `Instance` shows it)
    @property
    def running(self) -> dict[int, Job]:
        head = self.planned[0] if self.planned else None
        return {head.job.rid: head.job} if head is not None and head.start < self.now else {}

    @property
    def waiting(self) -> list[Job]:
        return [p.job for p in self.planned][self.n_running:]

    @property
    def n_running(self) -> int:
        # only the head can have started: the next one starts when the head has left the engine
        return int(bool(self.planned) and self.planned[0].start < self.now)

    @property
    def n_waiting(self) -> int:
        return len(self.planned) - self.n_running

    # ---- events
    def enqueue(self, job: Job, now: float) -> bool:
        """Queue a request at `now`; False (and the job marked rejected) when the buffer is full."""
        if self.profile.buffer is not None and self.n_waiting >= self.profile.buffer:
            job.rejected = "buffer full"
            self.done.append(job)
            return False
        job.enqueued = now
        self.planned.append(self._plan(job, max(now, self.free_at)))
        self.free_at = self.planned[-1].end
        return True

    def _plan(self, job: Job, start: float) -> _Planned:
        p, prompt, out = self.profile, job.prompt_tokens, job.output_tokens
        if prompt + 1 > p.kv_capacity_tokens:
            return _Planned(job, start, start, start, start, "larger than the KV cache")
        first = start + (p.prefill_intercept_s + p.prefill_s_per_token * prompt)
        fits = min(out - 1, p.kv_capacity_tokens - prompt - 1)  # decode steps the cache holds
        c0 = prompt + 1  # context before the first decode step
        end = first + self._decode(fits, c0) if fits > 0 else first
        if fits < out - 1:
            return _Planned(job, start, first, end, end, "outgrew the KV cache")
        leaves = first + self._decode(fits - 1, c0) if fits > 0 else start
        return _Planned(job, start, first, leaves, end)

    def _decode(self, steps: int, c0: int) -> float:
        p = self.profile  # `Instance._decode_stretch` with one request running
        return steps * p.decode_w_s + p.decode_h_s_per_token * (steps * c0 + steps * (steps - 1) / 2)

    def advance(self, until: float) -> None:
        """Every request whose last step starts before `until` leaves (into `done`)."""
        planned = self.planned
        while planned and planned[0].leaves < until:
            p = planned.popleft()
            job = p.job
            job.admitted = p.start
            if p.reason == "larger than the KV cache":
                job.rejected = p.reason
            else:
                job.first_token = p.first_token
                self.busy_s += p.end - p.start
                if p.reason:
                    job.rejected, job.preemptions = p.reason, 1
                else:
                    job.generated, job.finished = job.output_tokens, p.end
            self.done.append(job)
        if until > self.now:
            self.now = until
        head = planned[0] if planned else None
        if head is not None and head.start < self.now:
            head.job.admitted = head.start
