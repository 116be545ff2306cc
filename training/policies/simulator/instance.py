"""One serving instance with continuous batching, advanced in closed form between events.

Each engine step admits waiting requests (FIFO) while a sequence slot and KV-cache room remain,
prefills them and decodes one token for every request already running:
    step time = [c + k1 · prefill tokens]  +  [W + H · context tokens of the decoding requests]
(the prefill and decode fits of the tier profile, `profiling.batch_fits.TierFit`). A request's
first token comes at the end of its prefill step. While nothing can be admitted, the running set
decodes in lock-step and the next completion, KV overflow or caller's horizon is reached by
summing the arithmetic series of step times in one go, which is what makes the simulator fast.

KV cache: the tokens held are the running requests' prompt + generated tokens. When the next
decode step would exceed the capacity, the most recently admitted request is preempted and
recomputed later (vLLM's default): it returns to the head of the queue and its next prefill covers
its prompt and the tokens it had generated. A request larger than the whole cache is rejected.

Prefix caching (when the cluster gives the instance a block cache, `Instance.cache`): a request that
carries its prompt's block ids (`Job.hash_ids`, e.g. from a Mooncake-format trace) prefills only the
tokens after the leading run of blocks the instance already holds (at least one token, as vLLM
always computes the last), and its blocks then become the most recently used. The cache holds at
most the instance's KV capacity in blocks and evicts least-recently-used first. Simplification: the
memory check still counts every running request's whole context (shared blocks are not
deduplicated), so a shared prefix saves prefill time but not batch room.

A router that looks at an instance between two of its steps sees it as of its latest committed
step: a step in flight at dispatch time has already been applied (at most one step early).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from routeforge.artifacts.observation import Scrape
from routeforge.artifacts.prefix_index import BlockLru

# the lowest value each fitted term of a tier may take in the simulator (s; s per token; s per step)
FIT_FLOORS = {"prefill_intercept_s": 0.0, "prefill_grad_s_per_token": 1e-7, "decode_w_s": 1e-7,
              "decode_h_s_per_token": 0.0}


# why a job was rejected (`Job.rejected`)
BUFFER_FULL, TOO_LARGE, OUTGREW = "buffer full", "larger than the KV cache", "outgrew the KV cache"

@dataclass(frozen=True)
class InstanceProfile:
    """Latency parameters of one (model, hardware) tier and its batching limits."""

    prefill_intercept_s: float
    prefill_s_per_token: float
    decode_w_s: float
    decode_h_s_per_token: float
    max_running: int = 256
    kv_capacity_tokens: int = 1 << 30
    buffer: int | None = None  # waiting-queue capacity; a request routed to a full queue is rejected

    def __post_init__(self):
        for name in ("prefill_s_per_token", "decode_w_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"InstanceProfile.{name} must be positive, got {getattr(self, name)}")
        for name in ("prefill_intercept_s", "decode_h_s_per_token"):
            if getattr(self, name) < 0:
                raise ValueError(f"InstanceProfile.{name} must not be negative, got {getattr(self, name)}")
        if self.max_running < 1 or self.kv_capacity_tokens < 2:
            raise ValueError("InstanceProfile: max_running >= 1 and kv_capacity_tokens >= 2 required")

    @classmethod
    def from_fit(cls, fit: dict, **limits) -> InstanceProfile:
        """From a `TierFit.to_dict()` (or the `fit` of a tier profile's JSON), each term raised to its
        `FIT_FLOORS` value: a noise-sized fit (tiny models) can come out negative, which no instance
        can simulate."""
        f = {key: max(floor, fit[key]) for key, floor in FIT_FLOORS.items()}
        return cls(prefill_intercept_s=f["prefill_intercept_s"], prefill_s_per_token=f["prefill_grad_s_per_token"],
                   decode_w_s=f["decode_w_s"], decode_h_s_per_token=f["decode_h_s_per_token"], **limits)

    @staticmethod
    def floored_terms(fit: dict) -> dict[str, float]:
        """The fitted terms `from_fit` raises to their floor, with their fitted values."""
        return {key: fit[key] for key, floor in FIT_FLOORS.items() if not fit[key] >= floor}

    def nominal_tpot(self, context_tokens: float = 0.0) -> float:
        return self.decode_w_s + self.decode_h_s_per_token * context_tokens

    def unloaded_e2e(self, prompt_tokens: float, output_tokens: float) -> float:
        """Seconds a request takes alone on an idle instance: its prefill step, then one decode step per
        further output token over its own growing context (the default SLO is a multiple of this)."""
        decode_steps = max(0.0, output_tokens - 1)
        context = prompt_tokens + output_tokens / 2
        return (self.prefill_intercept_s + self.prefill_s_per_token * prompt_tokens
                + decode_steps * self.nominal_tpot(context))

    def capacity_rps(self, prompt_tokens: float, output_tokens: float) -> float:
        """Requests per second one instance sustains for requests of this mean size: each costs its
        own prefill step time, plus its share of decode steps run at the largest batch that fits."""
        batch = max(1.0, min(self.max_running, self.kv_capacity_tokens / (prompt_tokens + output_tokens)))
        step = self.nominal_tpot(batch * (prompt_tokens + output_tokens / 2))
        per_request = self.prefill_intercept_s + self.prefill_s_per_token * prompt_tokens + output_tokens * step / batch
        return 1.0 / per_request


@dataclass(slots=True)
class Job:
    """A request's life on one instance (times in simulated seconds)."""

    rid: int
    prompt_tokens: int
    output_tokens: int
    enqueued: float
    admitted: float | None = None  # when its latest prefill step began (service start, 004's ω)
    generated: int = 0
    start_counter: int = 0  # step counter at which generated == 0 (shifted on recompute)
    first_token: float | None = None
    finished: float | None = None
    preemptions: int = 0
    rejected: str | None = None
    hash_ids: tuple[int, ...] = ()  # the prompt's block ids (empty: it shares nothing known)
    cached_tokens: int = 0  # prompt tokens its first prefill took from the prefix cache


@dataclass
class Instance:
    name: str
    profile: InstanceProfile
    model: int = 0  # index of this instance's model in the requests' per-model label arrays
    clock: float = 0.0  # when the step in flight (if any) ends; the instance is free from then on
    counter: int = 0  # engine steps taken
    waiting: deque = field(default_factory=deque)
    running: dict = field(default_factory=dict)  # rid -> Job, in admission order
    finishes: list = field(default_factory=list)  # heap of (finish counter, rid)
    prompt_sum: int = 0  # Σ prompt tokens (incl. recomputed tokens) of running jobs
    start_sum: int = 0  # Σ start_counter of running jobs: context = prompt_sum + n · counter − start_sum
    done: list = field(default_factory=list)
    busy_s: float = 0.0
    cache: BlockLru | None = None  # the prefix cache (None: no prefix caching)
    block_tokens: int = 0  # tokens per cached block
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache (vLLM's prefix_cache_queries counter)
    prefix_hits: int = 0  # of them found cached (prefix_cache_hits)
    first_tokens: list = field(default_factory=list)  # (rid, time) of first tokens not yet seen by the router

    def cached_prefix_blocks(self, hash_ids) -> int:
        """How many leading blocks of a prompt this instance holds now (what KV events tell a router)."""
        return self.cache.match(hash_ids) if self.cache is not None and hash_ids else 0

    # ---- state a router may read
    @property
    def n_running(self) -> int:
        return len(self.running)

    @property
    def n_waiting(self) -> int:
        return len(self.waiting)

    @property
    def context_tokens(self) -> int:
        return self.prompt_sum + len(self.running) * self.counter - self.start_sum

    def generated(self, job: Job) -> int:
        return self.counter - job.start_counter if job.rid in self.running else job.generated

    def kv_utilization(self) -> float:
        return self.context_tokens / self.profile.kv_capacity_tokens

    def scrape(self, now: float) -> Scrape:
        """What this instance's `/metrics` says at `now`: all a router reads of it
        (`routeforge.artifacts.observation`)."""
        return Scrape(at=now, running=len(self.running), waiting=len(self.waiting),
                      kv_usage=min(1.0, self.kv_utilization()), prefix_queries=self.prefix_queries,
                      prefix_hits=self.prefix_hits)

    # ---- events
    def enqueue(self, job: Job, now: float) -> bool:
        """Queue a request at `now`; False (and the job marked rejected) when the buffer is full."""
        if self.profile.buffer is not None and len(self.waiting) >= self.profile.buffer:
            job.rejected = BUFFER_FULL
            self.done.append(job)
            return False
        job.enqueued = now
        self.waiting.append(job)
        if not self.running and self.clock < now:
            self.clock = now  # an idle instance starts its next step on arrival
        return True

    def advance(self, until: float) -> None:
        """Run every step that starts before `until`."""
        while self.clock < until:
            if self.waiting and self._admit():
                continue
            if not self.running:
                if self.waiting:  # nothing runs and the head still does not fit: it never will
                    job = self.waiting.popleft()
                    job.rejected = TOO_LARGE
                    self.done.append(job)
                    continue
                self.clock = until  # idle
                return
            self._decode_stretch(until)

    def _fits(self, job: Job) -> bool:
        """A free sequence slot, and room for the job and for this step's token of every running job
        (so that admitting never forces the preemption of what it joins)."""
        need = job.prompt_tokens + job.generated + 1 + len(self.running)
        return (len(self.running) < self.profile.max_running
                and self.context_tokens + need <= self.profile.kv_capacity_tokens)

    def _admit(self) -> bool:
        """One step that prefills every admissible waiting job and decodes the running ones."""
        if not self._fits(self.waiting[0]):
            return False
        decoding, context = len(self.running), self.context_tokens
        prefill = 0
        admitted = []
        while self.waiting and self._fits(self.waiting[0]):
            job = self.waiting.popleft()
            tokens = job.prompt_tokens + job.generated  # a preempted job recomputes what it had generated
            if self.cache is not None and job.hash_ids:
                cached = min(self.cache.match(job.hash_ids) * self.block_tokens, job.prompt_tokens - 1)
                if not job.preemptions:
                    job.cached_tokens = cached
                self.prefix_queries += job.prompt_tokens
                self.prefix_hits += cached
                tokens -= cached
                self.cache.insert(job.hash_ids)
            prefill += tokens
            job.start_counter = self.counter - job.generated
            job.admitted = self.clock
            self.running[job.rid] = job
            self.prompt_sum += job.prompt_tokens
            self.start_sum += job.start_counter
            heapq.heappush(self.finishes, (job.start_counter + job.output_tokens, job.rid))
            admitted.append(job)
        p = self.profile
        step = p.prefill_intercept_s + p.prefill_s_per_token * prefill
        if decoding:
            step += p.decode_w_s + p.decode_h_s_per_token * context
        self.clock += step
        self.busy_s += step
        self.counter += 1
        for job in admitted:
            if job.first_token is None:
                job.first_token = self.clock
                self.first_tokens.append((job.rid, self.clock))
        self._complete()
        return True

    def _decode_stretch(self, until: float) -> None:
        """Decode-only steps up to the next completion, KV overflow or the first step starting at or
        after `until`, whichever comes first, in closed form."""
        p = self.profile
        n, c0 = len(self.running), self.context_tokens
        to_finish = self.finishes[0][0] - self.counter
        room = (p.kv_capacity_tokens - c0) // n
        if room < 1:
            self._preempt()
            return
        steps = min(to_finish, room, self._steps_before(until, n, c0))
        steps = max(1, steps)
        duration = steps * p.decode_w_s + p.decode_h_s_per_token * (steps * c0 + n * steps * (steps - 1) / 2)
        self.clock += duration
        self.busy_s += duration
        self.counter += steps
        self._complete()

    def _steps_before(self, until: float, n: int, c0: int) -> int:
        """How many decode steps start before `until` (step j starts at clock + S(j))."""
        if math.isinf(until):
            return 1 << 62
        p = self.profile
        budget = until - self.clock
        h = p.decode_h_s_per_token
        a, b = h * n / 2, p.decode_w_s + h * (c0 - n / 2)
        # S(j) = a j² + b j < budget; the largest such j, plus one for step 0
        j = (-b + math.sqrt(b * b + 4 * a * budget)) / (2 * a) if a > 0 else budget / b
        j = max(0, math.ceil(j) - 1)
        while j > 0 and a * j * j + b * j >= budget:
            j -= 1
        return j + 1

    def _complete(self) -> None:
        while self.finishes and self.finishes[0][0] <= self.counter:
            finish, rid = heapq.heappop(self.finishes)
            job = self.running.get(rid)
            if job is None or job.start_counter + job.output_tokens != finish:
                continue  # the entry of an admission that was preempted
            del self.running[rid]
            self._release(job)
            job.generated = job.output_tokens
            job.finished = self.clock
            self.done.append(job)

    def _release(self, job: Job) -> None:
        self.prompt_sum -= job.prompt_tokens
        self.start_sum -= job.start_counter

    def _preempt(self) -> None:
        rid = next(reversed(self.running))  # the latest admitted
        job = self.running.pop(rid)
        job.generated = self.counter - job.start_counter
        self._release(job)
        job.preemptions += 1
        self.waiting.appendleft(job)
        if not self.running:  # one job alone exceeds the cache while decoding: it cannot finish here
            self.waiting.popleft()
            job.rejected = OUTGREW
            self.done.append(job)

