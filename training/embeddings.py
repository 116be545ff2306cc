"""Sentence embeddings with a durable cache, so the stages that embed the same prompts (the KNN
index, its leave-one-task-out evaluation, router selection) pay for each text once per encoder.

Keys are sha256(encoder ref, truncation side, text); rows live in `core.storage.ShardCache` shards
(atomic Parquet files), so a killed run keeps what it finished. A local encoder folder is keyed by
its path: replace its weights under a new path, or clear the cache, when they change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
from routeforge.core.pretrained import resolve_pretrained
from routeforge.core.progress import Counted
from routeforge.core.storage import ShardCache

SCHEMA = pa.schema([pa.field("cache_key", pa.string(), nullable=False),
                    pa.field("vector", pa.list_(pa.float32()), nullable=False)])


@lru_cache(maxsize=4)
def _load(ref: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_pretrained(ref), device="cpu")


def encode(texts: list[str], ref: str, batch_size: int = 64, log: Callable[[str], None] | None = None,
           truncation_side: str = "right", chunk: int = 1024) -> np.ndarray:
    """L2-normalized float32 embeddings with the PyTorch encoder, so inner product equals cosine.

    Texts longer than the encoder's window (256 word pieces for MiniLM) are cut on
    `truncation_side`; "left" keeps their end, where a few-shot prompt puts its actual question.
    With `log`, texts are encoded `chunk` at a time and the count reported (`core.progress`).
    The bundle ships the same encoder as ONNX for the runtime (`training.encoder_export`)."""
    model = _load(ref)
    before = model.tokenizer.truncation_side
    model.tokenizer.truncation_side = truncation_side
    counted = Counted(log, f"embedding ({truncation_side} truncation)", len(texts), "prompts")
    parts = []
    try:
        step = chunk if log is not None else max(len(texts), 1)  # one call when nobody is told
        for start in range(0, max(len(texts), 1), step):
            parts.append(model.encode(texts[start:start + step], batch_size=batch_size, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False))
            counted.count(min(start + step, len(texts)))
    finally:
        model.tokenizer.truncation_side = before
    return np.ascontiguousarray(np.concatenate(parts) if len(parts) > 1 else parts[0], dtype=np.float32)


def _key(ref: str, truncation_side: str, text: str) -> str:
    return hashlib.sha256(f"{ref}\x1f{truncation_side}\x1f{text}".encode()).hexdigest()[:32]


def encode_cached(texts: list[str], ref: str, truncation_side: str = "right",
                  cache_dir: Path | None = None, log: Callable[[str], None] | None = None) -> np.ndarray:
    """L2-normalized float32 embeddings of `texts` (as `encode`), read from and
    added to the cache under `cache_dir` when one is given; `log` hears the count of texts
    the cache did not hold as they are encoded."""
    if cache_dir is None:
        return encode(texts, ref, truncation_side=truncation_side, log=log)
    cache = ShardCache(Path(cache_dir), SCHEMA)
    keys = [_key(ref, truncation_side, t) for t in texts]
    known = {k: row["vector"] for k, row in cache.load().items()}
    todo = sorted({k: i for i, k in enumerate(keys) if k not in known}.values())
    if todo:
        vectors = encode([texts[i] for i in todo], ref, truncation_side=truncation_side, log=log)
        new = [{"cache_key": keys[i], "vector": v.tolist()} for i, v in zip(todo, vectors)]
        cache.append(new)
        cache.compact()
        known |= {row["cache_key"]: row["vector"] for row in new}
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.ascontiguousarray(np.asarray([known[k] for k in keys], dtype=np.float32))


class TorchEncoder:
    """The PyTorch encoder behind the runtime's encoder interface (`encode(texts, truncation_side)`,
    as `routeforge.artifacts.sentence_encoder.SentenceEncoder`), through the cache: what training
    code passes to a router's or KNN estimator's `predict`."""

    def __init__(self, ref: str, cache_dir: Path | None = None):
        self.ref, self.cache_dir = ref, cache_dir

    def encode(self, texts, truncation_side: str = "right", batch_size: int = 64) -> np.ndarray:
        return encode_cached(list(texts), self.ref, truncation_side, self.cache_dir)
