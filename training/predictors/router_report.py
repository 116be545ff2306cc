"""Fit the router on a training split and evaluate it once on a test split: the numbers of the
`router_selection` report (mean score at argmax, gap closed, per cluster against each cluster's best
single model, Brier score, AIQ and lead over the single-model hull where costs exist, batch latency).

`fit_and_evaluate` passes the test labels to `evaluate` only, after selection has finished; a test
shuffles them and checks that the chosen estimator and its weights do not move.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.router import Router
from routeforge.training.embeddings import TrainingEncoder
from routeforge.training.predictors.quality_cost_eval import auto_lambdas, hull_comparison
from routeforge.training.predictors.router_selection import (
    CrossValidatedScores,
    RouterSelection,
    brier,
    score_at_argmax,
    select_router,
)


def gap_closed(router: float, best_single: float, oracle: float) -> float:
    """(router − best single) / (oracle − best single)."""
    return (router - best_single) / (oracle - best_single) if oracle > best_single else float("nan")


def evaluate(router: Router, x: np.ndarray, y: np.ndarray, cost: np.ndarray | None = None,
             tasks: list[str] | None = None, texts: list[str] | None = None) -> dict[str, Any]:
    """The router on labelled prompts (embeddings `x`, labels `y`, true costs where known); with
    `texts`, known training prompts are routed by their observed scores as `Router.predict` does."""
    pred = router.predict_embeddings(x)
    if texts is not None:
        pred = router.apply_recall(texts, pred)
    picks = pred.best_index(0.0)
    means = np.nanmean(y, axis=0)
    score = score_at_argmax(pred.quality, y, picks)
    out: dict[str, Any] = {
        "prompts": int(len(y)), "router": score, "best_single": float(np.nanmax(means)),
        "best_single_model": router.models[int(np.nanargmax(means))],
        "oracle": float(np.nanmean(np.nanmax(y, axis=1))), "brier": brier(pred.quality, y),
        "guarded_share": float(pred.guarded.mean()), "unseen_share": float(pred.unseen.mean()),
        "recalled_share": float(pred.recalled.mean()) if pred.recalled is not None else 0.0,
        "share": {m: float(s) for m, s in zip(router.models, np.bincount(picks, minlength=len(router.models))
                                              / max(len(picks), 1)) if s > 0},
    }
    out["gap_closed"] = gap_closed(score, out["best_single"], out["oracle"])
    groups = {"cluster": [router.meta["guard"]["clusters"][c] for c in pred.cluster]}
    if tasks is not None:
        groups["task"] = list(tasks)
    for kind, labels in groups.items():
        arr = np.asarray(labels)
        rows = {}
        for g in sorted(set(labels)):
            sel = arr == g
            best = float(np.nanmax(np.nanmean(y[sel], axis=0)))
            rows[g] = {"prompts": int(sel.sum()), "best_single": best,
                       "router": score_at_argmax(pred.quality[sel], y[sel], picks[sel]),
                       "best_single_model": router.models[int(np.nanargmax(np.nanmean(y[sel], 0)))]}
            rows[g]["lead"] = rows[g]["router"] - best
        out[f"per_{kind}"] = rows
    if cost is not None and not np.isnan(cost).all():
        singles = [(float(np.nanmean(cost[:, j])), float(means[j])) for j in range(len(router.models))]
        sweep = []
        for lam in auto_lambdas(pred):  # the KNN evaluation's grid: 0 and six decades around q/c
            p = pred.best_index(float(lam))
            rows_ = np.arange(len(p))
            sweep.append((float(np.nanmean(cost[rows_, p])), float(np.nanmean(y[rows_, p]))))
        out["hull"] = hull_comparison(sweep, singles)
    return out


def batch_latency(router: Router, texts: list[str], batch: int = 64, repeats: int = 5) -> dict[str, float]:
    """Median seconds to route one batch of `batch` prompts on this CPU, encoding included (with the
    router's own encoder when it has one, else the PyTorch encoder it was trained with)."""
    texts = (texts * (batch // max(len(texts), 1) + 1))[:batch]
    if router.encoder is None:
        router.encoder = TrainingEncoder(router.meta["encoder"]["ref"])
    router.predict(texts[:2])  # load the encoder
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        router.predict(texts)
        times.append(time.perf_counter() - t)
    median = float(np.median(times))
    return {"batch": batch, "median_seconds": median, "per_prompt_ms": median / batch * 1e3}


@dataclass
class RouterFit:
    """`fit_and_evaluate`'s result: the selection on the winning truncation side, each side's
    cross-validated scores, and the one evaluation on the test split (None without test labels)."""

    selection: RouterSelection
    truncation_side: str
    cv_by_truncation_side: dict[str, CrossValidatedScores]
    test: dict[str, Any] | None = None

    @property
    def router(self) -> Router:
        return self.selection.router

    def report(self) -> dict[str, Any]:
        """The JSON form of `router_selection.json` (the selection's, plus the sides and the test)."""
        out = self.selection.report() | {
            "truncation_side": self.truncation_side,
            "cv_by_truncation_side": {side: asdict(cv) for side, cv in self.cv_by_truncation_side.items()}}
        return out | ({"test": self.test} if self.test is not None else {})


def fit_and_evaluate(x_train: np.ndarray | dict[str, tuple[np.ndarray, np.ndarray]], y_train: np.ndarray,
                     x_test: np.ndarray | None, y_test: np.ndarray | None, models: list[str], settings,
                     encoder: dict[str, Any], *, tasks_train: list[str] | None = None,
                     tasks_test: list[str] | None = None, cost_train: np.ndarray | None = None,
                     cost_test: np.ndarray | None = None, tokens_train: np.ndarray | None = None, seed: int = 0,
                     log: Callable[[str], None] = print) -> RouterFit:
    """Select on the training split (test untouched), then evaluate once on the test split.

    `x_train` may instead map encoder truncation sides to (train, test) embeddings: selection runs
    on each, the side with the higher cross-validated score wins (ties: the first), and only the
    winner sees the test split. `y_test` None: cross-validated numbers only."""
    views = x_train if isinstance(x_train, dict) else {encoder.get("truncation_side", "right"): (x_train, x_test)}
    chosen: tuple[str, RouterSelection] | None = None
    by_side = {}
    for side, (xs, _) in views.items():
        selection = select_router(xs, y_train, models, settings, {**encoder, "truncation_side": side},
                                  tasks=tasks_train, cost=cost_train, output_tokens=tokens_train, seed=seed, log=log)
        by_side[side] = selection.cv
        if chosen is None or selection.cv.router > chosen[1].cv.router:
            chosen = (side, selection)
    side, selection = chosen
    test = None
    if y_test is not None and len(y_test):
        test = evaluate(selection.router, views[side][1], y_test, cost_test, tasks_test)
    return RouterFit(selection, side, by_side, test)
