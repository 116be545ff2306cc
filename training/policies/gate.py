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

# objective → True where higher is better
OBJECTIVES = {"qos_mean": True, "slo_attainment": True, "quality_mean": True, "e2e_mean_s": False,
              "e2e_p99_s": False, "ttft_mean_s": False, "goodput_ratio": True}  # goodput: 004's benchmark


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
           and np.isfinite(r[objective])]
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
    candidates = [h for h in heuristics if h in table]
    scored = [p for p in learned if p in table]
    out = {"objective": objective, "higher_is_better": OBJECTIVES[objective],
           "unseen_workloads": sorted({c[0] for c in unseen}), "policies": table}
    if not candidates:
        if not scored:
            raise ValueError(f"routing gate: no policy has a finite {objective}")
        best = max(scored, key=lambda p: sign * table[p]["mean"])
        return {**out, "best_heuristic": None, "recommended": best, "kind": "learned", "margin": None,
                "noise": None, "reason": f"no heuristic was evaluated (training.routing_evaluation.policies); "
                                         f"{best} is the best learned policy on {objective}"}
    best_h = max(candidates, key=lambda h: sign * table[h]["mean"])  # first listed wins ties
    out["best_heuristic"] = best_h
    if not scored:
        return {**out, "recommended": best_h, "kind": "heuristic", "margin": None, "noise": None,
                "reason": f"no learned policy was evaluated; {best_h} is the best heuristic on {objective}"}
    best_l = max(scored, key=lambda p: sign * table[p]["mean"])
    margin = sign * (table[best_l]["mean"] - table[best_h]["mean"])
    paired = _paired_noise(rows, best_l, best_h, objective)
    noise = paired if paired is not None else max(table[best_l]["seed_std"], table[best_h]["seed_std"])
    l_unseen, h_unseen = table[best_l]["unseen_mean"], table[best_h]["unseen_mean"]
    holds_unseen = l_unseen is None or h_unseen is None or sign * (l_unseen - h_unseen) >= 0
    fmt = f"{objective} {{:.4g}}"
    versus = (f"{best_l} {fmt.format(table[best_l]['mean'])} vs {best_h} {fmt.format(table[best_h]['mean'])} "
              f"(margin {margin:+.4g}, seed noise {noise:.3g})")
    if margin > noise and holds_unseen:
        return {**out, "recommended": best_l, "kind": "learned", "margin": margin, "noise": noise,
                "reason": f"{versus}: the learned policy wins by more than the seed noise and holds on the "
                          f"unseen workloads"}
    why = ("it loses" if margin <= 0 else "its lead is within the seed noise" if margin <= noise
           else f"it loses on the unseen workloads ({l_unseen:.4g} vs {h_unseen:.4g})")
    return {**out, "recommended": best_h, "kind": "heuristic", "margin": margin, "noise": noise,
            "reason": f"{versus}: {why}, so the best heuristic is recommended"}


# `--objective` names (what a person types) → the metric it ranks by
OBJECTIVE_NAMES = {"e2e_mean": "e2e_mean_s", "e2e_p95": "e2e_p95_s", "e2e_p99": "e2e_p99_s",
                   "ttft_mean": "ttft_mean_s", "slo": "slo_attainment", "qos": "qos_mean", "quality": "quality_mean",
                   **{metric: metric for metric in ("e2e_mean_s", "e2e_p95_s", "e2e_p99_s", "ttft_mean_s",
                                                    "slo_attainment", "qos_mean", "quality_mean")}}
DIRECTION = {**OBJECTIVES, "e2e_p95_s": False}


def rank_policies(rows: list[dict], objective: str, recommended: str | None = None) -> dict[str, Any]:
    """Every policy of one evaluation (`rows`: one per policy with `<objective>` and
    `<objective>_by_seed` over the same windows) ranked by `objective`, best first, and the verdict
    for that traffic: the best policy, its lead over the runner-up against the paired-seed noise
    (the std over windows of their difference: both saw the same arrivals), and whether
    `recommended` (the bundle's choice) holds: it is the best, or within that noise of it.

    A policy without a finite value (an SLO metric with no SLO given, quality without labels) is
    left out of the ranking, and an objective no policy has a value for is an error naming it."""
    metric = OBJECTIVE_NAMES.get(objective, objective)
    if metric not in DIRECTION:
        raise ValueError(f"objective {objective!r}: expected one of {sorted(set(OBJECTIVE_NAMES))}")
    sign = 1.0 if DIRECTION[metric] else -1.0
    scored = [r for r in rows if r.get(metric) is not None and np.isfinite(r[metric])]
    if not scored:
        raise ValueError(f"objective {objective!r}: no policy has a value for {metric} on this traffic "
                         "(an SLO metric needs --slo-e2e / --slo-tpot; quality needs labels)")
    ranked = sorted(scored, key=lambda r: -sign * r[metric])
    best = ranked[0]

    def gap_and_noise(other: dict) -> tuple[float, float | None]:
        """How much worse `other` is than the best (≥ 0, in the metric's units) and the paired noise."""
        gap = sign * (best[metric] - other[metric])
        a, b = best.get(f"{metric}_by_seed"), other.get(f"{metric}_by_seed")
        if a is None or b is None or len(a) != len(b) or len(a) < 2:
            return gap, None
        diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
        return gap, float(diff.std(ddof=1)) if np.isfinite(diff).all() else None

    table = []
    for i, r in enumerate(ranked):
        gap, noise = gap_and_noise(r) if i else (0.0, None)
        table.append({"rank": i + 1, "policy": r["policy"], "value": float(r[metric]),
                      "std": float(r.get(f"{metric}_std", float("nan"))), "gap_to_best": gap,
                      "gap_relative": gap / abs(best[metric]) if best[metric] else None, "paired_noise": noise,
                      "within_noise": bool(i == 0 or (noise is not None and gap <= noise)),
                      "served": r.get("served")})
    runner_up = table[1] if len(table) > 1 else None
    out: dict[str, Any] = {"objective": metric, "higher_is_better": DIRECTION[metric], "best": best["policy"],
                           "ranking": table, "runner_up": runner_up["policy"] if runner_up else None,
                           "clear_winner": bool(runner_up is None or not runner_up["within_noise"])}
    lead = (f"; ahead of {runner_up['policy']} by {runner_up['gap_to_best']:.4g}"
            + (f" (paired noise {runner_up['paired_noise']:.3g})" if runner_up["paired_noise"] is not None else "")
            if runner_up else "")
    out["verdict"] = f"deploy {best['policy']}: best {metric} {best[metric]:.4g} on this traffic{lead}"
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
            if metric.startswith(("e2e", "ttft")) and (best.get("served") or 0) < (mine["served"] or 0):
                # latency counts the served requests only: a policy that turns more away can look faster
                out["verdict"] += (f" (note: {best['policy']} served {best['served']:.4g} requests per window, "
                                   f"{recommended} {mine['served']:.4g}; latency counts served requests only)")
    return out
