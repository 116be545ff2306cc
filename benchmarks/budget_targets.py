"""Budgets an operator sets, against what the router then does on a test split it never saw.

Per fleet (dcrouter, RouterBench): the router trained as the pipeline trains it (`train_router`, the
training split only; its calibration table is out of fold there), then on the test split, for each
target the table turns into λ (`artifacts.deciding.budget.choose_setting`):
- a cost per 1,000 requests at 25%, 50% and 75% of the way from the cheapest setting to λ = 0's
  (RouterBench only: dcrouter's score table has no costs);
- a most share for the model the router sends most traffic at λ = 0: 10%, 30%, 50%;
- a quality floor at the midpoint of the table's range;
the realised cost per 1,000 requests, share and mean quality on the test split, and their relative
error against the target. The goal is within 5% of the target.

    .venv/bin/python -m benchmarks.budget_targets [--fleets dcrouter routerbench]

Writes benchmarks/results/budget_targets/<fleet>.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from routeforge.artifacts.deciding.budget import TargetUnreachable, choose_setting
from routeforge.artifacts.deciding.router import Router
from routeforge.core.schemas import routing_models
from routeforge.fleet import load_fleet
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.router_training import split_rows, train_router
from routeforge.training.routing_table import matrix

from benchmarks.common import results_dir
from benchmarks.router_selection import CONFIGS, over_fleets, router_settings
from benchmarks.routerbench_knn import routing_table_of


def realised(router: Router, x_test: np.ndarray, texts: list[str], y: np.ndarray, cost: np.ndarray,
             setting) -> dict:
    """What the setting does on the test split: each prompt routed with its λ (`Setting.pick`)."""
    prediction = router.predict_embeddings(x_test)
    picks = setting.pick(prediction, texts)
    rows = np.arange(len(picks))
    true_cost = np.where(np.isnan(cost), prediction.cost, cost)[rows, picks]  # a missing cost: the predicted one
    return {"quality": float(np.nanmean(y[rows, picks])),
            "cost_per_1k": float(np.nanmean(true_cost) * 1000) if np.isfinite(true_cost).any() else None,
            "share": {m: float(np.mean(picks == j)) for j, m in enumerate(prediction.models)}}


def run(fleet: str, quick: bool) -> dict:
    config = load_fleet(CONFIGS[fleet])
    settings = router_settings(config, quick)
    timings: dict[str, float] = {}
    routing, _ = routing_table_of(config, timings)
    cache = Path(config.storage_root) / "cache" / "embeddings"
    start = time.perf_counter()
    result = train_router(routing, config.encoder, settings, Path(config.storage_root) / "benchmarks" / "budget",
                          results_dir("budget_targets") / f"{fleet}-report",
                          truncation_side=config.training.knn.truncation_side, seed=config.training.seed, title=fleet,
                          cache_dir=cache, log=lambda m: print(m, flush=True))
    timings["train_router_s"] = time.perf_counter() - start
    router = Router.load(result.folder)
    table = router.meta["budget"]
    models = routing_models(routing.schema)
    test = split_rows(routing, "test") & ~np.all(np.isnan(matrix(routing, "quality", models)), axis=1)
    texts = [t for t, keep in zip(routing.column("text").to_pylist(), test) if keep]
    x_test = encode_cached(texts, config.encoder, result.report["truncation_side"], cache)
    y, cost = matrix(routing, "quality", models)[test], matrix(routing, "cost", models)[test]
    rows = table["rows"]
    targets = []
    if rows[0]["cost_per_1k"] is not None and np.isfinite(cost).any():
        top, bottom = rows[0]["cost_per_1k"], min(r["cost_per_1k"] for r in rows)
        targets += [{"budget_per_1k": bottom + f * (top - bottom)} for f in (0.25, 0.5, 0.75)]
    strongest = max(rows[0]["share"], key=rows[0]["share"].get)
    targets += [{"max_share": {strongest: cap}} for cap in (0.1, 0.3, 0.5) if cap < rows[0]["share"][strongest]]
    qualities = [r["quality"] for r in rows if r["quality"] is not None]
    targets.append({"min_quality": (max(qualities) + min(qualities)) / 2})
    out = []
    for target in targets:
        try:
            setting = choose_setting(table, **target)
        except TargetUnreachable as exc:
            out.append({"target": target, "unreachable": str(exc)})
            continue
        got = realised(router, x_test, texts, y, cost, setting)
        row = {"target": target, "lam": setting.lam, "lam_other": setting.lam_other, "weight": setting.weight,
               "expected": {"quality": setting.quality,
               "cost_per_1k": setting.cost_per_1k, "share": setting.share}, "test": got}
        if "budget_per_1k" in target:
            row["relative_error"] = got["cost_per_1k"] / target["budget_per_1k"] - 1
        elif "max_share" in target:
            model, cap = next(iter(target["max_share"].items()))
            row["relative_error"] = got["share"][model] / cap - 1
        else:
            row["relative_error"] = got["quality"] / target["min_quality"] - 1
        out.append(row)
        print(f"{fleet}: {target} → {setting.describe()}; test {got['quality']:.4f} quality, "
              f"cost/1k {got['cost_per_1k']}, error {row['relative_error']:+.1%}", flush=True)
    report = {"fleet": fleet, "train_prompts": table["prompts"], "test_prompts": int(test.sum()),
              "table_rows": len(rows), "targets": out, "timings_s": timings, "quick": quick}
    path = results_dir("budget_targets") / f"{fleet}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"wrote {path}")
    return report


def main() -> None:
    over_fleets(__doc__, run)


if __name__ == "__main__":
    main()
