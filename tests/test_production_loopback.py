"""The production deployment, for real, on loopback: PostgreSQL for Dagster and MLflow, an S3 server
(moto, IAM authentication on) for the fleet's `storage_root` and MLflow's artifacts, and an
`mlflow server` on both. The RouterBench fleet runs end to end with its state on S3 and the Dagster
instance of deploy/dagster.yaml; the bundle is registered over HTTP, downloaded and verified by a
client that has no S3 credentials; nothing is written to the local state folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from routeforge.artifacts.bundle.signing import generate_key_pair

from tests.conftest import REPO
from tests.services import Unavailable, mlflow_server, postgres, routerbench_fleet, s3_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """PostgreSQL + S3 + MLflow server, started once for this module and stopped by PID after it."""
    folder = tmp_path_factory.mktemp("production")
    with contextlib.ExitStack() as servers:
        try:
            databases = servers.enter_context(postgres(folder / "postgres"))
            s3 = servers.enter_context(s3_server(folder / "s3", ("routeforge", "mlflow", "dagster-logs")))
        except Unavailable as exc:
            pytest.skip(f"production stack unavailable on this machine: {exc}")
        tracking = servers.enter_context(mlflow_server(folder / "mlflow", databases["mlflow"], "s3://mlflow/artifacts",
                                                       s3.env))
        yield {"folder": folder, "databases": databases, "s3": s3, "tracking": tracking}


def run_env(stack, folder: Path, with_s3: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_", "DAGSTER_"))}
    env.update({"ROUTEFORGE_STATE": str(folder / "state"), "ROUTEFORGE_MIRROR": str(folder / "mirror"),
                "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    if with_s3:
        env.update(stack["s3"].env)
    return env


def s3_keys(stack, bucket: str, prefix: str = "") -> list[str]:
    import boto3

    s3 = stack["s3"]
    client = boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.key, aws_secret_access_key=s3.secret,
                          region_name="us-east-1")
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def test_routerbench_fleet_on_s3_postgres_and_mlflow_server(stack, shared_data, tmp_path):
    folder = tmp_path
    # the first 300 rows of each table and 3 of its 11 models (a job run each): a deployment test, not a
    # quality one (test_end_to_end's is)
    fleet = routerbench_fleet(folder, shared_data, "s3://routeforge/state/routerbench", stack["tracking"], limit=300,
                              models=3)
    key = folder / "secrets" / "bundle-signing.key"
    public = generate_key_pair(key)
    home = folder / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    env = run_env(stack, folder) | {"DAGSTER_HOME": str(home), "DAGSTER_POSTGRES_URL": stack["databases"]["dagster"],
                                    "DAGSTER_COMPUTE_LOG_BUCKET": "dagster-logs", "ROUTEFORGE_SIGNING_KEY": str(key)}
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "routeforge.pipelines.run", str(fleet), "--log-file", str(folder / "run.log")],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - start
    log = (folder / "run.log").read_text() if (folder / "run.log").exists() else ""
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:] + log[-4000:]
    assert "registered" in run.stdout, run.stdout
    print(f"production loopback run: {seconds:.1f}s")

    # every stage file, component folder and report is on S3; nothing in the local state folder
    assert not (folder / "state").exists()
    keys = s3_keys(stack, "routeforge", "state/routerbench/")
    names = {k.removeprefix("state/routerbench/") for k in keys}
    assert "assets/routing_table.parquet" in names and "assets/prompts.parquet" in names
    assert "components/router/.routeforge-files.json" in names
    assert "components/knn_estimator/.routeforge-files.json" in names
    assert any(n.startswith("quarantine/") for n in names)
    assert "reports/router/router_selection.json" in names
    assert not any(".probe" in n for n in names)  # the start-up probe cleans up after itself
    # Dagster's runs are in PostgreSQL (5 job runs: the prompts, a model each, the training), MLflow's
    # artifacts in the mlflow bucket
    import psycopg2

    with psycopg2.connect(stack["databases"]["dagster"].replace("+psycopg2", "")) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs WHERE status = 'SUCCESS'")
        assert cursor.fetchone()[0] == 5
    assert any(k.endswith("manifest.json") for k in s3_keys(stack, "mlflow", "artifacts/"))

    # a router service with no S3 credentials downloads and verifies it over HTTP
    client_env = run_env(stack, folder, with_s3=False)
    verify = subprocess.run([str(Path(sys.executable).with_name("routeforge")), "bundle", "verify", "--json",
                             "models:/routeforge-routerbench-router@challenger", "--tracking-uri", stack["tracking"],
                             "--public-key", str(public)],
                            cwd=folder, env=client_env, capture_output=True, text=True, timeout=600)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    result = json.loads(verify.stdout)
    assert result["ok"] and result["signature"] == "valid"


@pytest.mark.parametrize("problem", ["missing_bucket", "wrong_secret"])
def test_unusable_storage_root_fails_at_start_naming_the_setting(stack, shared_data, tmp_path, problem):
    bucket = "no-such-bucket" if problem == "missing_bucket" else "routeforge"
    fleet = routerbench_fleet(tmp_path, shared_data, f"s3://{bucket}/state/x", stack["tracking"])
    env = run_env(stack, tmp_path) | {"ROUTEFORGE_SIGNING_KEY": str(tmp_path / "unused.key")}
    if problem == "wrong_secret":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    before = len(s3_keys(stack, "routeforge"))
    run = subprocess.run([sys.executable, "-m", "routeforge.pipelines.run", str(fleet), "--log-file", str(tmp_path / "run.log")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    error = run.stderr.strip().splitlines()
    assert len(error) == 1 and "storage_root s3://" in error[0], run.stderr
    assert ("does not exist" if problem == "missing_bucket" else "access denied") in error[0]
    assert "[1/" not in run.stdout  # no stage started
    assert len(s3_keys(stack, "routeforge")) == before
