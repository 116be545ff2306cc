"""Downstream value of predicted quality: RouteBalance's joint assignment (and the other baselines
that read a quality signal) in 000's setting, fed the KNN estimator's scores, the cross-validated
router's scores, the true scores or no scores (zero).

    .venv/bin/python -m benchmarks.routebalance_signals [--load 0.8] [--requirement-ms 60] [--quick]

RouteBalance runs twice: with 002's per-request min–max scaling of the quality estimates
(`route_balance`) and with the estimates as they are (`route_balance_absolute`).

The setting is `benchmarks/rl_qos_graph.py`'s: six RouterBench open models on six splitwise Llama-2-70B
tiers, Azure output lengths (true lengths, TL), Poisson arrivals at `--load` of capacity, 1,000
requests × 3 seeds. Writes benchmarks/results/routebalance_signals/routebalance_signals.json.
"""

from __future__ import annotations

import json

from routeforge.training.policies.simulator.baselines import BASELINES

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from benchmarks.rl_qos_graph import SIGNAL_BASELINES, Setting

OUT = results_dir("routebalance_signals")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--requirement-ms", type=float, default=60.0)
    args = parser.parse_args()
    baselines = ("route_balance", "route_balance_absolute") if args.quick else (*SIGNAL_BASELINES,
                                                                               "route_balance_absolute")
    policies = {b: BASELINES[b] for b in baselines}
    result: dict = {"load": args.load, "requirement_ms": args.requirement_ms, "signals": {}}
    for predictor in ("knn", "router"):
        setting = Setting(args, predictor=predictor)
        signals = {f"predicted_{predictor}": "predicted"}
        if predictor == "knn":
            signals |= {"true": "true", "zero": "zero"}
        for label, quality in signals.items():
            pool = setting.pool.ablated(quality=quality, length="true")
            table = setting.evaluate(policies, lambda s, pool=pool: setting.poisson(s, pool=pool), label)
            result["signals"][label] = {name: {"qos_mean": row["qos_mean"], "latency_per_token_s":
                                               row["latency_per_token_s"], "dropped": row["dropped"]}
                                        for name, row in table.items()}
        result[f"timings_{predictor}"] = setting.timings
    for variant in ("route_balance", "route_balance_absolute"):
        rb = {label: entry[variant]["qos_mean"][0] for label, entry in result["signals"].items()}
        result[f"{variant}_qos"] = rb
        print(f"{variant} QoS:", {k: round(v, 4) for k, v in rb.items()}, flush=True)
    (OUT / "routebalance_signals.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
