"""Arrival processes: when each request arrives, one definition for a QPS sweep (`profiling.sweep`),
the simulator's workloads and the routing evaluation.

Each process registers in `core.kinds.WORKLOADS` with `arrivals=True`:
`fn(n, rate, seed, **settings) -> offsets` in seconds from the first request (which goes at once),
seeded so a sweep or an episode can be replayed exactly. The workloads read from data (a trace, the
fleet's traffic logs) register there too, from `training/policies/workload_kinds.py`.

- `poisson`: exponential gaps;
- `gamma`: gamma gaps with a coefficient of variation `cv` above 1, the same mean rate arriving in
  clumps (as GuideLLM and `vllm bench serve --burstiness` do);
- `constant`: evenly spaced;
- `square_wave`: Poisson whose rate is `high` for the first half of every period and `low` after;
- `switched_poisson`: 004's Markov-modulated Poisson process, given by its generator D0 and rate
  matrix D1; at a mean `rate` without them, its two phases at 1.8× and 0.1× the rate.
"""

from __future__ import annotations

import numpy as np
from routeforge.core.kinds import WORKLOADS


def arrival_offsets(kind: str, n: int, rate: float = 1.0, seed: int = 0, **settings) -> np.ndarray:
    """Send offsets in seconds for `n` requests at a mean of `rate` per second, by the registered
    arrival process `kind` (its own settings: `cv`, `low`/`high`/`period_s`, `d0`/`d1`)."""
    entry = WORKLOADS.entry(kind)
    if not entry.metadata.get("arrivals"):
        processes = [e.name for e in WORKLOADS.entries() if e.metadata.get("arrivals")]
        raise ValueError(f"{kind!r} is a workload read from data, not an arrival process ({', '.join(processes)})")
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    return entry.value(n, rate, seed, **settings)


def arrival_times(kind: str, rate: float, n: int, seed: int = 0, cv: float = 2.0) -> np.ndarray:
    """A sweep's send offsets (`profiling.sweep.arrival`); `cv` for the gamma process."""
    return arrival_offsets(kind, n, rate, seed, cv=cv)


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    times = np.cumsum(gaps)
    return times - times[0] if len(times) else times  # the first request goes at once


@WORKLOADS.register("poisson", arrivals=True)
def poisson(n: int, rate: float, seed: int = 0, **_) -> np.ndarray:
    return _from_gaps(np.random.default_rng(seed).exponential(1.0 / rate, size=n))


@WORKLOADS.register("gamma", arrivals=True)
def gamma(n: int, rate: float, seed: int = 0, cv: float = 2.0, **_) -> np.ndarray:
    """`cv`: the coefficient of variation of the gaps (1 would be Poisson; 2 is bursty)."""
    if cv <= 0:
        raise ValueError(f"cv must be positive, got {cv}")
    shape = 1.0 / cv**2
    return _from_gaps(np.random.default_rng(seed).gamma(shape, 1.0 / (rate * shape), size=n))


@WORKLOADS.register("constant", arrivals=True)
def constant(n: int, rate: float, seed: int = 0, **_) -> np.ndarray:
    return _from_gaps(np.full(n, 1.0 / rate))


@WORKLOADS.register("square_wave", arrivals=True)
def square_wave_process(n: int, rate: float, seed: int = 0, low: float | None = None, high: float | None = None,
                        period_s: float = 60.0, **_) -> np.ndarray:
    """Half the mean rate and 1.5× it by default."""
    return square_wave(rate / 2 if low is None else low, rate * 1.5 if high is None else high, period_s, n, seed)


@WORKLOADS.register("switched_poisson", arrivals=True)
def switched_poisson_process(n: int, rate: float, seed: int = 0, d0=None, d1=None, **_) -> np.ndarray:
    """With `d0`/`d1`, that process (004's defaults are `SPP_D0`, `SPP_D1`); without, its two rates
    mapped to 1.8× and 0.1× the mean rate, switching at 0.036 per second."""
    if d0 is None or d1 is None:
        d1 = np.diag([1.8 * rate, 0.1 * rate])
        d0 = np.array([[-(1.8 * rate + 0.036), 0.036], [0.036, -(0.1 * rate + 0.036)]])
    return switched_poisson(n, d0, d1, seed)


# 004 §5: two phases, 180 req/s and 10 req/s on average, switching rarely
SPP_D0 = [[-180.036, 0.036], [0.0002, -10.002]]
SPP_D1 = [[180.0, 0.0], [0.0, 10.0]]


def square_wave(low: float, high: float, period_s: float, n: int, seed: int = 0) -> np.ndarray:
    """Poisson arrivals whose rate is `high` for the first half of every period and `low` after."""
    if min(low, high) <= 0 or period_s <= 0:
        raise ValueError("square_wave: rates and period must be positive")
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    while len(out) < n:
        rate = high if (t % period_s) < period_s / 2 else low
        t += rng.exponential(1.0 / rate)
        out.append(t)
    times = np.array(out)
    return times - times[0]


def switched_poisson(n: int, d0=SPP_D0, d1=SPP_D1, seed: int = 0, phase0: int = 0,
                     with_phases: bool = False,
                     until: float | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Markov-modulated Poisson arrivals: in phase i arrivals come at D1[i][i], and the phase
    switches to j at rate D0[i][j] (004's switched Poisson process), starting in `phase0`.
    `with_phases` also returns the phase each arrival came in (004 reports per phase). `until`
    stops early, before the first arrival at or after `until` seconds from the first one: the
    arrivals returned are exactly those of the full draw that come before it, without paying for
    the rest (a truncated episode uses a fraction of the n it must allow for)."""
    d0, d1 = np.asarray(d0, dtype=float), np.asarray(d1, dtype=float)
    if d0.shape != d1.shape or d0.shape[0] != d0.shape[1]:
        raise ValueError("switched_poisson: D0 and D1 must be square matrices of one shape")
    # 004's second row sums to -0.0018, not 0: a rounding of the paper's; allow 0.1% of the row's rate
    if not np.allclose((d0 + d1).sum(axis=1), 0, atol=1e-3 * np.abs(np.diag(d0)).max()):
        raise ValueError("switched_poisson: the rows of D0 + D1 must sum to zero (a generator)")
    # Each event costs one exponential and one uniform draw, exactly the draws `rng.choice(p=...)`
    # makes (a uniform searched in the cumulative p), so the stream equals the plain loop's, at a
    # tenth of its cost (an episode of 004's training draws ~23,000 arrivals at every reset).
    m = len(d0)
    scales, cdfs = [], []
    for phase in range(m):
        events = np.concatenate([d1[phase], np.where(np.arange(m) == phase, 0.0, d0[phase])])
        cdf = (events / events.sum()).cumsum()
        scales.append(1.0 / events.sum())
        cdfs.append(cdf / cdf[-1])
    rng = np.random.default_rng(seed)
    exponential, uniform = rng.exponential, rng.random
    times, phases = np.empty(n), np.empty(n, dtype=np.int64)
    phase, t, count = phase0, 0.0, 0
    while count < n:
        t += exponential(scales[phase])
        k = int(cdfs[phase].searchsorted(uniform(), side="right"))
        if k < m:  # an arrival (D1 is diagonal in 004: the phase stays)
            if until is not None and count and t - times[0] >= until:
                break
            times[count], phases[count] = t, phase
            count += 1
            phase = k
        else:
            phase = k - m
    times, phases = times[:count], phases[:count]
    times -= times[0]
    return (times, phases) if with_phases else times
