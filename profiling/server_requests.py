"""Timed requests to a live OpenAI-compatible server: a block-hash trace's requests sent open loop at
their arrival times (`send`), and a tier's static batches taken through the server's API
(`static_batches`, the `server_batches` profile kind's measurement). What the client saw of each
stream: its first token, its end, and its decode steps.

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
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
    from routeforge.generation.engines.openai_engine import stream_completion  # lazy: pydantic, rich on first use

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
