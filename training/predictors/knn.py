"""Build the KNN estimator (002 §4.2) from the routing table's training split.

The index and label files are written in the bundle format that `artifacts.deciding.knn.KnnEstimator`
loads, so evaluation here runs the exact code a router service will run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from routeforge.artifacts.deciding.knn import MEASURES, WEIGHT_EPS, KnnEstimator, write_labels
from routeforge.core.config import KnnSettings
from routeforge.core.schemas import routing_models
from routeforge.training.embeddings import encode_cached
from routeforge.training.routing_table import matrix


def _build_index(vectors: np.ndarray, settings: KnnSettings):
    import faiss

    n, dim = vectors.shape
    if settings.index == "ivfpq" and n >= settings.ivf_threshold:
        nlist = int(4 * np.sqrt(n))
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, 48 if dim % 48 == 0 else 32, 8,
                                 faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = 16
    else:
        index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    return index


def _histogram(lengths: np.ndarray, bucket: int) -> dict:
    lengths = lengths[~np.isnan(lengths)]
    if lengths.size == 0:
        return {"bucket_tokens": bucket, "counts": []}
    counts = np.bincount((lengths // bucket).astype(np.int64))
    return {"bucket_tokens": bucket, "counts": counts.tolist()}


def build_knn(
    routing: pa.Table, encoder_ref: str, settings: KnnSettings, out_dir: Path, split: str = "train",
    vectors: np.ndarray | None = None, cache_dir: Path | None = None, log: Callable[[str], None] | None = None,
) -> KnnEstimator:
    """Embed the `split` prompts, index them, and write index.faiss, labels.safetensors and knn.json.
    `vectors`, row-aligned with `routing`, are embeddings the caller already has (not re-encoded)."""
    models = routing_models(routing.schema)
    in_split = np.asarray(routing.column("split").to_pylist()) == split
    train = routing.filter(pa.array(in_split))
    quality = matrix(train, "quality", models)
    keep = ~np.all(np.isnan(quality), axis=1)  # a prompt with no label for any model teaches nothing
    train = train.filter(pa.array(keep))
    if train.num_rows == 0:
        raise ValueError(f"routing table has no labelled {split!r} prompts to index")
    if vectors is None:
        vectors = encode_cached(train.column("text").to_pylist(), encoder_ref, settings.truncation_side, cache_dir,
                                log=log)
    else:
        vectors = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32)[in_split][keep])
    index = _build_index(vectors, settings)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_labels(out_dir, train.column("prompt_id").to_pylist(),
                 {measure: matrix(train, measure, models) for measure in MEASURES})
    import faiss

    faiss.write_index(index, str(out_dir / "index.faiss"))
    priors = {
        measure: {m: float(np.nanmean(col)) if not np.all(np.isnan(col)) else 0.0
                  for m, col in zip(models, matrix(train, measure, models).T)}
        for measure in MEASURES
    }
    meta = {
        "k": settings.k,
        "prior_strength": settings.prior_strength,
        "weighting": f"w = 1 / (1 - cos + {WEIGHT_EPS}), normalized over neighbours labelled for the model",
        "index": type(index).__name__,
        "models": models,
        "encoder": {"ref": encoder_ref, "dim": int(vectors.shape[1]), "normalized": True,
                    "truncation_side": settings.truncation_side},
        "priors": priors,
        "length_histograms": {
            m: _histogram(col, settings.length_bucket_tokens)
            for m, col in zip(models, matrix(train, "output_tokens", models).T)
        },
        "n_indexed": int(train.num_rows),
    }
    (out_dir / "knn.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return KnnEstimator.load(out_dir)
