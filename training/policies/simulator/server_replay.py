"""The simulator checked against real servers: the same requests, with the same shared prefixes and
arrival times, sent to one or more vLLM servers (round-robin across them, the routing both sides take
alike, so what differs is the serving) and run in the simulator calibrated from the servers' profile:
one or several instances, long prompts, cache pressure.

Why: every goodput, TTFT and hit rate of the routing evaluation is the simulator's. Published
simulators (Vidur, the llm-d and Dynamo planners' models) state their error against real serving;
this measures ours, per load, on the trace format that carries prefix sharing.

The requests are the trace's as real prompts (`profiling.server_requests`: block ids as salted token ids).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
from routeforge.profiling.server_requests import Measured, ReplayRequest, send
from routeforge.training.policies.simulator.baselines import RoundRobin
from routeforge.training.policies.simulator.cluster import Cluster, Request
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.metrics import summarize


def simulate(profile: InstanceProfile, requests: Sequence[ReplayRequest], block_tokens: int,
             instances: int = 1) -> tuple[list, float]:
    """The same requests on `instances` simulated instances with a block cache each, round-robin in
    arrival order as `send` spreads them: (outcomes, prefix hit rate)."""
    reqs = [Request(i, r.arrival_s, len(r.block_ids) * block_tokens, np.array([float(r.output_tokens)]),
                    np.array([np.nan]), hash_ids=r.block_ids) for i, r in enumerate(requests)]
    outcomes = Cluster([profile] * instances, block_tokens=block_tokens).run(reqs, RoundRobin())
    return outcomes, float(summarize(outcomes).get("prefix_hit_rate", 0.0))


def prefix_counters(metrics_text: str) -> tuple[float, float]:
    """(hits, queries) in tokens from vLLM's `/metrics` (`vllm:prefix_cache_hits_total`,
    `vllm:prefix_cache_queries_total`), summed over label sets."""
    totals = {"hits": 0.0, "queries": 0.0}
    for line in metrics_text.splitlines():
        match = re.match(r"^vllm:prefix_cache_(hits|queries)_total(\{[^}]*\})?\s+(\S+)", line)
        if match:
            totals[match.group(1)] += float(match.group(3))
    return totals["hits"], totals["queries"]


def relative_errors(measured: Sequence[Measured], simulated: Sequence) -> dict[str, float]:
    """Simulated over measured, minus 1, for mean and p95 TTFT and E2E (requests both served)."""
    pairs = [(m, s) for m, s in zip(measured, simulated) if isinstance(m, Measured) and s.served]
    out = {}
    for key in ("ttft", "e2e"):
        real = np.array([getattr(m, f"{key}_s") for m, _ in pairs])
        sim = np.array([getattr(s, key) for _, s in pairs])
        for stat, fn in (("mean", np.mean), ("p95", lambda v: np.percentile(v, 95))):
            measured, simulated = float(fn(real)), float(fn(sim))
            out[f"measured_{key}_{stat}_s"], out[f"simulated_{key}_{stat}_s"] = measured, simulated
            out[f"{key}_{stat}_error"] = simulated / measured - 1.0
    out["compared"] = len(pairs)
    return out


def replay_check(base_url: str | Sequence[str], model: str, profile: InstanceProfile,
                 requests: Sequence[ReplayRequest], block_tokens: int, vocab: int, salt: int,
                 metrics: Callable[[], str]) -> dict:
    """Send `requests` to the server(s) and run them in the simulator: errors, served counts and the
    prefix hit rate on both sides (the servers' from their counters over this replay; `metrics` gives
    every server's `/metrics` text, concatenated)."""
    instances = 1 if isinstance(base_url, str) else len(base_url)
    hits0, queries0 = prefix_counters(metrics())
    measured = send(base_url, model, requests, block_tokens, vocab, salt)
    hits1, queries1 = prefix_counters(metrics())
    simulated, sim_hit_rate = simulate(profile, requests, block_tokens, instances)
    failed = [m for m in measured if isinstance(m, str)]
    return {"requests": len(requests), "failed": len(failed), "failures": failed[:3],
            "simulated_served": sum(o.served for o in simulated),
            "measured_prefix_hit_rate": (hits1 - hits0) / (queries1 - queries0) if queries1 > queries0 else None,
            "simulated_prefix_hit_rate": sim_hit_rate, **relative_errors(measured, simulated)}
