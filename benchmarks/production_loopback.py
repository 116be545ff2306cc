"""Wall time of the RouterBench fleet on the production stack against the local default, on this
machine, one run each side by side (the same fleet and settings; only where state lives changes).

- local: `storage_root` a local folder, MLflow on SQLite, the repository's SQLite Dagster instance;
- production: `storage_root` on S3 (moto's server, IAM authentication on), MLflow as `mlflow server`
  on PostgreSQL with artifacts on S3 (proxied), Dagster on PostgreSQL with step logs on S3
  (deploy/dagster.yaml); every server on 127.0.0.1 (tests/services.py).

Both run `python -m routeforge.pipelines.run` in a fresh process; the router's selection grid is the narrowed
one of tests/test_production_loopback.py (`tests.services.routerbench_fleet`). `--quick` runs the
production side only. Writes `benchmarks/results/production_loopback/results.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from routeforge.artifacts.bundle.signing import generate_key_pair

from benchmarks.common import DATA, REPO, parser, results_dir
from tests.services import mlflow_server, postgres, routerbench_fleet, s3_server


def _run(fleet: Path, cwd: Path, env: dict[str, str]) -> dict:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "routeforge.pipelines.run", str(fleet),
                          "--log-file", str(cwd / "run.log")],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if run.returncode:
        raise RuntimeError(f"{fleet}: exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    stages = [line for line in run.stdout.splitlines() if line.startswith("[")]
    return {"wall_s": round(seconds, 1), "stages": stages}


def _base_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_", "DAGSTER_"))}
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "ROUTEFORGE_STATE": str(folder / "state"), "ROUTEFORGE_MIRROR": str(folder / "mirror")})
    return env


def local(folder: Path) -> dict:
    folder.mkdir(parents=True)
    fleet = routerbench_fleet(folder, DATA, str(folder / "state" / "routerbench"),
                              f"sqlite:///{folder / 'mlflow.db'}", artifact_location=str(folder / "mlartifacts"))
    shutil.copy(REPO / "dagster.yaml", folder / "dagster.yaml")  # relative paths: .state/ under `folder`
    env = _base_env(folder) | {"DAGSTER_HOME": str(folder)}
    return _run(fleet, folder, env)


def production(folder: Path) -> dict:
    folder.mkdir(parents=True)
    with contextlib.ExitStack() as servers:
        databases = servers.enter_context(postgres(folder / "postgres"))
        s3 = servers.enter_context(s3_server(folder / "s3", ("routeforge", "mlflow", "dagster-logs")))
        tracking = servers.enter_context(mlflow_server(folder / "mlflow", databases["mlflow"],
                                                       "s3://mlflow/artifacts", s3.env))
        fleet = routerbench_fleet(folder, DATA, "s3://routeforge/state/routerbench", tracking)
        key = folder / "secrets" / "bundle-signing.key"
        generate_key_pair(key)
        home = folder / "dagster_home"
        home.mkdir()
        shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
        env = _base_env(folder) | s3.env | {
            "DAGSTER_HOME": str(home), "DAGSTER_POSTGRES_URL": databases["dagster"],
            "DAGSTER_COMPUTE_LOG_BUCKET": "dagster-logs", "ROUTEFORGE_SIGNING_KEY": str(key)}
        result = _run(fleet, folder, env)
        result["local_state_folder_created"] = (folder / "state").exists()
        return result


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__).parse_args(argv)
    out: dict = {"machine": f"{os.cpu_count()} cores", "fleet": "routerbench (narrowed router grid)"}
    with tempfile.TemporaryDirectory(prefix="rf-bench-loopback-") as tmp:
        if not args.quick:
            out["local"] = local(Path(tmp) / "local")
            print(f"local: {out['local']['wall_s']} s", flush=True)
        out["production"] = production(Path(tmp) / "production")
        print(f"production: {out['production']['wall_s']} s", flush=True)
    if "local" in out:
        out["ratio_production_over_local"] = round(out["production"]["wall_s"] / out["local"]["wall_s"], 3)
        print(f"ratio {out['ratio_production_over_local']}")
    (results_dir("production_loopback") / "results.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
