"""The reference GPU fleet end to end (issue 49, item 1): `make gpu-fleet`.

    python -m benchmarks.gpu_fleet [--config configs/gpu_fleet.yaml] [--state FOLDER]
    python -m benchmarks.gpu_fleet --prices      # the per-token prices, derived again from the file
    python -m benchmarks.gpu_fleet --compare OLD.json NEW.json --name NAME   # two runs' results, digit for digit

Runs `routeforge.pipelines.run` on the fleet in a fresh state folder and Dagster instance (every
policy trained, gated and registered in one bundle) and writes `benchmarks/results/gpu_fleet/
<fleet>.json`: the wall time, each stage's time, the load calibration per workload, and the table of
policy × workload × load with goodput, served share, latency over offered requests, quality and
cost (mean ± std over the seeds), the gate's verdict, and a plot of goodput against load.
Nothing here runs on a GPU: the tiers are published measurements (configs/gpu_fleet.yaml).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import DATA, REPO, parser, results_dir

SHOWN = ("goodput", "served_share", "e2e_mean_offered_s", "e2e_p95_offered_s", "quality_mean",
         "cost_usd_per_request", "rejected", "dropped", "quality_goodput")
WITH_STD = ("goodput", "served_share", "e2e_mean_offered_s", "e2e_p95_offered_s", "quality_goodput")


def derived_prices(config_path: Path) -> dict[str, float]:
    """USD per million tokens per model: its first tier's GPU-hour cost over the tokens that tier's
    LLM-Inference-Bench rows serve per hour at their best measured throughput."""
    import csv

    raw = yaml.safe_load(config_path.read_text())
    hourly = {h["name"]: h["hourly_usd"] for h in raw["hardware"]}
    best: dict[str, float] = {}
    with open(DATA / "profiles" / "llm_inference_bench_results.csv", newline="") as f:
        for row in csv.DictReader(f):
            key = f"{row['Model']}@{row['Hardware']}x{row['Num of Hardware']}@{row['Framework']}"
            best[key] = max(best.get(key, 0.0), float(row["Throughput"]))
    prices: dict[str, float] = {}
    for tier in raw["tiers"]:
        if tier["model"] not in prices:
            tokens_per_hour = best[tier["profile"]["key"]] * 3600
            prices[tier["model"]] = round(hourly[tier["hardware"]] / tokens_per_hour * 1e6, 3)
    return prices


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    workloads = sorted({r["workload"] for r in rows})
    recommended = report["gate"]["recommended"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.6 * len(workloads), 4), squeeze=False)
    for ax, kind in zip(axes[0], workloads):
        for policy in dict.fromkeys(r["policy"] for r in rows):
            pts = sorted((r["load"], r["goodput"], r["goodput_std"]) for r in rows
                         if r["workload"] == kind and r["policy"] == policy)
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", ms=3,
                        lw=2.5 if policy == recommended else 1, capsize=2,
                        label=policy + (" (recommended)" if policy == recommended else ""))
        ax.set(title=kind, xlabel="load (× sustainable rate)", ylabel="goodput (share of offered within SLO)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replay_with_headroom(bundle_uri: str, tracking_uri: str, loads: list[float], seeds: int, requests: int,
                         log=print) -> list[dict]:
    """The registered bundle replayed on Azure's conversation trace (its own arrivals and token
    counts) as `routeforge policies evaluate` does, at each load, with a clairvoyant lookahead router
    on the same windows (`benchmarks.routing_headroom`: true lengths, the simulator's state; no
    runtime could run it): how much room there was above the policies."""
    from routeforge.artifacts.bundle.loader import load_bundle
    from routeforge.training.policies.evaluation import fleet_profiles
    from routeforge.training.policies.packaging import read_simulator
    from routeforge.training.policies.replay import evaluate_bundle, trace_windows
    from routeforge.training.policies.simulator.cluster import Cluster
    from routeforge.training.policies.simulator.metrics import mean_std, summarize
    from routeforge.training.policies.simulator.traces import read_trace

    from benchmarks.routing_headroom import ClairvoyantLookahead

    bundle = load_bundle(bundle_uri, tracking_uri=tracking_uri)
    sim_component = next(c for c in bundle.manifest.components if c.kind == "routing_simulator")
    sim = read_simulator(bundle.root / sim_component.name)
    profiles, _ = fleet_profiles([i["fit"] for i in sim["instances"]], sim["queue_capacity"], sim["kv_capacity_tokens"])
    models = [i["model_index"] for i in sim["instances"]]
    times, prompt, output = read_trace(DATA / "traces" / "azure_llm_inference_conv_2023.csv")
    out = []
    for load in loads:
        start = time.perf_counter()
        report = evaluate_bundle(bundle, times, prompt, output, load=load, seeds=seeds, requests=requests, log=log)
        windows = trace_windows(times, prompt, output, requests, report["rate_rps"], len(sim["models"]))
        runs = [summarize(Cluster(profiles, models=models).run(windows(seed), ClairvoyantLookahead()),
                          profiles=profiles) for seed in range(seeds)]
        lookahead = {k: v for k, v in mean_std(runs, ("goodput", "served_share", "e2e_mean_offered_s")).items()}
        rows = [{"policy": r["policy"], "source": r["source"], **{k: [r[k], r[f"{k}_std"]] for k in
                 ("goodput", "served_share", "e2e_mean_offered_s", "e2e_p99_offered_s")},
                 **{k: r[k] for k in ("rejected_buffer_full", "rejected_too_large", "rejected_outgrew",
                                      "dropped_by_policy", "dropped_timed_out")}} for r in report["rows"]]
        out.append({"load": load, "rate_rps": report["rate_rps"], "sustainable_rps": report["capacity_rps"],
                    "ranking": report["ranking"]["ranking"], "verdict": report["ranking"]["verdict"],
                    "rows": rows, "lookahead": lookahead, "seconds": round(time.perf_counter() - start, 1)})
        log(f"trace replay at {load:g}: {report['ranking']['verdict']}; lookahead goodput "
            f"{lookahead['goodput'][0]:.4f}")
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--config", type=Path, default=REPO / "configs" / "gpu_fleet.yaml")
    p.add_argument("--state", type=Path, default=None, help="state folder (default: a fresh temporary one)")
    p.add_argument("--prices", action="store_true", help="print the derived prices against the file's and exit")
    p.add_argument("--replay-only", action="store_true",
                   help="skip the pipeline: replay the trace against the bundle already registered in --state")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"),
                   help="compare two runs' results (before and after a change) and exit")
    p.add_argument("--name", default="runs", help="with --compare: names results/gpu_fleet/compare_<name>.json")
    args = p.parse_args()
    if args.compare:
        found = compare_runs(*args.compare)
        path = results_dir("gpu_fleet") / f"compare_{args.name}.json"
        path.write_text(json.dumps(found, indent=2))
        print(f"gpu_fleet: {found['table_rows_equal']} of {found['table_rows']} table rows equal; "
              f"differing: {found['differing'] or 'none'}; in {path}")
        return
    config = args.config.resolve()
    if args.prices:
        raw = {m["name"]: m["price"]["output_per_mtok"] for m in yaml.safe_load(config.read_text())["models"]}
        for model, price in derived_prices(config).items():
            print(f"{model:<34} derived {price:7.3f} USD/Mtok   file {raw.get(model)}")
        return
    state = (args.state or Path(tempfile.mkdtemp(prefix="routeforge-gpu-fleet-"))).resolve()
    state.mkdir(parents=True, exist_ok=True)
    home = state / "dagster"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "ROUTEFORGE_STATE": str(state), "DAGSTER_HOME": str(home), "ROUTEFORGE_DATA": str(DATA),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    print(f"gpu_fleet: {config.name}, state in {state}", flush=True)
    name = yaml.safe_load(config.read_text())["name"]
    out = results_dir("gpu_fleet")
    if args.replay_only:
        result = json.loads((out / f"{name}.json").read_text())
        report = json.loads(_report(config, state).read_text())
        result |= {k: report.get(k) for k in ("train_workloads", "recommendations", "transfer")}
    else:
        result = _pipeline(config, state, env, name, out)
    tracking = f"sqlite:///{state / 'mlflow.db'}"
    os.environ.update({"ROUTEFORGE_STATE": str(state), "MLFLOW_TRACKING_URI": tracking})
    uri = f"models:/{yaml.safe_load(config.read_text())['registry']['model_name']}@challenger"
    loads = [0.5, 0.8, 0.95] if not args.quick else [0.8]
    result["trace_replay"] = replay_with_headroom(uri, tracking, loads, seeds=3, requests=500)
    from routeforge.artifacts.common import strict_json

    (out / f"{name}.json").write_text(strict_json.dumps(result, indent=2, default=float))
    print(f"gpu_fleet: results in {out / (name + '.json')}")


def compare_runs(old: Path, new: Path) -> dict:
    """Two runs' results compared value for value (floats too: the simulation is seeded, so a change
    that should not move behaviour leaves every digit): the table's rows, the gate and its inputs,
    the trace replay; wall and stage times are reported, not compared."""
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    rows = list(zip(a["table"], b["table"]))
    differing: dict[str, int] = {}
    for x, y in rows:
        if x != y:
            differing[x["policy"]] = differing.get(x["policy"], 0) + 1
    keys = ("gate", "gate_by_workload", "load_calibration", "slo", "recommendations", "tuned_heuristics", "transfer")
    replays = list(zip(a.get("trace_replay") or [], b.get("trace_replay") or []))
    return {"old": str(old), "new": str(new), "table_rows": len(a["table"]), "new_table_rows": len(b["table"]),
            "table_rows_equal": sum(x == y for x, y in rows), "differing": differing,
            "equal": {k: a.get(k) == b.get(k) for k in keys},
            "trace_replay_equal": [{"load": x["load"], "rows": x["rows"] == y["rows"],
                                    "lookahead": x["lookahead"] == y["lookahead"]} for x, y in replays],
            "wall_s": [a.get("wall_s"), b.get("wall_s")]}


def _report(config: Path, state: Path) -> Path:
    """The routing evaluation's report under the fleet's storage root as the run resolved it in
    `state` (not under the fleet's name: a copy of the file with another name keeps its root)."""
    root = yaml.safe_load(config.read_text())["storage_root"].replace("${ROUTEFORGE_STATE}", str(state))
    return Path(os.path.expandvars(root)) / "reports" / "routing" / "routing_evaluation.json"


def _pipeline(config: Path, state: Path, env: dict, name: str, out: Path) -> dict:
    """The pipeline on the fleet, timed, and what its routing evaluation found."""
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "routeforge.pipelines.run", str(config), "-v"], cwd=REPO, env=env,
                         text=True, capture_output=True)
    wall = time.perf_counter() - start
    (state / "run.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise SystemExit(f"the pipeline failed ({run.returncode}); log: {state / 'run.log'}\n{run.stderr[-3000:]}")
    timings = {line.split()[0]: float(line.split()[-1].rstrip("s")) for line in run.stdout.splitlines()
               if line.startswith("  ") and line.rstrip().endswith("s") and len(line.split()) == 2}
    report_path = _report(config, state)
    report = json.loads(report_path.read_text())
    table = [{"policy": r["policy"], "workload": r["workload"], "load": r["load"],
              **{k: r.get(k) for k in SHOWN}, **{f"{k}_std": r.get(f"{k}_std") for k in WITH_STD}}
             for r in report["rows"]]
    result = {"config": str(config.relative_to(REPO)) if config.is_relative_to(REPO) else str(config),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
              "wall_s": round(wall, 1), "stage_s": timings, "instances": report.get("instances"),
              "load_calibration": report["load_calibration"], "slo": report["slo"],
              "gate": {k: report["gate"][k] for k in ("recommended", "kind", "reason", "margin", "noise")},
              "gate_by_workload": report["gate_by_workload"], "table": table,
              "learned_training": report.get("pretrain"), "training": report.get("training"),
              "train_workloads": report.get("train_workloads"), "tuned_heuristics": report.get("tuned_heuristics"),
              "recommendations": report.get("recommendations"), "transfer": report.get("transfer"),
              "registered": [line for line in run.stdout.splitlines() if "registered bundle" in line]}
    _plot(report, out / f"{name}_goodput_by_load.png")
    print(f"gpu_fleet: {wall:.0f} s wall; gate recommends {report['gate']['recommended']} "
          f"({report['gate']['reason']})", flush=True)
    return result


if __name__ == "__main__":
    main()
