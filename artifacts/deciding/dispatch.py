"""One decision per request: which model and which instance, with its predicted TTFT/E2E, expected
quality and cost, from the live state of each instance as vLLM's `/metrics` exposes it.

    dispatcher = Dispatcher(bundle)                       # the bundle's simulated fleet and policy
    states = [LiveState.from_vllm_metrics(text) for text in scrapes]   # one per instance, in order
    decision = dispatcher.decide_prompt("What is 15 plus 27?", states)  # or decide(...) with estimates

What it combines:
- the quality router (or KNN estimator): expected quality, output length and cost per model;
- each instance's tier fit (the prefill/decode step model the simulator and the latency heads were
  trained from, recorded in the bundle's `routing_simulator`): predicted TTFT and E2E under the
  instance's live load;
- the bundle's recommended routing policy, which picks the instance: a heuristic spec, or a learned
  (ONNX) policy whose observation a router can build (`artifacts.deciding.policy_inputs`: the queue
  counts of `ppo_queue_bias`, 000's QoS graph, 001's workload-aware view, or a kind an extension
  registers).

Why the step model and not the latency heads' trees: a decision must cost ≤ 2 ms on one core for a
dozen instances; the trees are per tier and want per-request features that `/metrics` does not
give. What a heuristic decides from is the router-visible observation
(`routeforge.artifacts.deciding.observation`), the same one the simulator hands every policy it evaluates:
each instance's latest `/metrics` scrape (requests running and waiting, the KV cache's usage) and the
dispatcher's own record of what it sent where (each request's prompt tokens, predicted output tokens
and send time), which `finished(request_id)` ends; a caller that never reports completions is healed
by the counts (sends older than a scrape beyond what it counts are forgotten).
A learned policy runs here from the same router-visible observation, built by its observation's kind
(`artifacts.deciding.policy_inputs`, looked up by the exported spec: the function its training
environment called) over the dispatcher's view; as it decides each request when it comes, a drop or
wait action is set aside (the best-scored instance is taken). 004's observation (single-server
request ages) a router cannot build: where that policy is recommended, the dispatcher says so and
takes the best heuristic the bundle carries, or `policy=` names one. The arrival rate a queue-state
policy observes is counted from the dispatcher's own decisions over the policy's slot (or passed to
`decide`).

The deployed routers (`artifacts.deciding.deployed_routers`: llm-d, Dynamo, SGLang) run here as they run
without KV events: from `/metrics` (KV usage, queue lengths) and the dispatcher's own approximate
prefix index of what it sent where, kept in the policy's state across decisions. A prompt's blocks
are `prompt_blocks`: chained hashes of its text in 64-character chunks, at most 256 (llm-d's
approximate prefix scorer: `hashBlockSize` 64, `maxPrefixBlocksToMatch` 256); `decide` takes a
serving engine's own block hashes instead where the caller has them.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.heuristics import HEURISTICS, HeuristicPolicy, heuristic_spec
from routeforge.artifacts.deciding.observation import InstanceFacts, RouterView, Scrape
from routeforge.artifacts.deciding.policy import RoutingPolicy
from routeforge.artifacts.deciding.policy_inputs.base import (
    DecisionContext,
    FleetFacts,
    LiveInput,
    input_kind,
    live_input,
)

# vLLM's gauge names (V1, then V0 spellings)
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_QUERIES, PREFIX_HITS = ("vllm:prefix_cache_queries_total",), ("vllm:prefix_cache_hits_total",)
DEFAULT_OUTPUT_TOKENS = 128.0
BLOCK_CHARS, MAX_BLOCKS = 64, 256  # llm-d's approximate prefix scorer's defaults
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([^\s]+)")


def prompt_blocks(text: str, block_chars: int = BLOCK_CHARS, max_blocks: int = MAX_BLOCKS) -> list[int]:
    """The ids of `text`'s leading whole chunks of `block_chars` characters, each hashing the chunk
    and the id before it (two prompts share an id only where they share everything up to it), as
    63-bit integers; at most `max_blocks`. A partial last chunk is not a block, as in a KV cache."""
    whole = min(len(text) // block_chars, max_blocks) * block_chars
    return _chained(text[start:start + block_chars].encode("utf-8", "surrogatepass")
                    for start in range(0, whole, block_chars))


def token_blocks(ids: Sequence[int], block_tokens: int, max_blocks: int = MAX_BLOCKS) -> list[int]:
    """`prompt_blocks` of a prompt given as token ids: chunks of `block_tokens` ids, as a serving
    engine's KV blocks hold them (what the gateway's prefix index keys a token-id prompt by)."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens: a positive count, got {block_tokens!r}")
    whole = min(len(ids) // block_tokens, max_blocks) * block_tokens
    return _chained(np.asarray(ids[start:start + block_tokens], dtype="<i8").tobytes()
                    for start in range(0, whole, block_tokens))


def _chained(chunks) -> list[int]:
    """63-bit ids, each hashing its chunk and the id before it."""
    import hashlib

    ids, previous = [], b""
    for chunk in chunks:
        digest = hashlib.blake2b(previous + chunk, digest_size=8).digest()
        ids.append(int.from_bytes(digest, "big") >> 1)
        previous = digest
    return ids


def parse_gauges(text: str, names: Sequence[str]) -> dict[str, float]:
    """The value of each named series in Prometheus text exposition, summed over its label sets
    (several models on one server). The runtime reads three gauges, so this reads sample lines
    only (comments and other series are skipped) rather than pull in a Prometheus client."""
    wanted, out = set(names), {}
    prefixes = tuple(wanted)  # a server's /metrics is tens of KB: only the lines of wanted series are matched
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        match = _SAMPLE.match(line)
        if match and match.group(1) in wanted:
            value = float(match.group(3))
            out[match.group(1)] = out.get(match.group(1), 0.0) + value
    return out


@dataclass(frozen=True)
class LiveState:
    """One instance's state: requests running and waiting, the KV cache's usage (0..1), the prefix
    cache's cumulative counters, and `at`, when it was scraped on the caller's monotonic clock (None:
    the moment of the decision). A caller that scrapes on its own schedule (the gateway) gives `at`, so
    the dispatcher counts its sends made since the scrape as unseen by it, not as already counted."""

    running: float
    waiting: float
    kv_usage: float = 0.0
    at: float | None = None
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0

    def __post_init__(self):
        for name in ("running", "waiting"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"LiveState.{name}: a request count is finite and ≥ 0, got {value!r}")
        if not (math.isfinite(self.kv_usage) and 0 <= self.kv_usage <= 1.0001):
            raise ValueError(f"LiveState.kv_usage: a share in [0, 1], got {self.kv_usage!r}")

    @classmethod
    def from_vllm_metrics(cls, text: str, at: float | None = None) -> LiveState:
        """From the text of a vLLM server's `/metrics` (scraped at `at`); a server without the
        running/waiting gauges is refused, naming them."""
        gauges = parse_gauges(text, (*RUNNING, *WAITING, *KV_USAGE, *PREFIX_QUERIES, *PREFIX_HITS))

        def first(names: Sequence[str], required: bool) -> float:
            for name in names:
                if name in gauges:
                    return gauges[name]
            if required:
                raise ValueError(f"/metrics has no {' or '.join(names)}: not a vLLM server's metrics")
            return 0.0

        kv = first(KV_USAGE, False)
        return cls(first(RUNNING, True), first(WAITING, True), min(1.0, kv) if math.isfinite(kv) else kv, at,
                   first(PREFIX_QUERIES, False), first(PREFIX_HITS, False))


@dataclass(frozen=True)
class Decision:
    """Where one request goes and what is expected of it there."""

    model: str
    instance: int
    tier: str
    predicted_ttft_s: float
    predicted_e2e_s: float
    expected_quality: float
    cost_usd: float
    policy: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    request_id: int = -1  # what `Dispatcher.finished` takes once its response has ended

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


class Dispatcher:
    """Per-request decisions over the instances of a bundle's simulated fleet (see the module doc)."""

    def __init__(self, bundle, policy: str | None = None):
        sim = bundle.simulator_spec()  # the instances to dispatch to (KeyError for a bundle without them)
        self.bundle = bundle
        self.instances = sim["instances"]
        self.models: list[str] = sim["models"]
        self.max_running = int(sim["queue_capacity"])
        # each instance's own KV tokens where the fleet file gave its hardware (`profiling.kv_capacity`),
        # else the evaluation's one figure for all
        self.kv_tokens = np.array([float((i.get("limits") or {}).get("kv_capacity_tokens") or sim["kv_capacity_tokens"])
                                   for i in self.instances])
        fits = [i["fit"] for i in self.instances]
        self.prefill_c = np.array([max(0.0, f["prefill_intercept_s"]) for f in fits])
        self.prefill_k = np.array([max(1e-7, f["prefill_grad_s_per_token"]) for f in fits])
        self.decode_w = np.array([max(1e-7, f["decode_w_s"]) for f in fits])
        self.decode_h = np.array([max(0.0, f["decode_h_s_per_token"]) for f in fits])
        self.decode_s = np.array([max(0.0, f.get("decode_s_per_seq") or 0.0) for f in fits])  # 0 in older bundles
        self.model_of = np.array([i["model_index"] for i in self.instances])
        self._served_models = sorted(set(self.model_of.tolist()))  # the models some instance serves
        prices = {m.name: (m.input_per_mtok or 0.0, m.output_per_mtok or 0.0) for m in bundle.manifest.fleet.models}
        self.price_in = np.array([prices.get(m, (0.0, 0.0))[0] for m in self.models]) / 1e6
        self.price_out = np.array([prices.get(m, (0.0, 0.0))[1] for m in self.models]) / 1e6
        self.notes: tuple[str, ...] = ()
        # a learned policy's observation, built as its training environment built it (None: a heuristic)
        self._input: LiveInput | None = None
        self.policy_name, self.policy = self._policy(policy, (sim.get("gate") or {}).get("best_heuristic"))
        # the router's own record of what it sent where, and the scrapes: the observation every heuristic reads
        self.view = RouterView([InstanceFacts(self.max_running, float(c), float(k), float(w), float(h), float(kv))
                                for c, k, w, h, kv in zip(self.prefill_c, self.prefill_k, self.decode_w,
                                                          self.decode_h, self.kv_tokens)])
        self._next_id = 0
        self._counter = None  # `count_tokens`'s tokenizer, made on first use

    def _policy(self, name: str | None, best_heuristic: str | None) -> tuple[str, HeuristicPolicy | RoutingPolicy]:
        chosen = name or self.bundle.recommended_policy
        carried = {c.name: c for c in self.bundle.manifest.components if c.kind == "routing_policy"}
        if chosen is not None and not chosen.startswith("policy--"):
            chosen = f"policy--{chosen}"
        if chosen is not None and chosen not in carried:
            heuristic = chosen.removeprefix("policy--")
            if name is not None and heuristic in HEURISTICS:
                # a registered heuristic the evaluation did not run (a deployed router, say): its
                # documented defaults over this bundle's instances
                self.notes = (f"{name} is not carried by the bundle: run with its registered defaults",)
                return heuristic, HeuristicPolicy.from_spec(heuristic_spec(heuristic, len(self.instances)))
            raise KeyError(f"policy {chosen!r} is not in bundle {self.bundle.manifest.name} "
                           f"(it carries {sorted(carried)})")
        kind = None  # the learned policy's observation, where a router cannot build it
        if chosen is not None and carried[chosen].config.get("policy_kind") != "heuristic":
            policy = self.bundle.routing_policy(chosen)
            if isinstance(policy, RoutingPolicy):
                self._input = live_input(policy.spec["observation"], self._fleet_facts())
                if self._input is not None:
                    return chosen.removeprefix("policy--"), policy  # built from the router's view: runnable here
                kind = input_kind(policy.spec["observation"])
        if chosen is None or carried[chosen].config.get("policy_kind") != "heuristic":
            heuristics = [n for n, c in carried.items() if c.config.get("policy_kind") == "heuristic"]
            if not heuristics:
                raise ValueError(f"bundle {self.bundle.manifest.name} carries no heuristic routing policy to "
                                 "dispatch with")
            if name is not None:
                raise ValueError(f"{chosen} is a learned policy whose observation ({kind}) a router cannot build; "
                                 f"name a heuristic ({', '.join(heuristics)})")
            fallback = f"policy--{best_heuristic}" if f"policy--{best_heuristic}" in heuristics else heuristics[0]
            self.notes = (f"the recommended {chosen} is learned with an observation ({kind}) a router cannot "
                          f"build; dispatching with {fallback}",)
            chosen = fallback
        return chosen.removeprefix("policy--"), self.bundle.routing_policy(chosen)

    def predict_latency(self, states: Sequence[LiveState], prompt_tokens: float,
                        output_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(TTFT, E2E) in seconds of a request sent to each instance now (`output_tokens` per
        instance). Requests ahead of it beyond the batch limit drain at the batch's pace; its own
        prefill shares a step with the waiting ones; it then decodes at a step time that grows with
        the KV cache's content (and with the batch, where the tier's fit has a per-sequence term)."""
        running = np.array([s.running for s in states])
        waiting = np.array([s.waiting for s in states])
        context = np.array([s.kv_usage for s in states]) * self.kv_tokens
        out = np.maximum(1.0, output_tokens)
        batch = np.minimum(self.max_running, running + 1)
        step = self.decode_w + self.decode_s * batch + self.decode_h * (context + prompt_tokens + out / 2)
        ahead = np.maximum(0.0, running + waiting + 1 - self.max_running)
        drain = ahead * out * step / self.max_running  # a slot frees every (output · step / batch) s
        prefill = self.prefill_c + self.prefill_k * prompt_tokens * (1 + waiting)
        ttft = drain + prefill
        return ttft, ttft + (out - 1) * step

    def finished(self, request_id: int) -> None:
        """The response of a decided request has ended: it leaves the dispatcher's in-flight record."""
        self.view.finished(request_id)

    def first_token(self, request_id: int, at: float | None = None) -> None:
        """The first token of a decided request's stream arrived (`at`, default now): its prefill is
        done, which a proxying router sees and the observation uses."""
        self.view.first_token(request_id, time.monotonic() if at is None else float(at))

    def _fleet_facts(self) -> FleetFacts:
        return FleetFacts(tuple(float(kv) for kv in self.kv_tokens), tuple(self._served_models))

    def decide(self, states: Sequence[LiveState], prompt_tokens: int, quality: Sequence[float],
               output_tokens: Sequence[float], arrivals_per_s: float | None = None,
               hash_ids: Sequence[int] | None = None, block_tokens: int | None = None,
               now: float | None = None, among: Sequence[int] | None = None) -> Decision:
        """The decision for a request of `prompt_tokens` whose per-model estimates (the router's, in
        `self.models` order) are `quality` and `output_tokens` (NaN: unknown). `arrivals_per_s` is
        read by a queue-state policy only (default: counted from the decisions of its last slot);
        `hash_ids` (its prompt's block ids, `block_tokens` tokens each) by the prefix-aware ones.
        `states` are the latest scrapes (each as of its `at`, else `now`, default the monotonic clock);
        the decision is recorded as sent (its `request_id` for `finished`). `among`: the instances the
        request may go to (those up, those serving the model the client named); where the policy picks
        another, the one of them with the least predicted TTFT is taken, and the decision says so."""
        if len(states) != len(self.instances):
            raise ValueError(f"{len(states)} instance states given; the bundle's fleet has {len(self.instances)} "
                             f"instances ({', '.join(i['tier'] for i in self.instances)})")
        if not (isinstance(prompt_tokens, (int, np.integer)) and 0 < prompt_tokens <= 10_000_000):
            raise ValueError(f"prompt_tokens: a positive token count, got {prompt_tokens!r}")
        quality = np.asarray(quality, dtype=float)
        tokens = np.asarray(output_tokens, dtype=float)
        if quality.shape != (len(self.models),) or tokens.shape != (len(self.models),):
            raise ValueError(f"quality and output_tokens: one value per model ({len(self.models)}: {self.models})")
        known = np.isfinite(tokens) & (tokens > 0)
        # a model without a length estimate takes the others' median; a bundle with none (score tables
        # carry no output lengths) takes DEFAULT_OUTPUT_TOKENS
        tokens = np.where(known, tokens, float(np.median(tokens[known])) if known.any() else DEFAULT_OUTPUT_TOKENS)
        per_instance_tokens = tokens[self.model_of]
        request = {"prompt_tokens": prompt_tokens, "predicted_output_tokens": per_instance_tokens.tolist(),
                   "predicted_quality": quality[self.model_of].tolist()}
        if hash_ids:
            if not (isinstance(block_tokens, (int, np.integer)) and block_tokens >= 1):
                raise ValueError(f"block_tokens: the tokens per block of hash_ids, a positive count, "
                                 f"got {block_tokens!r}")
            request |= {"hash_ids": list(hash_ids), "block_tokens": int(block_tokens)}
        now = time.monotonic() if now is None else float(now)
        request["now_s"] = now
        for i, s in enumerate(states):
            at = now if s.at is None else float(s.at)
            seen = self.view.scrapes[i]
            if s.at is None or seen is None or seen.at != at:  # a scrape taken again would reset what left since
                self.view.scraped(i, Scrape(at=at, running=s.running, waiting=s.waiting, kv_usage=min(1.0, s.kv_usage),
                                            prefix_queries=s.prefix_queries, prefix_hits=s.prefix_hits))
        context = None
        if self._input is not None:
            # a learned policy: its own observation's pick; a wait (001) or drop (000) action is set aside
            context = DecisionContext(states, request, self.view, now, tokens, arrivals_per_s)
            choice = self._input.choose(self.policy, context)
        else:
            choice = int(self.policy.route(request, self.view.observe(now)))
        ttft, e2e = self.predict_latency(states, prompt_tokens, per_instance_tokens)
        notes = self.notes
        if among is not None:
            allowed = sorted({int(i) for i in among})
            if not allowed or not all(0 <= i < len(self.instances) for i in allowed):
                raise ValueError(f"among: instance indices in [0, {len(self.instances)}), at least one, got {among!r}")
            if choice not in allowed:
                taken = min(allowed, key=lambda i: (ttft[i], i))
                notes = (*notes, f"{self.policy_name} chose instance {choice}, not among {allowed}: took {taken}, "
                                 "the least predicted TTFT of them")
                choice = taken
        if context is not None:
            self._input.sent(choice, context)
        request_id, self._next_id = self._next_id, self._next_id + 1
        self.view.sent(choice, request_id, prompt_tokens, float(per_instance_tokens[choice]), now,
                       predicted_quality=float(request["predicted_quality"][choice]))
        model = int(self.model_of[choice])
        cost = float(prompt_tokens * self.price_in[model] + tokens[model] * self.price_out[model])
        return Decision(self.models[model], choice, self.instances[choice]["tier"], float(ttft[choice]),
                        float(e2e[choice]), float(quality[model]), cost, self.policy_name, notes, request_id)

    def count_tokens(self, text: str) -> int | None:
        """`text`'s tokens by the bundle's sentence-encoder tokenizer, every one (None: the bundle has no
        encoder). A copy of that tokenizer with truncation and padding off, made once: the encoder sets
        truncation on its own before each call, from whichever thread routes."""
        if self._counter is None:
            if not self.bundle.has_kind("sentence_encoder"):
                return None
            from tokenizers import Tokenizer

            counter = Tokenizer.from_str(self.bundle.sentence_encoder().tokenizer.tokenizer.to_str())
            counter.no_truncation()
            counter.no_padding()
            self._counter = counter
        return max(1, len(self._counter.encode(text).ids))

    def decide_prompt(self, prompt: str, states: Sequence[LiveState], prompt_tokens: int | None = None) -> Decision:
        """`decide` with the bundle's own estimates for `prompt` (its router, else its KNN estimator);
        the prompt's tokens are counted with the bundle's sentence-encoder tokenizer unless given;
        its blocks are `text_blocks` of its text."""
        prediction = self.bundle.route([prompt]).prediction
        order = [list(prediction.models).index(m) for m in self.models]
        prompt_tokens = prompt_tokens or self.count_tokens(prompt)
        blocks, block_tokens = text_blocks(prompt, prompt_tokens)
        return self.decide(states, prompt_tokens, np.asarray(prediction.quality)[0, order],
                           np.asarray(prediction.output_tokens, dtype=float)[0, order], hash_ids=blocks,
                           block_tokens=block_tokens)


def text_blocks(text: str, prompt_tokens: int) -> tuple[list[int], int | None]:
    """A text prompt's `prompt_blocks` and the tokens each stands for (its share of the prompt's
    `prompt_tokens`; None where the text is shorter than one block)."""
    blocks = prompt_blocks(text)
    return blocks, (max(1, round(prompt_tokens * BLOCK_CHARS / len(text))) if blocks else None)
