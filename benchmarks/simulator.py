"""The cluster simulator's speed and its calibration against measurements.

1. Speed: simulated requests per wall second for a 4-instance cluster (Llama-2-70B on 4 A100s from the
   splitwise profile) at moderate load (about 60% of its capacity) and near saturation, for each
   baseline policy; and the Azure conversation trace (19,365 requests) replayed on the same cluster.
2. CPU sweep replay: the measured sweep's arrivals (benchmarks/results/cpu_sweep/cpu_sweep_records.parquet)
   on one simulated instance calibrated by this CPU's batch profile of the same model
   (cpu_batch_profile.json); simulated vs measured mean TTFT / TPOT / E2E per rate, for a few values
   of the server's unknown sequence limit.
3. Static batches: every splitwise configuration replayed as a batch arriving at once on its tier.

    .venv/bin/python -m benchmarks.simulator
Writes benchmarks/results/simulator/simulator.json.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow.parquet as pq
from routeforge.profiling.batch_fits import fit_tier, import_splitwise
from routeforge.training.policies.simulator.baselines import BASELINES
from routeforge.training.policies.simulator.calibration import replay_sweep, static_batches
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.metrics import summarize
from routeforge.training.policies.simulator.traces import read_trace
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals

from benchmarks.common import DATA, results_dir
from benchmarks.common import parser as bench_parser

OUT = results_dir("simulator")
SPEED_TIER = "llama2-70b@a100-80gb-tp4"


def speed(tiers) -> dict:
    fit = fit_tier(tiers[SPEED_TIER].measurements)
    # KV room: ~150 GB left by the weights on 4 × 80 GB, at 320 kB per token of Llama-2-70B
    profile = InstanceProfile.from_fit(fit.to_dict(), max_running=64, kv_capacity_tokens=400_000)
    times, prompt, output = read_trace(DATA / "traces" / "azure_llm_inference_conv_2023.csv")
    pool = RequestPool.from_trace(prompt, output, n_models=1)
    capacity = 4 * profile.capacity_rps(prompt.mean(), output.mean())
    out = {"tier": SPEED_TIER, "instances": 4, "max_running": 64, "capacity_rps_estimate": capacity, "runs": []}
    for load, n in ((0.6, 20_000), (0.95, 20_000)):
        reqs = pool.requests(arrivals("poisson", n, rate=load * capacity, seed=1), seed=1)
        for name, policy in BASELINES.items():
            start = time.perf_counter()
            outcomes = Cluster([profile] * 4).run(reqs, policy())
            wall = time.perf_counter() - start
            stats = summarize(outcomes)
            out["runs"].append({"load": load, "policy": name, "requests": n, "wall_s": wall,
                                "requests_per_wall_s": n / wall, "e2e_mean_s": stats["e2e_mean_s"],
                                "e2e_p95_s": stats["e2e_p95_s"], "served": stats["served"]})
            print(f"load {load:.2f} {name:<20} {n / wall:9.0f} simulated requests per wall second; "
                  f"E2E mean {stats['e2e_mean_s']:.2f} s, p95 {stats['e2e_p95_s']:.2f} s", flush=True)
    reqs = pool.requests(times, in_order=True)
    start = time.perf_counter()
    stats = summarize(Cluster([profile] * 4).run(reqs, BASELINES["join_shortest_queue"]()))
    wall = time.perf_counter() - start
    out["azure_trace"] = {"requests": len(reqs), "trace_span_s": float(times[-1]), "wall_s": wall,
                          "requests_per_wall_s": len(reqs) / wall, **stats}
    print(f"Azure trace, {len(reqs)} requests over {times[-1]:.0f} s: {len(reqs) / wall:.0f} requests per wall "
          f"second (JSQ; E2E mean {stats['e2e_mean_s']:.2f} s)", flush=True)
    return out


def sweep_replay() -> dict:
    fit = json.loads((results_dir("cpu_batch_profile") / "cpu_batch_profile.json").read_text())["fit"]
    records = pq.read_table(results_dir("cpu_sweep") / "cpu_sweep_records.parquet")
    out = {}
    for max_running in (16, 32, 64):
        rows = replay_sweep(InstanceProfile.from_fit(fit, max_running=max_running), records)
        out[str(max_running)] = {"per_rate": rows, **{f"{k}_mape": float(np.mean([r[f"{k}_ape"] for r in rows]))
                                                      for k in ("ttft", "tpot", "e2e")}}
        print(f"CPU sweep replay, max_running {max_running}: mean APE TTFT {out[str(max_running)]['ttft_mape']:.1%}, "
              f"TPOT {out[str(max_running)]['tpot_mape']:.1%}, E2E {out[str(max_running)]['e2e_mape']:.1%}", flush=True)
    return out


def splitwise(tiers) -> dict:
    out = {}
    for name, tier in sorted(tiers.items()):
        fit = fit_tier(tier.measurements)
        result = static_batches(InstanceProfile.from_fit(fit.to_dict(), max_running=1024), tier.measurements)
        out[name] = {k: v for k, v in result.items() if k != "rows"}
        print(f"splitwise {name:<28} {result['batches']:3d} batches: MAPE TTFT {result['ttft_ape_mape']:.1%}, "
              f"TPOT {result['tpot_ape_mape']:.1%}, E2E {result['e2e_ape_mape']:.1%}", flush=True)
    return out


def main() -> None:
    bench_parser(__doc__).parse_args()  # --quick: the benchmark is seconds long either way
    tiers = import_splitwise(DATA / "profiles" / "splitwise_perf_model.csv")
    result = {"speed": speed(tiers), "cpu_sweep_replay": sweep_replay(), "splitwise_static_batches": splitwise(tiers)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "simulator.json").write_text(json.dumps(result, indent=2))
    print(f"wrote {OUT / 'simulator.json'}")


if __name__ == "__main__":
    main()
