"""RouterBench quality–cost benchmark of the KNN router (library code only, no Dagster).

Runs prompts → table import → table correctness → routing table → KNN on configs/routerbench.yaml
and writes `benchmarks/results/routerbench_knn/routerbench_knn.json` and `.png`: per-model accuracy and cost,
random, oracle, KNN argmax-quality routing, and the λ sweep of q̂ − λ·ĉ.

    .venv/bin/python -m benchmarks.routerbench_knn [--config configs/routerbench.yaml] [--k 10]
        [--truncation-side left|right] [--prior-strength 10] [--no-loto]

λ runs over `training.predictors.quality_cost_eval.auto_lambdas` (six decades around the fleet's quality-per-cost
rate). Leave-one-task-out (002's leave-one-dataset-out): the router indexed without ARC routes the
ARC test prompts, and likewise for Winogrande.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from routeforge.core.schemas import QUALITY, RESPONSES
from routeforge.core.storage import Quarantine, to_table
from routeforge.fleet import load_fleet
from routeforge.generation.engines import make_engine, prompt_rows
from routeforge.prompts.sources import build_prompts
from routeforge.scoring.quality import Scorer
from routeforge.training.predictors.knn import build_knn
from routeforge.training.predictors.knn_eval import evaluate_knn, leave_one_task_out
from routeforge.training.predictors.quality_cost_eval import plot_quality_cost
from routeforge.training.routing_table import build_routing_table

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir


def routing_table_of(config, timings: dict[str, float]):
    """Prompts → table import → table correctness → routing table with the library code alone;
    returns the table and the quarantined pairs per model."""
    t0 = time.perf_counter()
    prompts, _ = build_prompts(config)
    timings["prompts_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    responses, quality, quarantined = {}, {}, {}
    rows = prompt_rows(prompts)
    scorer = Scorer(config)
    for spec in config.models:
        q = Quarantine("responses", spec.name)
        responses[spec.name] = to_table(make_engine(spec, config, Path("/tmp")).generate(rows, q), RESPONSES)
        qq = Quarantine("quality", spec.name)
        quality[spec.name] = to_table(scorer.score(responses[spec.name], prompts, qq), QUALITY)
        quarantined[spec.name] = len(q) + len(qq)
    timings["import_and_score_s"] = time.perf_counter() - t0
    return build_routing_table(prompts, responses, quality, config.model_names), quarantined


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--config", default="configs/routerbench.yaml")
    parser.add_argument("--k", type=int, default=None, help="override training.knn.k")
    parser.add_argument("--truncation-side", choices=["left", "right"], default=None,
                        help="override training.knn.truncation_side (which end of a long prompt the encoder keeps)")
    parser.add_argument("--prior-strength", type=float, default=None, help="override training.knn.prior_strength")
    parser.add_argument("--no-loto", action="store_true", help="skip the leave-one-task-out evaluation")
    parser.add_argument("--out", default=str(results_dir("routerbench_knn") / "routerbench_knn"))
    args = parser.parse_args()
    if args.quick:
        args.no_loto = True

    config = load_fleet(args.config)
    updates = {k: v for k, v in (("k", args.k), ("truncation_side", args.truncation_side),
                                 ("prior_strength", args.prior_strength)) if v is not None}
    knn_settings = config.training.knn.model_copy(update=updates)
    timings = {}
    routing, quarantined = routing_table_of(config, timings)
    t0 = time.perf_counter()
    out = Path(args.out)
    knn = build_knn(routing, config.encoder, knn_settings, config.storage_root / "benchmarks" / "knn_component")
    timings["knn_build_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    result, _ = evaluate_knn(knn, routing, config.encoder, config.training.lambda_sweep)
    timings["knn_predict_and_evaluate_s"] = time.perf_counter() - t0
    result.update({"k": knn_settings.k, "truncation_side": knn_settings.truncation_side,
                   "prior_strength": knn_settings.prior_strength,
                   "n_train_indexed": knn.index.ntotal, "quarantined_pairs": quarantined, "timings": timings})
    if not args.no_loto:
        result["leave_one_task_out"] = leave_one_task_out(routing, config.encoder, knn_settings,
                                                          config.storage_root / "benchmarks" / "knn_loto")
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    plot_quality_cost(result, Path(f"{out}.png"), f"RouterBench arc_challenge + winogrande, KNN k={knn_settings.k}")

    best = result["best_single_model"]
    print(f"best single model {best}: {result['single_models'][best]['quality']:.4f}")
    print(f"KNN argmax quality: {result['router_max_quality']['quality']:.4f} "
          f"(gap {100 * result['router_gap_to_best_single']:+.2f} points), "
          f"cost {result['router_max_quality']['cost']:.6f} vs {result['single_models'][best]['cost']:.6f}")
    print(f"oracle {result['oracle']['quality']:.4f}, random {result['random']['quality']:.4f}")
    h = result["hull"]
    print(f"AIQ router {h['aiq_router']:.4f} vs single-model hull {h['aiq_single_hull']:.4f}; largest lead over "
          f"the hull {100 * h['max_gap_above_hull']:+.2f} points at ${h['max_gap_at_cost']:.6f}")
    for task, r in result.get("leave_one_task_out", {}).items():
        if isinstance(r, dict):
            print(f"leave {task} out: router {r['router_quality']:.4f} vs best single {r['best_single_model']} "
                  f"{r['best_single_quality']:.4f}, random {r['random_quality']:.4f}; AIQ {r['aiq_router']:.4f} "
                  f"vs hull {r['aiq_single_hull']:.4f}")
    print(f"wrote {out}.json and {out}.png")


if __name__ == "__main__":
    main()
