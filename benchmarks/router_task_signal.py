"""How much of a router's gain is recognising the prompt's task: per-cluster routing against the KNN,
by cross-validation inside the training split (no test label is read).

Routing every k-means cluster of the prompts to the model with the best mean label in that cluster
(clusters and their best models fitted inside each fold, the library's spherical k-means and
`cluster_best`) needs no per-prompt estimate at all; where it matches the estimators, they extract
what task recognition gives and nothing within a task. Compared, on the same folds: the best single
model (chosen inside each fold), cluster routing for several k, the KNN (k = 100, the family's
runtime prediction), and the oracle. Three fold seeds; mean and spread over them (the spread is
the noise any "gain" must clear).

Where the rows name their task (dcrouter through its task lookup, RouterBench's eval_name), the
ceilings of a router that only recognises the task, on the same folds:
- `true_task`: each prompt routed to its own task's best model (the task given, not predicted);
- `true_task_knn_residual`: that, plus what a prompt's 100 nearest neighbours of the same task
  say about the models beyond their task's means (shrunk by 100 / (100 + 30)): the per-prompt
  signal left in the encoder once the task is known;
- `task_classifier_accuracy`: how often the family's task classifier (multinomial logistic, C = 1,
  as `task_mixture`) names the right task out of fold;
- where costs exist, the AIQ of each over the λ sweep (RouterBench's area under the quality–cost
  hull), against the single models' hull;
- `leave_one_task_out`: each training task held out in turn, its prompts routed by the mixture fitted
  on the other tasks and by the other tasks' best single model, as leads over the held-out task's
  own best model, the mixture's lead over the other tasks' best single model (the fixed choice a
  fleet makes without a router), and the AUROC of the classifier's largest posterior at telling the
  held-out task's prompts from an in-distribution fold (how well an unseen task can be detected).

    .venv/bin/python -m benchmarks.router_task_signal [--fleets dcrouter routerbench] [--quick]

Writes benchmarks/results/router_task_signal/<fleet>.json.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
from routeforge.artifacts.deciding.knn import KnnPrediction
from routeforge.core.schemas import routing_models
from routeforge.fleet import load_fleet
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.quality_cost_eval import auto_lambdas, hull_comparison
from routeforge.training.predictors.router_family import Candidate, fit_predict
from routeforge.training.predictors.router_selection import (
    assign,
    cluster_best,
    cluster_centroids,
    fold_ids,
    score_at_argmax,
)
from routeforge.training.predictors.router_training import split_rows
from routeforge.training.routing_table import matrix

from benchmarks.common import results_dir
from benchmarks.router_selection import CONFIGS, over_fleets
from benchmarks.routerbench_knn import routing_table_of

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
    tasks = np.asarray(routing.column("task").to_pylist())[train]
    cost = matrix(routing, "cost", models)[train]
    ceilings = task_ceilings(x, y, tasks, cost, settings.folds, seeds, fleet) if len(set(tasks)) > 1 else None
    result = {"fleet": fleet, "train_prompts": int(len(x)), "folds": settings.folds, "fold_seeds": list(seeds),
              "task_ceilings": ceilings,
              "encoder": config.encoder, "truncation_side": config.training.knn.truncation_side,
              "cv_score": {n: {"mean": float(np.mean(v)), "std": float(np.std(v)), "by_seed": v}
                           for n, v in rows.items()},
              "timings_s": timings, "quick": quick}
    path = results_dir("router_task_signal") / f"{fleet}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"{fleet}: " + ", ".join(f"{n} {s['mean']:.4f} ± {s['std']:.4f}" for n, s in result["cv_score"].items())
          + f" -> {path}", flush=True)
    return result


def _task_means(y: np.ndarray, tasks: np.ndarray, names) -> np.ndarray:
    with warnings.catch_warnings():  # a model with no label in a task: NaN, never its best
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.stack([np.nanmean(y[tasks == t], axis=0) for t in names])


def _knn_residual(x_fit, y_fit, t_fit, x_val, t_val, k: int = 100, shrink: float = 30.0) -> np.ndarray:
    """Own-task means plus the shrunk mean residual of the k nearest same-task training prompts."""
    names = np.unique(t_fit)
    means = _task_means(y_fit, t_fit, names)
    row = {t: i for i, t in enumerate(names)}
    residual = np.nan_to_num(y_fit - means[[row[t] for t in t_fit]])
    out = np.zeros((len(x_val), y_fit.shape[1]))
    for t in np.unique(t_val):
        a, b = np.flatnonzero(t_fit == t), np.flatnonzero(t_val == t)
        kk = min(k, len(a))
        idx = np.argpartition(-(x_val[b] @ x_fit[a].T), kk - 1, axis=1)[:, :kk]
        out[b] = means[row[t]] + residual[a][idx].mean(axis=1) * kk / (kk + shrink)
    return out


def _hull_of(pred: np.ndarray, y: np.ndarray, cost: np.ndarray) -> dict[str, float]:
    """AIQ of routing by `pred` over the library's λ sweep (`auto_lambdas`; each model's mean cost,
    as the router predicts it), against the single models' hull (`hull_comparison`)."""
    cbar = np.broadcast_to(np.nanmean(cost, axis=0), pred.shape)
    prediction = KnnPrediction([str(j) for j in range(y.shape[1])], pred, np.full_like(pred, np.nan), cbar)
    rows = np.arange(len(y))
    points = [(float(cost[rows, p].mean()), float(y[rows, p].mean()))
              for p in (prediction.best_index(lam) for lam in auto_lambdas(prediction))]
    return hull_comparison(points, [(float(cost[:, j].mean()), float(y[:, j].mean())) for j in range(y.shape[1])])


def _task_classifier(x: np.ndarray, tasks: np.ndarray, seed: int):
    """The multinomial logistic task classifier `task_mixture` uses (C = 1)."""
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():  # lbfgs may stop at max_iter on a separable fold: still usable
        warnings.simplefilter("ignore")
        return LogisticRegression(C=1.0, max_iter=2000, random_state=seed).fit(x, tasks)


def task_ceilings(x, y, tasks, cost, folds_n: int, seeds, fleet: str) -> dict:
    """What knowing the task gives, and what is left within it (see the module docstring)."""
    from sklearn.metrics import roc_auc_score

    complete = ~(np.isnan(y).any(axis=1) | np.isnan(cost).any(axis=1))
    with_costs = bool(complete.any() and not np.isnan(cost).all())
    rows: dict[str, list[float]] = {}
    mixture = Candidate("task_mixture", {"C": 1.0, "clusters": 8})
    for seed in seeds:
        folds = fold_ids(len(x), folds_n, seed)
        preds = {name: np.zeros_like(y) for name in ("true_task", "true_task_knn_residual", "task_mixture")}
        correct = 0
        for f in range(folds_n):
            fit, val = folds != f, folds == f
            names = np.unique(tasks[fit])
            means = _task_means(y[fit], tasks[fit], names)
            preds["true_task"][val] = means[np.searchsorted(names, tasks[val])]
            preds["true_task_knn_residual"][val] = _knn_residual(x[fit], y[fit], tasks[fit], x[val], tasks[val])
            preds["task_mixture"][val] = fit_predict(mixture, x[fit], y[fit], x[val], seed, tasks[fit])
            correct += int((_task_classifier(x[fit], tasks[fit], seed).predict(x[val]) == tasks[val]).sum())
        rows.setdefault("task_classifier_accuracy", []).append(correct / len(x))
        for name, pred in preds.items():
            rows.setdefault(name, []).append(score_at_argmax(np.nan_to_num(pred, nan=-1.0), y))
            if with_costs:
                hull = _hull_of(pred[complete], y[complete], cost[complete])
                rows.setdefault(f"aiq_{name}", []).append(hull["aiq_router"])
        if with_costs:
            rows.setdefault("aiq_single_hull", []).append(hull["aiq_single_hull"])  # the same for every router
        print(f"{fleet} fold seed {seed} (tasks known): " + ", ".join(f"{n} {v[-1]:.4f}" for n, v in rows.items()),
              flush=True)
    held_out = {}
    folds = fold_ids(len(x), folds_n, seeds[0])
    for task in np.unique(tasks):
        rest, held = tasks != task, tasks == task
        own = float(np.nanmax(np.nanmean(y[held], axis=0)))
        overall = int(np.nanargmax(np.nanmean(y[rest], axis=0)))
        pred = fit_predict(mixture, x[rest], y[rest], x[held], seeds[0], tasks[rest])
        fit, in_dist = rest & (folds != 0), rest & (folds == 0)
        auroc = None  # one task left: no classifier to be unsure
        if len(set(tasks[fit])) > 1:
            clf = _task_classifier(x[fit], tasks[fit], seeds[0])
            confidence = np.r_[clf.predict_proba(x[in_dist]).max(axis=1), clf.predict_proba(x[held]).max(axis=1)]
            auroc = float(roc_auc_score(np.r_[np.zeros(in_dist.sum()), np.ones(held.sum())], -confidence))
        # the fixed choice a fleet makes without a router: the other tasks' best model
        fixed, mixture_score = float(np.nanmean(y[held][:, overall])), score_at_argmax(pred, y[held])
        held_out[str(task)] = {
            "prompts": int(held.sum()), "own_best": own, "lead_best_overall": fixed - own,
            "lead_task_mixture": mixture_score - own, "mixture_over_best_overall": mixture_score - fixed,
            "unseen_detection_auroc": auroc}
    summary = {n: {"mean": float(np.mean(v)), "std": float(np.std(v)), "by_seed": v} for n, v in rows.items()}
    print(f"{fleet} leave one task out (lead over the task's best model: best overall / mixture; unseen AUROC): "
          + ", ".join(f"{t} {r['lead_best_overall']:+.3f}/{r['lead_task_mixture']:+.3f}/"
                      + ("-" if r["unseen_detection_auroc"] is None else f"{r['unseen_detection_auroc']:.2f}")
                      for t, r in held_out.items()), flush=True)
    return {"cv": summary, "leave_one_task_out": held_out,
            "within_half_point": {key: sum(r[key] >= -0.005 for r in held_out.values())
                                  for key in ("lead_best_overall", "lead_task_mixture", "mixture_over_best_overall")}}


def main() -> None:
    over_fleets(__doc__, run)


if __name__ == "__main__":
    main()
