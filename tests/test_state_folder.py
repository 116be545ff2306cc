"""One place for state (issue 50, item 5): `$ROUTEFORGE_STATE` holds the Dagster instance that `make
ui`, `make demo` and `python -m routeforge.pipelines.run` share, with the checkout's settings
(telemetry off), beside the stores, the bundle cache and the logs."""

import os
import subprocess
from pathlib import Path

import yaml
from routeforge.artifacts.bundle.bundle_cache import cache_root
from routeforge.pipelines.instance import instance_home, shared_instance
from routeforge.pipelines.run import default_log_file

REPO = Path(__file__).resolve().parents[1]


def test_the_driver_uses_the_instance_in_the_state_folder_with_the_checkouts_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("ROUTEFORGE_CACHE", raising=False)
    monkeypatch.setenv("ROUTEFORGE_STATE", str(tmp_path / "state"))
    home = instance_home()
    assert home == tmp_path / "state" / "dagster"
    assert yaml.safe_load((home / "dagster.yaml").read_text()) == yaml.safe_load((REPO / "dagster.yaml").read_text())
    instance = shared_instance()
    try:
        assert Path(instance.root_directory) == home and not instance.telemetry_enabled
        assert instance.run_monitoring_enabled  # the checkout's settings, not Dagster's defaults
    finally:
        instance.dispose()
    # the rest of the state beside it
    assert cache_root() == tmp_path / "state" / "cache" / "bundles"
    assert default_log_file("demo", "x").parent == tmp_path / "state" / "logs"
    # $DAGSTER_HOME, where set, wins (a deployment's instance); issue 62, item 4: a run then says where
    # its runs go, since `make ui` opens the state folder's instance
    from routeforge.pipelines.instance import instance_note

    assert instance_note() is None
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "deployed"))
    assert instance_home() == tmp_path / "deployed"
    note = instance_note()
    assert note and str(tmp_path / "deployed") in note and str(tmp_path / "state" / "dagster") in note
    assert f"make ui DAGSTER_HOME={tmp_path / 'deployed'}" in note
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "state" / "dagster"))
    assert instance_note() is None


def test_make_points_dagster_home_into_the_state_folder_and_copies_the_settings(tmp_path):
    state = tmp_path / "elsewhere"
    probe = tmp_path / "probe.mk"
    probe.write_text("print-home:\n\t@echo $(DAGSTER_HOME) $(MLFLOW_TRACKING_URI)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI", "MAKEFLAGS")}
    env["ROUTEFORGE_STATE"] = str(state)
    shown = subprocess.run(["make", "-s", "-f", "Makefile", "-f", str(probe), "print-home"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.stdout.split() == [str(state / "dagster"), f"sqlite:///{state}/mlflow.db"], shown.stderr
    made = subprocess.run(["make", "-s", str(state / "dagster" / "dagster.yaml")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert (state / "dagster" / "dagster.yaml").read_text() == (REPO / "dagster.yaml").read_text()


def test_two_runs_opening_a_new_state_folder_at_once_both_get_the_instance(tmp_path):
    """The first use creates the instance's SQLite tables; processes doing it at once raced ("table
    secondary_indexes already exists", alembic's "more than one head": 4 of 12 processes died
    in 3 tries of 4 here) before `shared_instance` opened and used it under a file lock."""
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"} | {"ROUTEFORGE_STATE": str(tmp_path / "state")}
    code = ("from routeforge.pipelines.instance import shared_instance; i = shared_instance(); "
            "print(len(i.get_runs()) + len(i.get_asset_records())); i.dispose()")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["0"] * 4
