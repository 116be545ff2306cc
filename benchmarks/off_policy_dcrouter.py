"""Off-policy replay on a logged stream simulated from dcrouter's test labels (issue 52, item 2).

dcrouter's score table has every model's true score on every test prompt, so a logged stream can be
simulated with a known logging policy and every challenger's true value is known exactly:

- the router: the one `benchmarks.budget_targets` trained on the training split (reused from
  `<state>/dcrouter/benchmarks/budget` when there, else trained the same way);
- the logging policy π0 (known propensities): a softmax over the router's estimates at temperature
  0.05, mixed with 10% uniform exploration, the shape a Thompson-sampling router with ε-exploration
  logs;
- each seed logs `--requests` requests: a test prompt drawn uniformly, a model drawn from π0, the
  outcome that model's true score on that prompt;
- the challengers, deterministic: the router at λ = 0; the best single model on the training split;
  the router's second choice (a deliberately worse policy);
- true value: each challenger's mean true score over the test prompts (the prompt draw's expectation).

Per estimator (IPS, SNIPS, DR with the router's estimates as the reward model): bias, RMSE, mean
95% interval width and coverage over the seeds; and the paired DR difference (router − best single)
against the true difference, which is what the release gate's `release.replay` acts on.

    .venv/bin/python -m benchmarks.off_policy_dcrouter [--quick]

Writes benchmarks/results/off_policy_dcrouter/off_policy_dcrouter.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from routeforge.artifacts.deciding.router import Router
from routeforge.artifacts.operating.off_policy import METHODS, difference, estimate
from routeforge.core.schemas import routing_models
from routeforge.fleet import load_fleet
from routeforge.training.embeddings import encode_cached
from routeforge.training.predictors.router_training import split_rows, train_router
from routeforge.training.routing_table import matrix

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from benchmarks.router_selection import CONFIGS, router_settings
from benchmarks.routerbench_knn import routing_table_of

TEMPERATURE, EXPLORE = 0.05, 0.10


def logging_policy(quality: np.ndarray) -> np.ndarray:
    """π0(·|x): softmax of the estimates at `TEMPERATURE`, mixed with `EXPLORE` uniform."""
    z = (quality - quality.max(axis=1, keepdims=True)) / TEMPERATURE
    soft = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return (1 - EXPLORE) * soft + EXPLORE / quality.shape[1]


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="logged requests per seed")
    args = parser.parse_args()
    seeds = 20 if args.quick else 200
    config = load_fleet(CONFIGS["dcrouter"])
    timings: dict[str, float] = {}
    routing, _ = routing_table_of(config, timings)
    cache = Path(config.storage_root) / "cache" / "embeddings"
    folder = Path(config.storage_root) / "benchmarks" / "budget"
    start = time.perf_counter()
    if not (folder / "router.json").is_file():
        train_router(routing, config.encoder, router_settings(config, args.quick), folder,
                     results_dir("off_policy_dcrouter") / "report", truncation_side=config.training.knn.truncation_side,
                     seed=config.training.seed, title="dcrouter", cache_dir=cache, log=lambda m: print(m, flush=True))
    router = Router.load(folder)
    timings["router_s"] = time.perf_counter() - start
    models = routing_models(routing.schema)
    y_all = matrix(routing, "quality", models)
    test = split_rows(routing, "test") & ~np.isnan(y_all).any(axis=1)
    train = split_rows(routing, "train")
    texts = [t for t, keep in zip(routing.column("text").to_pylist(), test) if keep]
    x = encode_cached(texts, config.encoder, router.meta["encoder"].get("truncation_side", "right"), cache)
    y = y_all[test]
    q_hat = np.nan_to_num(router.apply_recall(texts, router.predict_embeddings(x)).quality.astype(np.float64), nan=0.0)
    m = len(models)
    pi0 = logging_policy(q_hat)
    best_single = int(np.nanargmax(np.nanmean(y_all[train], axis=0)))
    order = np.argsort(-q_hat, axis=1, kind="stable")
    challengers = {"router": order[:, 0], "best_single": np.full(len(texts), best_single),
                   "router_second_choice": order[:, 1]}
    truth = {name: float(y[np.arange(len(texts)), pick].mean()) for name, pick in challengers.items()}
    print(f"dcrouter: {len(texts)} test prompts, {m} models; true values "
          + ", ".join(f"{k} {v:.4f}" for k, v in truth.items()), flush=True)
    stats = {name: {method: {"errors": [], "widths": [], "covered": 0} for method in METHODS} for name in challengers}
    diff_stats = {"errors": [], "widths": [], "covered": 0, "excludes_zero": 0}
    true_diff = truth["router"] - truth["best_single"]
    start = time.perf_counter()
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        prompts = rng.integers(0, len(texts), size=args.requests)
        cumulative = pi0[prompts].cumsum(axis=1)
        actions = np.minimum((rng.random(args.requests)[:, None] > cumulative).sum(axis=1), m - 1)
        rewards = y[prompts, actions]
        propensities = pi0[prompts, actions]
        for name, pick in challengers.items():
            found = estimate(actions, propensities, rewards, np.eye(m)[pick[prompts]], q_hat[prompts])
            for method, e in found.items():
                s = stats[name][method]
                s["errors"].append(e.value - truth[name])
                s["widths"].append(e.high - e.low)
                s["covered"] += e.covers(truth[name])
        d = difference(actions, propensities, rewards, np.eye(m)[challengers["router"][prompts]],
                       np.eye(m)[challengers["best_single"][prompts]], q_hat[prompts], q_hat[prompts], "dr")
        diff_stats["errors"].append(d.value - true_diff)
        diff_stats["widths"].append(d.high - d.low)
        diff_stats["covered"] += d.covers(true_diff)
        diff_stats["excludes_zero"] += d.low > 0 or d.high < 0
    timings["replay_s"] = time.perf_counter() - start

    def summary(s: dict) -> dict:
        errors = np.asarray(s["errors"])
        out = {"bias": float(errors.mean()), "rmse": float(np.sqrt(np.mean(errors ** 2))),
               "mean_width": float(np.mean(s["widths"])), "coverage": s["covered"] / seeds}
        if "excludes_zero" in s:
            out["interval_excludes_zero"] = s["excludes_zero"] / seeds
        return out

    result = {"fleet": "dcrouter", "test_prompts": len(texts), "models": m, "seeds": seeds,
              "requests_per_seed": args.requests, "level": 0.95,
              "logging_policy": {"temperature": TEMPERATURE, "explore": EXPLORE,
                                 "min_propensity": float(pi0.min()),
                                 "value": float((pi0 * y).sum(axis=1).mean())},
              "true_value": truth,
              "estimators": {name: {method: summary(s) for method, s in by.items()} for name, by in stats.items()},
              "paired_difference_router_minus_best_single": {"true": true_diff, **summary(diff_stats)},
              "timings_s": timings, "quick": args.quick}
    for name, by in result["estimators"].items():
        print(f"{name}: " + "; ".join(f"{k} bias {v['bias']:+.4f} rmse {v['rmse']:.4f} width {v['mean_width']:.4f} "
                                      f"coverage {v['coverage']:.1%}" for k, v in by.items()), flush=True)
    d = result["paired_difference_router_minus_best_single"]
    print(f"difference router − best single: true {true_diff:+.4f}, DR rmse {d['rmse']:.4f}, coverage "
          f"{d['coverage']:.1%}, interval excludes 0 in {d['interval_excludes_zero']:.1%}")
    out = results_dir("off_policy_dcrouter") / "off_policy_dcrouter.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
