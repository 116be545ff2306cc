"""What `--load X` means: X × the arrival rate the simulated fleet sustains on that traffic.

Why by search: the capacity used to come from the trace's mean token counts (each instance's
requests per second at its largest batch), which leaves out heavy tails, the KV cache and the
waiting-queue buffer; at "0.8 of capacity" the conversation trace then had 2 to 18% of its requests
rejected. Here the sustainable rate is measured in the simulator itself: the highest arrival rate
at which the best reference heuristic (join-shortest-queue or least-work-left, whichever serves
more) still serves `target` (99%) of the offered requests, over the same windows the evaluation
replays. A geometric bracket from the mean-token estimate, then bisection to `tolerance`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

REFERENCE_POLICIES = ("join_shortest_queue", "least_work_left")
TARGET_SERVED = 0.99


@dataclass(frozen=True)
class LoadCalibration:
    """The sustainable rate and how it was found (each probed rate with its best served share)."""

    rate_rps: float
    estimate_rps: float  # the mean-token capacity the search started from
    target_served: float
    probes: list[tuple[float, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"sustainable_rps": self.rate_rps, "mean_token_estimate_rps": self.estimate_rps,
                "target_served_share": self.target_served, "probes": [list(p) for p in self.probes],
                "method": f"highest rate at which the best of {', '.join(REFERENCE_POLICIES)} serves "
                          f"≥ {self.target_served:.0%} of offered requests (bisection)"}


def sustainable_rate(served_share_at: Callable[[float], float], estimate_rps: float,
                     target: float = TARGET_SERVED, tolerance: float = 0.02, max_probes: int = 40,
                     log: Callable[[str], None] = lambda _: None) -> LoadCalibration:
    """The highest rate r with `served_share_at(r) >= target`, to a relative `tolerance`.

    `served_share_at(rate)` runs the reference policies at that mean arrival rate and returns the
    best one's served share (mean over windows)."""
    if not (estimate_rps > 0 and np.isfinite(estimate_rps)):
        raise ValueError(f"load calibration: the starting estimate {estimate_rps!r} req/s is not a positive rate")
    probes: list[tuple[float, float]] = []

    def ok(rate: float) -> bool:
        share = served_share_at(rate)
        probes.append((rate, share))
        return share >= target

    lo, hi = None, None
    rate = estimate_rps
    while len(probes) < max_probes and (lo is None or hi is None):
        if ok(rate):
            lo, rate = rate, rate * 2.0
        else:
            hi, rate = rate, rate / 2.0
        if lo is not None and hi is not None:
            break
    if lo is None:
        raise ValueError(f"load calibration: even {hi:.3g} req/s has fewer than {target:.0%} of requests served "
                         f"(a request larger than every KV cache, or a buffer too small, rejects at any load)")
    if hi is None:
        raise ValueError(f"load calibration: {lo:.3g} req/s is still served in full; the fleet looks unbounded")
    while hi / lo > 1.0 + tolerance and len(probes) < max_probes:
        mid = float(np.sqrt(lo * hi))
        if ok(mid):
            lo = mid
        else:
            hi = mid
    log(f"load calibration: sustainable {lo:.4g} req/s ({len(probes)} probes; the mean-token estimate was "
        f"{estimate_rps:.4g})")
    return LoadCalibration(float(lo), float(estimate_rps), target, probes)


def served_share_probe(run: Callable[[str, float, int], float], seeds: list[int],
                       policies: tuple[str, ...] = REFERENCE_POLICIES) -> Callable[[float], float]:
    """`rate → best served share` from `run(policy, rate, seed) → served share of that window`."""
    def probe(rate: float) -> float:
        return max(float(np.mean([run(policy, rate, seed) for seed in seeds])) for policy in policies)

    return probe
