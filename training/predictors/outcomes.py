"""Production outcomes into a freshly trained router: the next bundle starts from what the last one learned.

Traffic logs may carry an `outcome` per request (a score, a thumbs-up, an error:
`prompts.traffic_logs`). A router service learns from them between retrains through the runtime's
`Router.update`; when the pipeline retrains, it replays every logged outcome of the fleet's
traffic logs into the new router the same way, so the bundle it registers begins where production
left off instead of at the training means. Requests served by a model the router does not know
(retired, or outside the fleet) are counted and skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.router import Router, distinct_outcomes, source_weights
from routeforge.artifacts.deciding.sentence_encoder import embed_for
from routeforge.core.storage import Quarantine
from routeforge.prompts.traffic_logs import UNAUTHENTICATED, read_traffic_logs, source_id


def contradictions(router: Router, cluster: np.ndarray, models: list[str], outcomes: np.ndarray,
                   weight: np.ndarray, use: np.ndarray, threshold: float, min_weight: float) -> list[dict[str, Any]]:
    """(cluster, model) cells whose weighted outcome mean is more than `threshold` from the cell's
    training mean, once their outcomes weigh `min_weight`: each with both means and the weight."""
    prior = router._online_prior()
    flagged = []
    for c, j in sorted({(int(c), router.models.index(m)) for c, m, u in zip(cluster, models, use) if u}):
        cell = use & (cluster == c) & (np.asarray(models) == router.models[j])
        w = float(weight[cell].sum())
        mean = float((weight[cell] * outcomes[cell]).sum() / w) if w else float("nan")
        if w >= min_weight and abs(mean - prior[c, j]) > threshold:
            flagged.append({"cluster": c, "model": router.models[j], "training_mean": round(float(prior[c, j]), 3),
                            "outcome_mean": round(mean, 3), "weight": round(w, 2), "outcomes": int(cell.sum())})
    return flagged


def replay_outcomes(router: Router, log_uris: list[str], encoder, quarantine: Quarantine,
                    log: Callable[[str], None] = print, settings=None) -> dict[str, Any]:
    """Every logged outcome of the logs at `log_uris` into `router` (`Router.update_embeddings`,
    embedding with `encoder`); returns the counts for the report.

    Hardened against one loud client and against many invented ones: a line repeated verbatim by one
    source counts once; each source (an id at `settings.source_field` that `settings.sources` lists;
    every other line is the one source `UNAUTHENTICATED`) weighs at most
    `settings.max_source_weight` outcomes per (cluster, model) cell, and all sources together at most
    `settings.max_cell_weight`; a cell whose outcomes contradict
    its training mean by more than `settings.contradiction_threshold` is flagged and not absorbed."""
    from routeforge.core.config.training import OutcomeSettings  # lazy: pydantic, yaml on first use

    settings = settings or OutcomeSettings()
    listed = {source_id(source) for source in settings.sources}
    rows, foreign = [], 0
    for uri in log_uris:
        for request in read_traffic_logs(uri, quarantine, source_field=settings.source_field):
            if request.outcome is None:
                continue
            if request.model not in router.models:
                foreign += 1
                continue
            rows.append((request.source if request.source in listed else UNAUTHENTICATED, request.text,
                         request.model, request.outcome))
    keep = distinct_outcomes(*zip(*rows)) if rows else []
    duplicates = len(rows) - len(keep)
    rows = [rows[i] for i in keep]
    out = {"logged_outcomes": len(rows) + duplicates + foreign, "counted": 0, "other_models": foreign,
           "unseen_task": 0, "duplicates": duplicates, "sources": len({r[0] for r in rows}),
           "max_source_weight": settings.max_source_weight, "max_cell_weight": settings.max_cell_weight,
           "unauthenticated": sum(r[0] == UNAUTHENTICATED for r in rows), "contradicting": [], "held_back": 0}
    if rows:
        sources, texts, models, outcomes = (list(col) for col in zip(*rows))
        outcomes = np.asarray(outcomes, dtype=float)
        x = embed_for(router, texts, encoder)
        cluster, seen = router.online_cells(x)
        weight = source_weights(sources, cluster, models, seen, settings.max_source_weight, settings.max_cell_weight)
        flagged = contradictions(router, cluster, models, outcomes, weight, seen,
                                 settings.contradiction_threshold, settings.contradiction_min_weight)
        held = np.zeros(len(rows), dtype=bool)
        for cell in flagged:
            held |= (cluster == cell["cluster"]) & (np.asarray(models) == cell["model"])
        out["counted"] = router.update_embeddings(x, models, outcomes, sources=sources,
                                                  max_source_weight=settings.max_source_weight,
                                                  max_cell_weight=settings.max_cell_weight, use=~held)
        out["unseen_task"] = int((~seen).sum())
        out["contradicting"] = flagged
        out["held_back"] = int((held & seen).sum())
    if rows or foreign:
        log(f"router: learned from {out['counted']} production outcomes of {out['sources']} source(s) "
            f"({out['unauthenticated']} without an id training.outcomes.sources lists, counted as one source; "
            f"{duplicates} repeated lines counted once, {foreign} of models it does not route to, "
            f"{out['unseen_task']} far from every training cluster)")
    for cell in out["contradicting"]:
        log(f"router: outcomes for {cell['model']} in cluster {cell['cluster']} contradict training "
            f"(mean {cell['outcome_mean']} over weight {cell['weight']} against {cell['training_mean']}): "
            "flagged, not absorbed; look at the logs before the labels are overridden")
    return out
