"""Gradient-boosted regression trees read from XGBoost's JSON model format and evaluated in NumPy.

The latency heads are trained with XGBoost and stored in its documented JSON format (language
neutral: any runtime can read the node arrays). A router service only predicts, so it should not
need the XGBoost library (and its native build) for that: this evaluates the same trees the way
XGBoost's CPU predictor does, so predictions agree to the last bit:

- features are compared as float32 (a DMatrix stores float32): `x < split_condition` goes left;
- a missing value (NaN) follows the node's `default_left`;
- leaf values (held in `split_conditions` at leaves) are summed tree by tree in float32, onto the
  model's `base_score` margin.

Supported: `gbtree` boosters with numerical splits, one output, identity-link regression objectives
(`reg:squarederror`, `reg:absoluteerror`, `reg:pseudohubererror`, `reg:quantileerror` with one
quantile). Anything else (categorical splits, `dart`, multi-output, a link function) is refused at
load with its name, never mis-predicted. `tests/artifacts/test_tree_ensemble.py` checks the
agreement with XGBoost itself on random models, NaNs included.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IDENTITY_OBJECTIVES = ("reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror", "reg:quantileerror")


@dataclass(frozen=True)
class _Tree:
    left: np.ndarray  # int32, -1 at leaves
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray  # float32; the leaf value at leaves
    default_left: np.ndarray  # bool
    depth: int


@dataclass(frozen=True)
class TreeEnsemble:
    """The trees of one XGBoost regressor; `predict(x)` equals `Booster.predict(DMatrix(x))`."""

    trees: tuple[_Tree, ...]
    base_score: np.float32
    num_feature: int
    raw: bytes  # the JSON it was read from, written back unchanged by `save`

    @property
    def num_rounds(self) -> int:
        return len(self.trees)

    @classmethod
    def from_json(cls, raw: bytes | str) -> TreeEnsemble:
        raw = raw.encode() if isinstance(raw, str) else bytes(raw)
        learner = json.loads(raw)["learner"]
        booster = learner["gradient_booster"]
        objective = learner.get("objective", {}).get("name")
        if booster.get("name") != "gbtree":
            raise ValueError(f"booster {booster.get('name')!r} is not supported (gbtree only)")
        if objective not in IDENTITY_OBJECTIVES:
            raise ValueError(f"objective {objective!r} is not supported (identity-link regression only)")
        param = learner["learner_model_param"]
        if int(param.get("num_target", "1")) != 1 or int(param.get("num_class", "0")) > 1:
            raise ValueError("multi-output models are not supported")
        base = str(param["base_score"]).strip("[]").split(",")
        if len(base) != 1:
            raise ValueError(f"base_score {param['base_score']!r}: one output expected")
        trees = []
        for t in booster["model"]["trees"]:
            if any(int(s) != 0 for s in t.get("split_type", [])):
                raise ValueError(f"tree {t.get('id')}: categorical splits are not supported")
            left = np.asarray(t["left_children"], dtype=np.int32)
            trees.append(_Tree(left, np.asarray(t["right_children"], dtype=np.int32),
                               np.asarray(t["split_indices"], dtype=np.int64),
                               np.asarray(t["split_conditions"], dtype=np.float32),
                               np.asarray(t["default_left"], dtype=bool), _depth(left, t["right_children"])))
        return cls(tuple(trees), np.float32(float(base[0])), int(param["num_feature"]), raw)

    @classmethod
    def load(cls, path: Path) -> TreeEnsemble:
        return cls.from_json(Path(path).read_bytes())

    def save(self, path: Path) -> None:
        Path(path).write_bytes(self.raw)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """float32 predictions for the rows of `x` (NaN = missing), as XGBoost computes them."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.num_feature:
            raise ValueError(f"expected rows of {self.num_feature} features, got shape {x.shape}")
        rows = np.arange(len(x))
        out = np.full(len(x), self.base_score, dtype=np.float32)
        for tree in self.trees:
            node = np.zeros(len(x), dtype=np.int32)
            for _ in range(tree.depth):
                inner = tree.left[node] >= 0
                if not inner.any():
                    break
                value = x[rows, np.where(inner, tree.feature[node], 0)]
                go_left = np.where(np.isnan(value), tree.default_left[node], value < tree.threshold[node])
                node = np.where(inner, np.where(go_left, tree.left[node], tree.right[node]), node)
            out = out + tree.threshold[node]  # float32 + float32, tree by tree, as XGBoost sums
        return out


def _depth(left: np.ndarray, right) -> int:
    """The longest root-to-leaf path, in edges."""
    right = np.asarray(right, dtype=np.int32)
    depth = np.zeros(len(left), dtype=np.int32)
    for node in range(len(left)):  # XGBoost numbers children after their parent
        if left[node] >= 0:
            depth[left[node]] = depth[right[node]] = depth[node] + 1
    return int(depth.max()) if len(depth) else 0
