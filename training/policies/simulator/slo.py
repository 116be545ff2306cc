"""What a request must meet to count as served on time, fixed before the router chooses.

Why a class of its own: the old default judged a request by `scale` × its E2E alone on *the instance
it was sent to*, so a router bought goodput by sending work to slow instances (a 70B instance gave
a looser SLO than an 8B one). The source papers fix the requirement per request (004: P98 ≤ 300 ms;
000: completed within L), whatever instance serves it. So:

- absolute bounds, a service class: TTFT ≤ `ttft_s`, TPOT ≤ `tpot_s`, E2E ≤ `e2e_s` (any of them);
- `reference="fastest"`: E2E ≤ `scale` × the request's E2E alone on the idle instance that would
  serve it fastest, from its own token counts (the same bound wherever it is sent);
- `reference="serving"`: the old rule, kept as a named option only (`instance_relative`).

A request that is not served misses every bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Reference = Literal["fastest", "serving"]
DEFAULT_SCALE = 5.0  # × the request's unloaded E2E


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    scale: float | None = None  # E2E within scale × the request's unloaded E2E on `reference`
    reference: Reference = "fastest"

    def __post_init__(self):
        for name in ("ttft_s", "tpot_s", "e2e_s", "scale"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0):
                raise ValueError(f"slo.{name}: a positive finite number is expected, got {value!r}")
        if self.reference not in ("fastest", "serving"):
            raise ValueError(f"slo.reference: 'fastest' or 'serving', got {self.reference!r}")

    @property
    def empty(self) -> bool:
        return self.ttft_s is None and self.tpot_s is None and self.e2e_s is None and self.scale is None

    @property
    def absolute(self) -> bool:
        """Whether any bound is a fixed number of seconds (then `slo_attainment` is reported)."""
        return self.ttft_s is not None or self.tpot_s is not None or self.e2e_s is not None

    def describe(self) -> str:
        """The SLO in words, for every table and report that ranks by it."""
        parts = [f"{label} ≤ {value:g} s" for label, value in
                 (("TTFT", self.ttft_s), ("TPOT", self.tpot_s), ("E2E", self.e2e_s)) if value is not None]
        if self.scale is not None and self.e2e_s is None:
            where = ("the idle instance that would serve it fastest" if self.reference == "fastest"
                     else "the idle instance it was sent to (instance-relative)")
            parts.append(f"E2E ≤ {self.scale:g} × the request's E2E alone on {where}")
        return " and ".join(parts) or "none"

    def e2e_bounds(self, outcomes: Sequence, profiles=None, models: Sequence[int] | None = None) -> np.ndarray:
        """Each request's E2E bound in seconds (inf: none; NaN: relative to an instance it never reached)."""
        n = len(outcomes)
        if self.e2e_s is not None:
            return np.full(n, self.e2e_s)
        if self.scale is None:
            return np.full(n, np.inf)
        if profiles is None:
            raise ValueError(f"SLO '{self.describe()}' needs the instances' profiles")
        models = list(models) if models is not None else [0] * len(profiles)
        if self.reference == "serving":
            def served_tokens(o) -> float:
                return o.job.output_tokens if o.job is not None else float(o.request.output_tokens[0])

            return np.array([self.scale * profiles[o.instance].unloaded_e2e(o.request.prompt_tokens, served_tokens(o))
                             if o.instance >= 0 else np.nan for o in outcomes], dtype=float)
        return np.array([self.scale * min(p.unloaded_e2e(o.request.prompt_tokens, float(o.request.output_tokens[m]))
                                          for p, m in zip(profiles, models)) for o in outcomes], dtype=float)

    def met(self, outcomes: Sequence, profiles=None, models: Sequence[int] | None = None,
            e2e: np.ndarray | None = None) -> np.ndarray:
        """Per request: served, and within every bound (TPOT is not judged on one-token outputs).
        `e2e`: the bounds `e2e_bounds` gave for these outcomes, when the caller has them already."""
        e2e = self.e2e_bounds(outcomes, profiles, models) if e2e is None else e2e
        out = np.zeros(len(outcomes), dtype=bool)
        for k, o in enumerate(outcomes):
            if not o.served:
                continue
            tpot = o.tpot
            out[k] = not np.isnan(e2e[k]) and o.e2e <= e2e[k] \
                and (self.ttft_s is None or o.ttft <= self.ttft_s) \
                and (self.tpot_s is None or np.isnan(tpot) or tpot <= self.tpot_s)
        return out


def slo_of(e2e_s: float | None = None, tpot_s: float | None = None, ttft_s: float | None = None,
           scale: float = DEFAULT_SCALE, reference: Reference = "fastest") -> Slo:
    """The SLO a fleet file (`routing_evaluation.slo_*`) or a command's flags name: the absolute
    bounds given, and without an absolute E2E bound, E2E within `scale` × the request's unloaded
    E2E on `reference`."""
    return Slo(ttft_s=ttft_s, tpot_s=tpot_s, e2e_s=e2e_s, scale=None if e2e_s is not None else scale,
               reference=reference)


def settings_slo(settings) -> Slo:
    """The SLO of a `RoutingEvaluationSettings`."""
    return slo_of(settings.slo_e2e_s, settings.slo_tpot_s, settings.slo_ttft_s, settings.slo_scale,
                  settings.slo_reference)


def legacy_slo(e2e_s: float | None, tpot_s: float | None, scale: float, with_profiles: bool) -> Slo | None:
    """The SLO the older arguments (absolute E2E/TPOT, else `scale` × the serving instance's unloaded
    E2E when profiles are given) meant, or None where they set none."""
    if e2e_s is not None or not with_profiles:
        slo = Slo(tpot_s=tpot_s, e2e_s=e2e_s)
        return None if slo.empty else slo
    return Slo(tpot_s=tpot_s, scale=scale, reference="serving")
