"""Summaries of a simulated run: latency percentiles, SLO attainment, quality, drops, goodput.

Every offered request counts. A policy that turns requests away must not look faster for it: the
served-only latencies (`e2e_mean_s`, …) are reported beside the served share, while the objectives a
ranking uses count every offered request: `goodput` (the share of offered requests finished within
their SLO), and latencies over offered requests (`*_offered_s`), in which a request not served
missed its SLO: +inf in the percentiles, and in the mean the window's censoring value (the largest
of its SLOs and of its served E2E latencies: never cheaper than any request that was served).

The SLO of a request, unless an absolute one is given: its E2E within `slo_scale` × what it would
take alone on the idle instance that served it (`InstanceProfile.unloaded_e2e`), so the SLO
measures what queueing and batching with others cost it, on whichever tier it was sent to.
"""

from __future__ import annotations

import numpy as np
from routeforge.training.policies.simulator.cluster import Outcome
from routeforge.training.policies.simulator.instance import BUFFER_FULL, OUTGREW, TOO_LARGE

DEFAULT_SLO_SCALE = 5.0  # × the unloaded E2E on the serving instance
# why a request was not served → its count's metric
NOT_SERVED = {BUFFER_FULL: "rejected_buffer_full", TOO_LARGE: "rejected_too_large", OUTGREW: "rejected_outgrew",
              "dropped by the policy": "dropped_by_policy", "timed out in the router queue": "dropped_timed_out"}


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else float("nan")


def _offered_pct(x: np.ndarray, q: float) -> float:
    """A percentile over offered requests, +inf standing for each request not served: finite only
    when at least q% were served. The inverted CDF never interpolates towards +inf."""
    return float(np.percentile(x, q, method="inverted_cdf")) if x.size else float("nan")


def request_slo_e2e(outcome: Outcome, profiles, slo_scale: float) -> float:
    """`slo_scale` × the request's unloaded E2E on the instance it was sent to (NaN when it never
    reached one)."""
    if outcome.instance < 0 or profiles is None:
        return float("nan")
    tokens = outcome.job.output_tokens if outcome.job is not None else float(outcome.request.output_tokens[0])
    return slo_scale * profiles[outcome.instance].unloaded_e2e(outcome.request.prompt_tokens, tokens)


def summarize(outcomes: list[Outcome], slo_e2e_s: float | None = None, slo_tpot_s: float | None = None,
              accuracy: list[float] | None = None, profiles=None,
              slo_scale: float = DEFAULT_SLO_SCALE) -> dict[str, float]:
    """Latency statistics over served requests and over offered ones; SLO attainment, goodput and
    quality over *all* requests (a dropped or rejected request misses its SLO and earns no quality).
    `profiles` (the instances' `InstanceProfile`s) give each request its default SLO; `accuracy`
    per instance weights on-time completions for 004's accuracy-weighted goodput."""
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
    # each request's E2E SLO: the absolute one given, else slo_scale × its unloaded E2E where it was sent
    slo = np.array([slo_e2e_s if slo_e2e_s is not None else request_slo_e2e(o, profiles, slo_scale)
                    for o in outcomes], dtype=float)
    offered = np.array([o.e2e if o.served else np.inf for o in outcomes], dtype=float)
    if n:
        censor = float(np.nanmax(np.concatenate([e2e, slo[np.isfinite(slo)], [0.0]])))
        out["e2e_mean_offered_s"] = float(np.where(np.isfinite(offered), offered, censor).mean())
        out["e2e_p50_offered_s"] = _offered_pct(offered, 50)
        out["e2e_p95_offered_s"] = _offered_pct(offered, 95)
        out["e2e_p99_offered_s"] = _offered_pct(offered, 99)
    on_time = np.array([o.served and (slo_e2e_s is None or o.e2e <= slo_e2e_s)
                        and (slo_tpot_s is None or np.isnan(o.tpot) or o.tpot <= slo_tpot_s) for o in outcomes])
    if slo_e2e_s is not None or slo_tpot_s is not None:
        out["slo_attainment"] = float(on_time.mean()) if n else float("nan")
    # goodput: finished within the SLO (the given one, else the default from the instance), of all offered
    within = np.array([o.served and np.isfinite(s) and o.e2e <= s for o, s in zip(outcomes, slo)])
    if slo_e2e_s is None and profiles is None:
        out["goodput"] = out["slo_attainment"] if "slo_attainment" in out else float("nan")
    else:
        tpot_ok = np.array([slo_tpot_s is None or np.isnan(o.tpot) or o.tpot <= slo_tpot_s for o in outcomes])
        out["goodput"] = float((within & tpot_ok).mean()) if n else float("nan")
        # RouteBalance's trade in one number: the quality delivered within the SLO, per offered request
        on_slo = within & tpot_ok
        out["quality_goodput"] = (float(np.nanmean(np.where(on_slo, quality, 0.0)))
                                  if n and np.isfinite(quality).any() else float("nan"))
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
