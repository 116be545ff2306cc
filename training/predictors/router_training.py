"""Train the bundle's router from a routing table: embed once, select by cross-validation on the
training split, evaluate once on the test split, write the component and the `router_selection`
report with its plots (reliability of predicted quality, per-cluster lead over the best single model).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from routeforge.core.schemas import routing_models
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.router_report import batch_latency, fit_and_evaluate
from routeforge.training.routing_table import matrix


@dataclass
class RouterTrainingResult:
    """What the `router_selection` asset hands on: the component folder and the report."""

    folder: Path
    report_path: Path
    plots: list[Path]
    metrics: dict[str, float]
    report: dict[str, Any] = field(repr=False)


def split_rows(routing: pa.Table, split: str) -> np.ndarray:
    return np.asarray(routing.column("split").to_pylist()) == split


def reliability_plot(pred: np.ndarray, y: np.ndarray, path: Path, title: str, bins: int = 10) -> Path:
    """Mean true quality against mean predicted quality per bin of predicted quality."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    known = ~np.isnan(y)
    p, t = pred[known], y[known]
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(p, edges) - 1, 0, bins - 1)
    xs = [p[which == b].mean() for b in range(bins) if (which == b).any()]
    ys = [t[which == b].mean() for b in range(bins) if (which == b).any()]
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="calibrated")
    ax.plot(xs, ys, marker="o", label="router")
    ax.set(xlabel="predicted quality", ylabel="mean true quality", title=title, xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cluster_plot(per_cluster: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(per_cluster)
    fig, ax = plt.subplots(figsize=(max(4.5, 0.6 * len(names) + 2), 3.5))
    xs = np.arange(len(names))
    ax.bar(xs - 0.2, [per_cluster[n]["best_single"] for n in names], 0.4, label="cluster's best single model")
    ax.bar(xs + 0.2, [per_cluster[n]["router"] for n in names], 0.4, label="router")
    ax.set_xticks(xs, names, rotation=45, ha="right")
    ax.set(ylabel="mean quality (test)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def train_router(routing: pa.Table, encoder_ref: str, settings, out_dir: Path, report_dir: Path, *,
                 truncation_side: str = "right", seed: int = 0, title: str = "router",
                 cache_dir: Path | None = None, log=print) -> RouterTrainingResult:
    models = routing_models(routing.schema)
    train_rows, test_rows = split_rows(routing, "train"), split_rows(routing, "test")
    quality = matrix(routing, "quality", models)
    labelled = ~np.all(np.isnan(quality), axis=1)
    train_rows &= labelled
    test_rows &= labelled
    if train_rows.sum() < settings.folds * 2:
        raise ValueError(f"routing table has {int(train_rows.sum())} labelled training prompts; "
                         f"{settings.folds}-fold selection needs at least {settings.folds * 2}")
    texts = routing.column("text").to_pylist()
    rows = train_rows | test_rows
    sides = list(getattr(settings, "truncation_sides", None) or [truncation_side])
    log(f"router: embedding {int(rows.sum())} prompts ({', '.join(sides)} truncation)")
    views = {}
    for side in sides:
        vectors = encode_cached([t for t, keep in zip(texts, rows) if keep], encoder_ref, side, cache_dir, log=log)
        # each view straight from the embedded rows: a table-sized copy besides them was 1.5 GB at 10^6
        views[side] = (vectors[train_rows[rows]], vectors[test_rows[rows]])
        del vectors
    tasks = np.asarray(routing.column("task").to_pylist())
    cost, tokens = matrix(routing, "cost", models), matrix(routing, "output_tokens", models)
    has_test = bool(test_rows.any())
    start = time.perf_counter()
    fit = fit_and_evaluate(
        views, quality[train_rows], None, quality[test_rows] if has_test else None, models, settings,
        {"ref": encoder_ref}, tasks_train=list(tasks[train_rows]),
        tasks_test=list(tasks[test_rows]) if has_test else None, cost_train=cost[train_rows],
        cost_test=cost[test_rows] if has_test else None, tokens_train=tokens[train_rows], seed=seed, log=log)
    router, report = fit.router, fit.report()
    x_test = views[fit.truncation_side][1]
    report["selection_seconds"] = time.perf_counter() - start
    if getattr(settings, "recall_known_prompts", False):
        router.add_recall([t for t, keep in zip(texts, train_rows) if keep], quality[train_rows])
    out_dir, report_dir = Path(out_dir), Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    router.save(out_dir)
    plots = []
    if has_test:
        report["batch64_cpu"] = batch_latency(router, [t for t, k in zip(texts, test_rows) if k][:64])
        pred = router.predict_embeddings(x_test).quality
        plots.append(reliability_plot(pred, quality[test_rows], report_dir / "router_reliability.png",
                                      f"{title}: reliability (test)"))
        plots.append(cluster_plot(report["test"]["per_cluster"], report_dir / "router_per_cluster.png",
                                  f"{title}: per cluster (test)"))
    path = report_dir / "router_selection.json"
    path.write_text(json.dumps(report, indent=2, default=float))
    metrics = {f"cv/{k}": float(v) for k, v in asdict(fit.selection.cv).items()}
    if has_test:
        metrics |= {f"test/{k}": float(v) for k, v in report["test"].items() if isinstance(v, float)}
        metrics |= {f"test/hull/{k}": float(v) for k, v in report["test"].get("hull", {}).items()}
        metrics["batch64/per_prompt_ms"] = report["batch64_cpu"]["per_prompt_ms"]
    return RouterTrainingResult(out_dir, path, plots, metrics, report)
