"""What `--load X` means: X × a rate the simulated fleet can carry on that traffic, on one of two bases.

`saturation` (the default): the fleet's throughput at saturation, the completions per second of the
better of join-shortest-queue and least-work-left when each window's requests are all offered
within about a second, held at the router while every instance's buffer is full (`HoldWhenFull`: a
closed loop, nothing turned away), counted between the 10th and 90th percentile completion times
(`steady_throughput`: every batch as full as its slots and KV cache allow), over the evaluation's
windows. A window smaller than the fleet's slots never fills it: its figure is then a lower bound.
So 0.8 means a busy fleet, whatever the SLO; SLO attainment is then what each load shows. Why not
the rate at which an SLO still holds: on a trace of long-output requests that rate can be a small
fraction of what the fleet serves, so every policy would be judged where routing hardly matters.

`slo` (the former default): by search, as below.

Why by search: the capacity used to come from the trace's mean token counts (each instance's
requests per second at its largest batch), which leaves out heavy tails, the KV cache and the
waiting-queue buffer; at "0.8 of capacity" a conversation trace then had requests rejected. Here
the sustainable rate is found in the simulator itself: the highest arrival rate
at which the better reference heuristic (join-shortest-queue or least-work-left) still serves
`target` (99%) of the offered requests, and finishes `slo_target` (90%, DistServe's attainment
level) of them within their SLO, over the same windows the evaluation replays. Both, because a
window shorter than the fleet's buffers is served in full at any rate: past capacity its requests
wait instead of being turned away. A geometric bracket from the mean-token estimate, then bisection
to `tolerance`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from routeforge.training.policies.simulator.baselines import BASELINES
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.metrics import summarize

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
    basis: str = "slo"  # "saturation": rate_rps is the throughput at saturation (probes: rate, served, throughput)

    def to_dict(self) -> dict:
        if self.basis == "saturation":
            method = (f"throughput at saturation: completions per second of the better of "
                      f"{', '.join(REFERENCE_POLICIES)} with each window offered within about a second, held at "
                      "the router while every buffer is full, between the 10th and 90th percentile completions")
        else:
            method = (f"highest rate at which the better of {', '.join(REFERENCE_POLICIES)} serves "
                      f"≥ {self.target_served:.0%} of offered requests and finishes ≥ {self.target_goodput:.0%} "
                      "within their SLO (bisection)")
        return {"sustainable_rps": self.rate_rps, "mean_token_estimate_rps": self.estimate_rps, "found": self.bounded,
                "target_served_share": self.target_served, "target_goodput": self.target_goodput,
                "probes": [list(p) for p in self.probes], "basis": self.basis, "method": method}


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


class HoldWhenFull:
    """A baseline that holds a request at the router while every instance's waiting buffer is full,
    and else sends it where the baseline says, or where it has room (the fewest outstanding requests):
    a closed loop that keeps the fleet full without turning anything away. It reads the buffers
    themselves (`reads_simulator_state`: a calibration driver, not a router under evaluation); the
    inner policy gets the router's side."""

    reads_simulator_state = True

    def __init__(self, inner):
        self.inner = inner

    def assign(self, queue, cluster, now):
        """In arrival order, one request at a time; once no instance has room the rest wait (the inner
        policy is not asked about them: a deep router queue would cost a decision each per tick)."""
        insts = cluster.instances
        added = [0] * len(insts)  # what this batch of decisions has already sent to each instance
        out = []
        for request in queue:
            room = [k for k, i in enumerate(insts)
                    if i.profile.buffer is None or i.n_waiting + added[k] < i.profile.buffer]
            if not room:
                break
            choice = self.inner.assign([request], cluster.handed_to(self.inner, now), now)[0]
            if choice is None or choice not in room:
                choice = min(room, key=lambda k: insts[k].n_running + insts[k].n_waiting + added[k])
            added[choice] += 1
            out.append(choice)
        return out + [None] * (len(queue) - len(out))


def steady_throughput(outcomes) -> float:
    """Completions per second between the 10th and the 90th percentile completion times: while the fleet
    is full, leaving out its filling and its drain (the last long requests finishing one by one)."""
    done = np.sort([o.job.finished for o in outcomes if o.served])
    if len(done) < 10:
        return len(done) / done[-1] if len(done) and done[-1] > 0 else 0.0
    lo, hi = int(0.1 * len(done)), int(0.9 * len(done))
    return (hi - lo) / (done[hi] - done[lo]) if done[hi] > done[lo] else float(len(done)) / max(done[-1], 1e-9)


def calibrate_on(profiles, models: list[int], windows: Callable[[float, int], list], estimate_rps: float,
                 seeds: list[int], slo, basis: str = "saturation", block_tokens: int | None = None,
                 log: Callable[[str], None] = lambda _: None) -> LoadCalibration:
    """The rate `loads` are shares of, for the simulated fleet (`profiles`, each instance's model in
    `models`) on the requests `windows(rate, seed)` gives: its throughput at saturation, or (basis
    `slo`) the highest rate at which `slo` (an `Slo`) still holds for 90% of requests (`sustainable_rate`)."""
    def run(policy: str, rate: float, seed: int):
        return Cluster(profiles, models=models, block_tokens=block_tokens).run(windows(rate, seed), BASELINES[policy]())

    if basis == "saturation":
        n = len(windows(1.0, seeds[0]))
        burst = float(max(n, 1))  # the whole window within about one second
        best, probes = (0.0, 0.0), []  # (throughput, served share) of the better reference policy
        for policy in REFERENCE_POLICIES:
            rates, shares = [], []
            for seed in seeds:
                outcomes = Cluster(profiles, models=models, block_tokens=block_tokens).run(
                    windows(burst, seed), HoldWhenFull(BASELINES[policy]()), max_queue_s=math.inf)
                rates.append(steady_throughput(outcomes))
                shares.append(sum(o.served for o in outcomes) / len(outcomes))
            probes.append((burst, float(np.mean(shares)), float(np.mean(rates))))
            best = max(best, (float(np.mean(rates)), float(np.mean(shares))))
        if not best[0] > 0:
            raise ValueError("load calibration: no request was served even with the whole window offered at once "
                             "(a request larger than every KV cache rejects at any load)")
        log(f"load calibration: throughput at saturation {best[0]:.4g} req/s ({best[1]:.1%} of each window "
            f"served; the mean-token estimate was {estimate_rps:.4g})")
        return LoadCalibration(best[0], float(estimate_rps), TARGET_SERVED, float("nan"), probes, basis="saturation")

    def shares(policy: str, rate: float, seed: int) -> tuple[float, float]:
        summary = summarize(run(policy, rate, seed), slo=slo, profiles=profiles, models=models)
        return summary["served_share"], summary["goodput"]

    return sustainable_rate(served_share_probe(shares, seeds), estimate_rps, log=log)
