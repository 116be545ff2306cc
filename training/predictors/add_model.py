"""A model that joins the fleet after the router was trained, from a few labelled prompts of its own.

Retraining the router for every new model means generating and scoring the whole prompt set for
it and re-running selection; a router team adding a model wants it routed now, from the labels it
can afford (RouteLLM issues #58 and #30). The new model's quality is read off the trained models'
estimates for the same prompt: in logit space, q_new(x) = σ(Σ_j w_j·logit(q̂_j(x)) + b), an
item-response-style model in which the trained models' estimates describe the prompt's difficulty
profile and (w, b) is the new model's position on it. The prior is the average trained model
(w_j = 1/K, b = 0): ridge toward it, with its strength chosen by K-fold cross-validation on the new
labels, so 25 labels move the model little and 400 let it differ. Residuals left per guard cluster
become a shrunk offset (n_c / (n_c + `cluster_shrinkage`)), which is what lets a model that is
strong on one task alone stand out there.

The guard is extended the same way: each cluster's row of training means gains the new model's
column, the mean of its labels in that cluster shrunk toward the fitted model applied to the
cluster's own row of means; the unseen-task row averages the clusters, each once. Nothing else
of the router changes, so the models it knew route exactly as before among themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.router import Router, _sigmoid, logit, text_key

RIDGE_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
CONFIDENCE_Z = 1.0  # how many standard errors the new model's estimate is lowered by (`add_model`)


@dataclass
class StackedFit:
    coef: np.ndarray
    bias: float
    ridge: float


def _fit(f: np.ndarray, y: np.ndarray, ridge: float, prior: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares of σ(f·w + b) against y, plus ridge·||w − prior||² / n (b free)."""
    from scipy.optimize import minimize

    n, k = f.shape

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:k], theta[k]
        p = _sigmoid(f @ w + b)
        r = p - y
        g = 2 * r * p * (1 - p) / n
        reg = w - prior
        return float(np.mean(r ** 2) + ridge * reg @ reg / n), np.append(f.T @ g + 2 * ridge * reg / n, g.sum())

    start = np.append(prior, 0.0)
    result = minimize(loss, start, jac=True, method="L-BFGS-B")
    return result.x[:k], float(result.x[k])


def fit_stacked(base: np.ndarray, y: np.ndarray, folds: int = 5, seed: int = 0) -> StackedFit:
    """(w, b) of the new model over the trained models' estimates `base` (n, K), the ridge toward
    the average trained model chosen by `folds`-fold cross-validation (squared error) on the labels."""
    f = logit(base)
    prior = np.full(f.shape[1], 1.0 / f.shape[1])
    n = len(y)
    if n < 2 * folds:
        ridge = max(RIDGE_GRID)  # too few labels to choose: stay near the average model
    else:
        order = np.random.default_rng(seed).permutation(n)
        fold = np.empty(n, dtype=int)
        fold[order] = np.arange(n) % folds
        errors = []
        for ridge in RIDGE_GRID:
            sq = 0.0
            for k in range(folds):
                w, b = _fit(f[fold != k], y[fold != k], ridge, prior)
                sq += float(np.sum((_sigmoid(f[fold == k] @ w + b) - y[fold == k]) ** 2))
            errors.append(sq)
        ridge = RIDGE_GRID[int(np.argmin(errors))]
    w, b = _fit(f, y, ridge, prior)
    return StackedFit(w, b, ridge)


def add_model(router: Router, name: str, x: np.ndarray, y: np.ndarray, *, output_tokens: float | None = None,
              cost: float | None = None, texts: list[str] | None = None, cluster_shrinkage: float = 10.0,
              confidence: float = CONFIDENCE_Z, seed: int = 0,
              holdout: tuple[list[str], list[float]] | None = None) -> dict[str, Any]:
    """Add `name` to `router` (in place) from its labels `y` (0…1) on prompts embedded as `x`;
    `output_tokens` / `cost`: its mean output length and cost per prompt where known (else the
    trained models' mean); `texts`: the labelled prompts, recalled exactly like training prompts
    where the router recalls known prompts; `holdout`: labelled prompts kept out of the fit, recorded
    (`holdout_record`) for the release gate to score the model with. Returns what was fitted."""
    if name in router.models:
        raise ValueError(f"add_model: {name!r} is already one of the router's models {router.models}")
    y = np.asarray(y, dtype=float)
    x = np.asarray(x, dtype=np.float32)
    known = np.isfinite(y)
    if known.sum() < 2:
        raise ValueError(f"add_model: {name!r} needs at least 2 labelled prompts, got {int(known.sum())}")
    if ((y[known] < 0) | (y[known] > 1)).any():
        raise ValueError(f"add_model: {name!r} labels must lie in [0, 1]")
    x, y = x[known], y[known]
    base = router.base_estimate(x)
    fit = fit_stacked(base, y, seed=seed)
    centroids = router.weights["guard/centroids"]
    cluster = np.argmax(x @ centroids.T, axis=1)
    n_clusters = len(centroids)
    residual = y - _sigmoid(logit(base) @ fit.coef + fit.bias)
    counts = np.bincount(cluster, minlength=n_clusters).astype(float)
    offset = np.bincount(cluster, weights=residual, minlength=n_clusters) / (counts + cluster_shrinkage)
    # a lower confidence bound, not the point estimate: the new model wins a prompt only where its
    # few labels make the lead believable (the residual spread over the cluster's effective count)
    spread = float(np.sqrt(np.mean(residual ** 2)))
    offset = offset - confidence * spread / np.sqrt(counts + 1.0)
    router.weights[f"added/{name}/coef"] = fit.coef.astype(np.float64)
    router.weights[f"added/{name}/bias"] = np.array([fit.bias])
    router.weights[f"added/{name}/cluster_offset"] = offset

    # the guard's rows of per-cluster means: the fitted model on the cluster's own row (the trained
    # models' means there), pulled toward the mean of the labels seen in the cluster
    trained = len(router.models) - len(router.added_models)
    rows = router.weights["guard/cluster_quality"]
    from_row = np.clip(_sigmoid(logit(rows[:, :trained]) @ fit.coef + fit.bias) + offset, 0, 1)
    label_mean = np.bincount(cluster, weights=y, minlength=n_clusters) / np.maximum(counts, 1)
    column = (counts * label_mean + cluster_shrinkage * from_row) / (counts + cluster_shrinkage)
    router.weights["guard/cluster_quality"] = np.column_stack([rows, column])
    if "guard/unseen_quality" in router.weights:
        router.weights["guard/unseen_quality"] = np.append(router.weights["guard/unseen_quality"], column.mean())
    prior = router.weights
    prior["prior/quality"] = np.append(prior["prior/quality"], y.mean())
    tokens = prior["prior/output_tokens"]
    prior["prior/output_tokens"] = np.append(tokens, output_tokens if output_tokens is not None
                                             else np.nanmean(tokens) if np.isfinite(tokens).any() else np.nan)
    costs = prior["prior/cost"]
    prior["prior/cost"] = np.append(costs, cost if cost is not None
                                    else np.nanmean(costs) if np.isfinite(costs).any() else np.nan)
    if "recall/quality" in router.weights:
        observed = router.weights["recall/quality"]
        router.weights["recall/quality"] = np.column_stack([observed, np.full(len(observed), np.nan)])
    router.models.append(name)
    router.meta["models"] = router.models
    record = {"name": name, "labels": int(len(y)), "rule": "stacked_logit", "ridge": fit.ridge,
              "cluster_shrinkage": cluster_shrinkage, "confidence_z": confidence, "label_mean": float(y.mean()),
              "holdout": holdout_record(*(holdout or ([], [])))}
    router.meta.setdefault("added_models", []).append(record)
    if texts is not None and "recall/keys" in router.weights:
        _recall_labels(router, [t for t, k in zip(texts, known) if k], y)
    return record


MAX_HOLDOUT_KEYS = 5000  # held-out labels kept by prompt (the rest count in the mean alone)


def holdout_record(texts: list[str], labels: list[float], z: float = CONFIDENCE_Z) -> dict[str, Any]:
    """The held-out labels as the release gate reads them (`registry.release.evaluate_bundle`):
    each prompt's label by its text key (hex), and their mean less `z` standard errors, the score an
    evaluation prompt routed to the model without a label of its own gets. No labels: a lower bound
    of 0, so an unlabelled model is never scored above what it showed."""
    y = np.asarray(labels, dtype=float)
    n = len(y)
    mean = float(y.mean()) if n else 0.0
    lower = max(0.0, mean - z * float(y.std(ddof=1)) / np.sqrt(n)) if n > 1 else 0.0
    return {"labels": n, "mean": mean, "lower": lower,
            "by_prompt": {text_key(t).hex(): float(v) for t, v in list(zip(texts, y))[:MAX_HOLDOUT_KEYS]}}


def _recall_labels(router: Router, texts: list[str], y: np.ndarray) -> None:
    """The new model's observed labels into the recall table (a known prompt's row gains them; an
    unknown prompt becomes a row of its own, NaN for the other models)."""
    keys = list(router.weights["recall/keys"])
    observed = router.weights["recall/quality"]
    index = {bytes(k): i for i, k in enumerate(keys)}
    extra_keys, extra_rows = [], []
    for text, label in zip(texts, y):
        key = text_key(text)
        if key in index:
            observed[index[key], -1] = label
        else:
            row = np.full(observed.shape[1], np.nan)
            row[-1] = label
            extra_keys.append(np.frombuffer(key, dtype=np.uint8))
            extra_rows.append(row)
    if extra_rows:
        router.weights["recall/keys"] = np.vstack([router.weights["recall/keys"], np.stack(extra_keys)])
        router.weights["recall/quality"] = np.vstack([observed, np.stack(extra_rows)])
    router._recall_index = router._index_recall()
