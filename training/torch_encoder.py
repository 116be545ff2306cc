"""The PyTorch sentence encoder (sentence-transformers): loaded once per reference, embeddings with the
tokenizer cutting long texts on the side asked. Beneath both `embeddings` (which caches what it
embeds and may run the ONNX export instead) and `encoder_export` (which exports this encoder and
checks the export against it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np
from routeforge.core.pretrained import resolve_pretrained


def encoder_cache_root() -> Path:
    """Where exported encoder graphs are kept: $ROUTEFORGE_STATE/encoders, else ~/.cache/routeforge/encoders."""
    state = os.environ.get("ROUTEFORGE_STATE")
    return Path(state) / "encoders" if state else Path.home() / ".cache" / "routeforge" / "encoders"


@lru_cache(maxsize=4)
def load(ref: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_pretrained(ref), device="cpu")


@contextmanager
def cutting(ref: str, truncation_side: str) -> Iterator:
    """The encoder `ref` with its tokenizer cutting on `truncation_side` for the block (restored after:
    the model is shared by every caller of `load`)."""
    model = load(ref)
    before = model.tokenizer.truncation_side
    model.tokenizer.truncation_side = truncation_side
    try:
        yield model
    finally:
        model.tokenizer.truncation_side = before


def embed(model, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """L2-normalised embeddings of `texts` (float32)."""
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=False)


def encode(texts: list[str], ref: str, truncation_side: str = "right", batch_size: int = 64) -> np.ndarray:
    """`embed` with encoder `ref` cutting on `truncation_side`."""
    with cutting(ref, truncation_side) as model:
        return np.ascontiguousarray(embed(model, list(texts), batch_size), dtype=np.float32)
