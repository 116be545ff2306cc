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
