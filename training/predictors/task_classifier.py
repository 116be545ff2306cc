"""The task classifier (001 appendix A.6): prompt text → task, trained on the routing table's
prompts. Its prediction supplies the "This is a <task> task." hint of the bucket predictors when
a caller does not know the task (`artifacts.deciding.text_predictor.TextPredictor.predict`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from routeforge.artifacts.deciding.text_predictor import TextPredictor
from routeforge.core.config import TaskClassifierSettings
from routeforge.training.predictors.bucket_predictors import classifier_settings, split_rows
from routeforge.training.predictors.packaging import PARITY_PROMPTS, package_predictor, parity_metrics
from routeforge.training.predictors.predictor_eval import (
    classification_report,
    plot_confusion,
    plot_folder,
    plot_reliability,
)
from routeforge.training.predictors.text_classifier import train_classifier


def train_task_classifier(routing_table: pa.Table, settings: TaskClassifierSettings, folder: Path, seed: int = 0,
                          log: Callable[[str], None] = print) -> dict:
    train, test = split_rows(routing_table, "train"), split_rows(routing_table, "test")
    texts, tasks = train.column("text").to_pylist(), train.column("task").to_pylist()
    labels = sorted(set(tasks))
    if len(labels) < 2:
        raise ValueError(f"task classifier: the train split has {len(labels)} task(s) ({labels}); it needs two or more")
    index = {t: i for i, t in enumerate(labels)}
    classifier = classifier_settings(settings, seed)
    work = folder.parent / f"{folder.name}.work"
    summary = train_classifier(texts, [index[t] for t in tasks], len(labels), classifier, work, log=log)
    spec = {"kind": "task_classifier", "labels": labels, "max_length": settings.max_length,
            "truncation_side": classifier.truncation_side, "hint_template": None, "model_tokens": None,
            "scheme": None, "backbone": settings.backbone}
    spec = package_predictor(work / "model", folder, spec, texts[:PARITY_PROMPTS],
                             freeze_word_embeddings=classifier.freeze_word_embeddings,
                             precision=classifier.export_precision)
    metrics = {"train_prompts": float(len(texts)), "tasks": float(len(labels)),
               **parity_metrics(spec), "train_seconds": summary["seconds"]}
    plots = []
    known = [t in index for t in test.column("task").to_pylist()]  # a task never trained on cannot be scored
    test = test.filter(pa.array(known))
    if test.num_rows:
        probs = TextPredictor.load(folder).predict(test.column("text").to_pylist())["probabilities"]
        report = classification_report(np.array([index[t] for t in test.column("task").to_pylist()]), probs, labels)
        metrics |= {"test_top1": report["top1"], "test_top3": report["top3"], "test_ece": report["ece"],
                    "test_prompts": float(report["n"]), "test_unseen_task_prompts": float(known.count(False))}
        metrics |= {f"test_top1/{t}": v for t, v in report["per_label_top1"].items()}
        plots = [plot_confusion(report["confusion"], labels, plot_folder(folder) / f"{folder.name}_confusion.png",
                                f"task classifier, test prompts: top-1 {100 * report['top1']:.1f}%"),
                 plot_reliability(report["reliability"], plot_folder(folder) / f"{folder.name}_calibration.png",
                                  f"task classifier: ECE {report['ece']:.3f}")]
    return {"metrics": metrics, "spec": spec, "plots": [str(p) for p in plots],
            "learning_curve": summary["learning_curve"]}
