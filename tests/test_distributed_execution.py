"""Steps in other processes: the `multiprocess` executor, and dagster-ray's executor on a local Ray
cluster (one Ray job per step), both against a persistent Dagster instance on PostgreSQL and the
fleet's state on S3. A step process shares nothing with the run but those two: its inputs come
from the IO managers on S3 and its outputs go there."""

from __future__ import annotations

import contextlib

import dagster as dg
import pytest
import yaml
from routeforge.core.config import load_fleet
from routeforge.pipelines.definitions import build_definitions
from routeforge.pipelines.executors import execute

from tests.services import Unavailable, postgres, ray_cluster, ray_job_outcome, routerbench_fleet, s3_server
from tests.test_production_loopback import s3_keys

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    folder = tmp_path_factory.mktemp("distributed")
    with contextlib.ExitStack() as servers:
        try:
            databases = servers.enter_context(postgres(folder / "postgres", ("dagster",)))
            s3 = servers.enter_context(s3_server(folder / "s3", ("routeforge",)))
        except Unavailable as exc:
            pytest.skip(f"PostgreSQL or the S3 server unavailable on this machine: {exc}")
        yield {"folder": folder, "databases": databases, "s3": s3}


@pytest.mark.parametrize("executor", ["multiprocess", "ray"])
def test_steps_run_in_their_own_processes_with_state_on_s3(stores, shared_data, tmp_path, monkeypatch, executor):
    s3 = stores["s3"]
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "dagster_home"
    home.mkdir()
    url = stores["databases"]["dagster"]
    (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_url": url}},
                                                      "telemetry": {"enabled": False}}))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("ROUTEFORGE_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("ROUTEFORGE_SIGNING_KEY", str(tmp_path / "unused.key"))
    root = f"s3://routeforge/{executor}"
    path = routerbench_fleet(tmp_path, shared_data, root, "http://127.0.0.1:1")
    raw = yaml.safe_load(path.read_text())
    raw["execution"] = {"executor": executor, "max_concurrent": 2}
    with contextlib.ExitStack() as cluster:
        if executor == "ray":
            try:
                raw["execution"]["ray_address"] = cluster.enter_context(ray_cluster(tmp_path / "ray"))
            except Unavailable as exc:
                pytest.skip(str(exc))
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        config = load_fleet(path)
        defs = build_definitions(path)
        model = config.model_names[0]
        with dg.DagsterInstance.get() as instance:
            execute(defs, config, path, "build_prompts", instance, None, {"test": executor}, {})
            result = execute(defs, config, path, "generate_and_score", instance, model, {"test": executor}, {})
            assert all(check.passed for check in result.get_asset_check_evaluations())
            runs = instance.get_runs(dg.RunsFilter(tags={"test": executor}))
            assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * 2
            # every step started its own worker (a process, or a Ray job)
            starts = [e for r in runs for e in instance.all_logs(r.run_id, of_type=dg.DagsterEventType.STEP_WORKER_STARTING)]
            assert len(starts) == 3  # prompts; responses and quality of one model partition
            if executor == "ray":
                assert all("Ray job" in e.message for e in starts)
        if executor == "ray":
            from ray.job_submission import JobSubmissionClient

            client = JobSubmissionClient(raw["execution"]["ray_address"])
            steps = [j.submission_id for j in client.list_jobs() if (j.submission_id or "").startswith("dagster-step-")]
            assert len(steps) == 3
            assert {job: ray_job_outcome(client, job) for job in steps} == dict.fromkeys(steps, "SUCCEEDED")
    names = {k.removeprefix(f"{executor}/") for k in s3_keys(stores, "routeforge", f"{executor}/")}
    safe = model.replace("/", "_")
    assert "assets/prompts.parquet" in names
    assert any(n.startswith("assets/responses/") for n in names) and any(n.startswith("assets/quality/") for n in names)
    assert any(n.startswith("quarantine/quality/") and safe in n for n in names)
    assert not (tmp_path / "state").exists()
