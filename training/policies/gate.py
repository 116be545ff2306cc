"""The routing policy gate: which policy a bundle recommends, learned or heuristic, and why.

A learned policy is recommended only when it beats the best heuristic on the evaluation's held-out
seeds by more than the seed noise, and does not lose to it on the workloads it was not trained on
(trace replay, bursty arrivals). The noise is the paired one where per-seed values are given (the
std over seeds of the difference between the two policies, which see the same arrivals), else the
larger of the two policies' own std over seeds. Otherwise the best heuristic is recommended: a router service that
asks a bundle for its routing policy never gets one that loses to a one-line rule. Every policy
keeps its numbers, recommended or not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from routeforge.artifacts.deciding.objectives import DEFAULT, HIGHER_IS_BETTER, canonical

# objective → True where higher is better: the runtime's vocabulary (artifacts/deciding/objectives.py), and
# 004's benchmark ratio
OBJECTIVES = {**HIGHER_IS_BETTER, "goodput_ratio": True}
# latencies: a policy that served less never ranks above one that served more on these (the served-only
# ones count only what was served; the offered ones count the rest at a censoring value)
LATENCY = {"e2e_mean_s", "e2e_p50_s", "e2e_p95_s", "e2e_p99_s", "ttft_mean_s", "e2e_mean_offered_s",
           "e2e_p50_offered_s", "e2e_p95_offered_s", "e2e_p99_offered_s"}
SHARES = {"goodput", "quality_goodput", "served_share", "slo_attainment", "qos_mean", "quality_mean", "goodput_ratio"}
SHARE_NOISE_FLOOR = 1e-3  # one request in a thousand
RELATIVE_NOISE_FLOOR = 1e-3  # of the best value: a periodic trace's paired noise came out 4.7e-16


def noise_floor(metric: str, value: float) -> float:
    """The smallest noise a comparison on `metric` is judged against: no gap below it counts."""
    if metric in SHARES:
        return SHARE_NOISE_FLOOR
    return RELATIVE_NOISE_FLOOR * abs(value) if np.isfinite(value) else 0.0


def _served_noise(a: dict, b: dict) -> float:
    """The paired noise of two rows' served shares (floored at one request in a thousand)."""
    x, y = a.get("served_share_by_seed"), b.get("served_share_by_seed")
    if x is None or y is None or len(x) != len(y) or len(x) < 2:
        return SHARE_NOISE_FLOOR
    diff = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    return max(float(diff.std(ddof=1)), SHARE_NOISE_FLOOR) if np.isfinite(diff).all() else SHARE_NOISE_FLOOR


def served_first(rows: list[dict], metric: str, sign: float) -> list[dict]:
    """`rows` best first by `metric`; for a latency, the policies that served the largest share
    (within the paired noise) come first, then the rest by served share: serving fewer requests
    never buys a better rank."""
    by_metric = sorted(rows, key=lambda r: -sign * r[metric])
    if metric not in LATENCY or not all("served_share" in r for r in rows):
        return by_metric
    top = max(rows, key=lambda r: r["served_share"])
    full = [r for r in by_metric if top["served_share"] - r["served_share"] <= _served_noise(top, r)]
    rest = sorted((r for r in by_metric if r not in full), key=lambda r: (-r["served_share"], -sign * r[metric]))
    return full + rest


def _paired_noise(rows: list[dict], a: str, b: str, objective: str) -> float | None:
    """The seed noise of a paired comparison: the std over seeds of a's minus b's per-seed value,
    averaged over the cells where both have per-seed values (`<objective>_by_seed`, same seeds).
    Both policies see the same arrivals per seed, so this is far below either policy's own spread."""
    key, stds = f"{objective}_by_seed", []
    by_cell = {(r["policy"], r["workload"], r["load"]): r for r in rows}
    for (policy, workload, load), row in by_cell.items():
        other = by_cell.get((b, workload, load))
        if policy != a or other is None or key not in row or key not in other:
            continue
        diff = np.asarray(row[key], dtype=float) - np.asarray(other[key], dtype=float)
        if diff.size > 1 and np.isfinite(diff).all():
            stds.append(float(diff.std()))
    return float(np.mean(stds)) if stds else None


def _summary(rows: list[dict], policy: str, objective: str, cells: set) -> dict[str, Any] | None:
    sel = [r for r in rows if r["policy"] == policy and (r["workload"], r["load"]) in cells
           and not np.isnan(r[objective])]
    if not sel:
        return None
    return {"mean": float(np.mean([r[objective] for r in sel])),
            "seed_std": float(np.mean([r.get(f"{objective}_std", 0.0) for r in sel])),
            "cells": {f"{r['workload']}@{r['load']:g}": float(r[objective]) for r in sel}}


def recommend(rows: list[dict], learned: list[str], heuristics: list[str], objective: str = "qos_mean",
              trained_on: tuple[str, float] | None = None) -> dict[str, Any]:
    """`rows`: the evaluation's rows (policy, workload, load, `objective` and `<objective>_std` over
    held-out seeds). `trained_on`: the (workload, load) the learned policies trained on; the other
    workloads are the unseen ones. Returns {recommended, kind, objective, reason, margin, noise,
    policies: {name: {mean, seed_std, cells, unseen_mean}}}."""
    if objective not in OBJECTIVES:
        raise ValueError(f"routing gate objective {objective!r}: expected one of {sorted(OBJECTIVES)}")
    sign = 1.0 if OBJECTIVES[objective] else -1.0
    cells = {(r["workload"], r["load"]) for r in rows}
    unseen = {c for c in cells if trained_on is None or c[0] != trained_on[0]}
    table: dict[str, dict[str, Any]] = {}
    for name in [*heuristics, *learned]:
        summary = _summary(rows, name, objective, cells)
        if summary is None:
            continue
        held_out = _summary(rows, name, objective, unseen)
        summary["unseen_mean"] = held_out["mean"] if held_out else None
        table[name] = summary
    if objective in LATENCY:  # served share first: a policy that serves less cannot win on latency
        for name, summary in table.items():
            share = _summary(rows, name, "served_share", cells) if rows and "served_share" in rows[0] else None
            summary["served_share"] = share["mean"] if share else None
        top = max((t["served_share"] for t in table.values() if t["served_share"] is not None), default=None)
        if top is not None:
            for summary in table.values():
                served = summary["served_share"]
                summary["serves_less"] = served is not None and top - served > SHARE_NOISE_FLOOR
    candidates = [h for h in heuristics if h in table]
    scored = [p for p in learned if p in table]

    def rank_key(name: str) -> tuple[bool, float]:
        return (not table[name].get("serves_less", False), sign * table[name]["mean"])

    out = {"objective": objective, "higher_is_better": OBJECTIVES[objective],
           "unseen_workloads": sorted({c[0] for c in unseen}), "policies": table}
    if not candidates:
        if not scored:
            raise ValueError(f"routing gate: no policy has a finite {objective}")
        best = max(scored, key=rank_key)
        return {**out, "best_heuristic": None, "recommended": best, "kind": "learned", "margin": None,
                "noise": None, "reason": f"no heuristic was evaluated (training.routing_evaluation.policies); "
                                         f"{best} is the best learned policy on {objective}"}
    best_h = max(candidates, key=rank_key)  # first listed wins ties
    out["best_heuristic"] = best_h
    if not scored:
        return {**out, "recommended": best_h, "kind": "heuristic", "margin": None, "noise": None,
                "reason": f"no learned policy was evaluated; {best_h} is the best heuristic on {objective}"}
    best_l = max(scored, key=rank_key)
    margin = sign * (table[best_l]["mean"] - table[best_h]["mean"])
    paired = _paired_noise(rows, best_l, best_h, objective)
    noise = paired if paired is not None else max(table[best_l]["seed_std"], table[best_h]["seed_std"])
    noise = max(noise, noise_floor(objective, table[best_h]["mean"]))
    if table[best_l].get("serves_less") and not table[best_h].get("serves_less"):
        margin = min(margin, 0.0)  # faster by serving fewer: not a win
    l_unseen, h_unseen = table[best_l]["unseen_mean"], table[best_h]["unseen_mean"]
    holds_unseen = l_unseen is None or h_unseen is None or sign * (l_unseen - h_unseen) >= 0
    fmt = f"{objective} {{:.4g}}"
    versus = (f"{best_l} {fmt.format(table[best_l]['mean'])} vs {best_h} {fmt.format(table[best_h]['mean'])} "
              f"(margin {margin:+.4g}, seed noise {noise:.3g})")
    if margin > noise and holds_unseen:
        return {**out, "recommended": best_l, "kind": "learned", "margin": margin, "noise": noise,
                "reason": f"{versus}: the learned policy wins by more than the seed noise and holds on the "
                          f"unseen workloads"}
    why = ("it loses" if margin < 0 else "it ties" if margin == 0 else "its lead is within the seed noise"
           if margin <= noise
           else f"it loses on the unseen workloads ({l_unseen:.4g} vs {h_unseen:.4g})")
    return {**out, "recommended": best_h, "kind": "heuristic", "margin": margin, "noise": noise,
            "reason": f"{versus}: {why}, so the best heuristic is recommended"}


DEFAULT_OBJECTIVE = DEFAULT
DIRECTION = OBJECTIVES


def rank_policies(rows: list[dict], objective: str, recommended: str | None = None) -> dict[str, Any]:
    """Every policy of one evaluation (`rows`: one per policy with `<objective>` and
    `<objective>_by_seed` over the same windows) ranked by `objective`, best first, and the verdict
    for that traffic: the best policy, its lead over the runner-up against the paired-seed noise
    (the std over windows of their difference: both saw the same arrivals), and whether
    `recommended` (the bundle's choice) holds: it is the best, or within that noise of it.

    A policy without a finite value (an SLO metric with no SLO given, quality without labels) is
    left out of the ranking, and an objective no policy has a value for is an error naming it."""
    metric = canonical(objective)
    sign = 1.0 if DIRECTION[metric] else -1.0
    scored = [r for r in rows if r.get(metric) is not None and not np.isnan(r[metric])]
    if not scored:
        raise ValueError(f"objective {objective!r}: no policy has a value for {metric} on this traffic "
                         "(an SLO metric needs --slo-e2e / --slo-tpot; quality needs labels)")
    ranked = served_first(scored, metric, sign)
    best = ranked[0]

    def gap_and_noise(other: dict) -> tuple[float, float | None]:
        """How much worse `other` is than the best (≥ 0, in the metric's units) and the paired noise."""
        gap = sign * (best[metric] - other[metric])
        a, b = best.get(f"{metric}_by_seed"), other.get(f"{metric}_by_seed")
        if a is None or b is None or len(a) != len(b) or len(a) < 2:
            return gap, None
        diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
        if not np.isfinite(diff).all():
            return gap, None
        return gap, max(float(diff.std(ddof=1)), noise_floor(metric, float(best[metric])))

    # "serves less" against the policy that served the most, as `served_first` groups them
    top = max(ranked, key=lambda r: r.get("served_share", 0.0))
    table = []
    for i, r in enumerate(ranked):
        gap, noise = gap_and_noise(r) if i else (0.0, None)
        serves_less = (metric in LATENCY and "served_share" in r and "served_share" in top
                       and top["served_share"] - r["served_share"] > _served_noise(top, r))
        finite = np.isfinite(gap)
        table.append({"rank": i + 1, "policy": r["policy"], "value": float(r[metric]),
                      "std": float(r.get(f"{metric}_std", float("nan"))), "gap_to_best": gap,
                      "gap_relative": gap / abs(best[metric]) if best[metric] and finite else None,
                      "paired_noise": noise,
                      "within_noise": bool(i == 0 or (not serves_less and noise is not None and gap <= noise)),
                      "served": r.get("served"), "served_share": r.get("served_share"),
                      "serves_less": bool(serves_less)})
    runner_up = table[1] if len(table) > 1 else None
    out: dict[str, Any] = {"objective": metric, "higher_is_better": DIRECTION[metric], "best": best["policy"],
                           "ranking": table, "runner_up": runner_up["policy"] if runner_up else None,
                           "clear_winner": bool(runner_up is None or not runner_up["within_noise"])}
    lead = (f"; ahead of {runner_up['policy']} by {runner_up['gap_to_best']:.4g}"
            + (f" (paired noise {runner_up['paired_noise']:.3g})" if runner_up["paired_noise"] is not None else "")
            if runner_up else "")
    served = f", {best['served_share']:.1%} of offered requests served" if "served_share" in best else ""
    out["verdict"] = f"deploy {best['policy']}: best {metric} {best[metric]:.4g} on this traffic{served}{lead}"
    if recommended is not None:
        mine = next((t for t in table if t["policy"] == recommended), None)
        out["recommended"] = recommended
        out["recommendation_holds"] = bool(mine is not None and mine["within_noise"])
        if mine is None:
            out["verdict"] += f"; the bundle's recommendation {recommended} has no {metric} here"
        elif mine["rank"] == 1:
            out["verdict"] += f"; the bundle's recommendation {recommended} holds"
        else:
            rel = f" ({mine['gap_relative']:+.1%})" if mine["gap_relative"] is not None else ""
            out["verdict"] += (f"; the bundle's recommendation {recommended} ranks {mine['rank']}, "
                               f"{mine['gap_to_best']:.4g} worse{rel}: "
                               + ("within the paired noise, so it holds" if mine["within_noise"]
                                  else "beyond the paired noise, so it does not hold on this traffic"))
            if mine["serves_less"]:
                out["verdict"] += (f" (it served {mine['served_share']:.1%} of offered requests, {best['policy']} "
                                   f"{best['served_share']:.1%}: a latency ranks the policies that serve the most "
                                   "first)")
    return out
