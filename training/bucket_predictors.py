"""The fleet's output-length bucket predictor from the routing table (001 §5.1, shared as in 000).

One classifier for every model: each (prompt, model) pair of the train split becomes the text
"<model token> prompt [This is a <task> task.]" labelled with the bucket of that model's observed
output length. Completion-time buckets use a decode speed (tokens/s) given by the caller: the
profiled tiers' where they exist. Evaluated on the test split per model; packaged for ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from artifacts.text_predictor import TextPredictor, compose, softmax
from pipelines.config import LengthPredictorSettings
from pipelines.schemas import routing_column, routing_models
from training.buckets import completion_time, equal_width
from training.predictor_eval import classification_report, plot_confusion
from training.text_classifier import ClassifierSettings, model_token, package_predictor, train_classifier

HINT = "This is a {task} task."


def _pairs(table: pa.Table, models: list[str], tokens: dict[str, str], hint: str | None):
    texts, lengths, owners = [], [], []
    prompts, tasks = table.column("text").to_pylist(), table.column("task").to_pylist()
    for m in models:
        for text, task, n in zip(prompts, tasks, table.column(routing_column("output_tokens", m)).to_pylist()):
            if n is not None:
                texts.append(compose(text, task, m, hint, tokens))
                lengths.append(float(n))
                owners.append(m)
    return texts, np.array(lengths), np.array(owners)


def train_length_predictor(routing_table: pa.Table, settings: LengthPredictorSettings, decode_tok_s: float,
                           folder: Path, seed: int = 0, log=print) -> dict:
    models = routing_models(routing_table.schema)
    tokens = {m: model_token(m) for m in models}
    hint = HINT if settings.task_hint else None
    split = routing_table.column("split").to_pylist()
    train = routing_table.filter(pa.array([s == "train" for s in split]))
    test = routing_table.filter(pa.array([s == "test" for s in split]))
    texts, lengths, _ = _pairs(train, models, tokens, hint)
    if len(texts) == 0:
        raise ValueError("length predictor: no training pair has an output length")
    scheme = (completion_time(lengths, decode_tok_s, tuple(settings.completion_time_edges_s))
              if settings.buckets == "completion_time" else equal_width(lengths, n=settings.equal_width_buckets))
    classifier = ClassifierSettings(backbone=settings.backbone, epochs=settings.epochs, max_length=settings.max_length,
                                    batch_size=settings.batch_size, learning_rate=settings.learning_rate, seed=seed,
                                    model_tokens=list(tokens.values()))
    work = folder.parent / f"{folder.name}.work"
    summary = train_classifier(texts, scheme.assign(lengths), scheme.n, classifier, work, log=log)
    spec = {"kind": "length_bucket", "labels": [str(i) for i in range(scheme.n)], "max_length": settings.max_length,
            "truncation_side": classifier.truncation_side, "hint_template": hint, "model_tokens": tokens,
            "scheme": scheme.to_dict(), "decode_tok_s": decode_tok_s, "backbone": settings.backbone}
    spec = package_predictor(work / "model", folder, spec, texts[:32])
    metrics = {"train_pairs": float(len(texts)), "onnx_max_abs_diff": spec["onnx_max_abs_diff"],
               "train_seconds": summary["seconds"]}
    plot = None
    test_texts, test_lengths, owners = _pairs(test, models, tokens, hint)
    if len(test_texts):
        runtime = TextPredictor.load(folder)
        probs = softmax(runtime.logits(test_texts).astype(np.float64))  # texts already carry token and hint
        report = classification_report(scheme.assign(test_lengths), probs, spec["labels"])
        metrics |= {"test_top1": report["top1"], "test_top3": report["top3"], "test_ece": report["ece"],
                    "test_pairs": float(report["n"]),
                    "test_expected_length_mae": float(np.abs(probs @ np.array(scheme.values) - test_lengths).mean())}
        for m in models:
            mine = owners == m
            if mine.any():
                metrics[f"test_top1/{m}"] = float((probs[mine].argmax(1) == scheme.assign(test_lengths[mine])).mean())
        plot = plot_confusion(report["confusion"], spec["labels"], folder.parent / f"{folder.name}_confusion.png",
                              f"length buckets ({scheme.name}), test pairs: top-1 {100 * report['top1']:.1f}%")
    return {"metrics": metrics, "spec": spec, "plot": str(plot) if plot else None,
            "learning_curve": summary["learning_curve"]}

