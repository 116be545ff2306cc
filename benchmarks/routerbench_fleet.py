"""The RouterBench fleet the simulator benchmarks share: RouterBench's test prompts labelled with
every model's true output length and 0/1 quality (the routing table), optionally the KNN
estimator's predictions of both, and splitwise tiers standing in for each model's deployment
(RouterBench's models are API models; the tiers give them a heavy and a light latency)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from routeforge.core.schemas import routing_models
from routeforge.fleet import load_fleet
from routeforge.profiling.batch_fits import fit_tier, import_splitwise
from routeforge.training.embeddings import TrainingEncoder, encode_cached
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.workloads import RequestPool, prompt_token_counts
from routeforge.training.predictors.knn import build_knn
from routeforge.training.predictors.router_report import fit_and_evaluate
from routeforge.training.routing_table import matrix

from benchmarks.common import DATA, REPO
from benchmarks.routerbench_knn import routing_table_of

TIERS = {  # model -> splitwise tier
    "gpt-4-1106-preview": "bloom-176b@a100-80gb-tp8",
    "zero-one-ai/Yi-34B-Chat": "llama2-70b@h100-80gb-tp8",
    "gpt-3.5-turbo-1106": "llama2-70b@h100-80gb-tp8",
    "mistralai/mixtral-8x7b-chat": "llama2-70b@h100-80gb-tp4",
}


def tier_profile(tier: str, **limits) -> InstanceProfile:
    tiers = import_splitwise(DATA / "profiles" / "splitwise_perf_model.csv")
    return InstanceProfile.from_fit(fit_tier(tiers[tier].measurements).to_dict(), **limits)


def router_quality(routing: pa.Table, texts: list[str], config,
                   timings: dict[str, float]) -> tuple[np.ndarray, list[str]]:
    """The cross-validated router's predicted quality of `texts` (and its model order), trained on
    the routing table's training split over all of RouterBench's models, as the bundle's would be."""
    t0 = time.perf_counter()
    train = routing.filter(pa.compute.equal(routing.column("split"), "train"))
    cache = config.storage_root / "cache" / "embeddings"
    settings = config.training.router
    sides = settings.truncation_sides or [config.training.knn.truncation_side]
    views = {side: (encode_cached(train.column("text").to_pylist(), config.encoder, side, cache),
                    encode_cached(texts, config.encoder, side, cache)) for side in sides}
    models = routing_models(routing.schema)
    fit = fit_and_evaluate(views, matrix(train, "quality", models), None, None, models, settings,
                           {"ref": config.encoder}, tasks_train=train.column("task").to_pylist(),
                           log=lambda _: None)
    router = fit.router
    quality = router.predict_embeddings(views[fit.truncation_side][1]).quality
    timings["router_s"] = time.perf_counter() - t0
    return quality, router.models


def routerbench_pool(models: list[str], predictions: bool, timings: dict[str, float],
                     predictor: str = "knn") -> tuple[RequestPool, dict]:
    """(test-split pool, each model's mean quality on the train split: 004's validation accuracy).
    With `predictions`, the pool carries predicted lengths from the KNN estimator and predicted
    quality from `predictor`: "knn" (002's estimator) or "router" (the cross-validated router)."""
    config = load_fleet(REPO / "configs" / "routerbench.yaml")
    routing, _ = routing_table_of(config, timings)
    split = routing.column("split")
    train = routing.filter(pa.compute.equal(split, "train"))
    test = routing.filter(pa.compute.equal(split, "test"))
    texts = test.column("text").to_pylist()
    extra = {}
    if predictions:
        t0 = time.perf_counter()
        knn = build_knn(routing, config.encoder, config.training.knn, config.storage_root / "benchmarks" / "rb_fleet")
        prediction = knn.predict(texts, TrainingEncoder(config.encoder))
        timings["knn_s"] = time.perf_counter() - t0
        cols = [knn.models.index(m) for m in models]
        extra = {"predicted_quality": prediction.quality[:, cols],
                 "predicted_tokens": prediction.output_tokens[:, cols]}
        if predictor == "router":
            quality, names = router_quality(routing, texts, config, timings)
            extra["predicted_quality"] = quality[:, [names.index(m) for m in models]]
    pool = RequestPool.from_routing_table(test, prompt_token_counts(texts, config.encoder), models, **extra)
    accuracy = dict(zip(models, np.nanmean(matrix(train, "quality", models), axis=0).tolist()))
    return pool, accuracy


def save_bar_panel(fig, ax, names: list[str], path: Path, **labels) -> None:
    """Label a bar panel with the policy names and write the figure (the simulator benchmarks' plots)."""
    import matplotlib.pyplot as plt

    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    ax.set(**labels)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
