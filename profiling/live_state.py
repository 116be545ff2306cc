"""The instance state a router can know at dispatch: dead-reckoned by the client, and scraped.

RouteBalance (002) feeds its latency heads the instance telemetry at the moment a request is sent.
Two sources, both recorded as features by a QPS sweep:

- `ClientState`: what the load generator itself knows from the requests it sent and the tokens it
  has received (always available, for any server): in-flight counts, prompt tokens still to be
  prefilled, decode tokens still expected, context held by decoding requests, token rates and
  inter-token gaps over a recent window, and derived backlog and per-request time estimates.
- `MetricsScraper`: the server's Prometheus `/metrics` where it has one (vLLM's running / waiting
  counts, KV-cache usage, preemptions and token counters turned into rates). A server without the
  endpoint gives NaN for these features, which the XGBoost heads treat as missing.

`FEATURES` is the exact column order of the heads; the bundle stores it next to each head.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import httpx
import numpy as np

CLIENT_FEATURES = (
    "in_flight", "waiting_first_token", "decoding", "pending_prefill_tokens", "pending_decode_tokens",
    "decode_context_tokens", "decode_context_p50", "decode_context_p95", "decode_context_max",
    "decode_tok_rate", "prefill_tok_rate", "recent_itl_ms", "recent_ttft_ms", "backlog_s", "est_request_s",
)
SERVER_FEATURES = (
    "server_running", "server_waiting", "server_kv_usage", "server_preemptions_per_s",
    "server_prompt_tok_rate", "server_gen_tok_rate",
)
REQUEST_FEATURES = ("prompt_tokens", "predicted_output_tokens")
FEATURES = REQUEST_FEATURES + CLIENT_FEATURES + SERVER_FEATURES


@dataclass
class _InFlight:
    prompt_tokens: int
    expected_tokens: int
    received: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None


@dataclass
class ClientState:
    """Dead reckoning of one server's load from the client's own requests (times: perf_counter)."""

    window_s: float = 2.0
    _flight: dict[int, _InFlight] = field(default_factory=dict)
    _tokens: deque = field(default_factory=deque)  # (t, 1) per decode token received
    _gaps: deque = field(default_factory=deque)  # (t, inter-token gap s)
    _firsts: deque = field(default_factory=deque)  # (t, prompt tokens, ttft s)
    _sent_at: dict[int, float] = field(default_factory=dict)

    def sent(self, rid: int, prompt_tokens: int, expected_tokens: int, now: float) -> None:
        self._flight[rid] = _InFlight(prompt_tokens, expected_tokens)
        self._sent_at[rid] = now

    def token(self, rid: int, now: float) -> None:
        r = self._flight.get(rid)
        if r is None:
            return
        if r.first_token_at is None:
            r.first_token_at = now
            self._firsts.append((now, r.prompt_tokens, now - self._sent_at[rid]))
        else:
            self._gaps.append((now, now - r.last_token_at))
            self._tokens.append(now)
        r.received += 1
        r.last_token_at = now

    def finished(self, rid: int) -> None:
        self._flight.pop(rid, None)
        self._sent_at.pop(rid, None)

    def _prune(self, now: float) -> None:
        horizon = now - self.window_s
        for q in (self._tokens, self._gaps, self._firsts):
            while q and (q[0] if isinstance(q[0], float) else q[0][0]) < horizon:
                q.popleft()

    def snapshot(self, now: float, predicted_output_tokens: int) -> dict[str, float]:
        self._prune(now)
        flights = list(self._flight.values())
        waiting = [r for r in flights if r.first_token_at is None]
        decoding = [r for r in flights if r.first_token_at is not None]
        contexts = np.array([r.prompt_tokens + r.received for r in decoding], dtype=float)
        pending_decode = float(sum(max(r.expected_tokens - r.received, 0) for r in flights))
        decode_rate = len(self._tokens) / self.window_s
        itl_ms = float(np.median([g for _, g in self._gaps]) * 1e3) if self._gaps else math.nan
        backlog = pending_decode / decode_rate if decode_rate > 0 else math.nan
        per_request_tokens = pending_decode / max(len(decoding), 1) + predicted_output_tokens
        return {
            "in_flight": float(len(flights)),
            "waiting_first_token": float(len(waiting)),
            "decoding": float(len(decoding)),
            "pending_prefill_tokens": float(sum(r.prompt_tokens for r in waiting)),
            "pending_decode_tokens": pending_decode,
            "decode_context_tokens": float(contexts.sum()),
            "decode_context_p50": float(np.percentile(contexts, 50)) if len(contexts) else 0.0,
            "decode_context_p95": float(np.percentile(contexts, 95)) if len(contexts) else 0.0,
            "decode_context_max": float(contexts.max()) if len(contexts) else 0.0,
            "decode_tok_rate": decode_rate,
            "prefill_tok_rate": sum(p for _, p, _ in self._firsts) / self.window_s,
            "recent_itl_ms": itl_ms,
            "recent_ttft_ms": float(np.median([f for _, _, f in self._firsts]) * 1e3) if self._firsts else math.nan,
            "backlog_s": backlog,
            "est_request_s": per_request_tokens * itl_ms / 1e3 if not math.isnan(itl_ms) else math.nan,
        }


# Prometheus series → feature; several names per feature cover vLLM's V0 and V1 spellings.
_GAUGES = {
    "server_running": ("vllm:num_requests_running",),
    "server_waiting": ("vllm:num_requests_waiting",),
    "server_kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
_COUNTERS = {
    "server_preemptions_per_s": ("vllm:num_preemptions", "vllm:num_preemptions_total"),
    "server_prompt_tok_rate": ("vllm:prompt_tokens", "vllm:prompt_tokens_total"),
    "server_gen_tok_rate": ("vllm:generation_tokens", "vllm:generation_tokens_total"),
}


def parse_metrics(text: str) -> dict[str, float]:
    """Sum of each known series over its labels (e.g. several models on one server)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_created", "_bucket", "_sum", "_count")):
                continue
            totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


class MetricsScraper:
    """Polls `/metrics` from a thread of its own; `snapshot()` gives the latest gauges and counter
    rates, `seen(start, end)` the largest gauge values any scrape in that window saw.

    A thread, with its own connection, because the sweep's event loop is busy with the streams it
    measures: polled from that loop (and through its connection pool) the scrapes queued behind the
    requests, so under load every request saw the state of the idle moment before its phase.
    The first failed or non-200 scrape switches it off for the sweep (`available` is False), so a
    server without the endpoint costs one request, not one per poll.

    Each scrape keeps the moment it was sent and the moment it landed: the server read its gauges
    somewhere between the two. Under load a scrape can take seconds, and one filed under its landing
    time alone would fall after the phase it measured (a CI run saw no scrape land inside a short,
    saturated phase, and reported its gauges as NaN)."""

    def __init__(self, url: str, interval_s: float = 0.1, timeout_s: float = 5.0):
        self.url, self.interval_s, self.timeout_s = url, interval_s, timeout_s
        self.available: bool | None = None
        self._latest: dict[str, float] = {}
        self._previous: tuple[float, dict[str, float]] | None = None
        self._rates: dict[str, float] = {}
        # (sent, landed, gauges) of every scrape, perf_counter seconds
        self.history: list[tuple[float, float, dict[str, float]]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _update(self, now: float, raw: dict[str, float], sent: float | None = None) -> None:
        latest = {}
        for feature, names in _GAUGES.items():
            values = [raw[n] for n in names if n in raw]
            latest[feature] = values[0] if values else math.nan
        counters = {f: next((raw[n] for n in names if n in raw), math.nan) for f, names in _COUNTERS.items()}
        if self._previous is not None:
            then, before = self._previous
            dt = now - then
            self._rates = {f: (counters[f] - before[f]) / dt if dt > 0 else math.nan for f in counters}
        self._previous = (now, counters)
        self._latest = latest  # one reference swap: readers on other threads see old or new, whole
        self.history.append((now if sent is None else sent, now, latest))

    def _poll(self) -> None:
        with httpx.Client(timeout=self.timeout_s) as client:
            while not self._stop.is_set():
                try:
                    sent = time.perf_counter()
                    resp = client.get(self.url)
                    if resp.status_code != 200:
                        self.available = False
                        return
                    self._update(time.perf_counter(), parse_metrics(resp.text), sent=sent)
                    self.available = True
                except (httpx.HTTPError, ValueError):
                    self.failures += 1
                    if not self.available:
                        self.available = False
                        return
                self._stop.wait(self.interval_s)

    def start(self) -> MetricsScraper:
        self._thread = threading.Thread(target=self._poll, name="metrics-scraper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def seen(self, start: float, end: float) -> dict[str, float]:
        """The largest value of each gauge over the scrapes in flight at some moment between
        perf_counter `start` and `end` (NaN where there were none)."""
        window = [g for sent, landed, g in self.history if landed >= start and sent <= end]
        return {f: max((g[f] for g in window if not math.isnan(g[f])), default=math.nan) for f in _GAUGES}

    def settle(self, end: float) -> None:
        """Wait (at most one scrape's timeout and interval) for the scrape in flight at `end` to land,
        so that `seen(start, end)` includes it."""
        deadline = time.perf_counter() + self.timeout_s + self.interval_s + 0.5
        while (self._thread is not None and self._thread.is_alive() and time.perf_counter() < deadline
               and not (self.history and self.history[-1][0] >= end)):  # scrapes land in the order sent
            time.sleep(0.02)

    def snapshot(self) -> dict[str, float]:
        values = {f: self._latest.get(f, math.nan) for f in _GAUGES}
        values.update({f: self._rates.get(f, math.nan) for f in _COUNTERS})
        return values
