"""What a challenger router would have earned on traffic another policy served: the estimators
(`artifacts.operating.replay` reads the logs and builds the challenger's probabilities; `routeforge bundle
replay` prints it; the release gate's `release.replay` holds a challenger the log shows is worse).

A logged request i carries the model the serving policy chose, a_i, the probability it had of
choosing it, p_i = π0(a_i | x_i) (its propensity), and the outcome r_i. A challenger π1 gives
π1(a | x_i) for every model (one-hot for a deterministic router). With weights w_i = π1(a_i|x_i) / p_i:

- inverse propensity (IPS): V = mean(w_i r_i), unbiased when every p_i > 0 where π1 puts mass;
- self-normalised IPS (SNIPS): V = Σ w_i r_i / Σ w_i, a little biased, far less variable;
- doubly robust (DR), with the challenger's own estimates q̂(x, a):
  V = mean(Σ_a π1(a|x_i) q̂(x_i, a) + w_i (r_i − q̂(x_i, a_i))): unbiased when the propensities are
  right whatever q̂ is, and its variance shrinks as q̂ gets closer to the outcomes.

Intervals are normal, from the per-request terms (SNIPS by the delta method), as in the off-policy
evaluation literature (Dudík et al., 2011; Swaminathan and Joachims, 2015). NumPy only: a router
service can replay its own logs.

One logged line must not be able to steer an estimate:
- a line whose propensity is below `PROPENSITY_FLOOR` (10⁻³, under the least a routeforge router
  logs: one of its 256 posterior draws, 1/256) is not used; the estimate counts it (`below_floor`);
- below `MIN_EFFECTIVE` effective requests the interval widens to the whole outcome range (`thin`):
  two identical lines no longer give a zero-width interval;
- an estimate outside the range of the outcomes it was made from (IPS above 1 on outcomes in
  [0, 1]) is flagged (`outside_range`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Z = {0.9: 1.6448536269514722, 0.95: 1.959963984540054, 0.99: 2.5758293035489004}
PROPENSITY_FLOOR = 1e-3
MIN_EFFECTIVE = 10.0


@dataclass(frozen=True)
class Estimate:
    """A value estimate with its normal interval at `level`."""

    method: str
    value: float
    low: float
    high: float
    n: int
    effective_n: float  # (Σw)² / Σw²: how many logged requests the weights leave in effect
    level: float = 0.95
    below_floor: int = 0  # logged lines not used: their propensity was below PROPENSITY_FLOOR
    thin: bool = False  # fewer than MIN_EFFECTIVE effective requests: the interval is the outcome range
    outside_range: bool = False  # the value lies outside the range of the outcomes it was made from

    def covers(self, truth: float) -> bool:
        return self.low <= truth <= self.high


def _check(actions: np.ndarray, propensities: np.ndarray, rewards: np.ndarray, target: np.ndarray) -> None:
    n = len(actions)
    if not (len(propensities) == len(rewards) == len(target) == n):
        raise ValueError(f"logged arrays differ in length: actions {n}, propensities {len(propensities)}, "
                         f"rewards {len(rewards)}, challenger probabilities {len(target)}")
    bad = np.flatnonzero(~((propensities > 0) & (propensities <= 1)))
    if bad.size:
        raise ValueError(f"request {int(bad[0])}: propensity {float(propensities[bad[0]])!r} is not in (0, 1]")
    if not np.allclose(target.sum(axis=1), 1.0, atol=1e-6):
        row = int(np.flatnonzero(~np.isclose(target.sum(axis=1), 1.0, atol=1e-6))[0])
        raise ValueError(f"request {row}: the challenger's probabilities sum to {target[row].sum():.6g}, not 1")


def _arrays(actions, propensities, rewards, target):
    actions = np.asarray(actions, dtype=np.int64)
    propensities = np.asarray(propensities, dtype=np.float64)
    rewards = np.asarray(rewards, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    _check(actions, propensities, rewards, target)
    if not np.isfinite(rewards).all():
        raise ValueError(f"request {int(np.flatnonzero(~np.isfinite(rewards))[0])}: the outcome is not finite")
    return actions, propensities, rewards, target


def _floored(propensities: np.ndarray) -> tuple[np.ndarray, int]:
    """(the lines at or above the propensity floor, how many are below it)."""
    keep = propensities >= PROPENSITY_FLOOR
    if not keep.any():
        raise ValueError(f"every logged line's propensity is below the floor {PROPENSITY_FLOOR:g}: nothing to "
                         "estimate from")
    return keep, int((~keep).sum())


def _guarded(estimate: Estimate, low: float, high: float, below: int) -> Estimate:
    """`estimate` with the lines below the floor counted, its interval widened to [low, high] when its
    effective sample is thin, and flagged when its value lies outside [low, high]."""
    from dataclasses import replace

    thin = not estimate.effective_n >= MIN_EFFECTIVE
    return replace(estimate, below_floor=below, thin=thin,
                   low=min(low, estimate.value) if thin else estimate.low,
                   high=max(high, estimate.value) if thin else estimate.high,
                   outside_range=not low - 1e-12 <= estimate.value <= high + 1e-12)


def _terms(method: str, actions: np.ndarray, propensities: np.ndarray, rewards: np.ndarray, target: np.ndarray,
           q_hat: np.ndarray | None) -> tuple[np.ndarray, float, np.ndarray]:
    """(per-request terms whose mean is the estimate, or its linearisation for SNIPS; the estimate;
    the importance weights)."""
    rows = np.arange(len(actions))
    w = target[rows, actions] / propensities
    if method == "ips":
        terms = w * rewards
        return terms, float(terms.mean()), w
    if method == "snips":
        value = float((w * rewards).sum() / w.sum()) if w.sum() > 0 else float("nan")
        return w * (rewards - value) / max(w.mean(), 1e-300) + value, value, w
    if method == "dr":
        if q_hat is None:
            raise ValueError("the doubly robust estimate needs the challenger's own estimates (q_hat)")
        q_hat = np.asarray(q_hat, dtype=np.float64)
        if q_hat.shape != target.shape:
            raise ValueError(f"q_hat has shape {q_hat.shape}, the challenger's probabilities {target.shape}")
        terms = (target * q_hat).sum(axis=1) + w * (rewards - q_hat[rows, actions])
        return terms, float(terms.mean()), w
    raise ValueError(f"estimator {method!r}: one of {', '.join(METHODS)}")


METHODS = ("ips", "snips", "dr")


def _normal(method: str, terms: np.ndarray, value: float, effective: float, level: float) -> Estimate:
    n = len(terms)
    half = Z[level] * float(terms.std(ddof=1)) / np.sqrt(n) if n > 1 else float("inf")
    return Estimate(method, value, value - half, value + half, n, effective, level)


def _effective(w: np.ndarray) -> float:
    return float(w.sum() ** 2 / max((w ** 2).sum(), 1e-300))


def observed_mean(rewards, level: float = 0.95, method: str = "logged") -> Estimate:
    """The mean of outcomes as they were served (the logging policy's own value), with its interval."""
    rewards = np.asarray(rewards, dtype=np.float64)
    return _normal(method, rewards, float(rewards.mean()), float(len(rewards)), level)


def estimate(actions, propensities, rewards, target, q_hat=None, level: float = 0.95) -> dict[str, Estimate]:
    """IPS, SNIPS and (with `q_hat`) DR estimates of the challenger's mean outcome.

    actions: (n,) logged model indices; propensities: (n,) π0(a_i|x_i); rewards: (n,) outcomes;
    target: (n, m) π1(·|x_i); q_hat: (n, m) the challenger's estimated outcome per model."""
    actions, propensities, rewards, target = _arrays(actions, propensities, rewards, target)
    keep, below = _floored(propensities)
    actions, propensities, rewards, target = actions[keep], propensities[keep], rewards[keep], target[keep]
    q_hat = None if q_hat is None else np.asarray(q_hat, dtype=np.float64)[keep]
    low, high = float(rewards.min()), float(rewards.max())
    out = {}
    for method in METHODS if q_hat is not None else METHODS[:2]:
        terms, value, w = _terms(method, actions, propensities, rewards, target, q_hat)
        out[method] = _guarded(_normal(method, terms, value, _effective(w), level), low, high, below)
    return out


def difference(actions, propensities, rewards, target, baseline, q_hat=None, q_baseline=None, method: str = "dr",
               level: float = 0.95) -> Estimate:
    """V(challenger) − V(baseline) on the same logged requests, from the paired per-request terms:
    the two estimates share the noise of the logged outcomes, so their difference is known far more
    tightly than two separate intervals suggest. `effective_n` is the challenger's."""
    actions, propensities, rewards, target = _arrays(actions, propensities, rewards, target)
    baseline = np.asarray(baseline, dtype=np.float64)
    _check(actions, propensities, rewards, baseline)
    keep, below = _floored(propensities)
    actions, propensities, rewards, target, baseline = (actions[keep], propensities[keep], rewards[keep],
                                                        target[keep], baseline[keep])
    q_hat = None if q_hat is None else np.asarray(q_hat, dtype=np.float64)[keep]
    q_baseline = None if q_baseline is None else np.asarray(q_baseline, dtype=np.float64)[keep]
    terms, value, w = _terms(method, actions, propensities, rewards, target, q_hat)
    base_terms, base_value, _ = _terms(method, actions, propensities, rewards, baseline, q_baseline)
    span = float(rewards.max() - rewards.min())
    return _guarded(_normal(method, terms - base_terms, value - base_value, _effective(w), level), -span, span, below)
