"""Summaries of a simulated run: latency percentiles, SLO attainment, quality, drops, goodput."""

from __future__ import annotations

import numpy as np
from routeforge.training.policies.simulator.cluster import Outcome


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else float("nan")


def summarize(outcomes: list[Outcome], slo_e2e_s: float | None = None, slo_tpot_s: float | None = None,
              accuracy: list[float] | None = None) -> dict[str, float]:
    """Latency statistics over served requests; SLO attainment and quality over *all* requests (a
    dropped or rejected request misses its SLO and earns no quality). `accuracy` per instance
    weights on-time completions for 004's accuracy-weighted goodput."""
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
    on_time = np.array([o.served and (slo_e2e_s is None or o.e2e <= slo_e2e_s)
                        and (slo_tpot_s is None or np.isnan(o.tpot) or o.tpot <= slo_tpot_s) for o in outcomes])
    if slo_e2e_s is not None or slo_tpot_s is not None:
        out["slo_attainment"] = float(on_time.mean()) if n else float("nan")
    if accuracy is not None:
        out["accuracy_weighted_goodput_rps"] = (
            sum(accuracy[o.instance] for o, ok in zip(outcomes, on_time) if ok) / span if span > 0 else float("nan"))
    return out



def mean_std(runs: list[dict[str, float]], keys=None) -> dict[str, list[float]]:
    """{metric: [mean, std]} over the runs of several seeds (NaN-aware: a run without a value for a
    metric, e.g. no served request, does not count for it)."""
    out = {}
    for key in keys or runs[0]:
        values = np.array([r[key] for r in runs], dtype=float)
        finite = np.isfinite(values).any()
        out[key] = [float(np.nanmean(values)) if finite else float("nan"),
                    float(np.nanstd(values)) if finite else float("nan")]
    return out
