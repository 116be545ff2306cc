"""Sentence embeddings with a durable cache, so the stages that embed the same prompts (the KNN
index, its leave-one-task-out evaluation, router selection) pay for each text once per encoder.

Keys are sha256(encoder ref, truncation side, text); rows live in `core.storage.ShardCache` shards
(atomic Parquet files), so a killed run keeps what it finished. A local encoder folder is keyed by
its path: replace its weights under a new path, or clear the cache, when they change.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
from routeforge.artifacts.encoder import encode
from routeforge.core.storage import ShardCache

SCHEMA = pa.schema([pa.field("cache_key", pa.string(), nullable=False),
                    pa.field("vector", pa.list_(pa.float32()), nullable=False)])


def _key(ref: str, truncation_side: str, text: str) -> str:
    return hashlib.sha256(f"{ref}\x1f{truncation_side}\x1f{text}".encode()).hexdigest()[:32]


def encode_cached(texts: list[str], ref: str, truncation_side: str = "right",
                  cache_dir: Path | None = None) -> np.ndarray:
    """L2-normalized float32 embeddings of `texts` (as `artifacts.encoder.encode`), read from and
    added to the cache under `cache_dir` when one is given."""
    if cache_dir is None:
        return encode(texts, ref, truncation_side=truncation_side)
    cache = ShardCache(Path(cache_dir), SCHEMA)
    keys = [_key(ref, truncation_side, t) for t in texts]
    known = {k: row["vector"] for k, row in cache.load().items()}
    todo = sorted({k: i for i, k in enumerate(keys) if k not in known}.values())
    if todo:
        vectors = encode([texts[i] for i in todo], ref, truncation_side=truncation_side)
        new = [{"cache_key": keys[i], "vector": v.tolist()} for i, v in zip(todo, vectors)]
        cache.append(new)
        cache.compact()
        known |= {row["cache_key"]: row["vector"] for row in new}
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.ascontiguousarray(np.asarray([known[k] for k in keys], dtype=np.float32))
