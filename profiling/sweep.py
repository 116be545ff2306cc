"""QPS sweep against one OpenAI-compatible server: per-request latency with the state at dispatch.

Phases, as `vllm bench sweep` and GuideLLM order them:
0. `warmup`: a few requests one at a time, recorded but used for nothing (the first request
   of a fresh server pays for lazy initialisation: 14 s against 14 ms on this CPU).
1. `idle`: requests one at a time: the tier's nominal TTFT and TPOT (the static prior).
2. `saturation`: a closed loop at `saturation_concurrency`: the highest sustained request rate and
   output-token throughput Θ the server reaches.
3. `rate`: open-loop arrivals (Poisson, gamma-bursty or constant) at each rate of the grid, by
   default fractions of the saturation rate from idle to past saturation.

Every request streams; its record holds the send time, TTFT, every inter-token gap, TPOT, E2E and
token counts, and the features of `profiling.live_state` taken at the moment it was sent. A failed
request is recorded with its error and never retried (a retry would distort the timing). The sweep
is bounded in requests and seconds per phase and stops by itself.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
from routeforge.core.config import SweepSettings
from routeforge.generation.engines.base import tpot
from routeforge.generation.engines.openai_engine import FatalRequestError, RetryableRequestError, stream_completion
from routeforge.profiling.arrivals import arrival_times
from routeforge.profiling.live_state import FEATURES, ClientState, MetricsScraper

ProgressFn = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class SweepPrompt:
    text: str
    prompt_tokens: int  # counted by the client before sending (a feature at dispatch)
    max_tokens: int  # requested output length; the router's predicted length for this prompt
    group: str = "default"  # QLM's request group (task)


@dataclass
class SweepResult:
    records: list[dict[str, Any]]
    rates: list[float]
    saturation_rps: float
    saturation_tok_s: float
    metrics_available: bool
    summary: list[dict[str, Any]] = field(default_factory=list)


def _body(settings: SweepSettings, model: str, prompt: SweepPrompt) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": prompt.max_tokens, "temperature": 0.0, "stream": True,
                            "stream_options": {"include_usage": True}, **settings.extra_body}
    if settings.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    return body


class _Runner:
    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, settings: SweepSettings,
                 scraper: MetricsScraper, started: float, tier: str):
        self.client, self.model, self.settings, self.scraper = client, model, settings, scraper
        self.url = base_url.rstrip("/") + ("/chat/completions" if settings.api == "chat" else "/completions")
        self.state = ClientState(window_s=settings.window_s)
        self.started, self.tier = started, tier
        self.next_id = 0

    async def one(self, prompt: SweepPrompt, phase: str, rate: float, seq: int, scheduled: float) -> dict[str, Any]:
        rid, self.next_id = self.next_id, self.next_id + 1
        now = time.perf_counter()
        features = {"prompt_tokens": float(prompt.prompt_tokens), "predicted_output_tokens": float(prompt.max_tokens)}
        features |= self.state.snapshot(now, prompt.max_tokens) | self.scraper.snapshot()
        self.state.sent(rid, prompt.prompt_tokens, prompt.max_tokens, now)
        record: dict[str, Any] = {
            "tier": self.tier, "phase": phase, "rate": rate, "arrival": self.settings.arrival, "seq": seq,
            "group": prompt.group, "sent_s": now - self.started, "scheduled_s": scheduled,
            "client_delay_s": max(0.0, now - self.started - scheduled), "requested_tokens": prompt.max_tokens,
        }
        try:
            result = await asyncio.wait_for(
                stream_completion(self.client, self.url, _body(self.settings, self.model, prompt),
                                  on_token=lambda t: self.state.token(rid, t)),
                timeout=self.settings.request_timeout_s,
            )
        except (TimeoutError, httpx.HTTPError, RetryableRequestError, FatalRequestError) as exc:
            record |= {"error": f"{type(exc).__name__}: {exc}"[:300], "e2e_s": time.perf_counter() - now}
            return record | {f"f_{k}": v for k, v in features.items()}
        finally:
            self.state.finished(rid)
        n = result.output_tokens or len(result.token_times_s)
        gaps = result.inter_token_s
        record |= {
            "server_prompt_tokens": result.prompt_tokens, "output_tokens": n, "finish_reason": result.finish_reason,
            "ttft_s": result.ttft_s, "tpot_s": tpot(result.ttft_s, result.e2e_s, n), "e2e_s": result.e2e_s,
            "itl_s": gaps, "itl_p50_s": float(np.median(gaps)) if gaps else None,
            "itl_p95_s": float(np.percentile(gaps, 95)) if gaps else None, "error": None,
        }
        return record | {f"f_{k}": v for k, v in features.items()}

    async def phase(self, name: str, prompts: Sequence[SweepPrompt], offsets: np.ndarray, rate: float,
                    max_in_flight: int, max_seconds: float, progress: ProgressFn | None) -> list[dict[str, Any]]:
        """Send prompt i at offsets[i] (seconds from the phase start), at most `max_in_flight` at once."""
        slots = asyncio.Semaphore(max_in_flight)
        start = time.perf_counter()
        phase_offset = start - self.started
        tasks: list[asyncio.Task] = []
        done = 0

        async def guarded(prompt: SweepPrompt, seq: int, offset: float):
            nonlocal done
            try:
                return await self.one(prompt, name, rate, seq, phase_offset + offset)
            finally:
                slots.release()
                done += 1
                if progress:
                    progress(name, done, len(offsets))

        for seq, (prompt, offset) in enumerate(zip(prompts, offsets)):
            wait = start + offset - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            if time.perf_counter() - start > max_seconds:
                break
            await slots.acquire()
            tasks.append(asyncio.create_task(guarded(prompt, seq, float(offset))))
        return list(await asyncio.gather(*tasks))


def _cycle(prompts: Sequence[SweepPrompt], n: int, rng: np.random.Generator) -> list[SweepPrompt]:
    if n <= 0:
        return []
    order = np.concatenate([rng.permutation(len(prompts)) for _ in range(math.ceil(n / len(prompts)))])
    return [prompts[i] for i in order[:n]]


def _ok(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("error") is None and r.get("ttft_s") is not None]


def phase_summary(records: list[dict[str, Any]], phase: str, rate: float) -> dict[str, Any]:
    ok = _ok(records)
    span = (max(r["sent_s"] + r["e2e_s"] for r in records) - min(r["sent_s"] for r in records)) if records else 0
    tpots = [r["tpot_s"] for r in ok if r["tpot_s"] is not None]
    return {
        "phase": phase, "offered_rps": rate, "requests": len(records), "errors": len(records) - len(ok),
        "achieved_rps": len(ok) / span if span > 0 else math.nan,
        "output_tok_s": sum(r["output_tokens"] for r in ok) / span if span > 0 else math.nan,
        "ttft_p50_ms": float(np.median([r["ttft_s"] for r in ok]) * 1e3) if ok else math.nan,
        "ttft_p99_ms": float(np.percentile([r["ttft_s"] for r in ok], 99) * 1e3) if ok else math.nan,
        "tpot_p50_ms": float(np.median(tpots) * 1e3) if tpots else math.nan,
        "tpot_p99_ms": float(np.percentile(tpots, 99) * 1e3) if tpots else math.nan,
        "e2e_p50_s": float(np.median([r["e2e_s"] for r in ok])) if ok else math.nan,
    }


async def _sweep(base_url: str, model: str, prompts: Sequence[SweepPrompt], settings: SweepSettings, tier: str,
                 metrics_url: str | None, progress: ProgressFn | None, log: Callable[[str], None]) -> SweepResult:
    rng = np.random.default_rng(settings.seed)
    limits = httpx.Limits(max_connections=settings.max_in_flight + 4, max_keepalive_connections=settings.max_in_flight)
    timeout = httpx.Timeout(settings.request_timeout_s, connect=10.0)
    if metrics_url is None:
        metrics_url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        scraper = MetricsScraper(metrics_url, settings.metrics_interval_s).start()
        runner = _Runner(client, base_url, model, settings, scraper, time.perf_counter(), tier)
        records: list[dict[str, Any]] = []
        summary = []

        def observed(row: dict[str, Any], start: float) -> dict[str, Any]:
            """The phase's summary plus the largest server gauges any scrape saw during it."""
            if scraper.available:
                end = time.perf_counter()
                scraper.settle(end)
                row |= {f"{k}_max": v for k, v in scraper.seen(start, end).items()}
            return row

        try:
            warm = await runner.phase("warmup", _cycle(prompts, settings.warmup_requests, rng),
                                      np.zeros(settings.warmup_requests), 0.0, 1, settings.max_seconds_per_rate, None)
            records += warm
            began = time.perf_counter()
            idle = await runner.phase("idle", _cycle(prompts, settings.idle_requests, rng),
                                      np.zeros(settings.idle_requests), 0.0, 1, settings.max_seconds_per_rate, progress)
            records += idle
            summary.append(observed(phase_summary(idle, "idle", 0.0), began))
            if not _ok(idle):
                raise RuntimeError(f"{tier}: every idle request failed, e.g. {idle[0].get('error')}")
            began = time.perf_counter()
            sat = await runner.phase("saturation", _cycle(prompts, settings.saturation_requests, rng),
                                     np.zeros(settings.saturation_requests), 0.0, settings.saturation_concurrency,
                                     settings.max_seconds_per_rate, progress)
            records += sat
            summary.append(observed(phase_summary(sat, "saturation", 0.0), began))
            saturation_rps, saturation_tok_s = summary[-1]["achieved_rps"], summary[-1]["output_tok_s"]
            idle_s = summary[0]
            log(f"{tier}: idle TTFT p50 {idle_s['ttft_p50_ms']:.1f} ms, TPOT p50 {idle_s['tpot_p50_ms']:.2f} ms;"
                f" saturation {saturation_rps:.2f} req/s, {saturation_tok_s:.0f} output tok/s")
            rates = list(settings.rates or [round(f * saturation_rps, 4) for f in settings.saturation_fractions])
            for i, rate in enumerate(rates):
                n = settings.requests_per_rate
                offsets = arrival_times(settings.arrival, rate, n, seed=settings.seed + i, cv=settings.burstiness_cv)
                began = time.perf_counter()
                got = await runner.phase("rate", _cycle(prompts, n, rng), offsets, rate, settings.max_in_flight,
                                         settings.max_seconds_per_rate, progress)
                records += got
                summary.append(observed(phase_summary(got, "rate", rate), began))
                s = summary[-1]
                log(f"{tier}: {rate:.2f} req/s offered → {s['achieved_rps']:.2f} achieved, TTFT p50 "
                    f"{s['ttft_p50_ms']:.0f} ms, TPOT p50 {s['tpot_p50_ms']:.1f} ms, {s['errors']} errors")
        finally:
            scraper.stop()
            if scraper.history:
                log(f"{tier}: /metrics scraped {len(scraper.history)} times, {scraper.failures} failed")
    return SweepResult(records=records, rates=rates, saturation_rps=saturation_rps, saturation_tok_s=saturation_tok_s,
                       metrics_available=bool(scraper.available), summary=summary)


def run_sweep(base_url: str, model: str, prompts: Sequence[SweepPrompt], settings: SweepSettings, tier: str,
              metrics_url: str | None = None, progress: ProgressFn | None = None,
              log: Callable[[str], None] = print) -> SweepResult:
    """Run the idle, saturation and rate phases against `base_url` (ending in /v1)."""
    if not prompts:
        raise ValueError(f"{tier}: a sweep needs at least one prompt")
    return asyncio.run(_sweep(base_url, model, prompts, settings, tier, metrics_url, progress, log))


FEATURE_COLUMNS = tuple(f"f_{k}" for k in FEATURES)
SWEEP_SCHEMA = pa.schema(
    [("tier", pa.string()), ("phase", pa.string()), ("rate", pa.float64()), ("arrival", pa.string()),
     ("seq", pa.int64()), ("group", pa.string()), ("sent_s", pa.float64()), ("scheduled_s", pa.float64()),
     ("client_delay_s", pa.float64()), ("requested_tokens", pa.int64()), ("server_prompt_tokens", pa.int64()),
     ("output_tokens", pa.int64()), ("finish_reason", pa.string()), ("ttft_s", pa.float64()),
     ("tpot_s", pa.float64()), ("e2e_s", pa.float64()), ("itl_s", pa.list_(pa.float64())),
     ("itl_p50_s", pa.float64()), ("itl_p95_s", pa.float64()), ("error", pa.string())]
    + [(c, pa.float64()) for c in FEATURE_COLUMNS]
)


def records_table(records: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(records, schema=SWEEP_SCHEMA)
