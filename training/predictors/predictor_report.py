"""The predictors' evaluation report: what each learned predictor is worth as a router, how it
fares on a task it never saw, and what it costs to run (001: 0.8 s per batch of 64 on CPU).

- Routing value on the test split: routing by the KNN estimator's q̂ − λ·ĉ and, when a score
  predictor exists, by its expected score − λ·ĉ (the KNN's cost estimate, so only the quality
  predictions differ), each against the single-model hull (RouterBench's AIQ, largest lead).
- Leave-one-task-out KNN (002), when the training split has two or more tasks.
- A batch of 64 test prompts through each exported predictor with ONNX Runtime on this machine.
The held-out accuracies, confusions and calibration of the text predictors come from their own
assets and are gathered here unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from routeforge.artifacts.deciding.knn import KnnEstimator, KnnPrediction
from routeforge.artifacts.deciding.text_predictor import TextPredictor, compose
from routeforge.core.config import KnnSettings
from routeforge.training.embeddings import TrainingEncoder
from routeforge.training.predictors.knn_eval import leave_one_task_out, test_split
from routeforge.training.predictors.quality_cost_eval import evaluate_router, plot_quality_cost

BATCH = 64


def median_seconds(fn: Callable[[], Any], repeats: int = 3) -> float:
    fn()  # warm-up: first-call allocations and thread pools are not the steady state
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def batch_timing(predictor: TextPredictor, prompts: list[str], model: str) -> dict[str, float]:
    """ONNX Runtime seconds for one batch (tokenization included), composed as at serving time."""
    texts = [compose(p, None, model if predictor.spec.get("model_tokens") else None, None,
                     predictor.spec.get("model_tokens")) for p in prompts]
    seconds = median_seconds(lambda: predictor.logits(texts, batch_size=len(texts)))
    return {"batch": len(texts), "onnxruntime_s": seconds, "prompts_per_s": len(texts) / seconds}


def score_router(test: pa.Table, score: TextPredictor, knn: KnnPrediction, prior: np.ndarray,
                 lambdas: list[float] | None) -> dict[str, Any]:
    """Route by the score predictor's expected score per model − λ · the KNN's predicted cost."""
    prompts, tasks = test.column("text").to_pylist(), test.column("task").to_pylist()
    hint = bool(score.spec.get("hint_template"))
    quality = np.column_stack([score.predict(prompts, tasks if hint else None, model=m)["expected"]
                               for m in knn.models])
    return evaluate_router(test, KnnPrediction(knn.models, quality, knn.output_tokens, knn.cost), prior, lambdas)


def build_report(routing: pa.Table, knn_folder: Path, knn_eval: dict[str, Any], encoder_ref: str,
                 knn_settings: KnnSettings, predictors: dict[str, Path], lambdas: list[float] | None,
                 out_dir: Path, title: str, log: Callable[[str], None] = print,
                 cache_dir: Path | None = None) -> dict[str, Any]:
    """`knn_eval` is the KNN estimator's own test-split evaluation (`evaluate_knn`), reused here;
    `cache_dir` holds the embedding cache the other training stages share."""
    out_dir = Path(out_dir)
    knn = KnnEstimator.load(knn_folder)
    test = test_split(routing)
    routers = {"knn_estimator": knn_eval}
    loaded = {name: TextPredictor.load(folder) for name, folder in predictors.items()}
    if "score_predictor" in loaded:  # the KNN's cost estimates, so that only the quality predictions differ
        knn_prediction = knn.predict(test.column("text").to_pylist(), TrainingEncoder(encoder_ref, cache_dir, log=log))
        routers["score_predictor"] = score_router(test, loaded["score_predictor"], knn_prediction, knn.prior, lambdas)
    summary = {name: {**r["hull"], "max_quality": r["router_max_quality"]["quality"],
                      "max_quality_cost": r["router_max_quality"]["cost"]} for name, r in routers.items()}
    for name, s in summary.items():
        if np.isnan(s["aiq_router"]) or np.isnan(s["aiq_single_hull"]):  # every model costs the same (no prices)
            log(f"{name}: no AIQ: the models' costs do not differ (give `models[].price` for a quality-cost trade-off)")
            continue
        log(f"{name}: AIQ {s['aiq_router']:.4f} vs single-model hull {s['aiq_single_hull']:.4f}; "
            f"largest lead over the hull {100 * s['max_gap_above_hull']:+.2f} points")
    plot = plot_quality_cost(knn_eval, out_dir / "routers_quality_cost.png", f"{title}: routers on the test split",
                             {"score predictor (E[score] − λ·ĉ)": routers["score_predictor"]}
                             if "score_predictor" in routers else None)
    tasks = {t for s, t in zip(routing.column("split").to_pylist(), routing.column("task").to_pylist())
             if s == "train"}
    loto = (leave_one_task_out(routing, encoder_ref, knn_settings, out_dir / "knn_loto", lambdas, log, cache_dir)
            if len(tasks) >= 2 else {})
    prompts = test.column("text").to_pylist() or routing.column("text").to_pylist()
    batch = (prompts * (BATCH // len(prompts) + 1))[:BATCH]
    timing = {name: batch_timing(p, batch, knn.models[0]) for name, p in loaded.items()}
    knn_s = median_seconds(lambda: knn.predict(batch, TrainingEncoder(encoder_ref)))
    timing["knn_estimator"] = {"batch": BATCH, "encode_and_search_s": knn_s, "prompts_per_s": BATCH / knn_s}
    return {"routers": summary, "router_evaluations": routers, "leave_one_task_out": loto,
            "batch64_cpu": timing, "plots": [str(plot)]}
