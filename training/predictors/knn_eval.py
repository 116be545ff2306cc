"""Held-out evaluation of the KNN estimator as a router: on the test split, and leave one task out.

Leave-one-task-out (002's leave-one-dataset-out): index the training prompts of every task but one
and route the held-out task's test prompts. A task the index has never seen shows how much of the
router's value is recognising the task rather than the prompt; 002 saw GSM8K fall to chance.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from routeforge.artifacts.deciding.knn import KnnEstimator, KnnPrediction
from routeforge.core.config import KnnSettings
from routeforge.training.embeddings import TrainingEncoder, encode_cached
from routeforge.training.predictors.knn import build_knn
from routeforge.training.predictors.quality_cost_eval import evaluate_router


def test_split(routing: pa.Table) -> pa.Table:
    return routing.filter(pc.equal(routing.column("split"), "test"))


def evaluate_knn(knn: KnnEstimator, routing: pa.Table, encoder_ref: str,
                 lambdas: list[float] | None = None, cache_dir: Path | None = None,
                 log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], KnnPrediction]:
    """The router's evaluation on the test split, and its predictions (row-aligned with that split);
    test prompts are embedded through the cache under `cache_dir` when given (a re-run embeds only
    the new ones)."""
    test = test_split(routing)
    prediction = knn.predict(test.column("text").to_pylist(), TrainingEncoder(encoder_ref, cache_dir, log=log))
    return evaluate_router(test, prediction, knn.prior, lambdas), prediction


def leave_one_task_out(routing: pa.Table, encoder_ref: str, settings: KnnSettings, work_dir: Path,
                       lambdas: list[float] | None = None, log: Callable[[str], None] = print,
                       cache_dir: Path | None = None) -> dict[str, Any]:
    """Per task with test prompts: the router trained without that task against the single models
    and the random choice on it. Needs at least two tasks in the training split."""
    split, task = np.asarray(routing.column("split").to_pylist()), np.asarray(routing.column("task").to_pylist())
    train_tasks = sorted(set(task[split == "train"].tolist()))
    if len(train_tasks) < 2:
        raise ValueError(f"leave-one-task-out needs two or more training tasks, the routing table has {train_tasks}")
    vectors = None  # every prompt is embedded once, on the first task that needs it
    out = {}
    for held in train_tasks:
        keep = ((split == "train") & (task != held)) | ((split == "test") & (task == held))
        if not ((split == "test") & (task == held)).any():
            continue
        if vectors is None:
            vectors = encode_cached(routing.column("text").to_pylist(), encoder_ref, settings.truncation_side,
                                    cache_dir, log=log)
        subset = routing.filter(pa.array(keep))
        knn = build_knn(subset, encoder_ref, settings, Path(work_dir) / f"without_{held}", vectors=vectors[keep])
        test = test_split(subset)
        prediction = knn.predict_embeddings(vectors[keep & (split == "test")])
        result = evaluate_router(test, prediction, knn.prior, lambdas)
        best = result["best_single_model"]
        out[held] = {
            "n_test": result["n_scored"],
            "router_quality": result["router_max_quality"]["quality"],
            "router_cost": result["router_max_quality"]["cost"],
            "best_single_model": best,
            "best_single_quality": result["single_models"][best]["quality"],
            "random_quality": result["random"]["quality"],
            "oracle_quality": result["oracle"]["quality"],
            **result["hull"],
        }
        log(f"without {held}: router {out[held]['router_quality']:.3f}, best single {best} "
            f"{out[held]['best_single_quality']:.3f}, random {out[held]['random_quality']:.3f}")
    if out:
        out["mean_gap_to_best_single"] = float(np.mean(
            [v["router_quality"] - v["best_single_quality"] for v in out.values()]))
    return out
