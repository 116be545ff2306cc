"""The routers people deploy today, as registered heuristics: llm-d's scheduler, NVIDIA Dynamo's KV
router and SGLang's cache-aware policy, written from their public documentation (defaults below).

Why here: a bundle's recommendation means little unless it is measured against what a user would
deploy instead. Each is a decision function of `routeforge.artifacts.heuristics.HEURISTICS`, so the
simulator runs exactly the function a router service runs (`RegisteredHeuristic`), and a bundle can
carry one as its recommended policy.

Registered like every default heuristic: an evaluation whose fleet file names no policies runs them,
and a bundle may carry them. The TypeScript runtime (runtimes/typescript/src/deployed_routers.ts)
makes the same decisions, except Dynamo's at a temperature above 0 (sampled with Python's own
generator), which it refuses to load.

What they read, besides the telemetry every heuristic gets (heuristics' module docstring):
- request: `hash_ids`, the ids of its prompt's blocks (vLLM's prefix-caching hashes; Mooncake's
  `hash_ids`), and `block_tokens`, the tokens per block; without them nothing is shared;
- each instance, optionally: `cached_prefix_blocks` (its leading blocks of this prompt held in its
  KV cache, as KV events report them: llm-d's precise prefix scorer, Dynamo's default),
  `kv_utilization` (0-1, vLLM's `kv_cache_usage_perc`), `active_tokens` (tokens of its running and
  waiting requests), `kv_capacity_tokens`. Where `cached_prefix_blocks` is missing the router keeps
  its own approximate index of the blocks it sent where (`state["prefix_index"]`, a
  `routeforge.artifacts.prefix_index.PrefixIndex`), as SGLang's router always does and llm-d's
  approximate scorer and Dynamo without KV events do.

Documented defaults used:
- llm-d (inference scheduler, its inference-scheduling guide): prefix-cache scorer weight 3,
  KV-cache-utilisation scorer weight 2, queue scorer weight 2, max-score picker. Scores in [0, 1]:
  prefix = matched blocks / prompt blocks; KV = 1 − utilisation; queue = (max − q) / (max − min)
  over the candidates' waiting queues (1 when all are equal).
- Dynamo (KV router): cost = overlap_score_weight × prefill blocks + decode blocks, weight 1.0;
  prefill blocks = (prompt tokens − cached blocks × block size) / block size; decode blocks = the
  worker's active blocks + the request's; lowest cost wins at temperature 0 (the default), softmax
  over the normalised costs otherwise.
- ours, `llm_d_ttft`: llm-d's three scorers and a fourth, the request's predicted first-token time
  on each instance (the step in flight, then the prefill of the waiting prompts and of its own
  uncached tokens at that instance's speed), weight `ttft_weight` 0.5. Not a deployed router.
- ours, `linear_scorer`: a weighted sum of nine per-instance features (`SCORER_FEATURES`), its weights
  learned on training windows (`training.policies.weight_search`); with none given, `llm_d_ttft`.
- SGLang (model gateway, cache_aware): when the load is imbalanced (max − min outstanding requests
  > balance_abs_threshold 64 and max > balance_rel_threshold 1.5 × min) the least loaded; else the
  instance with the longest prefix match when its match rate exceeds cache_threshold 0.3; else the
  instance whose tree holds the fewest blocks. The tree is always the router's own approximation.
"""

from __future__ import annotations

import math
import random
from typing import Any

from routeforge.artifacts.heuristics import HEURISTICS
from routeforge.artifacts.prefix_index import PrefixIndex

LLM_D_WEIGHTS = {"prefix": 3.0, "kv_utilization": 2.0, "queue": 2.0}
DYNAMO = {"overlap_score_weight": 1.0, "temperature": 0.0}
SGLANG = {"cache_threshold": 0.3, "balance_abs_threshold": 64, "balance_rel_threshold": 1.5}
INDEX_BLOCKS = 1 << 20  # an approximate index's blocks per instance where no KV capacity bounds it


def _blocks(request: dict[str, Any]) -> tuple[list[int], int]:
    ids = list(request.get("hash_ids") or ())
    return ids, int(request.get("block_tokens") or 0)


def _index(state: dict, instances: list[dict[str, Any]], block_tokens: int, per_instance_kv: bool = True
           ) -> PrefixIndex:
    """The router's own index of the blocks it sent where, made on first use: per instance, as many
    blocks as its KV cache holds (llm-d's approximate scorer sizes its LRU per server so), or
    `INDEX_BLOCKS` each where not `per_instance_kv` (SGLang bounds its tree by one global size, not by
    each server's memory, and makes its index first)."""
    if "prefix_index" not in state:
        state["prefix_index"] = PrefixIndex([
            max(1, int(i["kv_capacity_tokens"]) // block_tokens)
            if per_instance_kv and i.get("kv_capacity_tokens") and block_tokens else INDEX_BLOCKS
            for i in instances])
    return state["prefix_index"]


def prefix_overlaps(request, instances, state, precise: bool = True) -> list[int]:
    """Each instance's leading blocks of the prompt: from KV events where told and `precise`, else
    from the router's own index."""
    ids, block_tokens = _blocks(request)
    if not ids:
        return [0] * len(instances)
    told = [i.get("cached_prefix_blocks") for i in instances]
    if precise and all(t is not None for t in told):
        return [int(t) for t in told]
    return _index(state, instances, block_tokens).overlaps(ids)


def remember(request, instances, state, choice: int) -> int:
    """Record the prompt's blocks as sent to `choice` in the router's own index; returns `choice`."""
    ids, block_tokens = _blocks(request)
    if ids:
        _index(state, instances, block_tokens).record(choice, ids)
    return choice


def _min_max(values: list[float]) -> list[float]:
    """Scaled to [0, 1] with the least 1 (all 1 when they are equal)."""
    low, high = min(values), max(values)
    return [1.0 if high == low else (high - v) / (high - low) for v in values]


def _queue_scores(waiting: list[int]) -> list[float]:
    return _min_max(waiting)


def _highest(score: list[float]) -> int:
    """The instance with the highest score, the first on ties."""
    return max(range(len(score)), key=lambda i: (score[i], -i))


def _llm_d_signals(request, instances, state) -> tuple[list[float], list[float], list[float], list[int]]:
    """llm-d's three scores per instance, unweighted (the prompt's share of blocks cached there, 1 − its
    KV use, its queue score), and the prompt's cached leading blocks on each (the prefix score's input)."""
    ids, _ = _blocks(request)
    overlaps = prefix_overlaps(request, instances, state)
    prefix = [o / len(ids) if ids else 0.0 for o in overlaps]
    kv = [1.0 - min(1.0, max(0.0, float(i.get("kv_utilization", 0.0)))) for i in instances]
    return prefix, kv, _queue_scores([len(i["waiting"]) for i in instances]), overlaps


def _llm_d_scores(request, instances, parameters, state) -> tuple[list[float], list[int]]:
    """llm-d's weighted sum of its prefix, KV-utilisation and queue scores per instance, and the
    prompt's cached leading blocks on each."""
    weights = {**LLM_D_WEIGHTS, **parameters.get("weights", {})}
    prefix, kv, queue, overlaps = _llm_d_signals(request, instances, state)
    return [weights["prefix"] * p + weights["kv_utilization"] * k + weights["queue"] * q
            for p, k, q in zip(prefix, kv, queue)], overlaps


@HEURISTICS.register("llm_d")
def llm_d(request, instances, parameters, state) -> int:
    """llm-d's scheduler: the highest weighted sum of its prefix, KV-utilisation and queue scores."""
    score, _ = _llm_d_scores(request, instances, parameters, state)
    return remember(request, instances, state, _highest(score))


# the first-token scorer's weight beside llm-d's 3 / 2 / 2, chosen on Mooncake training windows (rows
# 3,000 on, which no evaluation window holds; docs/results/load-aware-fleet.md); `ttft_weight` sets it
LLM_D_TTFT = {"ttft_weight": 0.5}


def predicted_first_token_s(request, instances, overlaps: list[int]) -> list[float]:
    """Per instance, when the request's first token would come: the prefill of the prompts waiting
    there and of its own tokens not in that instance's cache, at that instance's seconds per prompt
    token (the waiting prompts are prefilled before or with it; decode work, full slots and the step in
    flight, which no router sees, are not counted)."""
    _, block_tokens = _blocks(request)
    prompt = float(request["prompt_tokens"])
    return [i["prefill_s_per_token"]
            * (max(1.0, prompt - min(o * block_tokens, prompt - 1.0)) + sum(w["prompt_tokens"] for w in i["waiting"]))
            for o, i in zip(overlaps, instances)]


@HEURISTICS.register("llm_d_ttft", default=False)
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
    return remember(request, instances, state, _highest([s + weight * t for s, t in zip(score, soon)]))


# `linear_scorer`'s features, each per instance and larger where the instance is the better choice; its
# score is the sum of weight × feature in this order (the TypeScript runtime sums in the same order)
SCORER_FEATURES = ("prefix", "kv_free", "queue", "first_token", "first_token_s", "running", "waiting",
                   "prefill_speed", "decode_speed")
# a feature a spec leaves out weighs this: llm_d_ttft's weights, so `linear_scorer` with none decides as it does
SCORER_DEFAULTS = {**{f: 0.0 for f in SCORER_FEATURES}, "prefix": LLM_D_WEIGHTS["prefix"],
                   "kv_free": LLM_D_WEIGHTS["kv_utilization"], "queue": LLM_D_WEIGHTS["queue"],
                   "first_token": LLM_D_TTFT["ttft_weight"]}


def scorer_features(request, instances, state) -> dict[str, list[float]]:
    """`SCORER_FEATURES` per instance: the prompt's share of blocks it holds (`prefix`), 1 − its KV use
    (`kv_free`), llm-d's queue score (`queue`), the predicted first-token time min-max scaled (soonest 1:
    `first_token`) and in seconds, negated (`first_token_s`), its running and waiting requests per slot,
    negated, and its prefill and decode speed relative to the fleet's fastest (1 for the fastest)."""
    prefix, kv, queue, overlaps = _llm_d_signals(request, instances, state)
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


@HEURISTICS.register("linear_scorer", default=False)
def linear_scorer(request, instances, parameters, state) -> int:
    """The instance with the highest Σ weight × feature over `SCORER_FEATURES` (the first on ties). Why:
    llm-d's scorers and the first-token one weigh a fixed few signals by hand; this takes more of what a
    router sees (slots, relative speeds, the first token in seconds) and lets a learner set the weights
    (`training.policies.weight_search`: CMA-ES on training windows). With no weights it is `llm_d_ttft`."""
    weights = scorer_weights(parameters)
    features = scorer_features(request, instances, state)
    score = [0.0] * len(instances)
    for name in SCORER_FEATURES:
        w, values = weights[name], features[name]
        score = [s + w * v for s, v in zip(score, values)]
    return remember(request, instances, state, _highest(score))


def _active_tokens(instance: dict[str, Any]) -> float:
    if instance.get("active_tokens") is not None:
        return float(instance["active_tokens"])
    return float(sum(r["prompt_tokens"] for r in instance["waiting"]))


@HEURISTICS.register("dynamo_kv")
def dynamo_kv(request, instances, parameters, state) -> int:
    """Dynamo's KV router: the lowest overlap_score_weight × prefill blocks + decode blocks."""
    settings = {**DYNAMO, **parameters}
    ids, block_tokens = _blocks(request)
    block = block_tokens or 16  # vLLM's default block size when the request names none
    prompt = float(request["prompt_tokens"])
    overlaps = prefix_overlaps(request, instances, state)
    cost = [settings["overlap_score_weight"] * max(0.0, prompt - o * block) / block
            + (_active_tokens(i) + prompt) / block for o, i in zip(overlaps, instances)]
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
    return remember(request, instances, state, choice)


@HEURISTICS.register("sglang_cache_aware")
def sglang_cache_aware(request, instances, parameters, state) -> int:
    """SGLang's cache-aware policy over its own approximate prefix tree."""
    settings = {**SGLANG, **parameters}
    ids, block_tokens = _blocks(request)
    tree = _index(state, instances, block_tokens, per_instance_kv=False)  # its own, globally bounded
    load = [len(i["running"]) + len(i["waiting"]) for i in instances]
    low, high = min(load), max(load)
    if high - low > settings["balance_abs_threshold"] and high > settings["balance_rel_threshold"] * low:
        return remember(request, instances, state, load.index(low))
    if not ids:
        return load.index(low)
    overlaps = prefix_overlaps(request, instances, state, precise=False)
    best = max(range(len(instances)), key=lambda i: (overlaps[i], -load[i], -i))
    if overlaps[best] / len(ids) > settings["cache_threshold"]:
        return remember(request, instances, state, best)
    sizes = tree.sizes()
    return remember(request, instances, state, min(range(len(instances)), key=lambda i: (sizes[i], load[i], i)))
