"""One serving instance scheduled as vLLM V1 schedules it, advanced in closed form between events.

Each engine step has a token budget (`max_num_batched_tokens`, vLLM's chunked prefill). The running
requests are served first, in admission order: a decoding request takes one token, a request still
prefilling takes as much of its remaining prompt as the budget leaves; then waiting requests are
admitted first come first served while a sequence slot, budget and KV memory remain, each starting
its prefill with the chunk the budget allows. A step costs
    [c + k1 · prefill tokens + Σ over the prefilling requests of a · n · (h + n/2)]
  + [W + S · decoding requests + H · their context tokens]
(the tier profile's prefill and decode fits, `profiling.batch_fits.TierFit`): a chunk of n tokens
attends to the h its request already holds (cached, or computed by earlier chunks) and to itself, the
quadratic term a the fit finds at long prompts; a fit without it (a = 0) charges one read of the held
context at the decode slope, H · h. A request's first token comes at the end of the step that
completes its prefill. While nothing prefills, the decoding set runs in lock-step and the next
completion, KV overflow or caller's horizon is reached by summing the arithmetic series of step times
in one go, which is what keeps the simulator fast.

KV memory (`kv_pool.KvPool`): one pool of `kv_capacity_tokens` per instance, shared by the running
requests and the prefix cache. A request's full prompt blocks (`Job.hash_ids`, e.g. from a
Mooncake-format trace, when the cluster gives instances `block_tokens`) are stored once however many
requests use them and stay cached after the last one finishes, freed tail first and evicted least
recently used when memory is needed; everything else a request holds (its prompt's tail, its
generated tokens) is its own. A request prefills only what follows the leading blocks the pool holds
(at least one token, as vLLM always computes the last). When the running requests' next tokens do not
fit, the most recently admitted is preempted (vLLM's default) and recomputed later: it returns to the
head of the queue and its next prefill covers its prompt and the tokens it had generated, with
whatever of its blocks are still cached. A request larger than the whole pool is rejected.

A router that looks at an instance between two of its steps sees it as of its latest committed
step: a step in flight at dispatch time has already been applied (at most one step early); the
cluster holds back what a router would learn of it until its time (`cluster.Cluster.advance`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field, replace

from routeforge.artifacts.deciding.observation import Scrape
from routeforge.training.policies.simulator.kv_pool import KvPool

# the lowest value each fitted term of a tier may take in the simulator (s; s per token; s per step)
FIT_FLOORS = {"prefill_intercept_s": 0.0, "prefill_grad_s_per_token": 1e-7, "decode_w_s": 1e-7,
              "decode_h_s_per_token": 0.0}
# fitted where the rows show them (profiling.batch_fits)
OPTIONAL_TERMS = {"prefill_attention_s_per_token2": 0.0, "decode_s_per_seq": 0.0}


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
    # tokens one engine step may schedule, prefill chunks and decodes together (vLLM V1's
    # max_num_batched_tokens; its OpenAI server's default on a GPU with at least 70 GiB)
    max_num_batched_tokens: int = 8192
    # prefill attention: a chunk of n tokens over h already held costs a · n · (h + n/2) more (0: the tier's
    # fit cannot tell it; the chunk then reads its held context at the decode slope, H · h)
    prefill_attention_s_per_token2: float = 0.0
    # decode's cost per sequence in a step (S of W + S·b + H·tokens; 0: the tier's fit cannot tell it)
    decode_s_per_seq: float = 0.0

    def __post_init__(self):
        for name in ("prefill_s_per_token", "decode_w_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"InstanceProfile.{name} must be positive, got {getattr(self, name)}")
        for name in ("prefill_intercept_s", "decode_h_s_per_token", "decode_s_per_seq"):
            if getattr(self, name) < 0:
                raise ValueError(f"InstanceProfile.{name} must not be negative, got {getattr(self, name)}")
        if self.max_running < 1 or self.kv_capacity_tokens < 2 or self.max_num_batched_tokens < 1:
            raise ValueError("InstanceProfile: max_running >= 1, kv_capacity_tokens >= 2 and "
                             "max_num_batched_tokens >= 1 required")

    @classmethod
    def from_fit(cls, fit: dict, **limits) -> InstanceProfile:
        """From a `TierFit.to_dict()` (or the `fit` of a tier profile's JSON), each term raised to its
        `FIT_FLOORS` value: a noise-sized fit (tiny models) can come out negative, which no instance
        can simulate."""
        f = {key: max(floor, fit[key]) for key, floor in FIT_FLOORS.items()}
        extra = {key: max(0.0, float(fit.get(key) or default)) for key, default in OPTIONAL_TERMS.items()}
        return cls(prefill_intercept_s=f["prefill_intercept_s"], prefill_s_per_token=f["prefill_grad_s_per_token"],
                   decode_w_s=f["decode_w_s"], decode_h_s_per_token=f["decode_h_s_per_token"], **extra, **limits)

    @staticmethod
    def floored_terms(fit: dict) -> dict[str, float]:
        """The fitted terms `from_fit` raises to their floor, with their fitted values."""
        return {key: fit[key] for key, floor in FIT_FLOORS.items() if not fit[key] >= floor}

    def nominal_tpot(self, context_tokens: float = 0.0, batch: float = 1.0) -> float:
        """One decode step of `batch` sequences holding `context_tokens` in all."""
        return self.decode_w_s + self.decode_s_per_seq * batch + self.decode_h_s_per_token * context_tokens

    def prefill_s(self, prompt_tokens: float, cached_tokens: float = 0.0) -> float:
        """Seconds a request's prefill takes alone: its uncached tokens in chunks of the step budget,
        each chunk's step reading the context before it."""
        left, held, total = max(1.0, prompt_tokens - cached_tokens), float(cached_tokens), 0.0
        while left > 0:
            chunk = min(left, float(self.max_num_batched_tokens))
            total += self.prefill_intercept_s + self.prefill_s_per_token * chunk + self.context_read_s(chunk, held)
            left, held = left - chunk, held + chunk
        return total

    def context_read_s(self, chunk: float, held: float) -> float:
        """A prefill chunk's attention beyond the linear term: a · n · (h + n/2) where the fit has the
        quadratic term, else one read of the held context at the decode slope (H · h)."""
        a = self.prefill_attention_s_per_token2
        return a * chunk * (held + chunk / 2) if a > 0 else self.decode_h_s_per_token * held

    def unloaded_e2e(self, prompt_tokens: float, output_tokens: float) -> float:
        """Seconds a request takes alone on an idle instance: its prefill, then one decode step per
        further output token over its own growing context (the default SLO is a multiple of this)."""
        decode_steps = max(0.0, output_tokens - 1)
        context = prompt_tokens + output_tokens / 2
        return self.prefill_s(prompt_tokens) + decode_steps * self.nominal_tpot(context)

    def capacity_rps(self, prompt_tokens: float, output_tokens: float) -> float:
        """Requests per second one instance sustains for requests of this mean size: each costs its
        own prefill step time, plus its share of decode steps run at the largest batch that fits."""
        batch = max(1.0, min(self.max_running, self.kv_capacity_tokens / (prompt_tokens + output_tokens)))
        step = self.nominal_tpot(batch * (prompt_tokens + output_tokens / 2), batch)
        per_request = self.prefill_s(prompt_tokens) + output_tokens * step / batch
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
    target: int = 0  # tokens its current prefill computes up to (its prompt, and what it had generated)
    computed: int = 0  # of them computed or found cached so far
    held: int = 0  # its leading prompt blocks referenced in the KV pool


@dataclass
class Instance:
    name: str
    profile: InstanceProfile
    model: int = 0  # index of this instance's model in the requests' per-model label arrays
    clock: float = 0.0  # when the step in flight (if any) ends; the instance is free from then on
    counter: int = 0  # engine steps taken
    waiting: deque = field(default_factory=deque)
    running: dict = field(default_factory=dict)  # rid -> Job, in admission order (prefilling or decoding)
    prefilling: dict = field(default_factory=dict)  # rid -> Job: the running ones whose prefill is not done
    finishes: list = field(default_factory=list)  # heap of (finish counter, rid) of decoding jobs
    # of the decoding jobs: Σ prompt tokens, Σ start_counter (context = prompt_sum + n · counter − start_sum)
    # and Σ tokens of their referenced prompt blocks (what of that context is not their own)
    prompt_sum: int = 0
    start_sum: int = 0
    held_sum: int = 0
    done: list = field(default_factory=list)
    busy_s: float = 0.0
    block_tokens: int = 0  # tokens per prompt block; 0: no prefix caching (block ids unused)
    pool: KvPool | None = None
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache (vLLM's prefix_cache_queries counter)
    prefix_hits: int = 0  # of them found cached (prefix_cache_hits)
    first_tokens: list = field(default_factory=list)  # (rid, time) of first tokens not yet seen by the router

    def __post_init__(self):
        if self.pool is None:
            self.pool = KvPool(self.profile.kv_capacity_tokens, self.block_tokens)

    def enable_prefix_caching(self, block_tokens: int) -> None:
        self.block_tokens = int(block_tokens)
        self.pool = KvPool(self.profile.kv_capacity_tokens, self.block_tokens)

    def clone(self) -> Instance:
        """An independent copy (its jobs and pool copied) that can run on without touching this one."""
        jobs = {id(j): replace(j) for j in (*self.waiting, *self.running.values())}
        copy = replace(self, waiting=deque(jobs[id(j)] for j in self.waiting),
                       running={rid: jobs[id(j)] for rid, j in self.running.items()},
                       prefilling={rid: jobs[id(j)] for rid, j in self.prefilling.items()},
                       finishes=list(self.finishes), done=[], first_tokens=[], pool=self.pool.copy())
        return copy

    def cached_prefix_blocks(self, hash_ids) -> int:
        """How many leading blocks of a prompt this instance holds now (what KV events tell a router)."""
        return self.pool.match(hash_ids) if self.block_tokens and hash_ids else 0

    # ---- state
    @property
    def n_running(self) -> int:
        return len(self.running)

    @property
    def n_waiting(self) -> int:
        return len(self.waiting)

    @property
    def n_decoding(self) -> int:
        return len(self.running) - len(self.prefilling)

    def _decode_context(self) -> int:
        return self.prompt_sum + self.n_decoding * self.counter - self.start_sum

    @property
    def context_tokens(self) -> int:
        """Tokens the running requests hold: the decoding ones' prompt and generated tokens, the
        prefilling ones' computed tokens."""
        return self._decode_context() + sum(j.computed for j in self.prefilling.values())

    def _private(self) -> int:
        """Tokens the running requests hold that are not referenced prompt blocks."""
        bt = self.block_tokens
        return (self._decode_context() - self.held_sum
                + sum(j.computed - j.held * bt for j in self.prefilling.values()))

    def generated(self, job: Job) -> int:
        if job.rid in self.running and job.rid not in self.prefilling:
            return self.counter - job.start_counter
        return job.generated

    def kv_utilization(self) -> float:
        """The share of the pool the running requests hold (vLLM's kv_cache_usage_perc: free cached
        blocks count as free)."""
        return (self._private() + self.pool.referenced_tokens()) / self.profile.kv_capacity_tokens

    def scrape(self, now: float) -> Scrape:
        """What this instance's `/metrics` says at `now`: all a router reads of it
        (`routeforge.artifacts.deciding.observation`)."""
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
        job.target = job.prompt_tokens + job.generated
        self.waiting.append(job)
        if not self.running and self.clock < now:
            self.clock = now  # an idle instance starts its next step on arrival
        return True

    def advance(self, until: float) -> None:
        """Run every step that starts before `until`."""
        while self.clock < until:
            if (self.waiting or self.prefilling) and self._step():
                continue
            if not self.running:
                if self.waiting:
                    if self._step() or not self.waiting:  # a preemption in the last try held the queue
                        continue
                    # nothing runs and the head still cannot start: it never will
                    self._reject_head(OUTGREW if self.waiting[0].preemptions else TOO_LARGE)
                    continue
                self.clock = until  # idle
                return
            self._decode_stretch(until)

    def _reject_head(self, reason: str) -> None:
        job = self.waiting.popleft()
        job.rejected = reason
        self.done.append(job)

    def _hit_blocks(self, job: Job) -> int:
        """The job's leading prompt blocks the pool holds, at most all but its last token's."""
        if not (self.block_tokens and job.hash_ids):
            return 0
        return min(self.pool.match(job.hash_ids), (job.target - 1) // self.block_tokens)

    def _step(self) -> bool:
        """One engine step with prefill work (module doc); False, having done nothing but any
        preemption the decoding requests' next tokens force, when no prefill can be scheduled."""
        p, pool, bt = self.profile, self.pool, self.block_tokens
        preempted = False
        while self.n_decoding and pool.room(self._private()) < self.n_decoding:
            self._preempt()
            preempted = True
        plan: dict[int, int] = {}  # rid -> prefill tokens this step
        need = self.n_decoding
        budget = p.max_num_batched_tokens - need
        for job in list(self.prefilling.values()):
            if budget <= 0:
                break
            if job.rid not in self.prefilling:
                continue  # preempted for an earlier one
            chunk = min(job.target - job.computed, budget)
            while job.rid in self.running and pool.room(self._private()) < need + chunk:
                victim = self._preempt()
                preempted = True
                if victim.rid in plan:
                    need -= plan.pop(victim.rid)
                elif victim is not job:
                    need -= 1  # a decoding one: its token is not needed
                budget = p.max_num_batched_tokens - need
            if job.rid not in self.running:
                continue
            plan[job.rid] = chunk
            need += chunk
            budget -= chunk
        while not preempted and self.waiting and budget > 0 and len(self.running) < p.max_running:
            job = self.waiting[0]
            if job.target + 1 > p.kv_capacity_tokens:
                self._reject_head(OUTGREW if job.preemptions else TOO_LARGE)
                continue
            hits = self._hit_blocks(job)
            chunk = min(job.target - hits * bt, budget)
            newly_held = sum(1 for b in job.hash_ids[:hits] if b not in pool.refs)
            if pool.room(self._private()) - newly_held * bt < need + chunk:
                break
            self.waiting.popleft()
            for block in job.hash_ids[:hits]:
                pool.reference(block)
            job.held, job.computed = hits, hits * bt
            if not job.preemptions:
                job.cached_tokens = hits * bt
            if bt and job.hash_ids:
                self.prefix_queries += job.prompt_tokens
                self.prefix_hits += hits * bt
            job.admitted = self.clock
            self.running[job.rid] = job
            self.prefilling[job.rid] = job
            plan[job.rid] = chunk
            need += chunk
            budget -= chunk
        if not plan:
            return False
        decoding, context = self.n_decoding, self._decode_context()
        step = (p.prefill_intercept_s + p.prefill_s_per_token * sum(plan.values())
                + sum(p.context_read_s(chunk, self.running[rid].computed) for rid, chunk in plan.items()))
        if decoding:
            step += p.decode_w_s + p.decode_s_per_seq * decoding + p.decode_h_s_per_token * context
        self.clock += step
        self.busy_s += step
        self.counter += 1
        for rid, chunk in plan.items():
            job = self.running[rid]
            job.computed += chunk
            if bt and job.hash_ids:  # its prompt blocks now complete are stored, once, in the pool
                full = min(len(job.hash_ids), job.computed // bt)
                for block in job.hash_ids[job.held:full]:
                    pool.reference(block)
                job.held = max(job.held, full)
            if job.computed >= job.target:
                self._start_decoding(job)
        pool.fit(self._private())
        self._complete()
        return True

    def _start_decoding(self, job: Job) -> None:
        """The step that completed `job`'s prefill sampled its next token: it decodes from now on."""
        del self.prefilling[job.rid]
        job.generated += 1
        if job.first_token is None:
            job.first_token = self.clock
            self.first_tokens.append((job.rid, self.clock))
        job.start_counter = self.counter - job.generated
        self.prompt_sum += job.prompt_tokens
        self.start_sum += job.start_counter
        self.held_sum += job.held * self.block_tokens
        heapq.heappush(self.finishes, (job.start_counter + job.output_tokens, job.rid))

    def _decode_stretch(self, until: float) -> None:
        """Decode-only steps up to the next completion, KV overflow or the first step starting at or
        after `until`, whichever comes first, in closed form."""
        p = self.profile
        n, c0 = self.n_decoding, self._decode_context()
        if n == 0:  # only prefills wait, the budget taken: one step of nothing cannot happen
            self._preempt()
            return
        room = self.pool.room(self._private()) // n
        if room < 1:
            self._preempt()
            return
        to_finish = self.finishes[0][0] - self.counter
        steps = 1 if self.prefilling else min(to_finish, room, self._steps_before(until, n, c0))
        steps = max(1, steps)
        duration = (steps * (p.decode_w_s + p.decode_s_per_seq * n)
                    + p.decode_h_s_per_token * (steps * c0 + n * steps * (steps - 1) / 2))
        self.clock += duration
        self.busy_s += duration
        self.counter += steps
        self.pool.fit(self._private())
        self._complete()

    def _steps_before(self, until: float, n: int, c0: int) -> int:
        """How many decode steps start before `until` (step j starts at clock + S(j))."""
        if math.isinf(until):
            return 1 << 62
        p = self.profile
        budget = until - self.clock
        h = p.decode_h_s_per_token
        a, b = h * n / 2, p.decode_w_s + p.decode_s_per_seq * n + h * (c0 - n / 2)
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
            if job is None or rid in self.prefilling or job.start_counter + job.output_tokens != finish:
                continue  # the entry of an admission that was preempted
            del self.running[rid]
            self._stop_decoding(job)
            self.pool.release(job.hash_ids[:job.held])
            job.held = 0
            job.generated = job.output_tokens
            job.finished = self.clock
            self.done.append(job)

    def _stop_decoding(self, job: Job) -> None:
        self.prompt_sum -= job.prompt_tokens
        self.start_sum -= job.start_counter
        self.held_sum -= job.held * self.block_tokens

    def _preempt(self) -> Job:
        """Preempt the most recently admitted running job: its memory is freed (its blocks stay cached
        until evicted) and it returns to the head of the queue, to recompute what it had."""
        rid = next(reversed(self.running))
        job = self.running.pop(rid)
        if rid in self.prefilling:
            del self.prefilling[rid]
        else:
            job.generated = self.counter - job.start_counter
            self._stop_decoding(job)
        self.pool.release(job.hash_ids[:job.held])
        job.held, job.computed = 0, 0
        job.target = job.prompt_tokens + job.generated
        job.preemptions += 1
        self.waiting.appendleft(job)
        return job
