"""What a router can see of its fleet, built by one function for every policy in the simulator and in
the runtime: the router-visible observation.

Why one function: a policy trained or tuned on state only the simulator has (each instance's exact busy
time, the exact lengths of the prompts waiting there) is judged on a gain no deployed router can have,
and on a conversation trace such state made up a large part of a learned scorer's gain over llm-d
(docs/results/load-aware-vllm-physics.md). So the simulator produces what vLLM's `/metrics` would say
and what the router itself knows, hands a policy nothing else, and the runtime's `Dispatcher` builds
the same observation from real scrapes.

Two sources, nothing more:
- **A scrape of each instance's `/metrics`** (`Scrape`): requests running and waiting, the KV cache's
  use, the prefix cache's query and hit counters, as of when it was taken (`at`); how stale a scrape
  may get is the fleet file's `routing_evaluation.scrape_interval_s`.
- **What the router itself sent** (`RouterView`): per instance its in-flight requests in send order,
  each with its prompt tokens, the output tokens and quality predicted for it, its send time and, once its stream
  has begun, the time of its first token (`first_token`: a proxying router sees it, as Dynamo's slot
  manager marks prefill complete); a request leaves when its response ends (`finished`). The view's
  own prefix index (what it sent where, LRU per instance within its KV capacity) says how many of a
  send's tokens the instance should have to compute, so `queued_prefill_tokens` (the prefill still
  ahead there) is the router's estimate too. A prefix-aware policy keeps its own index besides, as
  its deployed original does (`artifacts.deciding.deployed_routers`).
And the fleet's static facts every router is configured with (`InstanceFacts`: slots, the tier's
prefill and decode step fits, KV capacity).

`RouterView.observe(now)` gives, per instance, an `ObservedInstance`: the mapping the heuristics read
(`routeforge.artifacts.deciding.heuristics`' telemetry form). Its requests are split the way vLLM's FCFS
scheduler holds them. Of the scrape's `running`, those of the router's sends that finished since are
gone; the oldest of its sends from before the scrape fill the rest (their generated tokens estimated
from their age at the decode step time); the others wait, with every send made after the scrape.
Requests the scrape counts beyond the router's own (another router replica's, another client's) are
there too, each as long as the router's sends on average (`typical`; 512 prompt and 128 output tokens
before its first send), running ones half-way through. A field
outside the observation (`busy_for_s`, an instance's context tokens, ...) raises `ObservationError`
when read, so a policy cannot decide from what a router could not see; `cached_prefix_blocks` (what
KV events would add) is absent, so the prefix-aware routers use their own index.

Plain Python (no NumPy): the runtime imports it alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from routeforge.artifacts.deciding.prefix_index import PrefixIndex

# the fields of an instance's observation, each always present
OBSERVED = ("max_running", "prefill_s_per_token", "tpot_s", "kv_capacity_tokens", "kv_utilization", "running",
            "waiting", "active_tokens", "queued_prefill_tokens", "prefix_cache_hit_rate", "scrape_age_s")
# fields a caller outside the simulator may hand a heuristic (KV events' `cached_prefix_blocks`): absent here,
# so `.get` gives its default and the heuristic falls back to its own index
ABSENT = frozenset({"cached_prefix_blocks"})


class ObservationError(Exception):
    """A policy read a field the router cannot see (not a KeyError, so `.get(name, default)` raises too)."""


@dataclass(frozen=True)
class InstanceFacts:
    """What a router is configured with about one instance: its slots, its tier's step fits
    (`profiling.batch_fits.TierFit` terms) and its KV capacity in tokens."""

    max_running: int
    prefill_intercept_s: float
    prefill_s_per_token: float
    decode_w_s: float
    decode_h_s_per_token: float
    kv_capacity_tokens: float


@dataclass(frozen=True)
class Scrape:
    """One instance's `/metrics` as of `at` (seconds on the router's clock): the gauges and the prefix
    cache's cumulative counters (tokens queried and hit)."""

    at: float
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0

    def __post_init__(self):
        for name in ("running", "waiting", "prefix_queries", "prefix_hits"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"Scrape.{name}: a finite count ≥ 0, got {value!r}")
        if not (math.isfinite(self.kv_usage) and 0 <= self.kv_usage <= 1.0001):
            raise ValueError(f"Scrape.kv_usage: a share in [0, 1], got {self.kv_usage!r}")


@dataclass(slots=True)
class Sent:
    """A request the router sent and has not seen finish."""

    rid: Any
    prompt_tokens: int
    predicted_output_tokens: float
    sent_at: float
    prefill_tokens: int  # of the prompt, what the router expects the instance to compute (not cached there)
    predicted_quality: float = 0.0  # the router's estimate of its quality on the instance's model (0: none)
    first_token_at: float | None = None
    waiting_entry: dict | None = None  # its observation while it waits (made once: nothing in it changes)


class ObservedInstance(Mapping):
    """One instance as the router sees it: a read-only mapping of exactly `OBSERVED`."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, Any]):
        self._fields = fields

    def __getitem__(self, name: str) -> Any:
        if name in self._fields:
            return self._fields[name]
        if name in ABSENT:
            raise KeyError(name)
        raise ObservationError(f"{name!r} is not in the router's observation (it has {', '.join(OBSERVED)}): "
                               "a policy decides from what /metrics and its own sends tell a router")

    def __contains__(self, name: object) -> bool:
        return name in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._fields)


TYPICAL = (512.0, 128.0)  # (prompt, output) tokens of a request the router did not send, before its first send


@dataclass
class RouterView:
    """The router's own bookkeeping over `facts` (one per instance): its in-flight sends, the latest
    scrape of each instance and how many of its sends from before that scrape have finished since."""

    facts: Sequence[InstanceFacts]
    block_tokens: int = 0  # tokens per block of the sends' `hash_ids` (0: prefixes are not tracked)
    in_flight: list[dict] = field(default_factory=list)  # per instance: rid -> Sent, in send order
    scrapes: list[Scrape | None] = field(default_factory=list)
    _where: dict = field(default_factory=dict)  # rid -> instance
    _gone: list[int] = field(default_factory=list)  # per instance: sends from before its scrape finished since
    _streaming: list[int] = field(default_factory=list)  # per instance: in-flight sends whose first token came
    _sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # Σ prompt, Σ output, sends

    def __post_init__(self):
        self.in_flight = [{} for _ in self.facts]
        self.scrapes = [None] * len(self.facts)
        self._gone = [0] * len(self.facts)
        self._streaming = [0] * len(self.facts)
        self.index = PrefixIndex([max(1, int(f.kv_capacity_tokens) // self.block_tokens) for f in self.facts]
                                 ) if self.block_tokens else None

    def __len__(self) -> int:
        return len(self.facts)

    @property
    def typical(self) -> tuple[float, float]:
        """The mean prompt and predicted output tokens of the router's sends (`TYPICAL` before any)."""
        prompt, output, n = self._sums
        return (prompt / n, output / n) if n else TYPICAL

    def sent(self, instance: int, rid: Any, prompt_tokens: int, predicted_output_tokens: float, now: float,
             hash_ids: Sequence[int] = (), predicted_quality: float = 0.0) -> None:
        """Record a send; `hash_ids`, its prompt's block ids, feed the view's prefix index;
        `predicted_quality`, the router's estimate for it there, is carried in its entries."""
        prefill = int(prompt_tokens)
        if self.index is not None and hash_ids:
            cached = self.index.overlaps(hash_ids)[instance] * self.block_tokens
            prefill = max(1, prefill - min(cached, prefill - 1))
            self.index.record(instance, hash_ids)
        quality = float(predicted_quality)
        self.in_flight[instance][rid] = Sent(rid, int(prompt_tokens), float(predicted_output_tokens), float(now),
                                             prefill, quality if math.isfinite(quality) else 0.0)
        self._where[rid] = instance
        self._sums[0] += prompt_tokens
        self._sums[1] += predicted_output_tokens
        self._sums[2] += 1

    def first_token(self, rid: Any, at: float) -> None:
        """The first token of `rid`'s stream arrived at `at` (its prefill is done)."""
        instance = self._where.get(rid)
        sent = self.in_flight[instance].get(rid) if instance is not None else None
        if sent is not None:
            if sent.first_token_at is None:
                self._streaming[instance] += 1
            sent.first_token_at = float(at)

    def finished(self, rid: Any) -> None:
        """The response of `rid` ended (served, rejected or failed); unknown ids are ignored."""
        instance = self._where.pop(rid, None)
        if instance is None:
            return
        sent = self.in_flight[instance].pop(rid, None)
        if sent is not None and sent.first_token_at is not None:
            self._streaming[instance] -= 1
        scrape = self.scrapes[instance]
        if sent is not None and scrape is not None and sent.sent_at <= scrape.at:
            self._gone[instance] += 1

    def scraped(self, instance: int, scrape: Scrape) -> None:
        """Take a new scrape. Sends older than it beyond what it counts (running + waiting) have
        finished without the router being told (a caller that never reports completions): the oldest
        such are forgotten, so the view heals from the counts alone."""
        self.scrapes[instance] = scrape
        self._gone[instance] = 0
        flights = self.in_flight[instance]
        counted = int(round(scrape.running + scrape.waiting))
        if len(flights) <= counted:  # nothing to heal (always, where completions are reported)
            return
        before = [rid for rid, s in flights.items() if s.sent_at <= scrape.at]
        for rid in before[:max(0, len(before) - counted)]:
            self._where.pop(rid, None)
            if flights.pop(rid).first_token_at is not None:
                self._streaming[instance] -= 1

    def _sent_before(self, i: int, at: float) -> int:
        """How many of instance i's in-flight sends were sent at or before `at` (sends are in time
        order: the ones after it are the last few)."""
        flights, after = self.in_flight[i], 0
        for rid in reversed(flights):
            if flights[rid].sent_at <= at:
                break
            after += 1
        return len(flights) - after

    def _split(self, i: int, now: float) -> tuple[int, int, int]:
        """How many of instance i's own in-flight sends run, and the requests running and waiting
        there that the router did not send."""
        scrape = self.scrapes[i] or Scrape(at=now)
        before = self._sent_before(i, scrape.at)
        # the scrape counted the router's sends from before it (those still in flight and those gone since)
        # and any others'; of its running, those gone since have left
        others = max(0, int(round(scrape.running + scrape.waiting)) - before - self._gone[i])
        still_running = max(0, int(round(scrape.running)) - self._gone[i])
        own_running = min(before, still_running)
        others_running = min(others, still_running - own_running)
        others_waiting = others - others_running
        return max(self._streaming[i], own_running), others_running, others_waiting

    def outstanding(self, now: float = 0.0) -> list[int]:
        """Requests running and waiting per instance: the router's own in flight and the others the
        scrapes count."""
        out = []
        for i in range(len(self.facts)):
            _, others_running, others_waiting = self._split(i, now)
            out.append(len(self.in_flight[i]) + others_running + others_waiting)
        return out

    def observe(self, now: float) -> list[ObservedInstance]:
        """Every instance's observation at `now` (module doc)."""
        return [self._observe(i, now) for i in range(len(self.facts))]

    def _observe(self, i: int, now: float) -> ObservedInstance:
        facts, scrape = self.facts[i], self.scrapes[i] or Scrape(at=now)
        tpot = facts.decode_w_s + facts.decode_h_s_per_token * scrape.kv_usage * facts.kv_capacity_tokens
        own_running, others_running, others_waiting = self._split(i, now)
        every = self.in_flight[i].values()  # those whose stream has begun first, then in send order
        flights = [s for s in every if s.first_token_at is not None] + [s for s in every if s.first_token_at is None]
        prompt, output = self.typical
        running, active = [], 0.0
        for s in flights[:own_running]:
            started = (s.first_token_at if s.first_token_at is not None else s.sent_at + facts.prefill_intercept_s
                       + facts.prefill_s_per_token * s.prefill_tokens)
            generated = min(max(0.0, s.predicted_output_tokens - 1),
                            (1.0 if s.first_token_at is not None else 0.0) + max(0.0, now - started) / tpot)
            running.append({"prompt_tokens": s.prompt_tokens, "predicted_output_tokens": s.predicted_output_tokens,
                            "generated_tokens": generated, "sent_at": s.sent_at,
                            "predicted_quality": s.predicted_quality})
            active += s.prompt_tokens + generated
        waiting = []
        for s in flights[own_running:]:
            if s.waiting_entry is None:
                s.waiting_entry = {"prompt_tokens": s.prompt_tokens,
                                   "predicted_output_tokens": s.predicted_output_tokens, "sent_at": s.sent_at,
                                   "predicted_quality": s.predicted_quality}
            waiting.append(s.waiting_entry)
            active += s.prompt_tokens
        queued = float(sum(s.prefill_tokens for s in flights if s.first_token_at is None))
        # another's requests were there by the scrape (their age at least its age); their quality unknown
        running += [{"prompt_tokens": prompt, "predicted_output_tokens": output, "generated_tokens": output / 2,
                     "sent_at": scrape.at, "predicted_quality": 0.0}] * others_running
        waiting += [{"prompt_tokens": prompt, "predicted_output_tokens": output, "sent_at": scrape.at,
                     "predicted_quality": 0.0}] * others_waiting
        active += others_running * (prompt + output / 2) + others_waiting * prompt
        queued += others_waiting * prompt
        hit_rate = scrape.prefix_hits / scrape.prefix_queries if scrape.prefix_queries > 0 else 0.0
        return ObservedInstance({
            "max_running": facts.max_running, "prefill_s_per_token": facts.prefill_s_per_token, "tpot_s": tpot,
            "kv_capacity_tokens": facts.kv_capacity_tokens, "kv_utilization": min(1.0, scrape.kv_usage),
            "running": running, "waiting": waiting, "active_tokens": active, "queued_prefill_tokens": queued,
            "prefix_cache_hit_rate": hit_rate, "scrape_age_s": max(0.0, now - scrape.at)})
