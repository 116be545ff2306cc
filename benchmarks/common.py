"""What every benchmark shares: the repository and data locations, one results folder per
experiment, and the command line (every script takes `--quick`, the smoke sizes `make benchmark`
runs). Run a benchmark as a module from the repository root: `python -m benchmarks.<name>`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import routeforge.fleet  # noqa: F401  (every kind loaded: benchmarks read fleet files and run registered kinds)

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ROUTEFORGE_DATA", REPO.parent / "shared" / "data"))
# `make benchmark` points this at a scratch folder so smoke runs never overwrite the quoted results
RESULTS = Path(os.environ.get("ROUTEFORGE_BENCH_RESULTS", REPO / "benchmarks" / "results"))


def results_dir(experiment: str) -> Path:
    """`benchmarks/results/<experiment>/`: JSON and plots are committed, regenerable binaries
    (ONNX policies, Parquet records) are git-ignored."""
    folder = RESULTS / experiment
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The script's argument parser, with `--quick` (smoke sizes: minutes, numbers not for quoting)."""
    p = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--quick", action="store_true", help="smoke sizes: checks the script runs, numbers not for quoting")
    return p


def trainer_parser(doc: str | None) -> argparse.ArgumentParser:
    """`parser` plus `--torch-threads`, for the scripts that train a network; read it with
    `parse_trainer_args`."""
    p = parser(doc)
    p.add_argument("--torch-threads", type=int, default=None,
                   help="torch intra-op threads (1 lets two trainers share this 2-core machine at full speed)")
    return p


def parse_trainer_args(p: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed arguments, with torch's intra-op threads set as `--torch-threads` asks."""
    args = p.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    return args


def gate_over(by_workload: dict[str, dict[str, dict]], learned: list[str], heuristics: list[str], objective: str,
              trained_on: str) -> dict:
    """The pipeline's routing gate (`training.policies.gate.recommend`) over a benchmark's results
    shaped {workload: {policy: {metric: [mean, std], <metric>_by_seed: [...]}}} (per-seed values,
    where given, make the gate's noise the paired one)."""
    from routeforge.training.policies.gate import recommend

    rows = [{"policy": p, "workload": w, "load": 0.0, objective: stats[objective][0],
             f"{objective}_std": stats[objective][1],
             **({f"{objective}_by_seed": stats[f"{objective}_by_seed"]} if f"{objective}_by_seed" in stats else {})}
            for w, policies in by_workload.items() for p, stats in policies.items() if objective in stats]
    return recommend(rows, learned, heuristics, objective=objective, trained_on=(trained_on, 0.0))
