"""The runtime's ONNX sentence encoder and `tokenizers`-only tokenization agree with the PyTorch and
transformers paths the pipeline trains with (issue 36: the router's encoder ships in the bundle)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from routeforge.artifacts.deciding.components import component_kind, registered_kinds
from routeforge.artifacts.deciding.knn import KnnEstimator
from routeforge.artifacts.deciding.sentence_encoder import SentenceEncoder
from routeforge.artifacts.deciding.tokenization import BatchTokenizer
from routeforge.core.config import KnnSettings
from routeforge.core.pretrained import ENCODER_PACKAGE_REF, resolve_pretrained
from routeforge.core.schemas import routing_column, routing_table_schema
from routeforge.training.embeddings import TrainingEncoder, encode
from routeforge.training.predictors.knn import build_knn

TEXTS = ["What is 15 plus 27?", "Translate to French: the garden is full of flowers.",
         "Summarise: " + "The committee met on Tuesday and agreed the budget. " * 60,
         "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)", "", "Ünïcödé ✓ 数学 🙂"]


@pytest.mark.parametrize("side", ["right", "left"])
def test_tokenizers_alone_give_the_ids_transformers_gives(side: str):
    from transformers import AutoTokenizer

    folder = resolve_pretrained(ENCODER_PACKAGE_REF)
    reference = AutoTokenizer.from_pretrained(folder)
    reference.truncation_side = side
    expected = reference(TEXTS, truncation=True, max_length=32, padding=True, return_tensors="np")
    ids, mask = BatchTokenizer.load(folder, 32, side)(TEXTS)
    np.testing.assert_array_equal(ids, expected["input_ids"])
    np.testing.assert_array_equal(mask, expected["attention_mask"])


def test_onnx_encoder_matches_pytorch(sentence_encoder_component):
    runtime = SentenceEncoder.load(sentence_encoder_component.folder)
    assert sentence_encoder_component.metrics["parity/min_cosine"] >= 0.9999
    for side in ("right", "left"):
        onnx, torch = runtime.encode(TEXTS, side), encode(TEXTS, ENCODER_PACKAGE_REF, truncation_side=side,
                                                          backend="torch")
        assert onnx.shape == torch.shape == (len(TEXTS), 384)
        assert np.sum(onnx * torch, axis=1).min() >= 0.9999
        np.testing.assert_allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-5)
    # the output keeps the input order whatever the length-sorted batching did
    one_by_one = np.concatenate([runtime.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(runtime.encode(TEXTS, batch_size=2), one_by_one, atol=1e-5)


def test_knn_routes_the_same_with_either_encoder(tmp_path, sentence_encoder_component):
    rng = np.random.default_rng(0)
    texts = [f"{topic} question number {i}: {w}" for i, (topic, w) in enumerate(
        (t, rng.choice(["alpha", "beta", "gamma", "delta"])) for t in ["math", "french", "code", "history"] * 12)]
    models = ["small", "large"]
    quality = {m: rng.random(len(texts)).round(1).tolist() for m in models}
    table = pa.table({"prompt_id": [f"p{i}" for i in range(len(texts))], "task": ["t"] * len(texts), "text": texts,
                      "split": ["train"] * len(texts),
                      **{routing_column(measure, m): quality[m] if measure == "quality" else [1.0] * len(texts)
                         for measure in ("quality", "output_tokens", "cost") for m in models}},
                     schema=routing_table_schema(models))
    build_knn(table, ENCODER_PACKAGE_REF, KnnSettings(k=5), tmp_path / "knn")
    knn = KnnEstimator.load(tmp_path / "knn")
    probes = [f"{t} question: {w}" for t in ["math", "french", "code", "history", "poetry"] for w in ["alpha", "zeta"]]
    onnx = knn.predict(probes, SentenceEncoder.load(sentence_encoder_component.folder))
    torch = knn.predict(probes, TrainingEncoder(ENCODER_PACKAGE_REF, backend="torch"))
    assert onnx.best_model(0.0, knn.prior) == torch.best_model(0.0, knn.prior)
    np.testing.assert_allclose(onnx.quality, torch.quality, atol=1e-4)


def test_every_runtime_kind_is_registered_and_unknown_kinds_are_named():
    assert {"knn_estimator", "router", "latency_heads", "routing_policy", "length_predictor", "score_predictor",
            "task_classifier", "sentence_encoder"} <= set(registered_kinds())
    assert component_kind("routing_policy", {"policy_kind": "heuristic"}).cls.__name__ == "HeuristicPolicy"
    assert component_kind("routing_policy", {"policy": "sac_qos_han"}).cls.__name__ == "RoutingPolicy"
    with pytest.raises(KeyError, match="'spline_heads' has no runtime loader"):
        component_kind("spline_heads")
