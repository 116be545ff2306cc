"""The routers people deploy today, as registered heuristics, each written from its own source or
documentation (defaults and sources below): llm-d's scheduler as its inference-scheduling guide
configures it (`llm_d`) and as its optimized baseline does now (`llm_d_affinity`), NVIDIA Dynamo's KV
router (`dynamo_kv`), SGLang's cache-aware router (`sglang_cache_aware`) and LMetric (`lmetric`).

Why here: a bundle's recommendation means little unless it is measured against what a user would
deploy instead. Each is a decision function of `routeforge.artifacts.deciding.heuristics.HEURISTICS`, so the
simulator runs exactly the function a router service runs (`RegisteredHeuristic`), on the same
router-visible observation (`routeforge.artifacts.deciding.observation`), and a bundle can carry one. The
TypeScript runtime (runtimes/typescript/src/deployed_routers.ts) makes the same decisions, ties broken
by the same generator (`pick_among`), except Dynamo's at a temperature above 0, which it refuses.

What they read, besides the observation every heuristic gets: the request's `hash_ids` (its prompt's
block ids: vLLM's prefix-caching hashes, Mooncake's `hash_ids`), `block_tokens` (tokens per block) and
`now_s` (the router's clock, for the indexes that age). Each keeps the prefix index its original keeps
of what it sent where (`state`), sized and aged as that original does, since no router in the
observation is told the engines' caches; a caller outside the simulator that has KV events may hand
`cached_prefix_blocks` per instance, which `llm_d`, `dynamo_kv` and `llm_d_affinity` then use.

Documented defaults used:
- llm-d, inference-scheduling guide (`llm_d`): prefix-cache scorer weight 3, KV-cache-utilisation
  scorer 2, queue scorer 2, max-score picker choosing at random among ties. Scores in [0, 1]: prefix =
  matched blocks / the prompt's blocks (at most `max_prefix_blocks`); KV = 1 − utilisation; queue =
  (max − q) / (max − min) over the candidates' waiting queues (1 when all are equal). Its approximate
  prefix index (Gateway API Inference Extension's prefix plugin): 16-token blocks, at most 256 matched
  (4,096 tokens), an LRU of 31,250 blocks per server; counted here in the request's own blocks.
- llm-d's optimized baseline, "sticky until saturated" (`llm_d_affinity`; llm-d's guides/optimized-
  baseline, the prefix-cache-affinity filter then the token-load scorer): an instance is sticky when
  its cached share of the prompt's complete blocks reaches `affinity_threshold` 0.8; only the sticky
  ones are candidates unless the best of them has `max_ttft_penalty_ms` 18,000 more of queued prefill
  (at `peak_prefill_tokens_per_second` 15,928, llm-d's Qwen3-32B/H100 figure) than the best other one;
  among the candidates the highest token-load score 1 − min(1, tokens / `queue_threshold_tokens`
  4,194,304), tokens = the instance's queued prefill tokens + the request's uncached ones; random ties.
- Dynamo (KV router; its router design doc): cost = overlap_score_weight × (the worker's queued
  prefill tokens + the request's tokens not cached there) / block size + the worker's active blocks +
  the request's new blocks (its overlap counted once, as active already), weight 1.0; lowest cost wins at
  temperature 0 (the default), softmax over the normalised costs otherwise. Without KV events its
  index predicts the cache from its own decisions with a 120 s TTL (`ttl_s`).
- SGLang (model gateway, cache_aware): when the load is imbalanced (max − min outstanding requests
  > balance_abs_threshold 64 and max > balance_rel_threshold 1.5 × min) the least loaded; else the
  instance with the longest prefix match when its match rate exceeds cache_threshold 0.3; else the
  instance whose tree holds the fewest blocks. Its tree is its own, bounded by one size over all
  instances (`max_tree_size` 2²⁶ characters, 2²⁴ tokens at 4 characters a token) and pruned least
  recently used first every `eviction_interval_s` 120 s.
- LMetric (Zhang et al., OSDI '26, "Simple is Better: Multiplication May Be All You Need for LLM
  Request Scheduling"): score = the request's prefill tokens not cached on the instance × the
  instance's batch size (its running requests); the lowest wins, ties to fewer uncached tokens, then
  at random. No parameter. Its cache indicator here is the router's own LRU index per instance within
  its KV capacity (the paper's deployment reads the engines' caches).
- llm-d's predicted-latency scorer (`llm_d_predicted_latency`; llm-d's predicted-latency producer and
  latency scorer): an XGBoost model, trained online in llm-d on what it routed, predicts each
  instance's TTFT from its KV use, the request's input length, the instance's queue depth, its running
  requests, the request's prefix match there and the tokens in flight (`PREDICTED_LATENCY_FEATURES`);
  the request goes where the predicted TTFT leaves the most headroom under its SLO, which with one
  SLO for every instance is the lowest predicted TTFT (ties at random). Its model is trained on the
  simulator's observations (`training.policies.predicted_latency`) and carried in its spec
  (`parameters.model`, XGBoost's JSON), which both runtimes evaluate without XGBoost.
- ours, `llm_d_ttft`: llm-d's three scorers and a fourth, the request's predicted first-token time
  on each instance (the prefill still queued there and its own uncached tokens at that instance's
  speed), weight `ttft_weight` 0.5. Not a deployed router.
- ours, `linear_scorer`: a weighted sum of per-instance features (`SCORER_FEATURES`), its weights
  learned on training windows (`training.policies.weight_search`); with none given, `llm_d_ttft`.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.artifacts.deciding.prefix_index import GlobalLruIndex, PrefixIndex, TtlIndex
from routeforge.artifacts.deciding.tree_ensemble import TreeEnsemble

LLM_D_WEIGHTS = {"prefix": 3.0, "kv_utilization": 2.0, "queue": 2.0}
LLM_D_PREFIX = {"block_size_tokens": 16, "max_prefix_blocks": 256, "lru_capacity_per_server": 31_250}
LLM_D_AFFINITY = {"affinity_threshold": 0.8, "max_ttft_penalty_ms": 18_000.0,
                  "peak_prefill_tokens_per_second": 15_928.0, "queue_threshold_tokens": 4_194_304}
DYNAMO = {"overlap_score_weight": 1.0, "temperature": 0.0, "ttl_s": 120.0}
SGLANG = {"cache_threshold": 0.3, "balance_abs_threshold": 64, "balance_rel_threshold": 1.5,
          "max_tree_size_tokens": 1 << 24, "eviction_interval_s": 120.0}
MASK64 = (1 << 64) - 1


def pick_among(state: dict, ties: list[int], seed: int = 0) -> int:
    """One of `ties` (instance indexes, in order) at random, from a splitmix64 stream kept in `state`
    and started at `seed`: llm-d's max-score picker chooses among equal scores at random. Why not
    `random`: the TypeScript runtime draws the same stream (deployed_routers.ts), so both runtimes and
    the simulator break a tie alike."""
    if len(ties) == 1:
        return ties[0]
    x = (state.get("splitmix64", int(seed) & MASK64) + 0x9E3779B97F4A7C15) & MASK64
    state["splitmix64"] = x
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return ties[(z ^ (z >> 31)) % len(ties)]


def _highest(score: list[float], state: dict | None = None, seed: int = 0) -> int:
    """The instance with the highest score: among equal ones at random where `state` is given (llm-d's
    picker), else the first."""
    top = max(score)
    ties = [i for i, v in enumerate(score) if v == top]
    return pick_among(state, ties, seed) if state is not None else ties[0]


def _blocks(request: dict[str, Any]) -> tuple[list[int], int]:
    ids = list(request.get("hash_ids") or ())
    return ids, int(request.get("block_tokens") or 0)


def _told(instances) -> list[int] | None:
    """Each instance's cached leading blocks where a caller with KV events gives them, else None."""
    told = [i.get("cached_prefix_blocks") for i in instances]
    return [int(t) for t in told] if all(t is not None for t in told) else None


def _llm_d_limits(block_tokens: int, parameters: dict) -> tuple[int, int]:
    """llm-d's approximate index in the request's own blocks: (blocks matched at most, blocks held per
    server), from its block size, match limit and LRU capacity in its own 16-token blocks."""
    settings = {**LLM_D_PREFIX, **parameters}
    tokens = int(settings["block_size_tokens"])
    bt = max(1, block_tokens)
    limit = max(1, math.ceil(int(settings["max_prefix_blocks"]) * tokens / bt))
    return limit, max(1, int(settings["lru_capacity_per_server"]) * tokens // bt)


def llm_d_overlaps(request, instances, state, parameters) -> tuple[list[int], int]:
    """Each instance's leading blocks of the prompt (KV events' where told, else llm-d's approximate
    index), at most the match limit, and the blocks the prefix score divides by."""
    ids, block_tokens = _blocks(request)
    if not ids:
        return [0] * len(instances), 0
    limit, capacity = _llm_d_limits(block_tokens, parameters)
    ids = ids[:limit]
    told = _told(instances)
    if told is not None:
        return [min(t, len(ids)) for t in told], len(ids)
    if "llm_d_index" not in state:
        state["llm_d_index"] = PrefixIndex([capacity] * len(instances))
    return state["llm_d_index"].overlaps(ids), len(ids)


def remember_llm_d(request, instances, state, parameters, choice: int) -> int:
    ids, block_tokens = _blocks(request)
    if ids and "llm_d_index" in state:
        state["llm_d_index"].record(choice, ids[:_llm_d_limits(block_tokens, parameters)[0]])
    return choice


def _min_max(values: list[float]) -> list[float]:
    """Scaled to [0, 1] with the least 1 (all 1 when they are equal)."""
    low, high = min(values), max(values)
    return [1.0 if high == low else (high - v) / (high - low) for v in values]


def _llm_d_signals(request, instances, state, parameters) -> tuple[list[float], list[float], list[float], list[int]]:
    """llm-d's three scores per instance, unweighted (the prompt's share of blocks cached there, 1 − its
    KV use, its queue score), and the prompt's cached leading blocks on each."""
    overlaps, considered = llm_d_overlaps(request, instances, state, parameters)
    prefix = [o / considered if considered else 0.0 for o in overlaps]
    kv = [1.0 - min(1.0, max(0.0, float(i.get("kv_utilization", 0.0)))) for i in instances]
    return prefix, kv, _min_max([len(i["waiting"]) for i in instances]), overlaps


def _llm_d_scores(request, instances, parameters, state) -> tuple[list[float], list[int]]:
    weights = {**LLM_D_WEIGHTS, **parameters.get("weights", {})}
    prefix, kv, queue, overlaps = _llm_d_signals(request, instances, state, parameters)
    return [weights["prefix"] * p + weights["kv_utilization"] * k + weights["queue"] * q
            for p, k, q in zip(prefix, kv, queue)], overlaps


def _seed(parameters) -> int:
    return int(parameters.get("seed", 0))


@HEURISTICS.register("llm_d", teaches="prefix", teacher_order=10)
def llm_d(request, instances, parameters, state) -> int:
    """llm-d's scheduler: the highest weighted sum of its prefix, KV-utilisation and queue scores."""
    score, _ = _llm_d_scores(request, instances, parameters, state)
    return remember_llm_d(request, instances, state, parameters, _highest(score, state, _seed(parameters)))


def _uncached(request, overlaps: list[int]) -> list[float]:
    """The request's prompt tokens each instance would compute (at least one: the last is always
    computed), given its cached leading blocks there."""
    _, block_tokens = _blocks(request)
    prompt = float(request["prompt_tokens"])
    return [max(1.0, prompt - min(o * block_tokens, prompt - 1.0)) for o in overlaps]


def queued_prefill_tokens(instance) -> float:
    """The prefill still queued on an instance: the observation's estimate, else (a caller's own
    telemetry) its waiting prompts."""
    queued = instance.get("queued_prefill_tokens")
    return float(queued) if queued is not None else float(sum(w["prompt_tokens"] for w in instance["waiting"]))


# the first-token scorer's weight beside llm-d's 3 / 2 / 2, chosen on Mooncake training windows (rows
# 3,000 on, which no evaluation window holds; docs/results/load-aware-fleet.md); `ttft_weight` sets it
LLM_D_TTFT = {"ttft_weight": 0.5}


def predicted_first_token_s(request, instances, overlaps: list[int]) -> list[float]:
    """Per instance, when the request's first token would come: the prefill still queued there and its
    own tokens not in that instance's cache, at that instance's seconds per prompt token (decode work
    and the step in flight, which no router sees, are not counted)."""
    return [i["prefill_s_per_token"] * (u + queued_prefill_tokens(i))
            for u, i in zip(_uncached(request, overlaps), instances)]


@HEURISTICS.register("llm_d_ttft", default=False, teaches="prefix", teacher_order=11)
def llm_d_ttft(request, instances, parameters, state) -> int:
    """llm-d's scheduler with a fourth scorer, the request's predicted first-token time
    (`predicted_first_token_s`, min-max scaled, soonest 1), weighted `ttft_weight`. Why: llm-d's
    scorers count cached blocks, KV use and queue length but not how fast each instance prefills, so
    on a fleet of mixed GPUs and model sizes it sends long uncached prompts to slow prefills. llm-d
    takes custom scorers; this is one, not llm-d's default (that is `llm_d`). Registered with
    `default=False`: a fleet file names it (its use is where prompts share prefixes)."""
    score, overlaps = _llm_d_scores(request, instances, parameters, state)
    weight = float(parameters.get("ttft_weight", LLM_D_TTFT["ttft_weight"]))
    soon = _min_max(predicted_first_token_s(request, instances, overlaps))
    choice = _highest([s + weight * t for s, t in zip(score, soon)], state, _seed(parameters))
    return remember_llm_d(request, instances, state, parameters, choice)


# `linear_scorer`'s features, each per instance and larger where the instance is the better choice; its
# score is the sum of weight × feature in this order (the TypeScript runtime sums in the same order)
SCORER_FEATURES = ("prefix", "kv_free", "queue", "first_token", "first_token_s", "running", "waiting",
                   "prefill_speed", "decode_speed")
# a feature a spec leaves out weighs this: llm_d_ttft's weights, so `linear_scorer` with none decides as it does
SCORER_DEFAULTS = {**{f: 0.0 for f in SCORER_FEATURES}, "prefix": LLM_D_WEIGHTS["prefix"],
                   "kv_free": LLM_D_WEIGHTS["kv_utilization"], "queue": LLM_D_WEIGHTS["queue"],
                   "first_token": LLM_D_TTFT["ttft_weight"]}


def scorer_features(request, instances, state, parameters=None) -> dict[str, list[float]]:
    """`SCORER_FEATURES` per instance: the prompt's share of blocks it holds (`prefix`), 1 − its KV use
    (`kv_free`), llm-d's queue score (`queue`), the predicted first-token time min-max scaled (soonest 1:
    `first_token`) and in seconds, negated (`first_token_s`), its running and waiting requests per slot,
    negated, and its prefill and decode speed relative to the fleet's fastest (1 for the fastest)."""
    prefix, kv, queue, overlaps = _llm_d_signals(request, instances, state, parameters or {})
    first = predicted_first_token_s(request, instances, overlaps)
    prefill = [float(i["prefill_s_per_token"]) for i in instances]
    tpot = [float(i["tpot_s"]) for i in instances]
    return {"prefix": prefix, "kv_free": kv, "queue": queue, "first_token": _min_max(first),
            "first_token_s": [-t for t in first],
            "running": [-len(i["running"]) / max(1, int(i["max_running"])) for i in instances],
            "waiting": [-len(i["waiting"]) / max(1, int(i["max_running"])) for i in instances],
            "prefill_speed": [min(prefill) / p if p > 0 else 1.0 for p in prefill],
            "decode_speed": [min(tpot) / t if t > 0 else 1.0 for t in tpot]}


def scorer_weights(parameters: dict[str, Any]) -> dict[str, float]:
    """`linear_scorer`'s weights: the spec's over `SCORER_DEFAULTS`; a name it does not know is refused."""
    given = dict(parameters.get("weights") or {})
    unknown = sorted(set(given) - set(SCORER_FEATURES))
    if unknown:
        raise ValueError(f"linear_scorer: weights {unknown} name no feature (known: {', '.join(SCORER_FEATURES)})")
    return {**SCORER_DEFAULTS, **{k: float(v) for k, v in given.items()}}


@HEURISTICS.register("linear_scorer", default=False, weights=SCORER_DEFAULTS, searchable=True)
def linear_scorer(request, instances, parameters, state) -> int:
    """The instance with the highest Σ weight × feature over `SCORER_FEATURES` (ties at random, as
    llm-d's picker). Why: llm-d's scorers and the first-token one weigh a fixed few signals by hand; this
    takes more of what a router sees (slots, relative speeds, the first token in seconds) and lets a
    learner set the weights (`training.policies.weight_search`: CMA-ES on training windows). With no
    weights it is `llm_d_ttft`."""
    weights = scorer_weights(parameters)
    features = scorer_features(request, instances, state, parameters)
    score = [0.0] * len(instances)
    for name in SCORER_FEATURES:
        w, values = weights[name], features[name]
        score = [s + w * v for s, v in zip(score, values)]
    return remember_llm_d(request, instances, state, parameters, _highest(score, state, _seed(parameters)))


@HEURISTICS.register("llm_d_affinity")
def llm_d_affinity(request, instances, parameters, state) -> int:
    """llm-d's optimized baseline: sticky to the instances that cache most of the prompt until they
    saturate, the token load deciding among the candidates (module doc)."""
    settings = {**LLM_D_AFFINITY, **parameters}
    ids, block_tokens = _blocks(request)
    overlaps, _ = llm_d_overlaps(request, instances, state, parameters)
    uncached = _uncached(request, overlaps)
    queued = [queued_prefill_tokens(i) for i in instances]
    threshold = float(settings["queue_threshold_tokens"])
    score = [1.0 - min(1.0, (q + u) / threshold) for q, u in zip(queued, uncached)]
    full = int(request["prompt_tokens"]) // block_tokens if block_tokens else 0
    sticky = [full > 0 and o / full >= float(settings["affinity_threshold"]) for o in overlaps]
    candidates = list(range(len(instances)))
    if any(sticky) and float(settings["affinity_threshold"]) > 0:
        ttft_ms = [q / float(settings["peak_prefill_tokens_per_second"]) * 1000.0 for q in queued]
        best_sticky = min(t for t, s in zip(ttft_ms, sticky) if s)
        others = [t for t, s in zip(ttft_ms, sticky) if not s]
        penalty = float(settings["max_ttft_penalty_ms"])
        if not others or penalty == 0 or best_sticky - min(others) <= penalty:
            candidates = [i for i in candidates if sticky[i]]
    top = max(score[i] for i in candidates)
    choice = pick_among(state, [i for i in candidates if score[i] == top], _seed(parameters))
    return remember_llm_d(request, instances, state, parameters, choice)


@HEURISTICS.register("lmetric")
def lmetric(request, instances, parameters, state) -> int:
    """LMetric: the lowest (uncached prefill tokens × batch size) (module doc)."""
    ids, block_tokens = _blocks(request)
    told = _told(instances)
    if ids and told is None and "lmetric_index" not in state:
        state["lmetric_index"] = PrefixIndex([max(1, int(i["kv_capacity_tokens"]) // block_tokens) for i in instances])
    overlaps = (told if told is not None else state["lmetric_index"].overlaps(ids)) if ids else [0] * len(instances)
    uncached = _uncached(request, overlaps)
    score = [u * len(i["running"]) for u, i in zip(uncached, instances)]
    low = min(score)
    tied = [k for k, v in enumerate(score) if v == low]
    fewest = min(uncached[k] for k in tied)
    choice = pick_among(state, [k for k in tied if uncached[k] == fewest], _seed(parameters))
    if ids and "lmetric_index" in state:
        state["lmetric_index"].record(choice, ids)
    return choice


PREDICTED_LATENCY_FEATURES = ("kv_utilization", "input_tokens", "queue_depth", "running", "prefix_match",
                              "tokens_in_flight")


def predicted_latency_features(request, instances, state, parameters) -> list[list[float]]:
    """`PREDICTED_LATENCY_FEATURES` of the request on each instance (the prefix match from llm-d's index)."""
    overlaps, considered = llm_d_overlaps(request, instances, state, parameters)
    return [[float(i.get("kv_utilization") or 0.0), float(request["prompt_tokens"]), float(len(i["waiting"])),
             float(len(i["running"])), o / considered if considered else 0.0, float(i.get("active_tokens") or 0.0)]
            for o, i in zip(overlaps, instances)]


@HEURISTICS.register("llm_d_predicted_latency", default=False, trained_by=(
        "routeforge.training.policies.predicted_latency", "fit_parameters"))
def llm_d_predicted_latency(request, instances, parameters, state) -> int:
    """llm-d's predicted-latency scorer: the lowest TTFT its trained model predicts (module doc)."""
    if "ensemble" not in state:
        if not parameters.get("model"):
            raise ValueError("llm_d_predicted_latency: parameters.model, its trained TTFT model (XGBoost's JSON), "
                             "is required (training.policies.predicted_latency trains it)")
        state["ensemble"] = TreeEnsemble.from_json(json.dumps(parameters["model"]))
    predicted = [float(v) for v in state["ensemble"].predict(predicted_latency_features(request, instances, state,
                                                                                        parameters))]
    low = min(predicted)
    choice = pick_among(state, [k for k, v in enumerate(predicted) if v == low], _seed(parameters))
    return remember_llm_d(request, instances, state, parameters, choice)


@HEURISTICS.register("dynamo_kv", teaches="prefix", teacher_order=12)
def dynamo_kv(request, instances, parameters, state) -> int:
    """Dynamo's KV router: the lowest overlap_score_weight × prefill blocks + decode blocks (module doc)."""
    settings = {**DYNAMO, **parameters}
    ids, block_tokens = _blocks(request)
    block = block_tokens or 16  # vLLM's default block size when the request names none
    now = float(request.get("now_s") or 0.0)
    told = _told(instances)
    if ids and told is None and "dynamo_index" not in state:
        state["dynamo_index"] = TtlIndex(len(instances), float(settings["ttl_s"]))
    overlaps = (told if told is not None else state["dynamo_index"].overlaps(ids, now)) if ids else [0] * len(instances)
    new = _uncached(request, overlaps)
    cost = [settings["overlap_score_weight"] * (queued_prefill_tokens(i) + n) / block
            + (float(i.get("active_tokens") or 0.0) + n) / block for n, i in zip(new, instances)]
    temperature = float(settings["temperature"])
    if temperature <= 0:
        choice = min(range(len(cost)), key=lambda i: (cost[i], i))
    else:  # softmax over the costs normalised to [0, 1], lower cost more likely
        top = max(cost) or 1.0
        logits = [-(c / top) / temperature for c in cost]
        peak = max(logits)
        weights = [math.exp(x - peak) for x in logits]
        rng = state.setdefault("rng", random.Random(int(settings.get("seed", 0))))
        choice = rng.choices(range(len(cost)), weights=weights)[0]
    if ids and "dynamo_index" in state:
        state["dynamo_index"].record(choice, ids, now)
    return choice


@HEURISTICS.register("sglang_cache_aware", teaches="prefix", teacher_order=13)
def sglang_cache_aware(request, instances, parameters, state) -> int:
    """SGLang's cache-aware policy over its own bounded, aging prefix tree (module doc)."""
    settings = {**SGLANG, **parameters}
    ids, block_tokens = _blocks(request)
    if "sglang_tree" not in state:
        capacity = max(1, int(settings["max_tree_size_tokens"]) // max(1, block_tokens))
        state["sglang_tree"] = GlobalLruIndex(len(instances), capacity, float(settings["eviction_interval_s"]))
    tree = state["sglang_tree"]
    tree.evict(float(request.get("now_s") or 0.0))
    load = [len(i["running"]) + len(i["waiting"]) for i in instances]
    low, high = min(load), max(load)

    def sent(choice: int) -> int:
        if ids:
            tree.record(choice, ids)
        return choice

    if high - low > settings["balance_abs_threshold"] and high > settings["balance_rel_threshold"] * low:
        return sent(load.index(low))
    if not ids:
        return load.index(low)
    overlaps = tree.overlaps(ids)
    best = max(range(len(instances)), key=lambda i: (overlaps[i], -load[i], -i))
    if overlaps[best] / len(ids) > settings["cache_threshold"]:
        return sent(best)
    sizes = tree.sizes()
    return sent(min(range(len(instances)), key=lambda i: (sizes[i], load[i], i)))
