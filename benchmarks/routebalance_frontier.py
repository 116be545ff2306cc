"""RouteBalance's joint quality–latency assignment (002) over a sweep of weights, in the simulator,
with what the router is told ablated as in 000 (predicted / true / zero quality and length).

Fleet: four instances serving four RouterBench models, each on a splitwise tier standing in for
its deployment (RouterBench's models are API models; the tiers give them a heavy and light
latency): GPT-4 on BLOOM-176B/8×A100 (slow, best), Yi-34B and gpt-3.5 on Llama-2-70B/8×H100 (fast),
Mixtral-8x7B on Llama-2-70B/4×H100. Requests: RouterBench's test prompts (arc_challenge +
winogrande) with their true 0/1 quality and output length on each model (MiniLM word pieces, as
the routing table counts them), Poisson at `--load` of the cluster's capacity, 2,000 per run,
3 seeds. Predictions: the KNN estimator of configs/routerbench.yaml trained on the train split.

For w_q from 0 to 1 (w_l = 1 − w_q, no cost term): mean true quality of the chosen models against
mean and p95 E2E, next to round-robin, JSQ and quality-only.

    .venv/bin/python -m benchmarks.routebalance_frontier [--load 0.7]
Writes benchmarks/results/routebalance_frontier/routebalance_frontier.json and .png.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from routeforge.training.policies.simulator.baselines import JoinShortestQueue, QualityOnly, RoundRobin, RouteBalance
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.metrics import summarize
from routeforge.training.policies.simulator.workloads import arrivals

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from benchmarks.routerbench_fleet import TIERS as FLEET
from benchmarks.routerbench_fleet import routerbench_pool, tier_profile

OUT = results_dir("routebalance_frontier")
SEEDS = (1, 2, 3)
N = 2000


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--load", type=float, default=0.7)
    args = parser.parse_args()
    timings: dict[str, float] = {}
    models = list(FLEET)
    pool, _ = routerbench_pool(models, predictions=True, timings=timings)
    profiles = [tier_profile(FLEET[m], max_running=64, kv_capacity_tokens=400_000) for m in models]
    capacity = sum(p.capacity_rps(pool.prompt_tokens.mean(), pool.output_tokens[:, i].mean())
                   for i, p in enumerate(profiles))
    rate = args.load * capacity

    def run(policy_factory, ablation=("true", "true")) -> dict[str, float]:
        view = pool.ablated(quality=ablation[0], length=ablation[1])
        runs = [summarize(Cluster(profiles, models=list(range(4))).run(
            view.requests(arrivals("poisson", N, rate=rate, seed=s), seed=s), policy_factory())) for s in SEEDS]
        return {k: float(np.mean([r[k] for r in runs])) for k in ("quality_mean", "e2e_mean_s", "e2e_p95_s")} | {
            f"{k}_std": float(np.std([r[k] for r in runs])) for k in ("quality_mean", "e2e_mean_s")}

    result = {"fleet": FLEET, "load": args.load, "rate_rps": rate, "capacity_rps": capacity, "requests": N,
              "seeds": list(SEEDS), "test_prompts": len(pool), "timings": timings,
              "anchors": {"round_robin": run(RoundRobin), "join_shortest_queue": run(JoinShortestQueue),
                          "quality_only_predicted": run(QualityOnly, ("predicted", "predicted")),
                          "quality_only_true": run(QualityOnly)},
              "single_model_quality": {m: float(pool.quality[:, i].mean()) for i, m in enumerate(models)},
              "frontiers": {}}
    for name, ablation in {"predicted (PS, PL)": ("predicted", "predicted"), "true (TS, TL)": ("true", "true"),
                           "zero quality (ZS, PL)": ("zero", "predicted"),
                           "zero length (PS, ZL)": ("predicted", "zero")}.items():
        points = []
        for wq in np.linspace(0, 1, 11):
            point = run(lambda wq=wq: RouteBalance(weights=(float(wq), float(1 - wq), 0.0)), ablation)
            points.append({"w_quality": float(wq), **point})
            print(f"{name:<22} w_q {wq:.1f}: quality {point['quality_mean']:.4f}, "
                  f"E2E mean {point['e2e_mean_s']:.2f} s, p95 {point['e2e_p95_s']:.2f} s", flush=True)
        result["frontiers"][name] = points
    for k, v in result["anchors"].items():
        print(f"{k:<24} quality {v['quality_mean']:.4f}, E2E mean {v['e2e_mean_s']:.2f} s", flush=True)
    (OUT / "routebalance_frontier.json").write_text(json.dumps(result, indent=2))
    plot(result, OUT / "routebalance_frontier.png")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, points in result["frontiers"].items():
        ax.plot([p["e2e_mean_s"] for p in points], [p["quality_mean"] for p in points], "-o", ms=3,
                label=f"RouteBalance, {name}")
    for name, a in result["anchors"].items():
        ax.scatter(a["e2e_mean_s"], a["quality_mean"], marker="x", s=60, label=name)
    ax.set(xlabel="mean E2E (s)", ylabel="mean quality (RouterBench accuracy)",
           title=f"RouteBalance over w_quality = 0 … 1 at {result['load']:.0%} load ({result['rate_rps']:.1f} req/s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
