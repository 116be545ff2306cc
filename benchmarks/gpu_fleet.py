"""The reference GPU fleet end to end (issue 49, item 1): `make gpu-fleet`.

    python -m benchmarks.gpu_fleet [--config configs/gpu_fleet.yaml] [--state FOLDER]
    python -m benchmarks.gpu_fleet --prices      # the per-token prices, derived again from the file

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
         "cost_usd_per_request", "rejected", "dropped")


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


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--config", type=Path, default=REPO / "configs" / "gpu_fleet.yaml")
    p.add_argument("--state", type=Path, default=None, help="state folder (default: a fresh temporary one)")
    p.add_argument("--prices", action="store_true", help="print the derived prices against the file's and exit")
    args = p.parse_args()
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
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "routeforge.pipelines.run", str(config), "-v"], cwd=REPO, env=env,
                         text=True, capture_output=True)
    wall = time.perf_counter() - start
    (state / "run.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise SystemExit(f"the pipeline failed ({run.returncode}); log: {state / 'run.log'}\n{run.stderr[-3000:]}")
    timings = {line.split()[0]: float(line.split()[-1].rstrip("s")) for line in run.stdout.splitlines()
               if line.startswith("  ") and line.rstrip().endswith("s") and len(line.split()) == 2}
    name = yaml.safe_load(config.read_text())["name"]
    report_path = state / name / "reports" / "routing" / "routing_evaluation.json"
    report = json.loads(report_path.read_text())
    out = results_dir("gpu_fleet")
    table = [{"policy": r["policy"], "workload": r["workload"], "load": r["load"],
              **{k: r.get(k) for k in SHOWN}, **{f"{k}_std": r.get(f"{k}_std") for k in SHOWN[:4]}}
             for r in report["rows"]]
    result = {"config": str(config.relative_to(REPO)) if config.is_relative_to(REPO) else str(config),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
              "wall_s": round(wall, 1), "stage_s": timings, "instances": report.get("instances"),
              "load_calibration": report["load_calibration"], "slo": report["slo"],
              "gate": {k: report["gate"][k] for k in ("recommended", "kind", "reason", "margin", "noise")},
              "gate_by_workload": report["gate_by_workload"], "table": table,
              "learned_training": report.get("pretrain"), "registered": [line for line in run.stdout.splitlines()
                                                                         if "registered bundle" in line]}
    _plot(report, out / f"{name}_goodput_by_load.png")
    from routeforge.artifacts import strict_json

    (out / f"{name}.json").write_text(strict_json.dumps(result, indent=2, default=float))
    print(f"gpu_fleet: {wall:.0f} s wall; gate recommends {report['gate']['recommended']} "
          f"({report['gate']['reason']}); results in {out / (name + '.json')}")


if __name__ == "__main__":
    main()
