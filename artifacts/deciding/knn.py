"""The KNN quality/length/cost estimator as stored in a bundle, and its prediction rule (002 §4.2).

Files in the component folder:
- ``index.faiss``: FAISS inner-product index over L2-normalized prompt embeddings (flat, or IVF-PQ
  for large N);
- ``labels.safetensors``: float64 arrays ``quality``, ``output_tokens`` and ``cost``, one row per
  indexed prompt and one column per model in ``knn.json``'s order (NaN where the label is missing),
  and ``prompt_ids.json``, the indexed prompts' ids in row order. (Components written before this
  format hold ``labels.parquet`` with a ``<measure>/<model>`` column each; they load where pyarrow is
  installed.)
- ``knn.json``: k, the weighting rule, model order, the encoder, per-model priors and 64-token
  output-length histograms.

Prediction: the k nearest neighbours get weight w = 1 / (1 − cos + 1e-6), normalized. Where indexed
prompts tie with the k-th neighbour (cosines within 1e-6), all of them share the places left after the
closer ones equally (`neighbour_shares`). Why: prompts that share a template longer than the encoder's
window embed identically (RouterBench's 1,926 training prompts, cut on the right, are 2 distinct
vectors), and picking k of a thousand tied prompts made the vote an arbitrary draw that changed with
the FAISS build; the shared vote is the tied group's mean, the same in every runtime. For each model
only neighbours that carry a label for it vote; when none does, the model's training mean (prior)
is returned. With `prior_strength` a > 0 the vote of the n labelled neighbours is shrunk toward the
prior: (n · vote + a · prior) / (n + a). Ties in predicted quality are broken by the prior, then
by lower predicted cost, so that a vote among a handful of neighbours does not hand traffic to a
weaker model by accident.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.components import register_component
from routeforge.artifacts.deciding.sentence_encoder import embed_for

MEASURES = ("quality", "output_tokens", "cost")
WEIGHT_EPS = 1e-6
QUERY_BLOCK = 4096  # queries searched and voted at a time (`KnnEstimator.predict_embeddings`)
TIE_EPS = 1e-6  # cosines this close to the k-th neighbour's count as tied with it (float32 rounding)


def neighbour_shares(sims: np.ndarray, k: int) -> np.ndarray:
    """(queries, candidates) cosines, −inf where there is no candidate → the share of one of the k
    neighbour places each candidate holds: 1 for those closer than the k-th neighbour, an equal part
    of the places left for those tied with it (within `TIE_EPS`), 0 for the rest. Without ties this
    is exactly the k nearest (each share 1); a row with fewer than k candidates keeps them all."""
    sims = np.asarray(sims, dtype=np.float64)
    valid = np.isfinite(sims)
    k = max(1, min(int(k), sims.shape[1]))
    kth = -np.partition(-np.where(valid, sims, -np.inf), k - 1, axis=1)[:, k - 1]
    short = ~np.isfinite(kth)  # fewer than k candidates: every one is a neighbour
    above = valid & (sims > kth[:, None] + TIE_EPS)
    tied = valid & ~above & (sims >= kth[:, None] - TIE_EPS)
    n_above, n_tied = above.sum(axis=1), tied.sum(axis=1)
    share = np.where(n_tied > 0, (k - n_above) / np.maximum(n_tied, 1), 0.0)
    return np.where(short[:, None], valid.astype(np.float64), above + tied * share[:, None])


def neighbour_weights(sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(shares, weights): each candidate's share of the k places (`neighbour_shares`) and its vote
    weight, that share times 1 / (1 − cos + `WEIGHT_EPS`) (0 for a candidate that holds none). The one
    rule of the bundle's KNN and the router family's KNN member."""
    shares = neighbour_shares(sims, k)
    return shares, shares / (1.0 - np.clip(np.nan_to_num(sims, neginf=-1.0), -1.0, 1.0) + WEIGHT_EPS)


@dataclass
class KnnPrediction:
    models: list[str]
    quality: np.ndarray  # (n_queries, n_models)
    output_tokens: np.ndarray
    cost: np.ndarray

    def best_model(self, lam: float = 0.0, prior: np.ndarray | None = None) -> list[str]:
        """argmax of predicted quality − λ · predicted cost per query (ties: prior, then cost)."""
        return [self.models[i] for i in self.best_index(lam, prior)]

    def best_index(self, lam: float = 0.0, prior: np.ndarray | None = None) -> np.ndarray:
        utility = self.quality - lam * self.cost
        tie_break = np.zeros(len(self.models)) if prior is None else prior
        # lexsort: last key is primary. Maximize utility, then prior, then minimize cost.
        picks = np.empty(len(utility), dtype=np.int64)
        for q in range(len(utility)):
            u = np.round(utility[q], 9)
            picks[q] = np.lexsort((self.cost[q], -tie_break, -u))[0]
        return picks


@register_component("knn_estimator")
class KnnEstimator:
    def __init__(self, index, labels: dict[str, np.ndarray], models: list[str], meta: dict[str, Any]):
        self.index = index
        self.labels = labels  # measure -> (n_indexed, n_models)
        self.models = models
        self.meta = meta
        self.encoder = None  # the bundle's SentenceEncoder, attached by RouterBundle
        self.k = int(meta["k"])

    @property
    def prior(self) -> np.ndarray:
        return np.asarray([self.meta["priors"]["quality"][m] for m in self.models], dtype=np.float64)

    def _candidates(self, queries: np.ndarray, exclude_self: bool
                    ) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, np.ndarray]]]:
        """(cosines, ids) of each query's k nearest, padded with (−inf, −1), and, for a query whose
        fetched results may stop inside a tie with the k-th, its whole tied group by a range search:
        FAISS returns k of a tied group in an order of its own. The completed rows come apart
        ({row: (cosines, ids)}), each as wide as its own tie: padding every row to the widest tie
        held (queries × widest tie × models) at once, and a million prompts of a template longer than
        the encoder's window, embedded identically, asked for 24 GB."""
        k = min(self.k + int(exclude_self), self.index.ntotal)
        fetch = min(2 * k, self.index.ntotal)  # k more, to see whether the tie ends
        sims, ids = self.index.search(queries, fetch)
        sims = np.where(ids >= 0, sims, -np.inf).astype(np.float64)
        first = int(exclude_self)  # the closest hit is the prompt itself
        completed = {}
        if fetch > k:
            for q in np.flatnonzero((ids[:, -1] >= 0) & (sims[:, -1] >= sims[:, k - 1] - TIE_EPS)):
                try:
                    lims, dist, found = self.index.range_search(queries[q:q + 1], float(sims[q, k - 1]) - 2 * TIE_EPS)
                except RuntimeError:  # an index kind without range search keeps what was fetched
                    continue
                order = np.argsort(-dist[lims[0]:lims[1]], kind="stable")
                completed[int(q)] = (dist[lims[0]:lims[1]][order][first:].astype(np.float64)[None, :],
                                     found[lims[0]:lims[1]][order][first:][None, :])
        return sims[:, first:], ids[:, first:], completed

    def _votes(self, sims: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Per measure, each query's vote from its candidates (cosines, ids; id −1: none)."""
        valid = ids >= 0
        shares, weights = neighbour_weights(sims, self.k)
        safe_ids = np.where(valid, ids, 0)
        out = {}
        for measure in MEASURES:
            values = self.labels[measure][safe_ids]  # (q, k, m)
            has = ~np.isnan(values) & valid[:, :, None]
            w = weights[:, :, None] * has
            total = w.sum(axis=1)
            summed = (np.where(has, values, 0.0) * w).sum(axis=1)
            prior = np.asarray([self.meta["priors"][measure][m] for m in self.models], dtype=np.float64)
            vote = np.where(total > 0, summed / np.where(total > 0, total, 1.0), prior)
            strength = float(self.meta.get("prior_strength", 0.0))
            if strength > 0:  # n: the labelled neighbours, a tied one counting as its share of a place
                n = (has * shares[:, :, None]).sum(axis=1)
                vote = (n * vote + strength * prior) / (n + strength)
            out[measure] = vote
        return out

    def predict_embeddings(self, queries: np.ndarray, exclude_self: bool = False) -> KnnPrediction:
        """Predict from normalized query embeddings; `exclude_self` drops an exact hit (leave-one-out).
        Queries go `QUERY_BLOCK` at a time, so memory does not grow with how many are asked."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        parts: dict[str, list[np.ndarray]] = {measure: [] for measure in MEASURES}
        for start in range(0, max(len(queries), 1), QUERY_BLOCK):
            sims, ids, completed = self._candidates(queries[start:start + QUERY_BLOCK], exclude_self)
            votes = self._votes(sims, ids)
            for q, (tied_sims, tied_ids) in completed.items():  # each completed row at its own width
                for measure, vote in self._votes(tied_sims, tied_ids).items():
                    votes[measure][q] = vote[0]
            for measure in MEASURES:
                parts[measure].append(votes[measure])
        out = {measure: np.concatenate(p) for measure, p in parts.items()}
        return KnnPrediction(self.models, out["quality"], out["output_tokens"], out["cost"])

    def predict(self, texts: list[str], encoder=None) -> KnnPrediction:
        """Estimates for prompt texts, embedded by `encoder` (a `SentenceEncoder`; by default the
        bundle's own, attached when the bundle loads this component)."""
        return self.predict_embeddings(embed_for(self, texts, encoder))

    def length_histogram(self, model: str) -> dict[str, Any]:
        return self.meta["length_histograms"][model]

    @classmethod
    def load(cls, folder: Path) -> KnnEstimator:
        import faiss

        folder = Path(folder)
        meta = json.loads((folder / "knn.json").read_text())
        labels = read_labels(folder, meta["models"])
        rows = len(labels["quality"])
        index = faiss.read_index(str(folder / "index.faiss"))
        if index.ntotal != rows:
            raise ValueError(f"{folder}: index holds {index.ntotal} vectors but the labels {rows} rows")
        return cls(index, labels, meta["models"], meta)


LABELS_FILE, PROMPT_IDS_FILE, LEGACY_LABELS_FILE = "labels.safetensors", "prompt_ids.json", "labels.parquet"


def write_labels(folder: Path, prompt_ids: list[str], labels: dict[str, np.ndarray]) -> None:
    """The labels of the indexed prompts: {measure: (n, m) float64} in safetensors, ids in JSON."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    save_file({m: np.ascontiguousarray(labels[m], dtype=np.float64) for m in MEASURES}, str(folder / LABELS_FILE))
    (folder / PROMPT_IDS_FILE).write_text(json.dumps([str(p) for p in prompt_ids]))


def read_labels(folder: Path, models: list[str]) -> dict[str, np.ndarray]:
    folder = Path(folder)
    if (folder / LABELS_FILE).is_file():
        from safetensors.numpy import load_file

        tensors = load_file(str(folder / LABELS_FILE))
        for measure in MEASURES:
            if tensors[measure].shape[1:] != (len(models),):
                raise ValueError(f"{folder}: {LABELS_FILE} {measure} has shape {tensors[measure].shape} "
                                 f"for {len(models)} models")
        return {m: tensors[m] for m in MEASURES}
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ValueError(f"{folder}: an older KNN component ({LEGACY_LABELS_FILE}) needs pyarrow; "
                         f"re-register the bundle to get {LABELS_FILE}") from exc
    table = pq.read_table(folder / LEGACY_LABELS_FILE)
    return {measure: np.column_stack([table.column(f"{measure}/{m}").to_numpy(zero_copy_only=False)
                                      .astype(np.float64) for m in models]) for measure in MEASURES}
