"""What the router benchmarks on the public score tables share: the fleet files, the router settings
on one truncation side (`--quick`: a small grid), and the routing table's labelled train/test rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from routeforge.core.schemas import routing_models
from routeforge.fleet import load_fleet
from routeforge.training.predictors.router_training import split_rows
from routeforge.training.routing_table import matrix

from benchmarks.routerbench_knn import routing_table_of

CONFIGS = {"dcrouter": "configs/dcrouter.yaml", "routerbench": "configs/routerbench.yaml"}


def selection_settings(config, quick: bool):
    """The fleet's router settings on one truncation side (the KNN's), or a small grid for `--quick`."""
    settings = config.training.router.model_copy(update={"truncation_sides": None})
    if quick:
        settings = settings.model_copy(update={"folds": 3, "knn_k": [30], "mlp_hidden": [0], "mlp_epochs": 5,
                                               "mf_dim": [], "guard_bootstrap": 200})
    return settings


@dataclass
class ScoreFleet:
    config: object
    routing: pa.Table
    models: list[str]
    train: np.ndarray  # labelled training rows (mask)
    test: np.ndarray  # labelled test rows (mask)
    quality: np.ndarray  # (rows, models), NaN where unknown
    texts: list[str]
    tasks: np.ndarray
    timings: dict[str, float]


def score_fleet(fleet: str, every_model: bool = False) -> ScoreFleet:
    """The fleet's routing table built by the library code; rows labelled for at least one model
    (`every_model`: for all of them)."""
    config = load_fleet(CONFIGS[fleet])
    timings: dict[str, float] = {}
    routing, _ = routing_table_of(config, timings)
    models = routing_models(routing.schema)
    quality = matrix(routing, "quality", models)
    keep = ~np.isnan(quality).any(axis=1) if every_model else ~np.all(np.isnan(quality), axis=1)
    return ScoreFleet(config, routing, models, split_rows(routing, "train") & keep, split_rows(routing, "test") & keep,
                      quality, routing.column("text").to_pylist(), np.asarray(routing.column("task").to_pylist()),
                      timings)
