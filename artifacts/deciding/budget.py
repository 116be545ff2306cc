"""Targets an operator sets instead of λ: a cost per 1,000 requests, a most share of traffic per
model, a quality floor.

The router's calibration table (`training.predictors.budget_calibration`, in router.json as
`budget`) lists, for a grid of λ, the quality, cost per 1,000 requests and shares the router gave on
prompts it was not fitted on. `choose_setting` picks what meets every target given, among the rows
and the mixtures of two rows (`Setting`): the best quality within the budget and the share caps;
with only a quality floor, the cheapest that clears it. It comes back with its figures and
intervals, so the caller can say what to expect. `refit` recomputes the predicted figures on
another prompt mix (a traffic log's prompts): shares and costs move with the mix; quality there is
the router's own estimate, labels being absent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class TargetUnreachable(ValueError):
    """No row of the calibration table meets the targets; the message names the nearest one."""


@dataclass(frozen=True)
class Setting:
    """What the targets pick, and what the table says to expect from it: one λ, or two λ mixed (a
    share `weight` of the prompts, chosen by a hash of their text, routed with `lam`, the rest with
    `lam_other`). A router's cost falls in steps as λ grows (a KNN's estimates move many prompts at
    once), so a budget between two steps is met only by mixing them; quality, cost and shares of a
    mixture are the same mixture of the two rows'."""

    lam: float
    quality: float | None
    cost_per_1k: float | None
    share: dict[str, float]
    quality_interval: list[float] | None = None
    cost_per_1k_interval: list[float] | None = None
    share_interval: dict[str, list[float]] = field(default_factory=dict)
    targets: dict[str, Any] = field(default_factory=dict)
    lam_other: float | None = None
    weight: float = 1.0  # the share of prompts routed with `lam`

    def lams(self, prompts: list[str]) -> np.ndarray:
        """Each prompt's λ: `lam`, or for a mixture `lam` where the prompt's hash falls below `weight`
        (the same prompt always gets the same λ), else `lam_other`."""
        if self.lam_other is None or self.weight >= 1.0:
            return np.full(len(prompts), self.lam)
        draws = np.array([int.from_bytes(hashlib.sha256(str(p).encode("utf-8")).digest()[:8], "big") / 2.0**64
                          for p in prompts])
        return np.where(draws < self.weight, self.lam, self.lam_other)

    def pick(self, prediction, prompts: list[str]) -> np.ndarray:
        """Each prompt's model index in `prediction` (a `RouterPrediction` of `prompts`), routed with
        its λ (`lams`)."""
        return prediction.best_index(self.lams(prompts))

    def describe(self) -> str:
        lam = (f"λ = {self.lam:.6g}" if self.lam_other is None or self.weight >= 1.0 else
               f"λ = {self.lam:.6g} for {self.weight:.1%} of prompts, {self.lam_other:.6g} for the rest")
        parts = [lam]
        if self.quality is not None:
            parts.append(f"expected quality {self.quality:.4f}" + _interval(self.quality_interval, ".4f"))
        if self.cost_per_1k is not None:
            parts.append(f"cost per 1,000 requests {self.cost_per_1k:.4g}"
                         + _interval(self.cost_per_1k_interval, ".4g"))
        shares = ", ".join(f"{m} {s:.1%}" for m, s in sorted(self.share.items(), key=lambda kv: -kv[1]) if s > 0)
        return "; ".join(parts) + f"; shares: {shares}"


def _interval(bounds: list[float] | None, fmt: str) -> str:
    return f" [{bounds[0]:{fmt}}, {bounds[1]:{fmt}}]" if bounds else ""


def _mix(a: dict[str, Any], b: dict[str, Any], w: float, key: str):
    """Row `a` weighted w and row `b` weighted 1 − w: a number, an interval or a {model: number}."""
    x, y = a.get(key), b.get(key)
    if x is None or y is None:
        return None
    if isinstance(x, dict):
        return {k: _mix(x, y, w, k) for k in x}
    if isinstance(x, list):
        return [w * u + (1 - w) * v for u, v in zip(x, y)]
    return w * x + (1 - w) * y


def choose_setting(table: dict[str, Any], *, budget_per_1k: float | None = None,
                   max_share: dict[str, float] | None = None, min_quality: float | None = None) -> Setting:
    """The setting for the targets (see the module docstring and `Setting`): among single rows and
    mixtures of two, the best quality that meets every target, or with only a quality floor the
    cheapest; `TargetUnreachable` names the nearest row when none does."""
    rows = table.get("rows") or []
    if not rows:
        raise TargetUnreachable("the calibration table is empty")
    targets = {k: v for k, v in (("budget_per_1k", budget_per_1k), ("max_share", max_share),
                                 ("min_quality", min_quality)) if v is not None}
    models = set(rows[0]["share"])
    unknown = sorted(set(max_share or {}) - models)
    if unknown:
        raise ValueError(f"max_share names {unknown}, not models of this router ({sorted(models)})")
    if budget_per_1k is not None and rows[0].get("cost_per_1k") is None:
        raise TargetUnreachable("the router's training data had no costs: a budget cannot be met by the table")
    if min_quality is not None and rows[0].get("quality") is None:
        raise TargetUnreachable("the router's training data had no quality labels: a floor cannot be met")

    # each target as (value of a row, limit, what a row that misses it does): met where value ≤ limit
    checks = []
    if budget_per_1k is not None:
        checks.append((lambda r: r["cost_per_1k"], budget_per_1k,
                       lambda v: f"costs {v:.4g} per 1,000 requests (> {budget_per_1k:g})"))
    for model, cap in (max_share or {}).items():
        checks.append((lambda r, m=model: r["share"][m], cap,
                       lambda v, m=model, c=cap: f"gives {m} {v:.1%} (> {c:.1%})"))
    if min_quality is not None:
        checks.append((lambda r: -r["quality"], -min_quality,
                       lambda v: f"reaches quality {-v:.4f} (< {min_quality:g})"))

    def misses(row) -> list[str]:
        return [say(value(row)) for value, limit, say in checks if value(row) > limit + 1e-12]

    cheapest_first = min_quality is not None and budget_per_1k is None and not max_share
    cost = lambda r: r["cost_per_1k"] if r.get("cost_per_1k") is not None else 0.0  # noqa: E731
    quality = lambda r: r["quality"] if r.get("quality") is not None else 0.0  # noqa: E731

    def score(a, b, w) -> tuple[float, float]:
        q, c = w * quality(a) + (1 - w) * quality(b), w * cost(a) + (1 - w) * cost(b)
        return (-c, q) if cheapest_first else (q, -c)

    best = None  # (score, row a, row b, weight of a)
    for i, a in enumerate(rows):
        for b in rows[i:]:
            # weights w in [0, 1] where every target holds for w·a + (1 − w)·b: an interval
            lo, hi = 0.0, 1.0
            for value, limit, _ in checks:
                slope, rest = value(a) - value(b), limit - value(b)  # w·slope ≤ rest
                if abs(slope) < 1e-15:
                    if rest < -1e-12:
                        lo, hi = 1.0, 0.0
                elif slope > 0:
                    hi = min(hi, rest / slope)
                else:
                    lo = max(lo, rest / slope)
            if lo > hi + 1e-12:
                continue
            for w in {min(max(lo, 0.0), 1.0), min(max(hi, 0.0), 1.0)}:
                candidate = (score(a, b, w), a, b, w)
                if best is None or candidate[0] > best[0]:
                    best = candidate
    if best is None:
        nearest = min(rows, key=lambda r: len(misses(r)))
        raise TargetUnreachable(f"no setting of the router meets {targets}: the nearest (λ = {nearest['lam']:.6g}) "
                                f"{'; '.join(misses(nearest))}")
    _, a, b, w = best
    if w <= 1e-9:  # all of b: b alone
        a, w = b, 1.0
    if w >= 1.0 - 1e-9 or a is b:  # one row: its own figures (a mixed with itself at weight 1)
        b, w = a, 1.0
    return Setting(float(a["lam"]), _mix(a, b, w, "quality"), _mix(a, b, w, "cost_per_1k"), _mix(a, b, w, "share"),
                   _mix(a, b, w, "quality_interval"), _mix(a, b, w, "cost_per_1k_interval"),
                   _mix(a, b, w, "share_interval") or {}, targets, None if a is b else float(b["lam"]), float(w))


def refit(table: dict[str, Any], prediction, source: str) -> dict[str, Any]:
    """The table's λ grid with each row's figures predicted on other prompts (`prediction`: a
    `RouterPrediction` of them): shares and cost per 1,000 from the router's picks and predicted
    costs, quality from its estimates (no labels). No intervals: the figures are the router's own."""
    n = len(prediction.quality)
    rows = []
    for row in table.get("rows") or []:
        picks = prediction.best_index(float(row["lam"]))
        cost = np.asarray(prediction.cost, dtype=np.float64)[np.arange(n), picks]
        quality = np.asarray(prediction.quality, dtype=np.float64)[np.arange(n), picks]
        rows.append({"lam": float(row["lam"]), "quality": float(np.mean(quality)),
                     "cost_per_1k": float(np.mean(cost) * 1000.0) if np.isfinite(cost).all() else None,
                     "share": {m: float(np.mean(picks == j)) for j, m in enumerate(prediction.models)}})
    return {**table, "source": source, "prompts": n, "rows": rows, "interval": None}
