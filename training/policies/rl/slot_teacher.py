"""The teacher of 004's PPO: the best fixed routing distribution over the models.

Why: 004's action is one routing distribution per slot. JSQ, earliest available and the other
per-request heuristics decide request by request from the instances' state, so no per-slot
distribution expresses them and none can be cloned. The best distribution that ignores the state
can: a share of the traffic per model, spread evenly over that model's instances. PPO trained from
scratch scored below it in 004's setting (docs/results.md), so starting there gives PPO a floor it
only leaves by earning more (with `keep_best_round`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import combinations

import numpy as np
from routeforge.training.policies.rl.rollout import episode_return


def share_grid(n_models: int, resolution: int) -> list[np.ndarray]:
    """Every split of the traffic over `n_models` models in steps of 1 / resolution (the simplex grid)."""
    points = []
    for bars in combinations(range(resolution + n_models - 1), n_models - 1):  # stars and bars
        edges = (-1, *bars, resolution + n_models - 1)
        points.append(np.asarray([edges[i + 1] - edges[i] - 1 for i in range(n_models)], dtype=np.float64)
                      / resolution)
    return points


def split_logits(instance_models: list[int], shares: np.ndarray) -> np.ndarray:
    """The action (logits; the environment applies softmax) that sends `shares[m]` of the traffic to
    model m, evenly over its instances; an empty share gets the action space's floor (−10)."""
    models = np.asarray(instance_models)
    counts = np.bincount(models, minlength=len(shares))
    probs = np.asarray(shares, dtype=np.float64)[models] / counts[models]
    logits = np.log(np.maximum(probs, np.exp(-10.0)))
    return (logits - logits.max()).astype(np.float32)


def best_fixed_split(make_env: Callable[[], object], seeds: Iterable[int], resolution: int,
                     log: Callable[[str], None] = print) -> dict:
    """The grid's split with the highest mean episode return on `seeds` (training-workload episodes,
    the quantity PPO maximises): {shares, logits, return, grid}."""
    env, seeds = make_env(), list(seeds)
    n_models = int(max(env.models)) + 1
    grid = []
    for shares in share_grid(n_models, resolution):
        logits = split_logits(env.models, shares)
        score = float(np.mean([episode_return(env, lambda _obs, a=logits: a, s) for s in seeds]))
        grid.append({"shares": shares.tolist(), "return": score})
    best = max(grid, key=lambda row: row["return"])
    log(f"best fixed split: model shares {np.round(best['shares'], 3).tolist()} (mean return {best['return']:.1f} "
        f"on {len(seeds)} training episodes; {len(grid)} splits tried)")
    return {"shares": best["shares"], "logits": split_logits(env.models, np.asarray(best["shares"])),
            "return": best["return"], "grid": grid}


def constant_action_observations(make_env: Callable[[], object], logits: np.ndarray,
                                 seeds: Iterable[int]) -> np.ndarray:
    """The observations of episodes played with one action throughout (the fixed split's logits; zero
    biases, shortest queue, under biased dispatch): the states the teacher's clone is fitted on."""
    env, rows = make_env(), []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            rows.append(obs)
            obs, _, terminated, truncated, _ = env.step(logits)
            done = terminated or truncated
    return np.stack(rows).astype(np.float32)
