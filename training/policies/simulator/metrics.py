"""Summaries of a simulated run: latency percentiles, SLO attainment, quality, drops, goodput.

Every offered request counts. A policy that turns requests away must not look faster for it: the
served-only latencies (`e2e_mean_s`, …) are reported beside the served share, while the objectives a
ranking uses count every offered request: `goodput` (the share of offered requests finished within
their SLO), and latencies over offered requests (`*_offered_s`), in which a request not served
missed its SLO: +inf in the percentiles, and in the mean the window's censoring value (the largest
of its SLOs and of its served E2E latencies: never cheaper than any request that was served).

The SLO of a request is an `Slo` (training.policies.simulator.slo): absolute bounds, or a bound from
the request's own token counts on a fixed reference. The older arguments (`slo_e2e_s`, `slo_tpot_s`,
`slo_scale`) still mean what they did: without an absolute E2E bound, `slo_scale` × what the
request would take alone on the idle instance that served it (the instance-relative rule).
"""

from __future__ import annotations

import numpy as np
from routeforge.training.policies.simulator.cluster import Outcome
from routeforge.training.policies.simulator.instance import BUFFER_FULL, OUTGREW, TOO_LARGE
from routeforge.training.policies.simulator.slo import DEFAULT_SCALE as DEFAULT_SLO_SCALE
from routeforge.training.policies.simulator.slo import Slo, legacy_slo

# why a request was not served → its count's metric
NOT_SERVED = {BUFFER_FULL: "rejected_buffer_full", TOO_LARGE: "rejected_too_large", OUTGREW: "rejected_outgrew",
              "dropped by the policy": "dropped_by_policy", "timed out in the router queue": "dropped_timed_out"}


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else float("nan")


def _offered_pct(x: np.ndarray, q: float) -> float:
    """A percentile over offered requests, +inf standing for each request not served: finite only
    when at least q% were served. The inverted CDF never interpolates towards +inf."""
    return float(np.percentile(x, q, method="inverted_cdf")) if x.size else float("nan")


def summarize(outcomes: list[Outcome], slo_e2e_s: float | None = None, slo_tpot_s: float | None = None,
              accuracy: list[float] | None = None, profiles=None,
              slo_scale: float = DEFAULT_SLO_SCALE, slo: Slo | None = None,
              models: list[int] | None = None) -> dict[str, float]:
    """Latency statistics over served requests and over offered ones; SLO attainment, goodput and
    quality over *all* requests (a dropped or rejected request misses its SLO and earns no quality).
    `slo` says what each request must meet; without it the older arguments apply (absolute E2E/TPOT,
    else `slo_scale` × the unloaded E2E on the instance that served it, from `profiles`). `profiles`
    and `models` (each instance's model index) give relative bounds; `accuracy` per instance weights
    on-time completions for 004's accuracy-weighted goodput. `prefix_hit_rate`: the share of served
    requests' prompt tokens taken from a prefix cache."""
    n = len(outcomes)
    served = [o for o in outcomes if o.served]
    e2e = np.array([o.e2e for o in served])
    ttft = np.array([o.ttft for o in served])
    tpot = np.array([o.tpot for o in served])
    tpot = tpot[~np.isnan(tpot)]
    quality = np.array([o.request.quality[o.model] if o.served else 0.0 for o in outcomes])
    span = max((o.job.finished for o in served), default=0.0) - min((o.request.arrival for o in outcomes), default=0.0)
    out = {
        "requests": float(n), "served": float(len(served)),
        "served_share": len(served) / n if n else float("nan"),
        "dropped": float(sum(o.instance == -1 for o in outcomes)),
        "rejected": float(sum(o.instance >= 0 and not o.served for o in outcomes)),
        "preemptions": float(sum(o.job.preemptions for o in outcomes if o.job is not None)),
        "e2e_mean_s": float(e2e.mean()) if e2e.size else float("nan"),
        "e2e_p50_s": _pct(e2e, 50), "e2e_p95_s": _pct(e2e, 95), "e2e_p98_s": _pct(e2e, 98), "e2e_p99_s": _pct(e2e, 99),
        "ttft_mean_s": float(ttft.mean()) if ttft.size else float("nan"), "ttft_p95_s": _pct(ttft, 95),
        "tpot_mean_s": float(tpot.mean()) if tpot.size else float("nan"), "tpot_p95_s": _pct(tpot, 95),
        "quality_mean": float(np.nanmean(quality)) if np.isfinite(quality).any() else float("nan"),
        "throughput_rps": len(served) / span if span > 0 else float("nan"),
    }
    for key in NOT_SERVED.values():
        out[key] = 0.0
    for o in outcomes:
        if not o.served:
            key = NOT_SERVED.get(o.reason or "")
            if key is not None:
                out[key] += 1.0
    # each request's SLO (`slo`, else the one the older arguments mean) and whether it was met
    if slo is None:
        slo = legacy_slo(slo_e2e_s, slo_tpot_s, slo_scale, profiles is not None)
    offered = np.array([o.e2e if o.served else np.inf for o in outcomes], dtype=float)
    bounds = slo.e2e_bounds(outcomes, profiles, models) if slo is not None else np.full(n, np.nan)
    if n:
        censor = float(np.nanmax(np.concatenate([e2e, bounds[np.isfinite(bounds)], [0.0]])))
        out["e2e_mean_offered_s"] = float(np.where(np.isfinite(offered), offered, censor).mean())
        out["e2e_p50_offered_s"] = _offered_pct(offered, 50)
        out["e2e_p95_offered_s"] = _offered_pct(offered, 95)
        out["e2e_p99_offered_s"] = _offered_pct(offered, 99)
        ttft_offered = np.array([o.ttft if o.served else np.inf for o in outcomes], dtype=float)
        out["ttft_p95_offered_s"] = _offered_pct(ttft_offered, 95)
        out["ttft_p99_offered_s"] = _offered_pct(ttft_offered, 99)
    on_time = slo.met(outcomes, e2e=bounds) if slo is not None else np.zeros(n, dtype=bool)
    if slo is not None and slo.absolute:
        out["slo_attainment"] = float(on_time.mean()) if n else float("nan")
    # goodput: finished within its SLO, of all offered requests
    out["goodput"] = float(on_time.mean()) if n and slo is not None else float("nan")
    if slo is not None:
        # RouteBalance's trade in one number: the quality delivered within the SLO, per offered request
        out["quality_goodput"] = (float(np.nanmean(np.where(on_time, quality, 0.0)))
                                  if n and np.isfinite(quality).any() else float("nan"))
    cached = sum(o.job.cached_tokens for o in served)
    prompt = sum(o.request.prompt_tokens for o in served)
    out["prefix_hit_rate"] = cached / prompt if prompt else 0.0
    if accuracy is not None:
        out["accuracy_weighted_goodput_rps"] = (
            sum(accuracy[o.instance] for o, ok in zip(outcomes, on_time) if ok) / span if span > 0 else float("nan"))
    return out


def mean_std(runs: list[dict[str, float]], keys=None) -> dict[str, list[float]]:
    """{metric: [mean, std]} over the runs of several seeds (NaN-aware: a run without a value for a
    metric, e.g. no served request, does not count for it; an infinite value, a percentile over
    offered requests past the served share, makes the mean infinite)."""
    out = {}
    for key in keys or runs[0]:
        values = np.array([r.get(key, float("nan")) for r in runs], dtype=float)
        finite = np.isfinite(values).any() or np.isinf(values).any()
        with np.errstate(invalid="ignore"):
            out[key] = [float(np.nanmean(values)) if finite else float("nan"),
                        float(np.nanstd(values)) if np.isfinite(values).all() else float("nan")]
    return out
