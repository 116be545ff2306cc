"""Latency records from production traffic logs: what the fleet really saw, in the QPS sweep's format.

A log holds when each request was sent, its token counts and (where the gateway logs it) its TTFT
and E2E, but not the instance state at dispatch the heads learn from. That state is reconstructed
by replaying the log through the sweep's own dead reckoning (`profiling.live_state.ClientState`):
every request is sent at its timestamp, its first token arrives at TTFT, its other tokens evenly
until E2E; the snapshot taken just before each send is its features, exactly as a sweep records
them. The records then train and evaluate the heads like a sweep's (`profiling.sweep_heads`), split
by time: the latest requests of the log are the held-out test.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
from routeforge.profiling.live_state import ClientState
from routeforge.profiling.rwt import RwtParams
from routeforge.profiling.sweep import FEATURE_COLUMNS, records_table
from routeforge.profiling.sweep_heads import lightest_load
from routeforge.prompts.traffic_logs import TrafficRequest

PHASE = "traffic"
SEND, TOKEN, FINISH = 0, 1, 2  # event order at equal times: a send sees tokens of the same instant after it


def replay(requests: Iterable[TrafficRequest], tier: str, window_s: float = 2.0) -> pa.Table:
    """Sweep-format records (one per timed request with ≥ 2 output tokens) for one tier's traffic."""
    timed = sorted((r for r in requests if r.timed and r.completion_tokens >= 2), key=lambda r: (r.sent_s, r.row_id))
    if not timed:
        raise ValueError(f"{tier}: no request in the traffic logs has timing (ttft_s, e2e_s) and 2+ output tokens")
    start = timed[0].sent_s
    span = max(timed[-1].sent_s - start, 1e-9)
    rate = (len(timed) - 1) / span if len(timed) > 1 else 0.0
    events: list[tuple[float, int, int, int]] = []  # (time, kind, request, token)
    for i, r in enumerate(timed):
        t0 = r.sent_s - start
        heapq.heappush(events, (t0, SEND, i, 0))
        first, last = t0 + r.ttft_s, t0 + r.e2e_s
        n = r.completion_tokens
        for k in range(n):
            at = first + (last - first) * k / (n - 1)
            heapq.heappush(events, (at, TOKEN, i, k))
        heapq.heappush(events, (last, FINISH, i, n))
    state = ClientState(window_s=window_s)
    records: list[dict] = []
    while events:
        now, kind, i, _ = heapq.heappop(events)
        r = timed[i]
        if kind == SEND:
            features = state.snapshot(now, r.completion_tokens)
            state.sent(i, r.prompt_tokens, r.completion_tokens, now)
            tpot = (r.e2e_s - r.ttft_s) / (r.completion_tokens - 1)
            row = {"tier": tier, "phase": PHASE, "rate": rate, "arrival": "log", "seq": i, "group": r.task or tier,
                   "sent_s": now, "scheduled_s": now, "client_delay_s": 0.0, "requested_tokens": r.completion_tokens,
                   "server_prompt_tokens": r.prompt_tokens, "output_tokens": r.completion_tokens,
                   "finish_reason": None, "ttft_s": r.ttft_s, "tpot_s": tpot, "e2e_s": r.e2e_s, "itl_s": [],
                   "itl_p50_s": tpot, "itl_p95_s": None, "error": None}
            values = {"prompt_tokens": float(r.prompt_tokens), "predicted_output_tokens": float(r.completion_tokens),
                      **features}
            for column in FEATURE_COLUMNS:
                row[column] = values.get(column.removeprefix("f_"), math.nan)
            records.append(row)
        elif kind == TOKEN:
            state.token(i, now)
        else:
            state.finished(i)
    return records_table(records)


def traffic_rwt(records: pa.Table, max_output_tokens: int) -> RwtParams:
    """QLM's parameters from traffic: P and d at the lightest load seen (no other request in flight,
    else the lightest tenth), ε = the 90th-percentile TPOT over d, Θ = the highest decode throughput
    over any 10-second window (output tokens per second across requests)."""
    t = records.to_pydict()
    light = lightest_load(np.asarray(t["f_in_flight"], dtype=float))
    ttft, tpot = np.asarray(t["ttft_s"]), np.asarray(t["tpot_s"])
    d = float(np.median(tpot[light]))
    sent, e2e, tokens = np.asarray(t["sent_s"]), np.asarray(t["e2e_s"]), np.asarray(t["output_tokens"], dtype=float)
    windows = np.arange(sent.min(), (sent + e2e).max() + 10.0, 10.0)
    throughput = 0.0
    for w in windows:
        overlap = np.clip(np.minimum(sent + e2e, w + 10.0) - np.maximum(sent, w), 0, None)
        throughput = max(throughput, float((tokens * overlap / np.maximum(e2e, 1e-9)).sum() / 10.0))
    return RwtParams(prefill_s=float(np.median(ttft[light])), decode_s=d,
                     epsilon=float(np.quantile(tpot, 0.9)) / d, theta_tok_s=throughput,
                     max_output_tokens=max_output_tokens)
