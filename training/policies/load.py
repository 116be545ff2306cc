"""What `--load X` means: X × the arrival rate the simulated fleet sustains on that traffic.

Why by search: the capacity used to come from the trace's mean token counts (each instance's
requests per second at its largest batch), which leaves out heavy tails, the KV cache and the
waiting-queue buffer; at "0.8 of capacity" the conversation trace then had 2 to 18% of its requests
rejected. Here the sustainable rate is measured in the simulator itself: the highest arrival rate
at which the better reference heuristic (join-shortest-queue or least-work-left) still serves
`target` (99%) of the offered requests, and finishes `slo_target` (90%, DistServe's attainment
level) of them within their SLO, over the same windows the evaluation replays. Both, because a
window shorter than the fleet's buffers is served in full at any rate: past capacity its requests
wait instead of being turned away. A geometric bracket from the mean-token estimate, then bisection
to `tolerance`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

REFERENCE_POLICIES = ("join_shortest_queue", "least_work_left")
TARGET_SERVED = 0.99
TARGET_GOODPUT = 0.90
MAX_FACTOR = 4096.0  # the highest rate probed, × the mean-token estimate


@dataclass(frozen=True)
class LoadCalibration:
    """The sustainable rate and how it was found (each probed rate with its best served share)."""

    rate_rps: float
    estimate_rps: float  # the mean-token capacity the search started from
    target_served: float
    target_goodput: float
    probes: list[tuple[float, float, float]] = field(default_factory=list)  # (rate, served, goodput)
    bounded: bool = True  # False: no probed rate missed the targets, and the mean-token estimate stands in

    def to_dict(self) -> dict:
        return {"sustainable_rps": self.rate_rps, "mean_token_estimate_rps": self.estimate_rps, "found": self.bounded,
                "target_served_share": self.target_served, "target_goodput": self.target_goodput,
                "probes": [list(p) for p in self.probes],
                "method": f"highest rate at which the better of {', '.join(REFERENCE_POLICIES)} serves "
                          f"≥ {self.target_served:.0%} of offered requests and finishes ≥ {self.target_goodput:.0%} "
                          "within their SLO (bisection)"}


def sustainable_rate(shares_at: Callable[[float], tuple[float, float]], estimate_rps: float,
                     target: float = TARGET_SERVED, slo_target: float = TARGET_GOODPUT, tolerance: float = 0.02,
                     max_probes: int = 40, log: Callable[[str], None] = lambda _: None) -> LoadCalibration:
    """The highest rate r at which `shares_at(r)` = (served share, goodput) meets both targets, to a
    relative `tolerance`. `shares_at(rate)` runs the reference policies at that mean arrival rate and
    returns the better one's (mean over windows; `served_share_probe`)."""
    if not (estimate_rps > 0 and np.isfinite(estimate_rps)):
        raise ValueError(f"load calibration: the starting estimate {estimate_rps!r} req/s is not a positive rate")
    probes: list[tuple[float, float, float]] = []

    def ok(rate: float) -> bool:
        served, goodput = shares_at(rate)
        probes.append((rate, served, goodput))
        return served >= target and goodput >= slo_target

    lo, hi = None, None
    rate = estimate_rps
    while len(probes) < max_probes and (lo is None or hi is None) and rate <= estimate_rps * MAX_FACTOR:
        if ok(rate):
            lo, rate = rate, rate * 2.0
        else:
            hi, rate = rate, rate / 2.0
    if lo is None:
        raise ValueError(f"load calibration: even {hi:.3g} req/s has fewer than {target:.0%} of requests served or "
                         f"{slo_target:.0%} within their SLO (a request larger than every KV cache, or a buffer too "
                         "small, rejects at any load)")
    if hi is None:  # a window shorter than the buffers: every request waits its turn, none misses its SLO
        log(f"load calibration: windows stay within the targets up to {lo:.4g} req/s ({MAX_FACTOR:g} × the "
            f"mean-token estimate): too short to load the fleet; the mean-token estimate {estimate_rps:.4g} is used")
        return LoadCalibration(float(estimate_rps), float(estimate_rps), target, slo_target, probes, bounded=False)
    while hi / lo > 1.0 + tolerance and len(probes) < max_probes:
        mid = float(np.sqrt(lo * hi))
        if ok(mid):
            lo = mid
        else:
            hi = mid
    log(f"load calibration: sustainable {lo:.4g} req/s ({len(probes)} probes; the mean-token estimate was "
        f"{estimate_rps:.4g})")
    return LoadCalibration(float(lo), float(estimate_rps), target, slo_target, probes)


def served_share_probe(run: Callable[[str, float, int], tuple[float, float]], seeds: list[int],
                       policies: tuple[str, ...] = REFERENCE_POLICIES) -> Callable[[float], tuple[float, float]]:
    """`rate → (served share, goodput)` of the better reference policy (by goodput, then served share),
    from `run(policy, rate, seed) → (served share, goodput) of that window`."""
    def probe(rate: float) -> tuple[float, float]:
        means = []
        for policy in policies:
            runs = np.array([run(policy, rate, seed) for seed in seeds], dtype=float)
            means.append((float(runs[:, 1].mean()), float(runs[:, 0].mean())))
        goodput, served = max(means)
        return served, goodput

    return probe


def calibrate_on(profiles, models: list[int], windows: Callable[[float, int], list], estimate_rps: float,
                 seeds: list[int], slo_e2e_s: float | None = None, slo_tpot_s: float | None = None,
                 slo_scale: float | None = None, log: Callable[[str], None] = lambda _: None) -> LoadCalibration:
    """The sustainable rate of the simulated fleet (`profiles`, each instance's model in `models`) on
    the requests `windows(rate, seed)` gives, with the evaluation's SLO settings."""
    from routeforge.training.policies.simulator.baselines import BASELINES
    from routeforge.training.policies.simulator.cluster import Cluster
    from routeforge.training.policies.simulator.metrics import DEFAULT_SLO_SCALE, summarize

    def shares(policy: str, rate: float, seed: int) -> tuple[float, float]:
        summary = summarize(Cluster(profiles, models=models).run(windows(rate, seed), BASELINES[policy]()),
                            slo_e2e_s=slo_e2e_s, slo_tpot_s=slo_tpot_s, profiles=profiles,
                            slo_scale=DEFAULT_SLO_SCALE if slo_scale is None else slo_scale)
        return summary["served_share"], summary["goodput"]

    return sustainable_rate(served_share_probe(shares, seeds), estimate_rps, log=log)
