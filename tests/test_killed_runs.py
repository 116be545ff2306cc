"""A run killed with SIGKILL blocks nothing (issue 53, item 3).

Before: `kill -9` of `python -m routeforge.pipelines.run` during generation left its Dagster run
STARTED and the `generation` pool's one slot claimed, and every later run waited for that slot
forever; a kill after registration left MLflow runs RUNNING and `@challenger` unset. Here one demo
fleet is killed four times, during generation, profiling, training and right after registration,
each time re-run from where it stopped; the last run finishes, and the registry ends with
`@champion` and `@challenger` set and no MLflow run RUNNING.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from mlflow import MlflowClient

from tests.conftest import REPO, write_config

pytestmark = pytest.mark.timeout(1500)


def _instance_yaml(home: Path) -> None:
    """The repository's instance settings (one slot per pool), in a folder of the test's own."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(f"storage:\n  sqlite:\n    base_dir: {home / 'storage'}\n"
                                       "telemetry:\n  enabled: false\n"
                                       "concurrency:\n  pools:\n    default_limit: 1\n")


def _start(path: Path, env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "routeforge.pipelines.run", str(path)], cwd=REPO, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def _kill_when(proc: subprocess.Popen, ready, what: str, log: Path, timeout_s: float = 900) -> None:
    """SIGKILL the run's whole process group as soon as `ready()` holds."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"the run ended before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_run_killed_at_every_stage_blocks_nothing_and_the_next_run_finishes(tmp_path, shared_data):
    home, state = tmp_path / "dagster", tmp_path / "state"
    _instance_yaml(home)
    # the demo with its text predictors and policy training off: the kills need each stage, not its size
    training = {"knn": {"k": 10}, "router": {"enabled": True, "folds": 2, "knn_k": [5], "mlp_hidden": [0],
                                             "mlp_epochs": 2, "mf_epochs": 2, "guard_clusters": 2,
                                             "guard_bootstrap": 50},
                "length_predictor": {"enabled": False}, "score_predictor": {"enabled": False},
                "task_classifier": {"enabled": False}, "routing_evaluation": {"enabled": False}}
    path = write_config(tmp_path, "demo", storage_root=str(state / "demo"), training=training,
                        registry={"tracking_uri": f"sqlite:///{state / 'mlflow.db'}",
                                  "artifact_location": str(state / "mlartifacts"), "experiment": "killed",
                                  "model_name": "killed-router", "alias": "challenger"})
    env = {**os.environ, "DAGSTER_HOME": str(home), "ROUTEFORGE_STATE": str(state),
           "ROUTEFORGE_DATA": str(shared_data), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    os.environ["DAGSTER_HOME"] = str(home)  # read by this process's instance below
    try:
        instance = dg.DagsterInstance.get()
    finally:
        del os.environ["DAGSTER_HOME"]
    client = MlflowClient(f"sqlite:///{state / 'mlflow.db'}")

    def claimed(step: str) -> bool:
        storage = instance.event_log_storage
        return any(s.step_key == step for key in storage.get_concurrency_keys()
                   for s in storage.get_concurrency_info(key).claimed_slots)

    def started(job: str, for_s: float) -> bool:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.STARTED]))
        return any(time.time() - (r.start_time or time.time()) >= for_s
                   for r in (instance.get_run_record_by_id(x.run_id) for x in runs))

    def registered() -> bool:
        try:
            return bool(client.search_model_versions("name='killed-router'"))
        except Exception:
            return False

    stages = [("a generation step holding its slot", lambda: claimed("responses")),
              ("a profiling step holding its slot", lambda: claimed("tier_profiles")),
              ("training under way", lambda: started("train_and_register", 5.0)),
              ("a registered version", registered)]
    logs = []
    for i, (what, ready) in enumerate(stages):
        logs.append(tmp_path / f"run{i}.log")
        _kill_when(_start(path, env, logs[-1]), ready, what, logs[-1])
        if i:  # each re-run found what the killed one held and said so, in one line
            assert "routeforge: recovered: run " in logs[-1].read_text(), logs[-1].read_text()[-3000:]
    logs.append(tmp_path / "final.log")
    final = _start(path, env, logs[-1])
    assert final.wait(timeout=900) == 0, logs[-1].read_text()[-4000:]
    text = logs[-1].read_text()
    assert "recovered: run " in text and "died: its process" in text
    assert not instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    assert not instance.event_log_storage.get_concurrency_run_ids()
    aliases = client.get_registered_model("killed-router").aliases
    assert {"champion", "challenger"} <= set(aliases), aliases
    experiment = client.get_experiment_by_name("killed")
    assert not client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'")
