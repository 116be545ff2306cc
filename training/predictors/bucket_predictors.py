"""The fleet's shared bucket predictors from the routing table: output length (001 §5.1) and
quality score (000 §V-B1), one classifier for every model as in 000 (a special token per model).

Each (prompt, model) pair of the train split becomes the text "<model token> prompt [This is a
<task> task.]" labelled with the bucket of that model's observed output length or quality score.
Completion-time length buckets use a decode speed (tokens/s) given by the caller: the profiled
tiers' where they exist. Evaluated on the test split, overall and per model; packaged for ONNX
Runtime (`artifacts.deciding.text_predictor`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from routeforge.artifacts.deciding.text_predictor import TextPredictor, compose, softmax
from routeforge.core.config import LengthPredictorSettings, ScorePredictorSettings, TextPredictorSettings
from routeforge.core.schemas import routing_column, routing_models
from routeforge.training.predictors.buckets import BucketScheme, completion_time, equal_width
from routeforge.training.predictors.packaging import PARITY_PROMPTS, package_predictor, parity_metrics
from routeforge.training.predictors.predictor_eval import (
    classification_report,
    plot_confusion,
    plot_folder,
    plot_reliability,
)
from routeforge.training.predictors.text_classifier import ClassifierSettings, model_token, train_classifier

HINT = "This is a {task} task."


def classifier_settings(settings: TextPredictorSettings, seed: int, model_tokens: list[str] | None = None):
    return ClassifierSettings(backbone=settings.backbone, epochs=settings.epochs, max_length=settings.max_length,
                              batch_size=settings.batch_size, learning_rate=settings.learning_rate, seed=seed,
                              truncation_side=settings.truncation_side, model_tokens=list(model_tokens or []),
                              freeze_word_embeddings=settings.freeze_word_embeddings,
                              export_precision=settings.export_precision)


def split_rows(table: pa.Table, split: str) -> pa.Table:
    return table.filter(pa.array([s == split for s in table.column("split").to_pylist()]))


def _pairs(table: pa.Table, measure: str, models: list[str], tokens: dict[str, str], hint: str | None):
    texts, values, owners = [], [], []
    prompts, tasks = table.column("text").to_pylist(), table.column("task").to_pylist()
    for m in models:
        for text, task, v in zip(prompts, tasks, table.column(routing_column(measure, m)).to_pylist()):
            if v is not None and not np.isnan(v):
                texts.append(compose(text, task, m, hint, tokens))
                values.append(float(v))
                owners.append(m)
    return texts, np.array(values), np.array(owners)


def train_bucket_predictor(routing_table: pa.Table, measure: str, kind: str, settings: TextPredictorSettings,
                           make_scheme: Callable[[np.ndarray], BucketScheme], folder: Path, seed: int = 0,
                           task_hint: bool = False, extra_spec: dict | None = None,
                           log: Callable[[str], None] = print) -> dict:
    """Train, package and evaluate one shared bucket predictor of the routing table's `measure`."""
    models = routing_models(routing_table.schema)
    tokens = {m: model_token(m) for m in models}
    hint = HINT if task_hint else None
    texts, values, _ = _pairs(split_rows(routing_table, "train"), measure, models, tokens, hint)
    if len(texts) == 0:
        raise ValueError(f"{kind}: no training pair has a {measure!r} label")
    scheme = make_scheme(values)
    classifier = classifier_settings(settings, seed, list(tokens.values()))
    work = folder.parent / f"{folder.name}.work"
    summary = train_classifier(texts, scheme.assign(values), scheme.n, classifier, work, log=log)
    spec = {"kind": kind, "labels": [str(i) for i in range(scheme.n)], "max_length": settings.max_length,
            "truncation_side": classifier.truncation_side, "hint_template": hint, "model_tokens": tokens,
            "scheme": scheme.to_dict(), "backbone": settings.backbone, **(extra_spec or {})}
    spec = package_predictor(work / "model", folder, spec, texts[:PARITY_PROMPTS],
                             freeze_word_embeddings=classifier.freeze_word_embeddings,
                             precision=classifier.export_precision)
    metrics = {"train_pairs": float(len(texts)), **parity_metrics(spec),
               "train_seconds": summary["seconds"]}
    plots = []
    test_texts, test_values, owners = _pairs(split_rows(routing_table, "test"), measure, models, tokens, hint)
    if len(test_texts):
        runtime = TextPredictor.load(folder)
        probs = softmax(runtime.logits(test_texts).astype(np.float64))  # texts already carry token and hint
        truth = scheme.assign(test_values)
        report = classification_report(truth, probs, spec["labels"])
        metrics |= {"test_top1": report["top1"], "test_top3": report["top3"], "test_ece": report["ece"],
                    "test_pairs": float(report["n"]),
                    "test_expected_value_mae": float(np.abs(probs @ np.array(scheme.values) - test_values).mean())}
        for m in models:
            mine = owners == m
            if mine.any():
                metrics[f"test_top1/{m}"] = float((probs[mine].argmax(1) == truth[mine]).mean())
        title = f"{kind} ({scheme.name}), test pairs"
        plots = [plot_confusion(report["confusion"], spec["labels"],
                                plot_folder(folder) / f"{folder.name}_confusion.png",
                                f"{title}: top-1 {100 * report['top1']:.1f}%"),
                 plot_reliability(report["reliability"], plot_folder(folder) / f"{folder.name}_calibration.png",
                                  f"{title}: ECE {report['ece']:.3f}")]
    return {"metrics": metrics, "spec": spec, "plots": [str(p) for p in plots],
            "learning_curve": summary["learning_curve"]}


def train_length_predictor(routing_table: pa.Table, settings: LengthPredictorSettings, decode_tok_s: float,
                           folder: Path, seed: int = 0, log: Callable[[str], None] = print) -> dict:
    def scheme(lengths: np.ndarray) -> BucketScheme:
        if settings.buckets == "completion_time":
            return completion_time(lengths, decode_tok_s, tuple(settings.completion_time_edges_s))
        return equal_width(lengths, n=settings.equal_width_buckets)

    return train_bucket_predictor(routing_table, "output_tokens", "length_bucket", settings, scheme, folder, seed,
                                  settings.task_hint, {"decode_tok_s": decode_tok_s}, log)


def train_score_predictor(routing_table: pa.Table, settings: ScorePredictorSettings, folder: Path, seed: int = 0,
                          log: Callable[[str], None] = print) -> dict:
    """000: equal-width buckets of [0, max score] (the top bucket holds the maximum)."""
    return train_bucket_predictor(routing_table, "quality", "score_bucket", settings,
                                  lambda scores: equal_width(scores, n=settings.buckets, name="score"),
                                  folder, seed, settings.task_hint, None, log)
