"""Per-tier XGBoost latency heads (002 §4.3) and their held-out evaluation on batch profiles.

A head maps what is known at dispatch to an observed latency (TPOT or TTFT). For static-batch
profiles (splitwise) the observable state is the batch itself: batch size, prompt and output
tokens per request, prefill tokens and mean context tokens. Live sweep records add the instance
telemetry of METHODS.md's feature list through the same trainer.

Hyperparameters default to RouteBalance's: depth 6, eta 0.1, subsample 0.8, colsample 0.8,
min_child_weight 5, 500 rounds with early stopping after 30 on a validation slice.

Evaluation holds out whole configurations (batch × prompt × output cells), never random rows of
one configuration, since repeats of a cell are near-identical: leave-one-configuration-out. E2E is
analytic from the heads as in 002: for a static batch, whose decode slots are all free, the prefill
yields the first token and n − 1 decode iterations follow (TTFT + (n − 1) × TPOT), compared with the
measured E2E.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from profiling.batch_fits import BatchMeasurement, fit_tier

FEATURES = ("batch_size", "prompt_tokens", "output_tokens", "prefill_tokens", "mean_context_tokens")
XGB_PARAMS = {"max_depth": 6, "eta": 0.1, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 5,
              "objective": "reg:squarederror", "seed": 0, "nthread": 2}
ROUNDS, EARLY_STOP = 500, 30


def features(ms: list[BatchMeasurement]) -> np.ndarray:
    return np.array([[m.batch_size, m.prompt_tokens, m.output_tokens, m.prefill_tokens, m.mean_context_tokens]
                     for m in ms], dtype=np.float64)


def train_head(x: np.ndarray, y: np.ndarray, params: dict | None = None, seed: int = 0):
    """An XGBoost regressor with early stopping on a seeded 20% validation slice of the rows."""
    import xgboost as xgb

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    n_val = max(1, len(y) // 5)
    val, train = order[:n_val], order[n_val:]
    dtrain = xgb.DMatrix(x[train], label=y[train], feature_names=list(FEATURES))
    dval = xgb.DMatrix(x[val], label=y[val], feature_names=list(FEATURES))
    return xgb.train({**XGB_PARAMS, **(params or {})}, dtrain, num_boost_round=ROUNDS, evals=[(dval, "val")],
                     early_stopping_rounds=EARLY_STOP, verbose_eval=False)


def predict(booster, x: np.ndarray) -> np.ndarray:
    import xgboost as xgb

    return booster.predict(xgb.DMatrix(x, feature_names=list(FEATURES)),
                           iteration_range=(0, booster.best_iteration + 1))


@dataclass
class HeldOutReport:
    configurations: int
    tpot_mae_ms_head: float
    tpot_mae_ms_linear: float
    tpot_mae_ms_prior: float
    ttft_mae_ms_head: float
    ttft_mae_ms_linear: float
    e2e_mape_head: float
    e2e_mape_linear: float
    per_configuration: list[dict] = field(default_factory=list)


def _ape(predicted: list[float], true: np.ndarray) -> float:
    return float((np.abs(np.array(predicted) - true) / true).mean())


def leave_one_configuration_out(ms: list[BatchMeasurement]) -> HeldOutReport:
    """Train on all other configurations, predict the held-out one; errors over all of them.

    Compared: the XGBoost heads, the linear batch fit (W + H·context, k1·tokens + c) trained on the
    same rows, and the static prior (batch-1 decode time per token, for TPOT)."""
    cells = sorted({(m.batch_size, m.prompt_tokens, m.output_tokens) for m in ms})
    rows = []
    for cell in cells:
        train = [m for m in ms if (m.batch_size, m.prompt_tokens, m.output_tokens) != cell]
        test = [m for m in ms if (m.batch_size, m.prompt_tokens, m.output_tokens) == cell]
        x_train, x_test = features(train), features(test)
        tpot_head = train_head(x_train, np.array([m.decode_iter_s for m in train]))
        ttft_head = train_head(x_train, np.array([m.prefill_s for m in train]))
        linear = fit_tier(train)
        tpot_true = np.array([m.decode_iter_s for m in test])
        ttft_true = np.array([m.prefill_s for m in test])
        e2e_true = np.array([m.e2e_s for m in test])
        tpot_h, ttft_h = predict(tpot_head, x_test), predict(ttft_head, x_test)
        tpot_l = np.array([linear.decode_iter_s(m.mean_context_tokens) for m in test])
        ttft_l = np.array([linear.prefill_s(m.prefill_tokens) for m in test])
        rows.append({
            "batch_size": cell[0], "prompt_tokens": cell[1], "output_tokens": cell[2],
            "tpot_ae_ms_head": float(np.abs(tpot_h - tpot_true).mean() * 1e3),
            "tpot_ae_ms_linear": float(np.abs(tpot_l - tpot_true).mean() * 1e3),
            "tpot_ae_ms_prior": float(np.abs(linear.decode_d_s - tpot_true).mean() * 1e3),
            "ttft_ae_ms_head": float(np.abs(ttft_h - ttft_true).mean() * 1e3),
            "ttft_ae_ms_linear": float(np.abs(ttft_l - ttft_true).mean() * 1e3),
            "e2e_ape_head": _ape([m.e2e_from(a, b) for m, a, b in zip(test, ttft_h, tpot_h)], e2e_true),
            "e2e_ape_linear": _ape([m.e2e_from(a, b) for m, a, b in zip(test, ttft_l, tpot_l)], e2e_true),
        })

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    return HeldOutReport(
        configurations=len(cells), tpot_mae_ms_head=mean("tpot_ae_ms_head"),
        tpot_mae_ms_linear=mean("tpot_ae_ms_linear"), tpot_mae_ms_prior=mean("tpot_ae_ms_prior"),
        ttft_mae_ms_head=mean("ttft_ae_ms_head"), ttft_mae_ms_linear=mean("ttft_ae_ms_linear"),
        e2e_mape_head=mean("e2e_ape_head"), e2e_mape_linear=mean("e2e_ape_linear"), per_configuration=rows,
    )
