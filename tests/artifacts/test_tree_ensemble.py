"""The runtime's NumPy tree evaluator predicts what XGBoost predicts, bit for bit, without XGBoost."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb
from routeforge.artifacts.deciding.tree_ensemble import TreeEnsemble


@pytest.mark.parametrize("seed, depth, objective", [(0, 6, "reg:squarederror"), (1, 3, "reg:absoluteerror"),
                                                    (2, 8, "reg:squarederror")])
def test_predictions_equal_xgboost_with_missing_values(seed: int, depth: int, objective: str):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(600, 5)) * [1, 10, 100, 1000, 0.01]
    y = x[:, 0] * 3 + np.sin(x[:, 1]) + 0.001 * x[:, 2] + rng.normal(size=600)
    x[rng.random(x.shape) < 0.1] = np.nan
    booster = xgb.train({"max_depth": depth, "eta": 0.2, "subsample": 0.8, "objective": objective, "seed": seed},
                        xgb.DMatrix(x, label=y), num_boost_round=40)
    trees = TreeEnsemble.from_json(booster.save_raw("json"))
    probe = rng.normal(size=(500, 5)) * [1, 10, 100, 1000, 0.01]
    probe[rng.random(probe.shape) < 0.2] = np.nan
    probe[:50] = x[:50]  # values equal to split thresholds
    assert trees.num_rounds == 40
    np.testing.assert_array_equal(trees.predict(probe), booster.predict(xgb.DMatrix(probe)))


def test_unsupported_models_are_refused_by_name():
    x, y = np.random.default_rng(0).normal(size=(50, 2)), np.arange(50) % 2
    logistic = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(x, label=y), 2)
    with pytest.raises(ValueError, match="binary:logistic"):
        TreeEnsemble.from_json(logistic.save_raw("json"))
    dart = xgb.train({"booster": "dart"}, xgb.DMatrix(x, label=y), 2)
    with pytest.raises(ValueError, match="dart"):
        TreeEnsemble.from_json(dart.save_raw("json"))
    with pytest.raises(ValueError, match="features"):
        TreeEnsemble.from_json(logistic.save_raw("json").replace(b"binary:logistic", b"reg:squarederror")) \
            .predict(np.zeros((1, 3)))
