"""Arrival processes for load generation: when each request of a sweep is sent.

Poisson (exponential gaps), gamma-bursty (gamma gaps with a coefficient of variation above 1: the
same mean rate arriving in clumps, as GuideLLM and `vllm bench serve --burstiness` do) and constant
(evenly spaced). Seeded, so a sweep can be replayed exactly, e.g. by the cluster simulator.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

ArrivalKind = Literal["poisson", "gamma", "constant"]


def arrival_times(kind: ArrivalKind, rate: float, n: int, seed: int = 0, cv: float = 2.0) -> np.ndarray:
    """Send offsets in seconds from the start, for `n` requests at a mean of `rate` per second.

    `cv` is the coefficient of variation of the gamma gaps (1 would be Poisson; 2 is bursty)."""
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    rng = np.random.default_rng(seed)
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    elif kind == "gamma":
        if cv <= 0:
            raise ValueError(f"cv must be positive, got {cv}")
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    elif kind == "constant":
        gaps = np.full(n, 1.0 / rate)
    else:
        raise ValueError(f"unknown arrival process {kind!r} (poisson, gamma, constant)")
    times = np.cumsum(gaps)
    return times - times[0] if n else times  # the first request goes at once
