"""Runtime latency model of one tier: predict TPOT, TTFT and E2E from the state at dispatch.

Reads a `latency--<tier>` folder of a bundle: `heads.json` and the XGBoost JSON models it names.
Needs only NumPy: the trees are evaluated by `routeforge.artifacts.deciding.tree_ensemble` (bit-identical to
XGBoost's predictor), so a router service does not install XGBoost.

Each target (`tpot`, `ttft`, and for live sweeps a direct `e2e`) is served by one of three kinds of
head, recorded in `heads.json` with why it was chosen:

- `line`: the tier's analytic latency model alone, a linear combination of named terms, each a
  product of features (`[]` is the intercept, `["batch_size", "prompt_tokens", "prompt_tokens"]` is
  b·p²). A missing feature takes the training median recorded in `fill`.
- `residual`: the line plus gradient-boosted trees fitted to what the line gets wrong.
- `trees`: gradient-boosted trees alone (RouteBalance's heads).

A line extrapolates where trees cannot (held-out cells at the edge of a profiled grid), and trees
learn what the line's form misses; the residual head has both. Format 1 files (before `heads`
existed) list only `targets` and are served as `trees`.

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
from routeforge.artifacts.deciding.components import register_component
from routeforge.artifacts.deciding.tree_ensemble import TreeEnsemble

HEAD_KINDS = ("line", "residual", "trees")


@dataclass(frozen=True)
class LinearTerms:
    """Σ coef_i · Π features(term_i): the analytic part of a head, in JSON."""

    terms: tuple[tuple[str, ...], ...]
    coef: tuple[float, ...]
    fill: Mapping[str, float]  # value used where a feature is missing (NaN)

    @classmethod
    def from_json(cls, spec: Mapping[str, Any]) -> LinearTerms:
        return cls(terms=tuple(tuple(t) for t in spec["terms"]), coef=tuple(float(c) for c in spec["coef"]),
                   fill={k: float(v) for k, v in spec["fill"].items()})

    def to_json(self) -> dict[str, Any]:
        return {"terms": [list(t) for t in self.terms], "coef": list(self.coef), "fill": dict(self.fill)}

    def design(self, x: np.ndarray, features: Sequence[str]) -> np.ndarray:
        """One column per term, missing features filled."""
        index = {f: i for i, f in enumerate(features)}
        filled = {f: np.where(np.isnan(x[:, index[f]]), self.fill[f], x[:, index[f]])
                  for f in {f for t in self.terms for f in t}}
        columns = [np.prod([filled[f] for f in t], axis=0) if t else np.ones(len(x)) for t in self.terms]
        return np.column_stack(columns) if columns else np.zeros((len(x), 0))

    def predict(self, x: np.ndarray, features: Sequence[str]) -> np.ndarray:
        """Summed term by term in a fixed order, not by a matrix product: BLAS picks its kernel by
        the matrix's shape, so the same row can differ in the last bit between a batch of 16 and
        one of 2,000, and the bundle's check compares predictions exactly."""
        out = np.zeros(len(x), dtype=np.float64)
        for c, column in zip(self.coef, self.design(x, features).T):
            out = out + c * column
        return out


@dataclass
class Head:
    """One target's predictor: `line` + `booster` where each is present (see the module docstring)."""

    kind: str
    line: LinearTerms | None = None
    booster: TreeEnsemble | None = None  # trees trained by XGBoost, evaluated in NumPy

    def __post_init__(self):
        if self.booster is not None and not isinstance(self.booster, TreeEnsemble):  # an xgboost.Booster
            self.booster = TreeEnsemble.from_json(self.booster.save_raw("json"))
        if self.kind not in HEAD_KINDS:
            raise ValueError(f"head kind {self.kind!r} is not one of {HEAD_KINDS}")
        if (self.line is None) != (self.kind == "trees") or (self.booster is None) != (self.kind == "line"):
            raise ValueError(f"a {self.kind} head needs {'a line' if self.kind != 'trees' else 'no line'} "
                             f"and {'trees' if self.kind != 'line' else 'no trees'}")

    def predict(self, x: np.ndarray, features: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(x), dtype=np.float64)
        if self.line is not None:
            out = out + self.line.predict(x, features)
        if self.booster is not None:
            out = out + self.booster.predict(x).astype(np.float64)
        return out

    def save(self, folder: Path, target: str, selection: dict[str, Any]) -> dict[str, Any]:
        """Write the trees (if any) as `<target>.json` in `folder`; returns the `heads.json` entry
        `from_spec` reads back, with the record of why this head serves."""
        entry: dict[str, Any] = {"kind": self.kind, "line": self.line.to_json() if self.line else None,
                                 "selection": selection}
        if self.booster is not None:
            self.booster.save(Path(folder) / f"{target}.json")
            entry |= {"trees": f"{target}.json", "rounds": self.booster.num_rounds}
        return entry

    @classmethod
    def from_spec(cls, folder: Path, entry: Mapping[str, Any]) -> Head:
        line = LinearTerms.from_json(entry["line"]) if entry.get("line") else None
        booster = TreeEnsemble.load(Path(folder) / entry["trees"]) if entry.get("trees") else None
        return cls(entry["kind"], line, booster)


@register_component("latency_heads")
@dataclass
class LatencyModel:
    tier: str
    spec: dict[str, Any]
    heads: dict[str, Head]  # target -> head

    @classmethod
    def load(cls, folder: Path) -> LatencyModel:
        folder = Path(folder)
        spec = json.loads((folder / "heads.json").read_text())
        if "heads" in spec:
            heads = {target: Head.from_spec(folder, entry) for target, entry in spec["heads"].items()}
        else:  # format 1: XGBoost heads only
            heads = {t: Head("trees", None, TreeEnsemble.load(folder / f))
                     for t, f in (spec.get("targets") or {}).items()}
        return cls(tier=spec["tier"], spec=spec, heads=heads)

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
        x = np.asarray(x, dtype=np.float64)
        if self.heads:
            out = {k: h.predict(x, self.features) for k, h in self.heads.items()}
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
        """Seconds for each state at dispatch (a mapping of this tier's `features`): checked first
        (`check_states`), so a misspelt or missing feature is an error, never a silent NaN."""
        self.check_states(states)
        return self.predict_matrix(self.matrix(states))

    def predict_one(self, state: Mapping[str, float]) -> dict[str, float]:
        """Seconds for one state at dispatch, as plain floats (`tpot`, `ttft`, `e2e`, …): what a
        router service asks per request; `predict` takes a batch and returns arrays."""
        return {key: float(values[0]) for key, values in self.predict([state]).items()}

    def required_features(self) -> list[str]:
        """The features the heads were trained with values for (their `range`); the others (a
        server's gauges where the profile had no /metrics) were always missing and may stay so."""
        ranges = self.spec.get("range")
        return [f for f in self.features if ranges is None or f in ranges]

    def check_states(self, states: Sequence[Mapping[str, float]]) -> None:
        """Raise naming the state and feature: an unknown feature, a required one missing or None, or
        a value that is not a finite number ≥ 0."""
        known, required = set(self.features), self.required_features()
        for i, state in enumerate(states):
            unknown = sorted(set(state) - known)
            if unknown:
                raise ValueError(f"{self.tier}: state {i}: unknown feature(s) {unknown}; this tier's heads take "
                                 f"{self.features}")
            missing = [f for f in required if state.get(f) is None]
            if missing:
                raise ValueError(f"{self.tier}: state {i}: missing feature(s) {missing} (required: {required})")
            for f, v in state.items():
                if v is None:
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                        or not math.isfinite(float(v)) or float(v) < 0:
                    raise ValueError(f"{self.tier}: state {i}: feature {f!r} must be a finite number ≥ 0, got {v!r}")

    def prior(self, output_tokens: np.ndarray) -> dict[str, np.ndarray]:
        """002's static prior: nominal TTFT + (n − 1) × nominal TPOT."""
        n = np.asarray(output_tokens, dtype=np.float64)
        p = self.spec["prior"]
        return {"tpot": np.full(len(n), p["tpot_s"]), "ttft": np.full(len(n), p["ttft_s"]),
                "e2e": p["ttft_s"] + np.maximum(n - 1, 0) * p["tpot_s"]}

    def slo_bound(self, target: str, predicted: np.ndarray, quantile: str = "0.95") -> np.ndarray:
        """An upper bound an SLO filter can compare with its limit, from held-out errors.

        With `intervals` (format 2): predicted × (1 + q), q the quantile of the relative error
        (observed − predicted) / predicted measured on data the heads were not fitted to, so the
        bound widens with the latency it bounds. Otherwise predicted + the absolute residual quantile."""
        interval = self.spec.get("intervals", {}).get(target)
        if interval is not None:
            return np.asarray(predicted) * (1.0 + interval["quantiles"][quantile])
        return predicted + self.spec["residual_quantiles"][target][quantile]

    def within_range(self, x: np.ndarray) -> np.ndarray:
        """Per row: every known feature inside the [min, max] the heads were trained on. Outside,
        a head extrapolates and its SLO bound was never checked (on splitwise tiers, held-out
        batches larger than any in training broke the p95 bound); format 1 files have no range."""
        x = np.asarray(x, dtype=np.float64)
        ok = np.ones(len(x), dtype=bool)
        for i, f in enumerate(self.features):
            bounds = self.spec.get("range", {}).get(f)
            if bounds is not None:
                column = x[:, i]
                ok &= np.isnan(column) | ((column >= bounds[0]) & (column <= bounds[1]))
        return ok

    def golden_max_abs_diff(self) -> float:
        """Largest difference between these heads' predictions and those made at training time."""
        golden = self.spec.get("golden")
        if not golden or not self.heads:
            return 0.0
        x = np.array([[math.nan if v is None else v for v in row] for row in golden["x"]], dtype=np.float64)
        got = self.predict_matrix(x)
        keys = {"tpot": "tpot", "ttft": "ttft", "e2e": "e2e_direct"}
        return max(float(np.abs(got[keys[k]] - np.asarray(golden[k])).max()) for k in self.heads)
