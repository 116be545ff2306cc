"""llm-d's predicted-latency scorer's model, trained as llm-d trains it online: on what the router saw
when it sent each request and the TTFT that request then had.

Why in the simulator: llm-d fits its XGBoost model from live traffic; a fleet that has none yet is
judged with a model fitted the same way on the training windows' simulated traffic, routed by llm-d's
default scheduler while it learns (the evaluation windows are never run here). The features are the
router-visible observation's (`artifacts.deciding.deployed_routers.PREDICTED_LATENCY_FEATURES`); the model is
XGBoost's JSON, which both runtimes evaluate without XGBoost (`artifacts.deciding.tree_ensemble`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.deployed_routers import predicted_latency_features
from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.training.policies.simulator.baselines import RegisteredHeuristic

TRAINING = {"n_estimators": 120, "max_depth": 5, "learning_rate": 0.1, "subsample": 0.9}


class Recording(RegisteredHeuristic):
    """llm-d's scheduler that writes down, per request, the predicted-latency features of the instance
    it chose (what the router saw at the send)."""

    def __init__(self):
        super().__init__("llm_d")
        self.seen: dict[int, list[float]] = {}

    def choose(self, request, router, now):
        asked, observed = router.observe(request, now)
        features = predicted_latency_features(asked, observed, self.state, {})  # llm-d's index before the send
        choice = HEURISTICS.get("llm_d")(asked, observed, self.parameters_, self.state)
        self.seen[request.rid] = features[choice]
        return choice


def fit_parameters(episode: Callable[[Any, int], list], seeds: list[int], log: Callable[[str], None],
                   seed: int = 0) -> dict[str, Any]:
    """`{"model": <XGBoost JSON>}` for `llm_d_predicted_latency`: an XGBoost regressor of TTFT on the
    features llm-d's router saw, from `episode(policy, seed)` (one training window run, its outcomes)
    over `seeds`. The prefix match is the share of the prompt's blocks the chosen instance held in
    llm-d's own index as the scheduler decided."""
    import xgboost

    rows, targets = [], []
    for s in seeds:
        policy = Recording()
        outcomes = episode(policy, s)
        for o in outcomes:
            if o.served and o.request.rid in policy.seen:
                rows.append(policy.seen[o.request.rid])
                targets.append(o.ttft)
    if len(rows) < 50:
        raise ValueError(f"llm_d_predicted_latency: {len(rows)} served requests on the training windows; "
                         "its model needs at least 50")
    model = xgboost.XGBRegressor(objective="reg:squarederror", random_state=seed, n_jobs=1, **TRAINING)
    model.fit(np.asarray(rows, dtype=np.float32), np.asarray(targets, dtype=np.float32))
    log(f"llm_d_predicted_latency: TTFT model fitted on {len(rows)} requests of {len(seeds)} training windows")
    return {"model": json.loads(model.get_booster().save_raw("json").decode())}
