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

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from profiling.batch_fits import BatchMeasurement, fit_tier

FEATURES = ("batch_size", "prompt_tokens", "output_tokens", "prefill_tokens", "mean_context_tokens")
XGB_PARAMS = {"max_depth": 6, "eta": 0.1, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 5,
              "objective": "reg:squarederror", "seed": 0, "nthread": 2}
ROUNDS, EARLY_STOP = 500, 30


def features(ms: list[BatchMeasurement]) -> np.ndarray:
    return np.array([[m.batch_size, m.prompt_tokens, m.output_tokens, m.prefill_tokens, m.mean_context_tokens]
                     for m in ms], dtype=np.float64)


def train_head(x: np.ndarray, y: np.ndarray, params: dict | None = None, seed: int = 0,
               feature_names: tuple[str, ...] = FEATURES, validation: tuple[np.ndarray, np.ndarray] | None = None):
    """An XGBoost regressor with early stopping, trimmed to its best iteration.

    Early stopping watches `validation` when given (sweeps pass the latest training requests, so
    the stopping point is chosen on later data as the held-out test will be); otherwise a seeded
    20% slice of the rows. The returned booster holds only the trees up to the best iteration, so
    any runtime that loads its JSON predicts exactly what it predicted here, with no extra argument."""
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


def predict(booster, x: np.ndarray, feature_names: tuple[str, ...] = FEATURES) -> np.ndarray:
    import xgboost as xgb

    return booster.predict(xgb.DMatrix(x, feature_names=list(feature_names)))


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
    residuals: dict[str, list[float]] = field(default_factory=dict)  # observed − predicted, per held-out row

    def summary(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("per_configuration", "residuals")}


def _ape(predicted: list[float], true: np.ndarray) -> float:
    return float((np.abs(np.array(predicted) - true) / true).mean())


def leave_one_configuration_out(ms: list[BatchMeasurement]) -> HeldOutReport:
    """Train on all other configurations, predict the held-out one; errors over all of them.

    Compared: the XGBoost heads, the linear batch fit (W + H·context, k1·tokens + c) trained on the
    same rows, and the static prior (batch-1 decode time per token, for TPOT)."""
    cells = sorted({(m.batch_size, m.prompt_tokens, m.output_tokens) for m in ms})
    rows = []
    residuals: dict[str, list[float]] = {"tpot": [], "ttft": [], "e2e": []}
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
        e2e_h = np.array([m.e2e_from(a, b) for m, a, b in zip(test, ttft_h, tpot_h)])
        residuals["tpot"] += (tpot_true - tpot_h).tolist()
        residuals["ttft"] += (ttft_true - ttft_h).tolist()
        residuals["e2e"] += (e2e_true - e2e_h).tolist()
        tpot_l = np.array([linear.decode_iter_s(m.mean_context_tokens) for m in test])
        ttft_l = np.array([linear.prefill_s(m.prefill_tokens) for m in test])
        rows.append({
            "batch_size": cell[0], "prompt_tokens": cell[1], "output_tokens": cell[2],
            "tpot_ae_ms_head": float(np.abs(tpot_h - tpot_true).mean() * 1e3),
            "tpot_ae_ms_linear": float(np.abs(tpot_l - tpot_true).mean() * 1e3),
            "tpot_ae_ms_prior": float(np.abs(linear.decode_d_s - tpot_true).mean() * 1e3),
            "ttft_ae_ms_head": float(np.abs(ttft_h - ttft_true).mean() * 1e3),
            "ttft_ae_ms_linear": float(np.abs(ttft_l - ttft_true).mean() * 1e3),
            "e2e_ape_head": _ape(list(e2e_h), e2e_true),
            "e2e_ape_linear": _ape([m.e2e_from(a, b) for m, a, b in zip(test, ttft_l, tpot_l)], e2e_true),
        })

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    return HeldOutReport(
        configurations=len(cells), tpot_mae_ms_head=mean("tpot_ae_ms_head"),
        tpot_mae_ms_linear=mean("tpot_ae_ms_linear"), tpot_mae_ms_prior=mean("tpot_ae_ms_prior"),
        ttft_mae_ms_head=mean("ttft_ae_ms_head"), ttft_mae_ms_linear=mean("ttft_ae_ms_linear"),
        e2e_mape_head=mean("e2e_ape_head"), e2e_mape_linear=mean("e2e_ape_linear"), per_configuration=rows,
        residuals=residuals,
    )


def write_batch_heads(ms: list[BatchMeasurement], folder: Path, tier: str,
                      quantiles: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99)) -> dict:
    """TPOT and TTFT heads on every batch measurement of a tier, evaluated leave-one-configuration-
    out first; residual quantiles come from those held-out predictions. Written as XGBoost JSON
    plus `heads.json` (features, prior, fit, residuals, golden predictions for the loader check)."""
    fit = fit_tier(ms)
    held = leave_one_configuration_out(ms)
    x = features(ms)
    heads = {"tpot": train_head(x, np.array([m.decode_iter_s for m in ms])),
             "ttft": train_head(x, np.array([m.prefill_s for m in ms]))}
    folder.mkdir(parents=True, exist_ok=True)
    for k, booster in heads.items():
        booster.save_model(str(folder / f"{k}.json"))
    golden = list(range(min(16, len(ms))))
    spec = {
        "tier": tier, "kind": "batch", "features": list(FEATURES), "targets": {k: f"{k}.json" for k in heads},
        "length_feature": "output_tokens", "units": "seconds",
        "prior": {"ttft_s": fit.ttft_p_s, "tpot_s": fit.decode_d_s},
        "residual_quantiles": {k: {str(q): float(np.quantile(v, q)) for q in quantiles}
                               for k, v in held.residuals.items()},
        "e2e": "analytic: ttft + max(n - 1, 0) * tpot (a static batch: every decode slot is free)",
        "trees": {k: int(h.num_boosted_rounds()) for k, h in heads.items()},
        "golden": {"x": x[golden].tolist(), **{k: predict(h, x[golden]).tolist() for k, h in heads.items()}},
        "evaluation": {"held_out": held.summary(), "per_configuration": held.per_configuration},
        "fit": fit.to_dict(),
    }
    (folder / "heads.json").write_text(json.dumps(spec, indent=2))
    return spec
