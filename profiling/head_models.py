"""Fit, compare and choose a tier's latency heads: the analytic line, line + residual trees, or trees.

A held-out profile cell usually sits at an edge of the grid (the largest batch, the longest
prompt): gradient-boosted trees predict there what they saw at the nearest cell inside, while the
analytic model (000/001's W + H·context decode and k1·tokens prefill, with the terms the physics
adds) keeps its slope. So the residual head starts from that line and lets trees learn only what
the line misses, with the trees constrained monotone non-decreasing in the load features (request
counts), since more concurrent requests must not make a request faster.

The line is fitted by bounded least squares (`scipy.optimize.lsq_linear`): the intercept is free,
every slope is ≥ 0, and gross outliers are left out with the rule of `profiling.batch_fits`.

Which kind serves is chosen per target on data none of them was fitted to: grouped K-fold over
profile configurations for batch profiles, the later validation slice for sweeps. Predictions at
training time go through `artifacts.deciding.latency.Head`, the runtime's own code, so a loaded bundle
reproduces them exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from routeforge.artifacts.deciding.latency import HEAD_KINDS, Head, LinearTerms

# one thread: profiles are hundreds to thousands of rows, where XGBoost's threads cost more than
# they save, and two trainings at once on two cores oversubscribe them (by far the slowest way)
XGB_PARAMS = {"max_depth": 6, "eta": 0.1, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 5,
              "objective": "reg:squarederror", "seed": 0, "nthread": 1}
ROUNDS, EARLY_STOP = 500, 30
Terms = Sequence[Sequence[str]]


def train_trees(x: np.ndarray, y: np.ndarray, feature_names: Sequence[str], params: dict | None = None,
                seed: int = 0, validation: tuple[np.ndarray, np.ndarray] | None = None):
    """An XGBoost regressor with early stopping, trimmed to its best iteration.

    Early stopping watches `validation` when given (sweeps pass the latest training requests, so
    the stopping point is chosen on later data as the held-out test will be); otherwise a seeded
    20% slice of the rows. The returned booster holds only the trees up to the best iteration, so
    any runtime that loads its JSON predicts exactly what it predicted here, with no extra argument.
    Hyperparameters default to RouteBalance's (002): depth 6, eta 0.1, subsample and colsample 0.8,
    min_child_weight 5, up to 500 rounds, early stopping after 30."""
    import xgboost as xgb

    if validation is None:
        order = np.random.default_rng(seed).permutation(len(y))
        n_val = max(1, len(y) // 5)
        validation = (x[order[:n_val]], y[order[:n_val]])
        x, y = x[order[n_val:]], y[order[n_val:]]
    names = list(feature_names)
    dtrain = xgb.DMatrix(x, label=y, feature_names=names)
    dval = xgb.DMatrix(validation[0], label=validation[1], feature_names=names)
    booster = xgb.train({**XGB_PARAMS, "seed": seed, **(params or {})}, dtrain, num_boost_round=ROUNDS,
                        evals=[(dval, "val")], early_stopping_rounds=EARLY_STOP, verbose_eval=False)
    return booster[: booster.best_iteration + 1]


def _gross_outliers(design: np.ndarray, y: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """Off the fit by more than 5 × the median absolute residual and by more than half the time."""
    predicted = design @ coef
    residual = np.abs(y - predicted)
    return (residual > 5 * float(np.median(residual))) & (residual > 0.5 * np.maximum(np.abs(y), np.abs(predicted)))


def bounded_least_squares(design: np.ndarray, y: np.ndarray, free: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """(coef, rows kept): least squares with coef ≥ 0 except where `free`, robust to gross outliers.

    Outliers found against the first fit are left out; the refit judges every row again, so a row
    that only looked off next to an outlier comes back."""
    from scipy.optimize import lsq_linear

    lower = np.where(np.asarray(free, dtype=bool), -np.inf, 0.0)
    scale = np.abs(design).max(axis=0)
    scale[scale == 0] = 1.0

    def solve(rows: np.ndarray) -> np.ndarray:
        return lsq_linear(design[rows] / scale, y[rows], bounds=(lower, np.inf)).x / scale

    every = np.ones(len(y), dtype=bool)
    coef = solve(every)
    keep = ~_gross_outliers(design, y, coef)
    if keep.all() or keep.sum() < design.shape[1] + 1:
        return coef, every
    keep = ~_gross_outliers(design, y, solve(keep))
    return solve(keep), keep


def fit_line(x: np.ndarray, y: np.ndarray, features: Sequence[str], terms: Terms) -> LinearTerms:
    """The analytic part: intercept (the empty term) free, every other term's slope ≥ 0."""
    index = {f: i for i, f in enumerate(features)}
    used = sorted({f for t in terms for f in t})
    fill = {}
    for f in used:
        column = x[:, index[f]]
        fill[f] = float(np.median(column[~np.isnan(column)])) if (~np.isnan(column)).any() else 0.0
    shape = LinearTerms(terms=tuple(tuple(t) for t in terms), coef=(0.0,) * len(terms), fill=fill)
    coef, _ = bounded_least_squares(shape.design(x, features), y, [len(t) == 0 for t in terms])
    return LinearTerms(terms=shape.terms, coef=tuple(float(c) for c in coef), fill=fill)


def monotone_constraints(features: Sequence[str], increasing: Sequence[str]) -> str:
    return "(" + ",".join("1" if f in increasing else "0" for f in features) + ")"


@dataclass(frozen=True)
class HeadRecipe:
    """How to fit one target's heads: the features, the line's terms and the load features.

    Candidates: `line` (the analytic terms alone), `residual` (that line + trees), `trees`, and, with
    `classic_terms`, `classic_line`: 000/001's own two-term line (W + H·context, k1·tokens + c), kept
    as a candidate because on a small grid its fewer slopes can extrapolate better than the fuller
    physics. Both line candidates are served as a `line` head."""

    features: tuple[str, ...]
    terms: tuple[tuple[str, ...], ...]
    load: tuple[str, ...] = ()  # the residual trees are non-decreasing in these
    seed: int = 0
    classic_terms: tuple[tuple[str, ...], ...] | None = None

    @property
    def candidates(self) -> tuple[str, ...]:
        return (("classic_line",) if self.classic_terms else ()) + HEAD_KINDS

    def fit(self, candidate: str, x: np.ndarray, y: np.ndarray,
            validation: tuple[np.ndarray, np.ndarray] | None = None) -> Head:
        if candidate not in self.candidates:
            raise ValueError(f"head candidate {candidate!r} is not one of {self.candidates}")
        if candidate == "trees":
            return Head("trees", None, train_trees(x, y, self.features, seed=self.seed, validation=validation))
        if candidate == "classic_line":
            return Head("line", fit_line(x, y, self.features, self.classic_terms))
        line = fit_line(x, y, self.features, self.terms)
        if candidate == "line":
            return Head("line", line)
        residual_val = None if validation is None else (
            validation[0], validation[1] - line.predict(validation[0], self.features))
        params = {"monotone_constraints": monotone_constraints(self.features, self.load)} if self.load else None
        trees = train_trees(x, y - line.predict(x, self.features), self.features, params=params, seed=self.seed,
                            validation=residual_val)
        return Head("residual", line, trees)


def feature_range(x: np.ndarray, features: Sequence[str]) -> dict[str, list[float] | None]:
    """[min, max] of each feature over the training rows (None where never seen): the runtime's
    `LatencyModel.within_range` tells a router when a state lies beyond what was profiled, where
    no head or interval learned from the profile has been checked."""
    out: dict[str, list[float] | None] = {}
    for i, f in enumerate(features):
        seen = x[:, i][~np.isnan(x[:, i])]
        out[f] = [float(seen.min()), float(seen.max())] if len(seen) else None
    return out


def group_folds(groups: Sequence, folds: int, seed: int = 0) -> np.ndarray:
    """Fold number per row: whole groups (profile configurations) land in one fold, dealt in a seeded
    order; with fewer groups than folds, one group per fold."""
    unique = sorted(set(groups), key=repr)
    order = np.random.default_rng(seed).permutation(len(unique))
    fold_of = {unique[i]: j % min(folds, len(unique)) for j, i in enumerate(order)}
    return np.array([fold_of[g] for g in groups])


@dataclass
class Choice:
    """The candidate chosen for one target, with the evidence."""

    kind: str  # a candidate of `HeadRecipe.candidates`
    cv_mae: dict[str, float]  # seconds, per candidate
    out_of_fold: dict[str, np.ndarray] = field(repr=False)  # per candidate, one prediction per row

    standard_error: dict[str, float] = field(default_factory=dict)  # of each candidate's MAE

    @classmethod
    def lowest(cls, errors: dict[str, np.ndarray], out_of_fold: dict[str, np.ndarray] | None = None) -> Choice:
        """The lowest mean absolute error serves; on a tie, the simpler (earlier) candidate.

        `errors[k]` holds the absolute errors the MAE averages: one per fold for grouped K-fold,
        one per row for a validation slice; their standard error is recorded beside the MAE so a
        reader sees how clear the win was. (The one-standard-error rule, the simplest candidate
        within one SE of the lowest, was tried and made the splitwise heads worse: with five
        folds of a few dozen configurations the SE is wide and the rule served the classic line
        nearly everywhere; docs/results.md.)"""
        mae = {k: float(np.mean(v)) for k, v in errors.items()}
        se = {k: float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0 for k, v in errors.items()}
        kind = min(errors, key=mae.get)  # the first of equals: the simpler
        return cls(kind=kind, cv_mae=mae, out_of_fold=out_of_fold or {}, standard_error=se)

    def record(self) -> dict:
        ranked = sorted(self.cv_mae, key=self.cv_mae.get)
        runner_up = next((k for k in ranked if k != self.kind), None)
        why = f"{self.kind}: lowest held-out MAE ({1e3 * self.cv_mae[self.kind]:.4g} ms"
        why += f"; next {runner_up} {1e3 * self.cv_mae[runner_up]:.4g} ms)" if runner_up else ")"
        return {"chosen": self.kind, "cv_mae_ms": {k: 1e3 * v for k, v in self.cv_mae.items()},
                "standard_error_ms": {k: 1e3 * v for k, v in self.standard_error.items()}, "why": why}


def choose_by_groups(recipe: HeadRecipe, x: np.ndarray, y: np.ndarray, groups: Sequence, folds: int = 5) -> Choice:
    """Grouped K-fold over profile configurations: every candidate predicts each fold from the
    others; the lowest MAE over the folds serves (see `Choice.lowest`)."""
    fold = group_folds(groups, folds, recipe.seed)
    oof = {k: np.full(len(y), np.nan) for k in recipe.candidates}
    for f in np.unique(fold):
        test = fold == f
        for k in recipe.candidates:
            oof[k][test] = recipe.fit(k, x[~test], y[~test]).predict(x[test], recipe.features)
    per_fold = {k: np.array([np.abs(oof[k][fold == f] - y[fold == f]).mean() for f in np.unique(fold)])
                for k in recipe.candidates}
    return Choice.lowest(per_fold, oof)


def relative_error_quantiles(observed: np.ndarray, predicted: np.ndarray, quantiles: Sequence[float],
                             groups: Sequence | None = None) -> dict[str, float]:
    """Quantiles of (observed − predicted) / predicted, the `intervals` the runtime's SLO bound uses.

    The conformal (finite-sample) quantile: the ⌈(n + 1)·q⌉-th smallest of n errors, so a bound
    taken from n held-out errors covers a new request with probability ≥ q when it is exchangeable
    with them. With `groups` (load levels: batch sizes, offered rates), the largest of the groups'
    quantiles: a pooled quantile covers on average over loads, and so under-covers the loads whose
    errors are widest; the largest covers each load level seen."""
    errors = (observed - predicted) / np.maximum(np.abs(predicted), 1e-9)
    labels = np.zeros(len(errors)) if groups is None else np.asarray(groups)

    def conformal(e: np.ndarray, q: float) -> float:
        e = np.sort(e)
        return float(e[min(len(e) - 1, int(np.ceil((len(e) + 1) * q)) - 1)])

    return {str(q): max(conformal(errors[labels == g], q) for g in np.unique(labels)) for q in quantiles}
