"""The embedding cache returns exactly what the encoder returns and encodes each text once."""

import numpy as np
import routeforge.training.embeddings as emb
from routeforge.core.pretrained import ENCODER_PACKAGE_REF
from routeforge.training.embeddings import encode


def test_cached_vectors_equal_fresh_ones_and_only_new_texts_are_encoded(tmp_path, monkeypatch):
    texts = ["What is 15 plus 27?", "Translate to French: good morning", "Name a prime number."]
    first = emb.encode_cached(texts[:2], ENCODER_PACKAGE_REF, "right", tmp_path)
    assert np.allclose(first, encode(texts[:2], ENCODER_PACKAGE_REF), atol=1e-6)
    seen = []

    def counting(batch, ref, truncation_side="right"):
        seen.extend(batch)
        return encode(batch, ref, truncation_side=truncation_side)

    monkeypatch.setattr(emb, "encode", counting)
    both = emb.encode_cached(texts, ENCODER_PACKAGE_REF, "right", tmp_path)
    assert seen == [texts[2]]
    assert np.array_equal(both[:2], first) and both.dtype == np.float32
    other_side = emb.encode_cached(texts[:1], ENCODER_PACKAGE_REF, "left", tmp_path)
    assert seen == [texts[2], texts[0]] and other_side.shape == (1, 384)
