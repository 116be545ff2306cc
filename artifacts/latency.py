"""Runtime latency model of one tier: predict TPOT, TTFT and E2E from the state at dispatch.

Reads a `latency--<tier>` folder of a bundle: `heads.json` (feature order, prior, residual
quantiles, golden predictions) and the XGBoost JSON models it names. Needs only xgboost and numpy.
A tier imported from coarse end-to-end results has no heads; it predicts with its prior.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class LatencyModel:
    tier: str
    spec: dict[str, Any]
    boosters: dict[str, Any]  # target -> xgboost.Booster

    @classmethod
    def load(cls, folder: Path) -> LatencyModel:
        folder = Path(folder)
        spec = json.loads((folder / "heads.json").read_text())
        boosters = {}
        if spec.get("targets"):
            import xgboost as xgb

            for target, file in spec["targets"].items():
                booster = xgb.Booster()
                booster.load_model(str(folder / file))
                boosters[target] = booster
        return cls(tier=spec["tier"], spec=spec, boosters=boosters)

    @property
    def features(self) -> list[str]:
        return list(self.spec.get("features", []))

    def matrix(self, states: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Feature rows in the heads' order; a missing or None feature is NaN (XGBoost's missing)."""
        return np.array([[math.nan if s.get(f) is None else float(s[f]) for f in self.features] for s in states],
                        dtype=np.float64).reshape(len(states), len(self.features))

    def _length(self, x: np.ndarray) -> np.ndarray:
        return x[:, self.features.index(self.spec["length_feature"] if "length_feature" in self.spec
                                        else "predicted_output_tokens")]

    def predict_matrix(self, x: np.ndarray, output_tokens: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Seconds: `tpot`, `ttft`, `e2e` (analytic: TTFT + (n − 1)·TPOT) and `e2e_direct` when the
        tier has a direct E2E head. `output_tokens` overrides n for prior-only tiers."""
        import xgboost as xgb

        x = np.asarray(x, dtype=np.float64)
        if self.boosters:
            dm = xgb.DMatrix(x, feature_names=self.features)
            out = {k: b.predict(dm).astype(np.float64) for k, b in self.boosters.items()}
            n = self._length(x) if output_tokens is None else np.asarray(output_tokens, dtype=np.float64)
        else:
            if output_tokens is None:
                raise ValueError(f"{self.tier}: a prior-only tier needs output_tokens")
            n = np.asarray(output_tokens, dtype=np.float64)
            out = {"tpot": np.full(len(n), self.spec["prior"]["tpot_s"]),
                   "ttft": np.full(len(n), self.spec["prior"]["ttft_s"])}
        result = {"tpot": out["tpot"], "ttft": out["ttft"], "e2e": out["ttft"] + np.maximum(n - 1, 0) * out["tpot"]}
        if "e2e" in out:
            result["e2e_direct"] = out["e2e"]
        return result

    def predict(self, states: Sequence[Mapping[str, float]]) -> dict[str, np.ndarray]:
        return self.predict_matrix(self.matrix(states))

    def prior(self, output_tokens: np.ndarray) -> dict[str, np.ndarray]:
        """002's static prior: nominal TTFT + (n − 1) × nominal TPOT."""
        n = np.asarray(output_tokens, dtype=np.float64)
        p = self.spec["prior"]
        return {"tpot": np.full(len(n), p["tpot_s"]), "ttft": np.full(len(n), p["ttft_s"]),
                "e2e": p["ttft_s"] + np.maximum(n - 1, 0) * p["tpot_s"]}

    def slo_bound(self, target: str, predicted: np.ndarray, quantile: str = "0.95") -> np.ndarray:
        """predicted + the residual quantile measured on held-out data (an SLO filter's bound)."""
        return predicted + self.spec["residual_quantiles"][target][quantile]

    def golden_max_abs_diff(self) -> float:
        """Largest difference between these heads' predictions and those made at training time."""
        golden = self.spec.get("golden")
        if not golden or not self.boosters:
            return 0.0
        x = np.array([[math.nan if v is None else v for v in row] for row in golden["x"]], dtype=np.float64)
        got = self.predict_matrix(x)
        keys = {"tpot": "tpot", "ttft": "ttft", "e2e": "e2e_direct"}
        return max(float(np.abs(got[keys[k]] - np.asarray(golden[k])).max()) for k in self.boosters)
