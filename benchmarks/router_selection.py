"""Router selection benchmark: the estimator family chosen by cross-validation on the training split,
evaluated once on the test split, on LLMRouter's dcrouter score table and on RouterBench.

    .venv/bin/python -m benchmarks.router_selection [--fleets dcrouter routerbench] [--quick]

Per fleet: prompts → table import → table scoring → routing table with the library code (no Dagster;
exact duplicate prompts are quarantined, so a test prompt that also sits in the training file is
dropped from the test split), then `train_router`: every candidate's cross-validated score and Brier
score, the chosen router, the guard's per-cluster decisions, and the test numbers (mean score at
argmax, gap closed, per cluster and per task against that group's best single model, AIQ and lead
over the single-model hull where costs exist, batch-of-64 CPU latency next to the KNN's).
Leave-one-task-out: the chosen configuration is re-selected without one task and routes that task's
test prompts (dcrouter's test rows carry no task: its training clusters are held out instead, scored
out of sample on their training rows). For dcrouter the published 500-row test file is also scored
as is (119 of its prompts appear verbatim in the training file), for comparison with other reports.

Writes benchmarks/results/router_selection/<fleet>.json and plots beside it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from routeforge.artifacts.deciding.router import Router
from routeforge.core.schemas import routing_models
from routeforge.fleet import load_fleet
from routeforge.prompts.score_tables import read_score_table
from routeforge.prompts.sources import normalize
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.router_report import batch_latency, evaluate
from routeforge.training.predictors.router_selection import select_router
from routeforge.training.predictors.router_training import split_rows, train_router
from routeforge.training.routing_table import matrix

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from benchmarks.routerbench_knn import routing_table_of

CONFIGS = {"dcrouter": "configs/dcrouter.yaml", "routerbench": "configs/routerbench.yaml"}


def leave_one_task_out(x, y, tasks_train, x_test, y_test, tasks_test, models, settings, encoder, log):
    """Per held-out task: the router selected without it, on that task's prompts, against the task's
    best single model (scored on those prompts)."""
    out = {}
    for task in sorted(set(tasks_test)):
        keep = np.asarray(tasks_train) != task
        held = np.asarray(tasks_test) == task
        router = select_router(x[keep], y[keep], models, settings, encoder,
                               tasks=list(np.asarray(tasks_train)[keep]), log=lambda _: None).router
        result = evaluate(router, x_test[held], y_test[held])
        out[task] = {"prompts": int(held.sum()), "router": result["router"], "best_single": result["best_single"],
                     "best_single_model": result["best_single_model"], "lead": result["router"] - result["best_single"]}
        log(f"  leave out {task}: router {out[task]['router']:.4f} vs best single {out[task]['best_single']:.4f}")
    return out


def latencies(router: Router, x_train, y_train, models, encoder, texts, settings, rounds: int = 5) -> dict:
    """Batch-of-64 latency of the chosen router and of 002's KNN (k = 10) through the same runtime,
    measured in alternation so that any other load on the machine weighs on both alike."""
    from routeforge.core.config import RouterSelectionSettings

    knn_only = RouterSelectionSettings(enabled=True, folds=2, knn_k=[10], knn_prior_strength=[10.0], mlp_hidden=[],
                                       mf_dim=[], ensemble_size=1, guard_clusters=settings.guard_clusters)
    knn = select_router(x_train, y_train, models, knn_only, encoder, log=lambda _: None).router
    runs: dict[str, list[dict]] = {"router": [], "knn_k10": []}
    for _ in range(rounds):
        runs["router"].append(batch_latency(router, texts, repeats=1))
        runs["knn_k10"].append(batch_latency(knn, texts, repeats=1))
    return {name: {"batch": 64, "median_seconds": float(np.median([r["median_seconds"] for r in rs])),
                   "per_prompt_ms": float(np.median([r["per_prompt_ms"] for r in rs]))} for name, rs in runs.items()}


def router_settings(config, quick: bool):
    """The fleet's router settings, or with `quick` a small selection (smoke runs)."""
    settings = config.training.router
    if quick:
        settings = settings.model_copy(update={"folds": 3, "knn_k": [30], "mlp_hidden": [0], "mlp_epochs": 5,
                                               "mf_epochs": 5, "guard_bootstrap": 200})
    return settings


def run(fleet: str, quick: bool) -> dict:
    config = load_fleet(CONFIGS[fleet])
    settings = router_settings(config, quick)
    timings: dict[str, float] = {}
    routing, quarantined = routing_table_of(config, timings)
    out_dir = results_dir("router_selection")
    cache = Path(config.storage_root) / "cache" / "embeddings"
    t0 = time.perf_counter()
    result = train_router(routing, config.encoder, settings, Path(config.storage_root) / "benchmarks" / "router",
                          out_dir, truncation_side=config.training.knn.truncation_side, seed=config.training.seed,
                          title=fleet, cache_dir=cache, log=lambda m: print(m, flush=True))
    timings["train_router_s"] = time.perf_counter() - t0
    report = result.report
    models = routing_models(routing.schema)
    train_rows, test_rows = split_rows(routing, "train"), split_rows(routing, "test")
    quality = matrix(routing, "quality", models)
    texts = routing.column("text").to_pylist()
    tasks = np.asarray(routing.column("task").to_pylist())
    encoder = {"ref": config.encoder, "truncation_side": report["truncation_side"]}  # the side CV chose
    x = encode_cached(texts, config.encoder, encoder["truncation_side"], cache)
    router = Router.load(result.folder)
    report["batch64_cpu_alternating"] = latencies(router, x[train_rows], quality[train_rows], models, encoder,
                                                  [t for t, k in zip(texts, test_rows) if k][:64], settings)
    if len(set(tasks[test_rows])) > 1:
        report["leave_one_task_out"] = leave_one_task_out(
            x[train_rows], quality[train_rows], list(tasks[train_rows]), x[test_rows], quality[test_rows],
            list(tasks[test_rows]), models, settings, encoder, print)
    if fleet == "dcrouter":
        ds = config.datasets[0]
        cluster_rows = read_score_table({"train": ds.files["train"]}, text_field=ds.text_field,
                                        scores_field=ds.scores_field, task_field="cluster_id")
        # the routing table holds the prompts as the pipeline normalised them (NFC, trimmed, LF)
        by_text = {normalize(r.text): f"cluster_id={r.task}" for r in cluster_rows}
        train_clusters = [by_text[t] for t in np.asarray(texts)[train_rows]]
        folds = np.asarray(train_clusters)
        report["leave_one_cluster_out_train"] = {}
        for c in sorted(set(train_clusters)):
            keep, held = folds != c, folds == c
            sub = select_router(x[train_rows][keep], quality[train_rows][keep], models, settings, encoder,
                                log=lambda _: None).router
            r = evaluate(sub, x[train_rows][held], quality[train_rows][held])
            report["leave_one_cluster_out_train"][c] = {
                "prompts": int(held.sum()), "router": r["router"], "best_single": r["best_single"],
                "best_single_model": r["best_single_model"], "lead": r["router"] - r["best_single"]}
            print(f"  leave out {c}: router {r['router']:.4f} vs best single {r['best_single']:.4f}", flush=True)
        published = read_score_table({"test": ds.files["test"]}, text_field=ds.text_field,
                                     scores_field=ds.scores_field, task_field=None)
        y_pub = np.asarray([[float(r.scores[m]) for m in models] for r in published])
        x_pub = encode_cached([r.text for r in published], config.encoder, encoder["truncation_side"], cache)
        report["test_published_500"] = {k: v for k, v in evaluate(router, x_pub, y_pub).items()
                                        if k not in ("per_cluster",)}
        # as the runtime serves them (`Router.predict`): the 119 prompts that are training prompts
        # verbatim are routed by the scores observed for them in training
        report["test_published_500_known_prompts_recalled"] = {
            k: v for k, v in evaluate(router, x_pub, y_pub, texts=[r.text for r in published]).items()
            if k not in ("per_cluster",)}
    report["quarantined_pairs"] = quarantined
    report["timings_s"] = timings
    report["quick"] = quick
    path = out_dir / f"{fleet}.json"
    path.write_text(json.dumps(report, indent=2, default=float))
    test = report.get("test", {})
    print(f"{fleet}: chosen {report['chosen']}; cv router {report['cv']['router']:.4f} (best single "
          f"{report['cv']['best_single']:.4f}); test router {test.get('router', float('nan')):.4f}, best single "
          f"{test.get('best_single', float('nan')):.4f}, oracle {test.get('oracle', float('nan')):.4f}, gap closed "
          f"{test.get('gap_closed', float('nan')):.3f} -> {path}", flush=True)
    return report


def over_fleets(doc: str | None, run_fleet) -> None:
    """A router benchmark's command line: `run_fleet(fleet, quick)` for each of `--fleets`."""
    parser = bench_parser(doc)
    parser.add_argument("--fleets", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args()
    for fleet in args.fleets:
        run_fleet(fleet, args.quick)


def main() -> None:
    over_fleets(__doc__, run)


if __name__ == "__main__":
    main()
