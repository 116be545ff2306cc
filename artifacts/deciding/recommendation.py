"""The bundle's recommended policy for the traffic a router sees now (runtime side).

The training run records, per evaluated traffic, its statistics and the best policy per objective
(`training.policies.recommendation`). `recommend` picks the entry nearest to the given statistics:
each statistic on a log scale (lengths and rates span orders of magnitude), divided by its spread
over the table
(at least `MIN_SPREAD`), and the entries compared by Euclidean distance over the statistics both sides have.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# prefix_sharing: the share of prompt blocks already sent earlier in the window (0 without block
# hashes): where it is high, a cache-aware router wins; where 0, it may lose (docs/results.md)
STAT_KEYS = ("arrival_cv", "prompt_mean", "output_mean", "load", "prefix_sharing")
MIN_SPREAD = 0.1  # on the log1p scale: about 10%


def _log(value: float) -> float:
    return math.log1p(max(0.0, float(value)))


def recommend(table: Sequence[Mapping[str, Any]], stats: Mapping[str, float], objective: str = "goodput") -> dict:
    """{policy, workload, load, distance, used}: the policy recorded for `objective` at the entry
    of `table` nearest to `stats` (any of `STAT_KEYS`; at least one)."""
    entries = [e for e in table if objective in e.get("best", {})]
    if not entries:
        objectives = sorted({o for e in table for o in e.get("best", {})})
        raise KeyError(f"no recommendation for objective {objective!r} (the bundle has {objectives or 'none'})")
    used = [k for k in STAT_KEYS if k in stats and all(k in e["stats"] for e in entries)]
    if not used:
        raise ValueError(f"traffic statistics: give at least one of {list(STAT_KEYS)} (got {sorted(stats)})")
    for key in used:
        value = stats[key]
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"traffic statistics: {key} must be a finite number ≥ 0, got {value!r}")
    spread = {}
    for key in used:
        values = [_log(e["stats"][key]) for e in entries]
        mean = sum(values) / len(values)
        # a floor: a statistic the table barely varies (one workload's prompts) must not dominate
        spread[key] = max(MIN_SPREAD, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))

    def distance(entry) -> float:
        return math.sqrt(sum(((_log(stats[k]) - _log(entry["stats"][k])) / spread[k]) ** 2 for k in used))

    nearest = min(entries, key=distance)
    return {"policy": nearest["best"][objective], "workload": nearest.get("workload"),
            "load": nearest["stats"].get("load"), "distance": distance(nearest), "used": used}
