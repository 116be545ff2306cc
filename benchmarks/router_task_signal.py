"""How much of a router's gain is recognising the prompt's task: per-cluster routing against the KNN,
by cross-validation inside the training split (no test label is read).

Routing every k-means cluster of the prompts to the model with the best mean label in that cluster
(clusters and their best models fitted inside each fold, the library's spherical k-means and
`cluster_best`) needs no per-prompt estimate at all; where it matches the estimators, they extract
what task recognition gives and nothing within a task. Compared, on the same folds: the best single
model (chosen inside each fold), cluster routing for several k, the KNN (k = 100, the family's
runtime prediction), and the oracle. Three fold seeds; mean and spread over them (the spread is
the noise any "gain" must clear).

    .venv/bin/python -m benchmarks.router_task_signal [--fleets dcrouter routerbench] [--quick]

Writes benchmarks/results/router_task_signal/<fleet>.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.common import results_dir
from benchmarks.router_selection import CONFIGS, over_fleets
from benchmarks.routerbench_knn import routing_table_of
from core.config import load_fleet
from core.schemas import routing_models
from training.embeddings import encode_cached
from training.predictors.router_family import Candidate, fit_predict
from training.predictors.router_selection import assign, cluster_best, cluster_centroids, fold_ids, score_at_argmax
from training.predictors.router_training import split_rows
from training.routing_table import matrix

CLUSTERS = (5, 10, 20, 40, 80)
FOLD_SEEDS = (0, 1, 2)


def out_of_fold_picks(x: np.ndarray, y: np.ndarray, folds: np.ndarray, pick_fold) -> np.ndarray:
    """The model each row is routed to, decided by `pick_fold(fit_mask, val_mask)` fitted without its fold."""
    picks = np.zeros(len(x), dtype=np.int64)
    for f in range(int(folds.max()) + 1):
        fit, val = folds != f, folds == f
        picks[val] = pick_fold(fit, val)
    return picks


def run(fleet: str, quick: bool) -> dict:
    config = load_fleet(CONFIGS[fleet])
    timings: dict[str, float] = {}
    routing, _ = routing_table_of(config, timings)
    models = routing_models(routing.schema)
    train = split_rows(routing, "train")
    y = matrix(routing, "quality", models)[train]
    texts = [t for t, keep in zip(routing.column("text").to_pylist(), train) if keep]
    t0 = time.perf_counter()
    x = encode_cached(texts, config.encoder, config.training.knn.truncation_side,
                      Path(config.storage_root) / "cache" / "embeddings")
    timings["encode_s"] = time.perf_counter() - t0
    settings = config.training.router
    seeds = FOLD_SEEDS[:1] if quick else FOLD_SEEDS
    rows: dict[str, list[float]] = {}

    def record(name: str, picks: np.ndarray) -> None:
        rows.setdefault(name, []).append(score_at_argmax(np.zeros_like(y), y, picks))

    for seed in seeds:
        folds = fold_ids(len(x), settings.folds, seed)
        record("best_single", out_of_fold_picks(x, y, folds, lambda fit, val: np.full(
            val.sum(), int(np.nanargmax(np.nanmean(y[fit], axis=0))))))
        for k in CLUSTERS[:2] if quick else CLUSTERS:
            def by_cluster(fit, val, k=k):
                cents, _ = cluster_centroids(x[fit], None, k, seed)
                best = cluster_best(y[fit], assign(x[fit], cents), len(cents))
                return best[assign(x[val], cents)]

            record(f"clusters_k{k}", out_of_fold_picks(x, y, folds, by_cluster))
        knn = Candidate("knn", {"k": 100, "prior_strength": 0.0})
        record("knn_k100", out_of_fold_picks(x, y, folds, lambda fit, val: np.argmax(
            fit_predict(knn, x[fit], y[fit], x[val], seed), axis=1)))
        rows.setdefault("oracle", []).append(float(np.nanmean(np.nanmax(y, axis=1))))
        print(f"{fleet} fold seed {seed}: " + ", ".join(f"{n} {v[-1]:.4f}" for n, v in rows.items()), flush=True)
    result = {"fleet": fleet, "train_prompts": int(len(x)), "folds": settings.folds, "fold_seeds": list(seeds),
              "encoder": config.encoder, "truncation_side": config.training.knn.truncation_side,
              "cv_score": {n: {"mean": float(np.mean(v)), "std": float(np.std(v)), "by_seed": v}
                           for n, v in rows.items()},
              "timings_s": timings, "quick": quick}
    path = results_dir("router_task_signal") / f"{fleet}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"{fleet}: " + ", ".join(f"{n} {s['mean']:.4f} ± {s['std']:.4f}" for n, s in result["cv_score"].items())
          + f" -> {path}", flush=True)
    return result


def main() -> None:
    over_fleets(__doc__, run)


if __name__ == "__main__":
    main()
