"""Which policy to use for which kind of traffic: the bundle's per-traffic recommendations.

A router knows its traffic only by what it can count online: how bursty arrivals are (the
coefficient of variation of the gaps between them), how long prompts and outputs run, how much of
the prompts' blocks repeat earlier ones (prefix sharing, where the traffic carries block hashes),
and how busy the fleet is (the load). Every cell of the routing evaluation (a workload at a load) is one such
traffic; for each it records those statistics and, per objective, the best policy the bundle
carries (`gate.rank_policies`: every offered request counted). The runtime
(`artifacts.deciding.recommendation.recommend`) picks the nearest cell's policy for the statistics it sees.

`transfer` measures what that is worth on traffic the table did not see: each workload in turn is
left out, recommended from the others, and the recommended policy's value there is compared with
that cell's best. (The kept traces of other services judge the same rule.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from routeforge.artifacts.deciding.recommendation import STAT_KEYS, recommend
from routeforge.training.policies.gate import DIRECTION, rank_policies

# the objectives recorded per traffic (each where the evaluation has values for it)
RECOMMENDED_OBJECTIVES = ("goodput", "quality_goodput", "e2e_mean_offered_s", "e2e_p99_offered_s", "qos_mean")


def traffic_stats(requests: Sequence) -> dict[str, float]:
    """What a router can compute online of a window of requests (`simulator.cluster.Request`)."""
    arrivals = np.sort(np.array([r.arrival for r in requests], dtype=float))
    gaps = np.diff(arrivals)
    prompt = np.array([r.prompt_tokens for r in requests], dtype=float)
    output = np.array([float(np.nanmean(r.output_tokens)) for r in requests], dtype=float)
    return {"arrival_cv": float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else 0.0,
            "prompt_mean": float(prompt.mean()), "prompt_p90": float(np.percentile(prompt, 90)),
            "output_mean": float(output.mean()), "output_p90": float(np.percentile(output, 90)),
            "prefix_sharing": prefix_sharing(requests)}


def prefix_sharing(requests: Sequence) -> float:
    """The share of the window's prompt blocks (`hash_ids`) already sent by an earlier request of
    the window, in arrival order; 0 for traffic without block hashes (nothing known to be shared)."""
    seen: set[int] = set()
    blocks = repeated = 0
    for request in sorted(requests, key=lambda r: r.arrival):
        ids = getattr(request, "hash_ids", None) or ()
        blocks += len(ids)
        repeated += sum(1 for h in ids if h in seen)
        seen.update(ids)
    return repeated / blocks if blocks else 0.0


def recommendation_table(rows: list[dict], stats: dict[tuple[str, float], dict[str, float]],
                         carried: Sequence[str]) -> list[dict]:
    """One entry per evaluated (workload, load): its traffic statistics (`load` among them) and the
    best carried policy per objective."""
    table = []
    for (workload, load), cell_stats in stats.items():
        cell = [r for r in rows if r["workload"] == workload and r["load"] == load and r["policy"] in carried]
        best = {}
        for objective in RECOMMENDED_OBJECTIVES:
            if cell and any(objective in r and not np.isnan(r[objective]) for r in cell):
                best[objective] = rank_policies(cell, objective)["best"]
        table.append({"workload": workload, "stats": {**cell_stats, "load": float(load)}, "best": best})
    return table


def transfer(rows: list[dict], table: list[dict], objective: str) -> dict:
    """Leave one workload out: its cells recommended from the other workloads' entries; the gap of
    the recommended policy's value to the cell's best (relative, ≥ 0), per cell and in summary."""
    sign = 1.0 if DIRECTION[objective] else -1.0
    cells = []
    for entry in table:
        others = [e for e in table if e["workload"] != entry["workload"]]
        if not others or objective not in entry["best"]:
            continue
        chosen = recommend(others, entry["stats"], objective)["policy"]
        here = {r["policy"]: r[objective] for r in rows
                if r["workload"] == entry["workload"] and r["load"] == entry["stats"]["load"]}
        best = here[entry["best"][objective]]
        value = here.get(chosen, float("nan"))
        gap = sign * (best - value) / abs(best) if best else 0.0
        cells.append({"workload": entry["workload"], "load": entry["stats"]["load"], "recommended": chosen,
                      "best": entry["best"][objective], "gap_relative": float(gap)})
    gaps = [c["gap_relative"] for c in cells if np.isfinite(c["gap_relative"])]
    return {"objective": objective, "cells": cells, "mean_gap": float(np.mean(gaps)) if gaps else None,
            "max_gap": float(np.max(gaps)) if gaps else None, "keys": list(STAT_KEYS)}
