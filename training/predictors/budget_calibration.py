"""The calibration table that turns an operator's target into the router's λ.

The runtime routes each prompt to argmax(quality − λ·cost). Nobody decides in λ: operators set a
cost per 1,000 requests, a share of traffic the strongest model may take, or a quality floor. This
table says, for a grid of λ, what the router does on prompts it was not fitted on: the mean quality
of the chosen models, the cost per 1,000 requests and each model's share, with bootstrap intervals.

It is computed from the out-of-fold estimates that router selection already makes on the training
split (the guard applied as the runtime applies it), scored with the true labels and costs of those
prompts: the test split stays unread, so the realised cost on it against a target is an honest
measurement (`benchmarks/budget_targets.py`). The runtime's choice of a row is
`routeforge.artifacts.deciding.budget`.
"""

from __future__ import annotations

import numpy as np
from routeforge.artifacts.deciding.router import RouterPrediction

TABLE_FORMAT = 1


def lam_grid(quality: np.ndarray, cost: np.ndarray, points: int = 48) -> np.ndarray:
    """0, then λ at quantiles of the break-even points where a prompt's choice moves from its best
    model to a cheaper one ((q_best − q_j) / (c_best − c_j)), then one past the largest: every λ
    between two grid points changes few decisions, and the last sends every prompt to its cheapest."""
    c = np.broadcast_to(np.nan_to_num(np.asarray(cost, dtype=np.float64), nan=0.0), quality.shape)
    best = np.argmax(quality, axis=1)
    rows = np.arange(len(quality))
    dq = quality[rows, best][:, None] - quality
    dc = c[rows, best][:, None] - c
    with np.errstate(divide="ignore", invalid="ignore"):
        breaks = np.where((dc > 0) & (dq >= 0), dq / dc, np.nan)
    breaks = breaks[np.isfinite(breaks) & (breaks > 0)]
    if breaks.size == 0:
        return np.asarray([0.0])
    inner = np.quantile(breaks, np.linspace(0.0, 1.0, points))
    return np.unique(np.concatenate([[0.0], inner, [float(breaks.max()) * 2.0]]))


def _percentiles(draws: np.ndarray) -> list[float]:
    return [float(np.nanpercentile(draws, 5)), float(np.nanpercentile(draws, 95))]


def calibration_table(quality_hat: np.ndarray, cost_hat: np.ndarray, y: np.ndarray, cost: np.ndarray | None,
                      models: list[str], *, draws: int = 200, seed: int = 0, points: int = 48,
                      source: str = "out-of-fold estimates on the training split") -> dict:
    """The table, as stored in the router's meta (`budget`).

    quality_hat: (n, m) the router's estimates as the runtime would make them (out of fold);
    cost_hat: (m,) the cost per request the runtime predicts per model (NaN: unknown, counted as 0);
    y: (n, m) true quality labels (NaN unknown); cost: (n, m) true costs per request (NaN, or None:
    the predicted cost stands in)."""
    n, m = quality_hat.shape
    cost_hat = np.asarray(cost_hat, dtype=np.float64)
    predicted = np.broadcast_to(cost_hat, (n, m)).astype(np.float64)
    true_cost = predicted.copy() if cost is None else np.where(np.isnan(cost), predicted, cost)
    has_cost = bool(np.isfinite(true_cost).any())
    prediction = RouterPrediction(list(models), quality_hat, np.full((n, m), np.nan), predicted,
                                  np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    rng = np.random.default_rng(seed)
    boot = rng.integers(0, n, size=(draws, n))
    rows = np.arange(n)
    out = []
    for lam in lam_grid(quality_hat, cost_hat if has_cost else np.zeros(m), points):
        picks = prediction.best_index(float(lam))
        got_q = y[rows, picks]
        got_c = true_cost[rows, picks] * 1000.0
        onehot = np.zeros((n, m))
        onehot[rows, picks] = 1.0
        with np.errstate(invalid="ignore"):
            q_draws = np.nanmean(got_q[boot], axis=1) if np.isfinite(got_q).any() else np.full(draws, np.nan)
            c_draws = np.nanmean(got_c[boot], axis=1) if has_cost else np.full(draws, np.nan)
        share_draws = onehot[boot].mean(axis=1)  # (draws, m)
        out.append({
            "lam": float(lam),
            "quality": float(np.nanmean(got_q)) if np.isfinite(got_q).any() else None,
            "quality_interval": _percentiles(q_draws) if np.isfinite(q_draws).any() else None,
            "cost_per_1k": float(np.nanmean(got_c)) if has_cost else None,
            "cost_per_1k_interval": _percentiles(c_draws) if has_cost else None,
            "share": {mod: float(onehot[:, j].mean()) for j, mod in enumerate(models)},
            "share_interval": {mod: _percentiles(share_draws[:, j]) for j, mod in enumerate(models)},
        })
    return {"format": TABLE_FORMAT, "source": source, "prompts": int(n), "interval": "bootstrap 5-95%",
            "draws": draws, "rows": out}
