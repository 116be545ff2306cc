"""A scoring policy's weights learned in the simulator (`training.routing_evaluation.weight_search`):
CMA-ES (the `cma` package, Hansen's reference implementation) searches the weights of a heuristic
registered with `weights=` and `searchable=True` (`routeforge.artifacts.deciding.heuristics`; `linear_scorer`,
from llm_d_ttft's) from its registered defaults, each candidate judged on the same training-workload
episodes by the evaluation's objective; several searches run, each on episodes of its own, and the
starting weights and each search's best are compared on validation episodes none of them ran: the best
there is kept. Why restarts: one search's best fits its few episodes (single searches on one trace
land far apart on the evaluation windows), and the validation choice among several is the
cross-validation the evaluation windows must not do.

Why CMA-ES and not a gradient method: the objective (mean TTFT, goodput) is a whole episode of a
discrete-event simulation, neither differentiable nor smooth in the weights, and nine weights are few
enough for a derivative-free search to cover in a few hundred episodes (Salimans et al. 2017 train far
larger policies so). Why judged on fixed episodes: candidates compared on different arrivals would be
ranked by the arrivals. Why a served-share floor: a latency over served requests improves by rejecting
the slow ones, so a candidate serving less than `min_served_share` is ranked below every one that does.
The evaluation windows are never run here; the policy is then judged with every other one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.artifacts.deciding.objectives import HIGHER_IS_BETTER
from routeforge.training.policies.rl.rollout import validation_seeds
from routeforge.training.policies.simulator.baselines import tuned_baseline

SEARCH_SEEDS = 10**7  # search episodes' arrival seeds start here: clear of training, validation and evaluation


def searchable_weights(name: str) -> dict[str, float]:
    """Heuristic `name`'s features and default weights, as registered; one not registered searchable
    (`weights=`, `searchable=True`) is refused naming the ones that are."""
    metadata = HEURISTICS.entry(name).metadata
    if not (metadata.get("searchable") and metadata.get("weights")):
        known = sorted(e.name for e in HEURISTICS.entries() if e.metadata.get("searchable"))
        raise ValueError(f"weight_search: heuristic {name!r} is not registered with searchable weights "
                         f"(those that are: {', '.join(known)})")
    return dict(metadata["weights"])


def search_seeds(seed: int, restart: int, episodes: int) -> list[int]:
    """Arrival seeds of the episodes every candidate of restart `restart` is judged on (training
    workload; never a validation or evaluation seed; each restart its own)."""
    return [SEARCH_SEEDS + seed * 10**4 + restart * 100 + i for i in range(episodes)]


def _loss(runs: list[dict[str, float]], objective: str, min_served: float) -> float:
    """The mean objective as a loss (negated where higher is better); below the served floor, 10⁶ plus
    the shortfall, so every candidate that serves enough ranks first."""
    served = float(np.mean([r["served_share"] for r in runs]))
    value = float(np.mean([r[objective] for r in runs]))
    if served < min_served:
        return 1e6 + (min_served - served)
    return -value if HIGHER_IS_BETTER[objective] else value


def search_weights(name: str, search, objective: str, seed: int,
                   episode_score: Callable[[Any, int], dict[str, float]], log: Callable[[str], None]
                   ) -> dict[str, Any]:
    """`name`'s weights by CMA-ES from its registered defaults (`weights=`, in order), `search` its settings
    (`WeightSearch`); `episode_score(policy, seed)` plays one training-workload episode and scores it.
    Each of `search.restarts` searches runs on episodes of its own; the starting weights and each
    search's best are then judged on the same validation episodes, and the best there is kept. Returns
    {parameters, objective, start, searches, kept, validation_loss} (`tuning.tune_heuristics`' entry form)."""
    import cma

    defaults = searchable_weights(name)
    features = tuple(defaults)

    def weights_of(x) -> dict[str, float]:
        return {f: round(float(v), 6) for f, v in zip(features, x)}

    def loss(weights: dict[str, float], seeds: list[int]) -> float:
        policy = tuned_baseline(name, {"weights": weights})
        return _loss([episode_score(policy, s) for s in seeds], objective, search.min_served_share)

    start = [float(defaults[f]) for f in features]
    searches = []
    for restart in range(search.restarts):
        seeds = search_seeds(seed, restart, search.episodes)
        options = {"seed": seed * 100 + restart + 1, "maxfevals": search.evaluations, "verbose": -9}
        es = cma.CMAEvolutionStrategy(start, search.sigma, options)
        curve, spent, best = [], 0, (loss(weights_of(start), seeds), start)
        while not es.stop():
            candidates = es.ask()
            losses = [loss(weights_of(x), seeds) for x in candidates]
            es.tell(candidates, losses)
            spent += len(candidates)
            i = int(np.argmin(losses))
            if losses[i] < best[0]:
                best = (losses[i], list(candidates[i]))
            curve.append({"evaluations": spent, "best_loss": best[0], "generation_best_loss": losses[i]})
            log(f"{name}: search {restart + 1}/{search.restarts}, CMA-ES generation {es.countiter}, "
                f"{spent}/{search.evaluations} candidates, best {objective} {abs(best[0]):.4g} "
                f"on {len(seeds)} episodes")
        searches.append({"weights": weights_of(best[1]), "search_loss": best[0], "curve": curve})
    checks = validation_seeds(seed, search.validation_episodes)
    candidates = {"start": weights_of(start), **{f"search {k + 1}": s["weights"] for k, s in enumerate(searches)}}
    on_validation = {label: loss(w, checks) for label, w in candidates.items()}
    kept = min(on_validation, key=lambda label: (on_validation[label], label != "start"))
    log(f"{name}: kept the {kept} weights ({objective} on {len(checks)} validation episodes: "
        + ", ".join(f"{label} {abs(v):.4g}" for label, v in on_validation.items()) + ")")
    return {"parameters": {"weights": candidates[kept]}, "objective": objective, "method": "cma-es",
            "start": candidates["start"], "searches": searches, "kept": kept, "validation_loss": on_validation,
            "validation_episodes": len(checks)}
