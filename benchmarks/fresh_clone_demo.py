"""A fresh clone's `make demo`, install included, through the lockfile (uv) and through pip, in one run.

Each installer gets its own clone of the committed HEAD and empty package caches (uv's and pip's),
so neither reuses a download the other made; both start from nothing but Python and `make`, as a
new user does. The clock covers `make install` (the .venv) and `make demo` (the whole pipeline on
the offline demo fleet, into the clone's own .state). Writes
`benchmarks/results/fresh_clone_demo/fresh_clone_demo.json`.

    python3 -m benchmarks.fresh_clone_demo [--installers uv pip]

Run it with the machine otherwise idle: it measures wall time.
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

from benchmarks.common import REPO, results_dir
from benchmarks.common import parser as bench_parser


def _timed(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "a") as out:
        done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed in {cwd} (exit {done.returncode}); its output: {log}")
    return seconds


def fresh_clone_demo(installer: str, scratch: Path) -> dict:
    """`make install` then `make demo` in a new clone of HEAD with empty caches."""
    clone = scratch / f"clone-{installer}"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ROUTEFORGE_STATE", "DAGSTER_HOME", "MLFLOW_TRACKING_URI", "VIRTUAL_ENV"))}
    env |= {"UV_CACHE_DIR": str(scratch / f"uv-cache-{installer}"),
            "PIP_CACHE_DIR": str(scratch / f"pip-cache-{installer}"), "INSTALLER": installer}
    log = scratch / f"{installer}.log"
    install_s = _timed(["make", "install", f"INSTALLER={installer}"], clone, env, log)
    demo_s = _timed(["make", "demo", f"INSTALLER={installer}"], clone, env, log)
    tail = log.read_text().strip().splitlines()[-4:]
    print(f"{installer}: install {install_s:.1f} s + demo {demo_s:.1f} s = {install_s + demo_s:.1f} s", flush=True)
    return {"install_s": round(install_s, 1), "demo_s": round(demo_s, 1), "total_s": round(install_s + demo_s, 1),
            "demo_output_tail": tail}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--installers", nargs="+", default=["uv", "pip"], choices=["uv", "pip"])
    parser.add_argument("--out", default=str(results_dir("fresh_clone_demo") / "fresh_clone_demo.json"))
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="routeforge-fresh-clone-") as tmp:
        runs = {name: fresh_clone_demo(name, Path(tmp)) for name in args.installers}
    result = {"commit": commit, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                            "python": platform.python_version()},
              "note": "install = make install (a new .venv, empty package caches); "
                      "demo = make demo on configs/demo.yaml",
              "runs": runs}
    if {"uv", "pip"} <= runs.keys():
        result["pip_over_uv"] = {k: round(runs["pip"][k] / runs["uv"][k], 2) for k in ("install_s", "total_s")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result.get("pip_over_uv", {})))


if __name__ == "__main__":
    main()
