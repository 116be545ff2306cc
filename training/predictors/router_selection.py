"""Choose the bundle's router by k-fold cross-validation inside the training split.

Every candidate of the family (`router_family.candidates`) is scored out of fold: the mean true
quality of the model it ranks first (λ = 0), with the Brier score of its estimates beside it. An
ensemble of the best `ensemble_size` is scored the same way. The winner is refitted on the whole
training split.

The guard then compares, cluster by cluster, the winner's out-of-fold picks with the cluster's best
single model chosen inside each fold (clusters: the training tasks where known, else k-means over the
embeddings). Where a bootstrap over the cluster's prompts does not give the gain a probability of at
least `guard_confidence` of being positive, the cluster is routed by its per-model training means
(at λ = 0: its best single model on the whole training split). A prompt far from every cluster is
routed by the rule `unseen_rule` picks by leaving each cluster out (the best single model there is
the best on average over clusters, each counted once: `macro_quality`). Nothing here reads a test label:
the caller evaluates the returned router on the test split once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.router import Router
from routeforge.core.progress import format_count
from routeforge.training.parallel import current_pool
from routeforge.training.predictors.budget_calibration import calibration_table
from routeforge.training.predictors.router_family import (
    Candidate,
    candidates,
    fit_candidate,
    fit_predict,
    kmeans_size,
    member_params,
)

LogFn = Callable[[str], None]


@dataclass(frozen=True)
class CrossValidatedScores:
    """Mean true quality of the models picked, out of fold on the training split (λ = 0)."""

    best_single: float  # the one model best on average
    oracle: float  # each prompt's best model: the ceiling
    router_unguarded: float  # the chosen estimator's picks
    router: float  # the same with the guard applied, as the runtime applies it


@dataclass
class RouterSelection:
    """What `select_router` returns: the refitted router and how it was chosen.

    The tables (`candidates`, `guard`, `unseen["leave_one_cluster_out"]`) stay rows of plain values:
    they go to the JSON report and the plots as they are."""

    router: Router
    candidates: list[dict[str, Any]]  # one row per estimator: kind, params, cv_score, cv_brier
    chosen: list[str]  # the estimator(s) refitted; several: their average
    calibrated: bool  # isotonic maps kept (they lowered the out-of-fold Brier score, not routing)
    cv: CrossValidatedScores
    guard: list[dict[str, Any]]  # one row per cluster: routed by the estimator or by its training means
    unseen: dict[str, Any]  # the rule for prompts far from every cluster, and the evidence for it

    def report(self) -> dict[str, Any]:
        """The JSON form written to `router_selection.json`."""
        return {"candidates": self.candidates, "chosen": self.chosen, "calibrated": self.calibrated,
                "cv": asdict(self.cv), "guard": self.guard, "unseen": self.unseen}


def fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    """A fold number per row, shuffled with `seed`, sizes within one of each other."""
    order = np.random.default_rng(seed).permutation(n)
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.arange(n) % folds
    return ids


def score_at_argmax(pred: np.ndarray, y: np.ndarray, picks: np.ndarray | None = None) -> float:
    """Mean true quality of each row's first-ranked model (rows where that label is known)."""
    picks = np.argmax(pred, axis=1) if picks is None else picks
    chosen = y[np.arange(len(y)), picks]
    return float(np.nanmean(chosen)) if len(chosen) else float("nan")


def brier(pred: np.ndarray, y: np.ndarray) -> float:
    known = ~np.isnan(y)
    return float(np.mean((pred[known] - y[known]) ** 2))


def cluster_centroids(x: np.ndarray, tasks: list[str] | None, k: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """Unit centroids: one per training task where tasks are known, else spherical k-means."""
    if tasks is not None and len(set(tasks)) > 1:
        names = sorted(set(tasks))
        arr = np.asarray(tasks)
        cents = np.stack([x[arr == t].mean(axis=0) for t in names])
    else:
        from sklearn.cluster import KMeans

        k = kmeans_size(x, k)
        cents = KMeans(k, n_init=4, random_state=seed).fit(x).cluster_centers_
        names = [f"cluster-{i}" for i in range(k)]
    cents = cents / np.maximum(np.linalg.norm(cents, axis=1, keepdims=True), 1e-12)
    return cents.astype(np.float32), names


def assign(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    return np.argmax(x @ centroids.T, axis=1)


def cluster_means(y: np.ndarray, clusters: np.ndarray, n_clusters: int) -> np.ndarray:
    """(clusters, models): each model's mean known label per cluster; NaN where the cluster is empty
    or the model has no label in it (callers decide what stands in for those)."""
    means = np.full((n_clusters, y.shape[1]), np.nan)
    with warnings.catch_warnings():  # a model with no label in a cluster: NaN, not an error
        warnings.simplefilter("ignore", RuntimeWarning)
        for c in range(n_clusters):
            rows = y[clusters == c]
            if len(rows):
                means[c] = np.nanmean(rows, axis=0)
    return means


def cluster_best(y: np.ndarray, clusters: np.ndarray, n_clusters: int) -> np.ndarray:
    """The model with the highest mean known label per cluster (the overall best where a cluster is empty)."""
    means = cluster_means(y, clusters, n_clusters)
    overall = int(np.nanargmax(np.nanmean(y, axis=0)))
    best = np.argmax(np.nan_to_num(means, nan=-np.inf), axis=1)
    return np.where(np.isnan(means).all(axis=1), overall, best).astype(np.int64)


def isotonic_maps(pred: np.ndarray, y: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per model, the isotonic (non-decreasing) map from predicted to observed quality, fitted on the
    labelled pairs, as the (x, y) knots `np.interp` applies at runtime."""
    from sklearn.isotonic import IsotonicRegression

    maps = []
    for j in range(y.shape[1]):
        known = ~np.isnan(y[:, j])
        if known.sum() < 2:
            maps.append((np.asarray([0.0, 1.0]), np.asarray([0.0, 1.0])))
            continue
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(pred[known, j], y[known, j])
        maps.append((np.asarray(iso.X_thresholds_, dtype=np.float64), np.asarray(iso.y_thresholds_, dtype=np.float64)))
    return maps


def apply_maps(pred: np.ndarray, maps: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    return np.column_stack([np.interp(pred[:, j], xs, ys) for j, (xs, ys) in enumerate(maps)])


def cross_fitted_calibration(pred: np.ndarray, y: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Out-of-fold predictions calibrated by isotonic maps fitted on the other folds only, so the
    calibrated score is as honest as the uncalibrated one."""
    out = np.empty_like(pred)
    for f in range(int(folds.max()) + 1):
        out[folds == f] = apply_maps(pred[folds == f], isotonic_maps(pred[folds != f], y[folds != f]))
    return out


def cross_validate(cands: list[Candidate], x: np.ndarray, y: np.ndarray, folds: np.ndarray, seed: int,
                   log: LogFn = print, tasks: list[str] | None = None) -> dict[str, np.ndarray]:
    """Out-of-fold quality estimates of every candidate (`tasks`: each row's task, where known)."""
    oof = {}
    arr = np.asarray(tasks) if tasks is not None else None
    n_folds = int(folds.max()) + 1
    pool = current_pool()
    # one task per candidate × fold: here a candidate at a time (its progress line as it ends), or
    # every one at once across the step's Ray workers
    for batch in ([[c] for c in cands] if pool.workers <= 1 else [cands]):
        results = pool.map(_fold, [(cand, x, y, folds, f, seed, arr) for cand in batch for f in range(n_folds)])
        for j, cand in enumerate(batch):
            pred = np.zeros_like(y, dtype=np.float64)
            for f in range(n_folds):
                pred[folds == f] = results[j * n_folds + f]
            oof[cand.name] = pred
            log(format_count("router selection", len(oof), len(cands), "candidates",
                             f"({cand.name}: cv score {score_at_argmax(pred, y):.4f})"))
    return oof


def _fold(cand: Candidate, x: np.ndarray, y: np.ndarray, folds: np.ndarray, f: int, seed: int,
          tasks: np.ndarray | None) -> np.ndarray:
    """One candidate fitted on every fold but `f`, its predictions on `f`."""
    fit, val = folds != f, folds == f
    return fit_predict(cand, x[fit], y[fit], x[val], seed, tasks[fit] if tasks is not None else None)


BOOTSTRAP_BLOCK = 1 << 25  # resampled values drawn at once (256 MB of float64, as much again of indices)


def bootstrap_means(rng: np.random.Generator, values: np.ndarray, draws: int) -> np.ndarray:
    """The means of `draws` resamples of `values` with replacement. Drawn in one call up to
    BOOTSTRAP_BLOCK values (every result before 10^5-prompt clusters, unchanged), in blocks of draws
    beyond: one call over 8×10^5 prompts × 1,000 draws held 13 GB."""
    if draws * len(values) <= BOOTSTRAP_BLOCK:
        return rng.choice(values, size=(draws, len(values)), replace=True).mean(axis=1)
    rows = max(1, BOOTSTRAP_BLOCK // len(values))
    return np.concatenate([rng.choice(values, size=(min(rows, draws - start), len(values)), replace=True).mean(axis=1)
                           for start in range(0, draws, rows)])


def guard_decisions(oof: np.ndarray, y: np.ndarray, clusters: np.ndarray, folds: np.ndarray, n_clusters: int,
                    confidence: float, draws: int, seed: int) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Per cluster: −1 (the estimator decides) or the index of the best single model to route to."""
    baseline = np.zeros(len(y))
    for f in range(int(folds.max()) + 1):
        fit, val = folds != f, folds == f
        best = cluster_best(y[fit], clusters[fit], n_clusters)
        baseline[val] = y[np.flatnonzero(val), best[clusters[val]]]
    picked = y[np.arange(len(y)), np.argmax(oof, axis=1)]
    gain = np.nan_to_num(picked - baseline)
    full_best = cluster_best(y, clusters, n_clusters)
    rng = np.random.default_rng(seed)
    forced = np.full(n_clusters, -1, dtype=np.int64)
    rows = []
    for c in range(n_clusters):
        g = gain[clusters == c]
        if len(g) == 0:
            forced[c] = full_best[c]
            rows.append({"cluster": c, "prompts": 0, "cv_gain": None, "p_positive": None, "routed_to_best": True})
            continue
        means = bootstrap_means(rng, g, draws)
        p_pos = float(np.mean(means > 0))
        if p_pos < confidence:
            forced[c] = full_best[c]
        rows.append({"cluster": c, "prompts": int(len(g)), "cv_router": float(np.nanmean(picked[clusters == c])),
                     "cv_best_single": float(np.nanmean(baseline[clusters == c])), "cv_gain": float(g.mean()),
                     "p_positive": p_pos, "routed_to_best": bool(forced[c] >= 0)})
    return forced, rows


def macro_quality(y: np.ndarray, clusters: np.ndarray, n_clusters: int) -> np.ndarray:
    """Per model, the mean over clusters (tasks) of its mean label in each: every non-empty cluster
    counts once, whatever its size. Why: a prompt of an unseen task is one more task, not more rows
    of the largest training task; a model best on a large task alone (a maths specialist trained on
    the biggest file) is a poor guess for it, one good across tasks is the safer fixed choice."""
    with warnings.catch_warnings():  # a cluster where a model has no label does not count for it
        warnings.simplefilter("ignore", RuntimeWarning)
        macro = np.nanmean(cluster_means(y, clusters, n_clusters), axis=0)
    return np.where(np.isnan(macro), np.nanmean(y, axis=0), macro)


def unseen_rule(x: np.ndarray, y: np.ndarray, clusters: np.ndarray, centroids: np.ndarray,
                cluster_quality: np.ndarray, confidence: float, draws: int,
                seed: int) -> dict[str, Any]:
    """How to route a prompt far from every training cluster (an unseen task), chosen by leaving each
    cluster out in turn on the training split: its prompts go either to the best single model of the
    other clusters, each cluster weighted once (`macro_quality`, "best_overall"), or to the best model
    of the other cluster each prompt is nearest to ("nearest_cluster"). Why: a new task is often a
    neighbour of a seen one (another coding or maths set), where the neighbour's best model beats the
    overall best; where neighbours mislead, the overall best is the safer fallback. nearest_cluster is
    chosen only where a bootstrap over the held-out prompts gives its gain a probability of at least
    `confidence` of being positive (the guard's test); else best_overall."""
    if len(centroids) < 2:
        return {"rule": "best_overall", "why": "one cluster: nothing to leave out", "leave_one_cluster_out": []}
    sims = x @ centroids.T
    best_of = np.argmax(cluster_quality, axis=1)
    rows, gains = [], []
    with warnings.catch_warnings():  # a model with no label in a group is never its best
        warnings.simplefilter("ignore", RuntimeWarning)
        for c in range(len(centroids)):
            held = clusters == c
            if not held.any():
                continue
            overall = int(np.argmax(macro_quality(y[~held], clusters[~held], len(centroids))))
            s = sims[held].copy()
            s[:, c] = -np.inf
            nearest = best_of[np.argmax(s, axis=1)]
            yh = y[held]
            by_overall, by_nearest = yh[:, overall], yh[np.arange(len(yh)), nearest]
            gains.append(by_nearest - by_overall)
            rows.append({"cluster": c, "prompts": int(held.sum()), "best_overall": float(np.nanmean(by_overall)),
                         "nearest_cluster": float(np.nanmean(by_nearest)),
                         "own_best_single": float(np.nanmax(np.nanmean(yh, axis=0)))})
    gain = np.concatenate(gains)
    gain = gain[~np.isnan(gain)]
    if not len(gain):
        return {"rule": "best_overall", "why": "no held-out prompt has both labels", "leave_one_cluster_out": rows}
    means = bootstrap_means(np.random.default_rng(seed), gain, draws)
    p_pos = float(np.mean(means > 0))
    return {"rule": "nearest_cluster" if p_pos >= confidence else "best_overall",
            "mean_gain_of_nearest": float(gain.mean()), "p_nearest_better": p_pos, "confidence": confidence,
            "leave_one_cluster_out": rows}


def select_router(x: np.ndarray, y: np.ndarray, models: list[str], settings, encoder: dict[str, Any], *,
                  tasks: list[str] | None = None, cost: np.ndarray | None = None,
                  output_tokens: np.ndarray | None = None, seed: int = 0,
                  log: LogFn = print) -> RouterSelection:
    """Cross-validate the family on the training split, refit the winner, add the guard.

    x: (n, d) L2-normalized embeddings; y: (n, m) quality labels (NaN where unknown); `cost` and
    `output_tokens` (n, m) where known give the router's per-model averages."""
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float64)
    folds = fold_ids(len(x), settings.folds, seed)
    cands = candidates(settings)
    oof = cross_validate(cands, x, y, folds, seed, log, tasks)
    ranked = sorted(cands, key=lambda c: -score_at_argmax(oof[c.name], y))
    table = [{"estimator": c.name, "kind": c.kind, "params": c.params,
              "cv_score": score_at_argmax(oof[c.name], y), "cv_brier": brier(oof[c.name], y)} for c in cands]
    chosen = ranked[:1]
    # the ensemble averages the best candidate of each of the best kinds (two KNNs that differ in k
    # make near-identical errors; a KNN and a trained head do not)
    best_per_kind = [c for i, c in enumerate(ranked) if c.kind not in {r.kind for r in ranked[:i]}]
    if settings.ensemble_size > 1 and len(best_per_kind) > 1:
        top = best_per_kind[:settings.ensemble_size]
        ensemble = np.mean([oof[c.name] for c in top], axis=0)
        table.append({"estimator": "ensemble(" + "+".join(c.name for c in top) + ")", "kind": "ensemble",
                      "params": {}, "cv_score": score_at_argmax(ensemble, y), "cv_brier": brier(ensemble, y)})
        if score_at_argmax(ensemble, y) > score_at_argmax(oof[ranked[0].name], y):
            chosen = top
    chosen_oof = np.mean([oof[c.name] for c in chosen], axis=0)
    calibrated = False
    if settings.calibrate:
        # kept only where cross-fitted calibration lowers the Brier score without lowering routing
        cal = cross_fitted_calibration(chosen_oof, y, folds)
        table.append({"estimator": "isotonic-calibrated chosen", "kind": "calibration", "params": {},
                      "cv_score": score_at_argmax(cal, y), "cv_brier": brier(cal, y)})
        if brier(cal, y) < brier(chosen_oof, y) and score_at_argmax(cal, y) >= score_at_argmax(chosen_oof, y):
            maps, chosen_oof, calibrated = isotonic_maps(chosen_oof, y), cal, True

    centroids, cluster_names = cluster_centroids(x, tasks, settings.guard_clusters, seed)
    clusters = assign(x, centroids)
    forced, guard_rows = guard_decisions(chosen_oof, y, clusters, folds, len(centroids),
                                         settings.guard_confidence, settings.guard_bootstrap, seed)
    for row in guard_rows:
        row["name"] = cluster_names[row["cluster"]]
        row["model"] = models[int(forced[row["cluster"]])] if forced[row["cluster"]] >= 0 else None
    guarded_picks = np.where(forced[clusters] >= 0, forced[clusters], np.argmax(chosen_oof, axis=1))
    cluster_quality = cluster_means(y, clusters, len(centroids))  # an empty cluster: the overall means
    cluster_quality = np.where(np.isnan(cluster_quality), np.nanmean(y, axis=0), cluster_quality)

    weights: dict[str, np.ndarray] = {}
    members = []
    for i, cand in enumerate(chosen):
        w = fit_candidate(cand, x, y, seed, tasks)
        name = f"m{i}"
        weights |= {f"{name}/{k}": v for k, v in w.items()}
        members.append({"name": name, "kind": cand.kind, "estimator": cand.name, "params": member_params(cand, w)})

    def average(values: np.ndarray | None) -> np.ndarray:
        if values is None:
            return np.full(len(models), np.nan, dtype=np.float32)
        with warnings.catch_warnings():  # a model with no known value keeps NaN: unknown, not an error
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(np.asarray(values, dtype=np.float64), axis=0).astype(np.float32)

    unseen = unseen_rule(x, y, clusters, centroids, cluster_quality, settings.guard_confidence,
                         settings.guard_bootstrap, seed)
    rule = unseen["rule"]
    unseen_quality = macro_quality(y, clusters, len(centroids))
    unseen["best_overall_model"] = models[int(np.argmax(unseen_quality))]
    unseen["best_overall_model_by_rows"] = models[int(np.nanargmax(np.nanmean(y, axis=0)))]
    for row in unseen["leave_one_cluster_out"]:
        row["name"] = cluster_names[row["cluster"]]
    log(f"router selection: unseen tasks go to {rule.replace('_', ' ')} (leave one cluster out on the training split)")
    own_similarity = (x @ centroids.T).max(axis=1)
    ood = float(np.quantile(own_similarity, settings.unseen_quantile)) if settings.unseen_quantile > 0 else -2.0
    if calibrated:
        weights |= {"calibration/x": np.concatenate([m[0] for m in maps]).astype(np.float32),
                    "calibration/y": np.concatenate([m[1] for m in maps]).astype(np.float32),
                    "calibration/offsets": np.cumsum([0, *(len(m[0]) for m in maps)]).astype(np.int64)}
    weights |= {"guard/centroids": centroids, "guard/ood_threshold": np.asarray([ood], dtype=np.float32),
                "guard/guarded": (forced >= 0).astype(np.int64),
                "guard/cluster_quality": cluster_quality.astype(np.float32),
                "guard/unseen_quality": unseen_quality.astype(np.float32),
                "prior/quality": average(y), "prior/output_tokens": average(output_tokens),
                "prior/cost": average(cost)}
    # the λ an operator's budget, share cap or quality floor maps to, from the same out-of-fold
    # estimates the guard was chosen on (the guard applied, as the runtime applies it)
    estimated = np.where((forced >= 0)[clusters][:, None], cluster_quality[clusters], chosen_oof)
    budget = calibration_table(estimated, average(cost), y, cost, models, seed=seed)
    meta = {"kind": "router", "models": models, "encoder": encoder, "members": members, "budget": budget,
            "guard": {"clusters": cluster_names, "confidence": settings.guard_confidence,
                      "unseen_quantile": settings.unseen_quantile, "unseen_rule": rule,
                      "source": "tasks" if tasks is not None and len(set(tasks)) > 1 else "kmeans"},
            "calibration": "isotonic" if calibrated else None,
            "selection": {"folds": settings.folds, "seed": seed, "chosen": [c.name for c in chosen]}}
    cv = CrossValidatedScores(best_single=float(np.nanmax(np.nanmean(y, axis=0))),
                              oracle=float(np.nanmean(np.nanmax(y, axis=1))),
                              router_unguarded=score_at_argmax(chosen_oof, y),
                              router=score_at_argmax(chosen_oof, y, guarded_picks))
    return RouterSelection(Router(meta, weights), candidates=table, chosen=[c.name for c in chosen],
                           calibrated=calibrated, cv=cv, guard=guard_rows, unseen=unseen)
