"""A new model without a full retrain: leave each model out, add it back from N of its labels.

    .venv/bin/python -m benchmarks.new_model [--fleets dcrouter routerbench] [--n 25 100 400] [--draws 3] [--quick]

Per fleet (the routing table built by the library code, as `benchmarks/router_selection.py` does):
1. the full retrain: the router selected by cross-validation on the training split with every
   model's labels;
2. per model m: the router selected without m (the fleet before m joined), then m added by
   `training.predictors.add_model` from N labelled training prompts drawn at random (`--draws`
   seeds each), nothing else retrained;
3. all of them route the test split at λ = 0 (the model with the highest estimate): mean true
   quality of the chosen models, in points (×100). The gap is full retrain − added; the router
   without m and the best single model are shown beside them.
Settings are the fleet file's router settings on one truncation side (the KNN's), so every router
of a fleet is selected the same way; nothing is tuned on the test split.
Writes benchmarks/results/new_model/<fleet>.json.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.add_model import add_model
from routeforge.training.predictors.router_selection import select_router

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from benchmarks.score_fleets import CONFIGS, score_fleet, selection_settings


def routed_points(quality: np.ndarray, y: np.ndarray) -> float:
    """Mean true quality (×100) of the model with the highest estimate per prompt."""
    picks = np.argmax(np.nan_to_num(quality, nan=-1.0), axis=1)
    return float(100 * np.nanmean(y[np.arange(len(y)), picks]))


def run(fleet: str, sizes: list[int], draws: int, quick: bool) -> dict:
    data = score_fleet(fleet)
    config, models, train, test, quality, texts, tasks, timings = (
        data.config, data.models, data.train, data.test, data.quality, data.texts, data.tasks, data.timings)
    settings = selection_settings(config, quick)
    side = config.training.knn.truncation_side
    encoder = {"ref": config.encoder, "truncation_side": side}
    cache = Path(config.storage_root) / "cache" / "embeddings"
    t0 = time.perf_counter()
    x = encode_cached(texts, config.encoder, side, cache, log=lambda m: print(m, flush=True))
    timings["embed_s"] = time.perf_counter() - t0
    x_tr, y_tr, x_te, y_te = x[train], quality[train], x[test], quality[test]
    tasks_tr = list(tasks[train])
    quiet = lambda _: None  # noqa: E731

    t0 = time.perf_counter()
    full_selection = select_router(x_tr, y_tr, models, settings, encoder, tasks=tasks_tr, log=quiet)
    full = full_selection.router
    timings["full_selection_s"] = time.perf_counter() - t0
    full_points = routed_points(full.predict_embeddings(x_te).quality, y_te)
    means = np.nanmean(y_te, axis=0)
    out = {"fleet": fleet, "models": models, "train_prompts": int(train.sum()), "test_prompts": int(test.sum()),
           "truncation_side": side, "full_retrain": {"chosen": full_selection.chosen, "test_points": full_points},
           "best_single": {"model": models[int(np.nanargmax(means))], "test_points": float(100 * np.nanmax(means))},
           "oracle_points": float(100 * np.nanmean(np.nanmax(y_te, axis=1))), "sizes": sizes, "draws": draws,
           "per_model": {}}
    print(f"{fleet}: full retrain {full_points:.2f} points ({full_selection.chosen}), best single "
          f"{out['best_single']['test_points']:.2f}", flush=True)
    for j, m in enumerate(models):
        others = [i for i in range(len(models)) if i != j]
        t0 = time.perf_counter()
        base = select_router(x_tr, y_tr[:, others], [models[i] for i in others], settings, encoder,
                             tasks=tasks_tr, log=quiet).router
        selected_s = time.perf_counter() - t0
        without = routed_points(base.predict_embeddings(x_te).quality, y_te[:, others])
        labelled = np.flatnonzero(np.isfinite(y_tr[:, j]))
        row = {"without_model_points": without, "selection_s": selected_s, "by_n": {}}
        for n in sizes:
            points, seconds = [], []
            for draw in range(draws):
                rows = np.random.default_rng(1000 * draw + n).choice(labelled, size=min(n, len(labelled)),
                                                                     replace=False)
                router = copy.deepcopy(base)
                t1 = time.perf_counter()
                add_model(router, m, x_tr[rows], y_tr[rows, j], seed=draw)
                seconds.append(time.perf_counter() - t1)
                q = router.predict_embeddings(x_te).quality  # columns: the others, then m
                points.append(routed_points(q, y_te[:, [*others, j]]))
            row["by_n"][str(n)] = {"test_points": float(np.mean(points)), "draws": points,
                                   "gap_to_full": full_points - float(np.mean(points)),
                                   "add_seconds": float(np.median(seconds)),
                                   "ridge": router.meta["added_models"][-1]["ridge"]}
        out["per_model"][m] = row
        print(f"  {m}: without {without:.2f}; " + ", ".join(
            f"N={n}: {row['by_n'][str(n)]['test_points']:.2f} (gap {row['by_n'][str(n)]['gap_to_full']:+.2f})"
            for n in sizes), flush=True)
    out["mean_gap_to_full"] = {str(n): float(np.mean([r["by_n"][str(n)]["gap_to_full"]
                                                      for r in out["per_model"].values()])) for n in sizes}
    out["max_gap_to_full"] = {str(n): float(np.max([r["by_n"][str(n)]["gap_to_full"]
                                                    for r in out["per_model"].values()])) for n in sizes}
    out["timings_s"], out["quick"] = timings, quick
    path = results_dir("new_model") / f"{fleet}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"{fleet}: mean gap to the full retrain {out['mean_gap_to_full']} -> {path}", flush=True)
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--fleets", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--n", nargs="+", type=int, default=[25, 100, 400])
    parser.add_argument("--draws", type=int, default=3)
    args = parser.parse_args()
    for fleet in args.fleets:
        run(fleet, args.n, args.draws, args.quick)


if __name__ == "__main__":
    main()
