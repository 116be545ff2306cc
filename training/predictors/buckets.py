"""Bucket schemes that turn output lengths or quality scores into class labels (000, 001).

- `equal_width`: n buckets of equal width over [low, high] (000: 10 buckets of [0, max]).
- `completion_time`: buckets by how long decoding takes, not by token count (001): edges in
  seconds (0.5, 2, 4, … by default) times the tier's decode speed in tokens per second, taken from
  its latency profile (1 / nominal TPOT) or configured where none exists.

A scheme is plain JSON (name, edges, representative value per bucket) so any runtime can map a
predicted bucket back to an expected length or score.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class BucketScheme:
    name: str
    edges: list[float]  # inner boundaries, ascending: bucket i holds edges[i-1] <= v < edges[i]
    values: list[float]  # representative value of each bucket (its training mean, else midpoint)

    @property
    def n(self) -> int:
        return len(self.edges) + 1

    def assign(self, values) -> np.ndarray:
        return np.searchsorted(np.asarray(self.edges, dtype=np.float64), np.asarray(values, dtype=np.float64),
                               side="right")

    def expected(self, probabilities: np.ndarray) -> np.ndarray:
        """Expected value under predicted bucket probabilities (n_rows, n_buckets)."""
        return np.asarray(probabilities) @ np.asarray(self.values)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> BucketScheme:
        return cls(name=raw["name"], edges=list(raw["edges"]), values=list(raw["values"]))


def _with_values(name: str, edges: list[float], train_values: np.ndarray, bounds: tuple[float, float]) -> BucketScheme:
    scheme = BucketScheme(name, edges, [])
    labels = scheme.assign(train_values)
    full = [bounds[0], *edges, bounds[1]]
    values = [float(train_values[labels == i].mean()) if (labels == i).any() else (full[i] + full[i + 1]) / 2
              for i in range(scheme.n)]
    return BucketScheme(name, edges, values)


def equal_width(train_values, n: int = 10, low: float = 0.0, high: float | None = None,
                name: str = "equal_width") -> BucketScheme:
    v = np.asarray(train_values, dtype=np.float64)
    high = float(v.max()) if high is None else high
    if high <= low:
        raise ValueError(f"{name}: need high > low, got [{low}, {high}]")
    edges = list(np.linspace(low, high, n + 1)[1:-1])
    return _with_values(name, [float(e) for e in edges], v, (low, high))


def completion_time(train_lengths, decode_tok_s: float, edges_s: tuple[float, ...] = (0.5, 2.0, 4.0, 8.0),
                    name: str = "completion_time") -> BucketScheme:
    if decode_tok_s <= 0:
        raise ValueError(f"{name}: decode_tok_s must be positive, got {decode_tok_s}")
    v = np.asarray(train_lengths, dtype=np.float64)
    edges = [float(s * decode_tok_s) for s in edges_s]
    return _with_values(name, edges, v, (0.0, max(float(v.max()), edges[-1] * 2)))
