"""Looking for signal within a task: a per-task second stage over the estimator's out-of-fold estimates.

    .venv/bin/python -m benchmarks.within_task_stacking [--fleet dcrouter] [--quick]

The router already routes tasks about as well as routing each task to its best model allows; what is
left is within a task. The attempt: per task and model, a ridge logistic regression on the first
stage's estimates of every model (logits) and the prompt's length (log characters), fitted on
out-of-fold estimates, so a prompt's difficulty profile across models and its size can move the
choice within its task. Everything is chosen on the training split by 5-fold cross-validation
(first stage: a KNN, k = 10, prior strength 10, the family's most common winner; second stage: C from
a grid); the test split is scored once, for the configuration CV prefers. Compared: the first stage
alone, the task's best model (chosen on the training split), and the stack.
Writes benchmarks/results/within_task_stacking/<fleet>.json.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.router_family import Candidate, fit_predict
from routeforge.training.predictors.router_selection import fold_ids, score_at_argmax

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from benchmarks.score_fleets import CONFIGS, score_fleet

FIRST = Candidate("knn", {"k": 10, "prior_strength": 10.0})
C_GRID = (0.01, 0.1, 1.0)


def _logit(q: np.ndarray) -> np.ndarray:
    q = np.clip(q, 0.02, 0.98)
    return np.log(q / (1 - q))


def features(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return np.column_stack([_logit(first), np.log1p(lengths)])


def stack_fit_predict(f_fit, y_fit, t_fit, f_pred, t_pred, c: float) -> np.ndarray:
    """Per task and model, ridge logistic on the features (a task or model with one class keeps the
    first stage's estimate, the feature's own column)."""
    from sklearn.linear_model import LogisticRegression

    k = y_fit.shape[1]
    out = 1 / (1 + np.exp(-f_pred[:, :k]))
    for task in np.unique(t_pred):
        fit_rows, pred_rows = t_fit == task, t_pred == task
        for m in range(k):
            y = y_fit[fit_rows, m]
            known = np.isfinite(y)
            labels = (y[known] >= 0.5).astype(int)
            if known.sum() < 20 or labels.min() == labels.max():
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = LogisticRegression(C=c, max_iter=500).fit(f_fit[fit_rows][known], labels)
            out[pred_rows, m] = model.predict_proba(f_pred[pred_rows])[:, 1]
    return out


def run(fleet: str, quick: bool) -> dict:
    data = score_fleet(fleet)
    config, train, test, y_all, tasks = data.config, data.train, data.test, data.quality, data.tasks
    texts = np.asarray(data.texts, dtype=object)
    side = config.training.knn.truncation_side
    x = encode_cached(list(texts), config.encoder, side, Path(config.storage_root) / "cache" / "embeddings")
    lengths = np.array([len(t) for t in texts], dtype=float)
    xt, yt, tt, lt = x[train], y_all[train], tasks[train], lengths[train]
    folds = fold_ids(len(xt), 3 if quick else 5, 0)
    first_oof = np.zeros_like(yt)
    for f in np.unique(folds):
        first_oof[folds == f] = fit_predict(FIRST, xt[folds != f], yt[folds != f], xt[folds == f])
    feats = features(first_oof, lt)
    cv = {"first_stage": score_at_argmax(first_oof, yt)}
    # the task's best model, chosen inside each fold
    task_best = np.zeros_like(yt)
    for f in np.unique(folds):
        for task in np.unique(tt):
            rows = (folds != f) & (tt == task)
            task_best[(folds == f) & (tt == task)] = np.nanmean(yt[rows], axis=0) if rows.any() else 0
    cv["task_best"] = score_at_argmax(task_best, yt)
    stacked = {}
    for c in C_GRID:  # second stage cross-fitted on the first stage's out-of-fold estimates
        pred = np.zeros_like(yt)
        for f in np.unique(folds):
            pred[folds == f] = stack_fit_predict(feats[folds != f], yt[folds != f], tt[folds != f],
                                                 feats[folds == f], tt[folds == f], c)
        stacked[c] = pred
        cv[f"stack_C{c:g}"] = score_at_argmax(pred, yt)
    best_c = max(C_GRID, key=lambda c: cv[f"stack_C{c:g}"])
    per_fold = {name: [score_at_argmax(p[folds == f], yt[folds == f]) for f in np.unique(folds)]
                for name, p in (("first_stage", first_oof), ("stack", stacked[best_c]))}
    diff = np.array(per_fold["stack"]) - np.array(per_fold["first_stage"])
    out = {"fleet": fleet, "first_stage": FIRST.name, "cv_points": {k: 100 * v for k, v in cv.items()},
           "chosen_C": best_c, "cv_stack_minus_first_points": {"mean": float(100 * diff.mean()),
                                                               "fold_std": float(100 * diff.std(ddof=1))}}
    # the test split, once: first stage and stack refitted on the whole training split
    first_test = fit_predict(FIRST, xt, yt, x[test])
    stack_test = stack_fit_predict(feats, yt, tt, features(first_test, lengths[test]), tasks[test], best_c)
    means = {task: np.nanmean(yt[tt == task], axis=0) for task in np.unique(tt)}
    fallback = np.nanmean(yt, axis=0)
    task_test = np.stack([means.get(t, fallback) for t in tasks[test]])
    out["test_points"] = {"first_stage": 100 * score_at_argmax(first_test, y_all[test]),
                          "stack": 100 * score_at_argmax(stack_test, y_all[test]),
                          "task_best": 100 * score_at_argmax(task_test, y_all[test]),
                          "oracle": float(100 * np.nanmean(np.nanmax(y_all[test], axis=1)))}
    path = results_dir("within_task_stacking") / f"{fleet}.json"
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2), flush=True)
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--fleet", default="dcrouter", choices=list(CONFIGS))
    args = parser.parse_args()
    run(args.fleet, args.quick)


if __name__ == "__main__":
    main()
