"""The simulator checked against real servers: the same requests, with the same shared prefixes and
arrival times, sent to one or more vLLM servers (round-robin across them, the routing both sides take
alike, so what differs is the serving) and run in the simulator calibrated from the servers' profile
(issue 60, item 7; issue 70, item 5: several instances, long prompts, cache pressure).

Why: every goodput, TTFT and hit rate of the routing evaluation is the simulator's. Published
simulators (Vidur, the llm-d and Dynamo planners' models) state their error against real serving
(under 9%); this measures ours, per load, on the trace format that carries prefix sharing.

How a block-hash trace becomes real prompts: each block id is `block_tokens` token ids drawn from a
generator seeded by the id (and a salt, so two replays share nothing), so two requests that share
their leading block ids share exactly those leading tokens, which the server's prefix cache finds as
the simulator's block cache does. Prompts are sent as token ids (the completions API takes them), so
no tokenizer stands between the trace's counts and the server's. Outputs are forced to their length
(`ignore_eos`, `min_tokens`).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from routeforge.training.policies.simulator.baselines import RoundRobin
from routeforge.training.policies.simulator.cluster import Cluster, Request
from routeforge.training.policies.simulator.instance import InstanceProfile

TOKEN_LOW = 100  # block tokens are drawn above the special tokens of any vocabulary


@dataclass(frozen=True)
class ReplayRequest:
    arrival_s: float  # offset from the replay's start
    block_ids: tuple[int, ...]  # the prompt's blocks, leading first
    output_tokens: int


def block_tokens_of(block_id: int, block_tokens: int, vocab: int, salt: int = 0) -> list[int]:
    """The token ids of one block: the same id (and salt) gives the same tokens, in any process."""
    seed = int.from_bytes(hashlib.blake2b(f"{salt}:{block_id}".encode(), digest_size=8).digest(), "big")
    return np.random.default_rng(seed).integers(TOKEN_LOW, vocab, size=block_tokens).tolist()


def prompt_ids(request: ReplayRequest, block_tokens: int, vocab: int, salt: int = 0) -> list[int]:
    return [t for b in request.block_ids for t in block_tokens_of(b, block_tokens, vocab, salt)]


@dataclass(frozen=True)
class Measured:
    ttft_s: float
    e2e_s: float
    output_tokens: int
    decode_s: float  # the median gap between tokens over the stream's last half (decode steps alone)


async def _send_all(urls: Sequence[str], models: Sequence[str], requests: Sequence[ReplayRequest], block_tokens: int,
                    vocab: int, salt: int, timeout_s: float) -> list[Measured | str]:
    import httpx
    from routeforge.generation.engines.openai_engine import stream_completion

    async def one(client, request: ReplayRequest, start: float, url: str, model: str) -> Measured | str:
        await asyncio.sleep(max(0.0, start + request.arrival_s - time.perf_counter()))
        body = {"model": model, "prompt": prompt_ids(request, block_tokens, vocab, salt), "stream": True,
                "max_tokens": request.output_tokens, "min_tokens": request.output_tokens, "ignore_eos": True,
                "temperature": 0.0, "stream_options": {"include_usage": True}}
        try:
            result = await asyncio.wait_for(stream_completion(client, url, body), timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - a failed request is counted, never retried
            return f"{type(exc).__name__}: {exc}"[:200]
        gaps = result.inter_token_s
        tail = gaps[len(gaps) // 2:] or gaps or [float("nan")]
        return Measured(float(result.ttft_s), float(result.e2e_s), int(result.output_tokens or 0),
                        float(np.median(tail)))

    limits = httpx.Limits(max_connections=len(requests) + 1)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        start = time.perf_counter() + 0.05
        return list(await asyncio.gather(*(one(client, r, start, urls[i % len(urls)], models[i % len(urls)])
                                           for i, r in enumerate(requests))))


def send(base_url: str | Sequence[str], model: str, requests: Sequence[ReplayRequest], block_tokens: int, vocab: int,
         salt: int = 0, timeout_s: float = 600.0, models: Sequence[str] | None = None) -> list[Measured | str]:
    """Each request at its arrival time (open loop), streamed: what the client saw, or why it failed.
    Several servers: request i goes to server i mod their number (round-robin in arrival order),
    naming `models[i mod n]` where the servers serve models of their own (default: `model` everywhere)."""
    bases = [base_url] if isinstance(base_url, str) else list(base_url)
    urls = [b.rstrip("/") + "/completions" for b in bases]
    names = list(models) if models is not None else [model] * len(urls)
    if len(names) != len(urls):
        raise ValueError(f"models: one per server ({len(urls)}), got {len(names)}")
    return asyncio.run(_send_all(urls, names, requests, block_tokens, vocab, salt, timeout_s))


def static_batches(base_url: str, model: str, batches: Sequence[int], prompts: Sequence[int], output_tokens: int,
                   block_tokens: int, vocab: int, salt: int = 10_000) -> list[dict]:
    """A tier's batch profile taken through the server: for each (b, p), b requests of p prompt
    tokens sharing nothing, sent together. The batch's prefill is its last first token; its decode
    step the median gap between tokens over the streams' last halves, when every prompt of the batch
    is in (a server that chunks prefills interleaves them with the first decodes, which the mean TPOT
    would count as decode time). Rows `profiling.batch_fits.BatchMeasurement` takes."""
    rows = []
    for b in batches:
        for p in prompts:
            salt += 1  # blocks of their own: no prefix hit in a profile
            blocks = max(1, p // block_tokens)
            requests = [ReplayRequest(0.0, tuple(range(i * blocks, (i + 1) * blocks)), output_tokens) for i in range(b)]
            got = [m for m in send(base_url, model, requests, block_tokens, vocab, salt) if isinstance(m, Measured)]
            if len(got) < b:
                raise RuntimeError(f"profile batch b={b} p={p}: {b - len(got)} of its requests failed")
            rows.append({"batch_size": b, "prompt_tokens": blocks * block_tokens, "output_tokens": output_tokens,
                         "prefill_s": max(m.ttft_s for m in got),
                         "decode_iter_s": float(np.median([m.decode_s for m in got])),
                         "e2e_s": max(m.e2e_s for m in got)})
    return rows


def simulate(profile: InstanceProfile, requests: Sequence[ReplayRequest], block_tokens: int,
             instances: int = 1) -> tuple[list, float]:
    """The same requests on `instances` simulated instances with a block cache each, round-robin in
    arrival order as `send` spreads them: (outcomes, prefix hit rate)."""
    from routeforge.training.policies.simulator.metrics import summarize

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
