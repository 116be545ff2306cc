"""OpenAI-compatible HTTP engine: `vllm serve`, `transformers serve --continuous-batching`, any other.

Requests stream (SSE) so that TTFT and every inter-token gap are measured on the client, with
bounded concurrency (a semaphore), per-request timeouts, and retries with exponential backoff and
jitter (tenacity) on connection errors, timeouts, HTTP 429/5xx, malformed chunks and streams that
end without a finish reason. A retry restarts the request from scratch and discards what the failed
attempt streamed, so every prompt ends as exactly one row or one quarantined failure, never two.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from routeforge.artifacts.common.openai_stream import chunk_text, is_token_chunk
from routeforge.core.config import FleetConfig, ModelSpec, OpenAISource, Sampling
from routeforge.core.kinds import ENGINES
from routeforge.core.storage import Quarantine
from routeforge.generation.engines.base import BaseEngine, ProgressFn, PromptRow, tpot
from routeforge.generation.token_counts import token_counter
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter


class RetryableRequestError(Exception):
    """A failure worth another attempt (overload, server error, broken stream)."""


class FatalRequestError(Exception):
    """A failure no retry will fix (bad request, unknown model, auth)."""


RETRYABLE = (httpx.TransportError, RetryableRequestError)  # TransportError covers timeouts and drops


@dataclass
class StreamResult:
    """One streamed completion as the client saw it (times in seconds, relative to `sent_at`)."""

    sent_at: float  # time.perf_counter() when the request was sent
    text: str
    finish_reason: str
    ttft_s: float | None
    e2e_s: float
    token_times_s: list[float] = field(default_factory=list)  # arrival of each content chunk
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    token_logprobs: list | None = None  # [[token, {alternative: logprob}], …] when the server sent them

    @property
    def inter_token_s(self) -> list[float]:
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:])]


def chunk_logprobs(choice: dict[str, Any], chat: bool) -> list:
    """[[token, {alternative: logprob}], …] from one streamed choice (completions or chat format)."""
    lp = choice.get("logprobs") or {}
    if chat:
        return [[c.get("token"), {a["token"]: a["logprob"] for a in c.get("top_logprobs") or []}]
                for c in lp.get("content") or []]
    tokens = lp.get("tokens") or []
    tops = lp.get("top_logprobs") or [{}] * len(tokens)
    return [[t, dict(alt or {})] for t, alt in zip(tokens, tops)]


def request_body(source: OpenAISource, sampling: Sampling, text: str, chat: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": source.model,
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if sampling.frequency_penalty:
        body["frequency_penalty"] = sampling.frequency_penalty
    if sampling.ignore_eos:  # vLLM's extension of the API
        body["ignore_eos"] = True
    if sampling.repetition_penalty != 1.0:
        body["repetition_penalty"] = sampling.repetition_penalty  # vLLM's extension of the API
    if sampling.stop:
        body["stop"] = sampling.stop
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if source.top_logprobs:
        if chat:
            body.update(logprobs=True, top_logprobs=source.top_logprobs)
        else:
            body["logprobs"] = source.top_logprobs
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


async def stream_completion(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str] | None = None,
    on_token: Callable[[float], None] | None = None,
) -> StreamResult:
    """POST one streaming (chat) completion and time it; raises Retryable/Fatal errors.

    `on_token(t)` is called as each content chunk arrives (t = time.perf_counter()), so a load
    generator can keep its view of the server's state current while requests are in flight."""
    chat = "messages" in body
    sent = time.perf_counter()
    pieces: list[str] = []
    stamps: list[float] = []
    finish: str | None = None
    usage: dict[str, Any] | None = None
    logprobs: list = []
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code == 429 or resp.status_code >= 500:
            await resp.aread()
            raise RetryableRequestError(f"HTTP {resp.status_code}")
        if resp.status_code >= 400:
            detail = (await resp.aread())[:300].decode(errors="replace")
            raise FatalRequestError(f"HTTP {resp.status_code}: {detail}")
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError as exc:
                raise RetryableRequestError("malformed stream chunk") from exc
            if chunk.get("error"):
                raise RetryableRequestError(f"error in stream: {str(chunk['error'])[:200]}")
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                piece = chunk_text(choice, chat)
                if is_token_chunk(choice, chat, piece):
                    now = time.perf_counter()
                    stamps.append(now - sent)
                    if on_token is not None:
                        on_token(now)
                if piece:
                    pieces.append(piece)
                if choice.get("logprobs"):
                    logprobs.extend(chunk_logprobs(choice, chat))
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
    e2e = time.perf_counter() - sent
    if finish is None:
        raise RetryableRequestError("stream ended without a finish reason")
    return StreamResult(
        sent_at=sent, text="".join(pieces), finish_reason=finish, ttft_s=stamps[0] if stamps else None,
        e2e_s=e2e, token_times_s=stamps,
        prompt_tokens=(usage or {}).get("prompt_tokens"), output_tokens=(usage or {}).get("completion_tokens"),
        token_logprobs=logprobs or None,
    )


def endpoint(source: OpenAISource) -> str:
    return source.base_url.rstrip("/") + ("/chat/completions" if source.api == "chat" else "/completions")


def auth_headers(source: OpenAISource) -> dict[str, str]:
    if not source.api_key_env:
        return {}
    key = os.environ.get(source.api_key_env)
    if not key:
        raise ValueError(f"environment variable {source.api_key_env} (api_key_env) is not set")
    return {"Authorization": f"Bearer {key}"}


@ENGINES.register("openai", sources=("openai",),
                  description="any OpenAI-compatible server over HTTP, streaming, with retries")
class OpenAIEngine(BaseEngine):
    name = "openai"

    def __init__(self, spec: ModelSpec, config: FleetConfig):
        assert isinstance(spec.source, OpenAISource)
        super().__init__(spec, config)
        self.source = spec.source
        self.url = endpoint(self.source)
        self.headers = auth_headers(self.source)
        self.version = f"httpx-{httpx.__version__}"
        self.chat = self.source.api == "chat"
        self.failed_attempts: Counter[str] = Counter()  # reason -> attempts that failed (retried or final)
        self._token_counter = config.generation.token_counter

    def _count_tokens(self, text: str) -> int:
        """Fallback when a server sends no usage: the configured counting tokenizer."""
        return token_counter(self._token_counter).count([text])[0]

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        return asyncio.run(self._generate(prompts, quarantine, progress))

    async def _generate(self, prompts, quarantine, progress):
        limits = httpx.Limits(max_connections=self.source.max_concurrency)
        timeout = httpx.Timeout(self.source.timeout_s, connect=min(10.0, self.source.timeout_s))
        semaphore = asyncio.Semaphore(self.source.max_concurrency)
        done = 0
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            async def one(prompt: PromptRow):
                nonlocal done
                async with semaphore:
                    try:
                        outcome = await self._with_retries(client, prompt)
                    except Exception as exc:  # noqa: BLE001 - every failure becomes a quarantine row
                        outcome = exc
                done += 1
                if progress:
                    progress(done, len(prompts))
                return outcome

            outcomes = await asyncio.gather(*(one(p) for p in prompts))
        rows = []
        for prompt, outcome in zip(prompts, outcomes):
            if isinstance(outcome, Exception):
                quarantine.add(prompt.prompt_id, f"request failed: {type(outcome).__name__}: {outcome}"[:500])
            else:
                rows.append(outcome)
        return rows

    async def _with_retries(self, client: httpx.AsyncClient, prompt: PromptRow) -> dict[str, Any]:
        body = request_body(self.source, self.sampling, prompt.text, self.chat)
        attempts = 0
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.source.max_retries + 1),
            wait=wait_exponential_jitter(initial=self.source.backoff_s, max=30.0),
            retry=retry_if_exception_type(RETRYABLE),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                attempts += 1
                try:
                    result = await stream_completion(client, self.url, body, self.headers)
                except RETRYABLE as exc:
                    self.failed_attempts[type(exc).__name__] += 1
                    raise
        n_out = result.output_tokens if result.output_tokens is not None else len(result.token_times_s)
        n_prompt = result.prompt_tokens if result.prompt_tokens is not None else self._count_tokens(prompt.text)
        return self.row(
            prompt, text=result.text, prompt_tokens=n_prompt, output_tokens=n_out, finish_reason=result.finish_reason,
            ttft_s=result.ttft_s, tpot_s=tpot(result.ttft_s, result.e2e_s, n_out), e2e_s=result.e2e_s,
            cost_usd=self.cost(n_prompt, n_out), attempts=attempts, token_logprobs=result.token_logprobs,
        )
