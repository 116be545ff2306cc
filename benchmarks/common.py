"""What every benchmark shares: the repository and data locations, one results folder per
experiment, and the command line (every script takes `--quick`, the smoke sizes `make benchmark`
runs). Run a benchmark as a module from the repository root: `python -m benchmarks.<name>`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

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
