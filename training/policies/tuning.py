"""Heuristics' parameters chosen on training windows (`training.routing_evaluation.tune`): each
combination of the values a fleet file lists runs `tune_episodes` episodes of the training workloads
(the learned policies' windows and load, never an evaluation seed), and the best on the evaluation's
objective is what the evaluation runs and the bundle's spec carries. Why: a heuristic's constants are
the router's settings too (quality_within_slo plans within `slo_scale` × the request's E2E alone,
where its step-time estimate is optimistic on a busy instance); choosing them on the windows the
policies are judged on would flatter them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.objectives import HIGHER_IS_BETTER
from routeforge.training.policies.rl.rollout import validation_seeds
from routeforge.training.policies.simulator.baselines import tuned_baseline


def tune_heuristics(settings, episode_score: Callable[[Any, int], dict[str, float]],
                    log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """{heuristic: {chosen parameters, scores: [...]}} for each heuristic `settings.tune` names;
    `episode_score(policy, seed)` plays one training-workload episode and scores it."""
    seeds = validation_seeds(settings.seed, settings.tune_episodes)
    objective, higher = settings.objective, HIGHER_IS_BETTER[settings.objective]
    out = {}
    for name, grid in settings.tune.items():
        keys = list(grid)
        tried = []
        for values in itertools.product(*(grid[k] for k in keys)):
            params = dict(zip(keys, values))
            runs = [episode_score(tuned_baseline(name, params), seed)[objective] for seed in seeds]
            tried.append({"parameters": params, objective: float(np.mean(runs))})
        # the best, the first listed on a tie (the fleet file lists its default first where it has one)
        best = max(tried, key=lambda t: t[objective] if higher else -t[objective])
        out[name] = {"parameters": best["parameters"], "objective": objective, "tried": tried}
        log(f"{name}: {', '.join(f'{k} {v:g}' for k, v in best['parameters'].items())} chosen on "
            f"{len(seeds)} training windows ({objective} {best[objective]:.4f}; "
            + ", ".join(" ".join(f"{v:g}" for v in t["parameters"].values()) + f": {t[objective]:.4f}"
                        for t in tried) + ")")
    return out
