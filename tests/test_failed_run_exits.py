"""A failed run exits (issue 61, item 8).

Before: a rerun after a SIGKILL failed in `train_and_register` with "RuntimeError: Converting a
tensordict to boolean value is not permitted" and the process was still alive 900 s later, holding
its storage root's run lock. Whatever raised, a thread left running (by a library, or by the step
itself) kept the interpreter from exiting. Here a step raises that error after starting a thread
that never ends: the driver says the error in one line and is gone within seconds, and the log file
keeps the stacks of what was still running.
"""

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, write_config

pytestmark = pytest.mark.timeout(300)

FAILING_STEP = '''
import threading

import routeforge.prompts.sources as sources


def build_prompts(*args, **kwargs):
    threading.Thread(target=threading.Event().wait, name="left-running-by-the-step", daemon=False).start()
    raise RuntimeError("Converting a tensordict to boolean value is not permitted")


sources.build_prompts = build_prompts
'''


def test_a_step_that_raises_ends_the_run_within_seconds_with_one_line(tmp_path, shared_data):
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(FAILING_STEP)
    state = tmp_path / "state"
    path = write_config(tmp_path, "demo", storage_root=str(state / "demo"),
                        registry={"tracking_uri": f"sqlite:///{state / 'mlflow.db'}",
                                  "artifact_location": str(state / "mlartifacts"), "experiment": "failed",
                                  "model_name": "failed-router", "alias": "challenger"})
    log = tmp_path / "run.log"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster"), "ROUTEFORGE_STATE": str(state),
           "ROUTEFORGE_DATA": str(shared_data), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "inject"), os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "dagster").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "routeforge.pipelines.run", str(path), "--log-file", str(log)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        first = proc.stderr.readline()  # the one line, said as the failure happens
        said = time.monotonic()
        code = proc.wait(timeout=60)
        gone_after = time.monotonic() - said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert code == 1, first + proc.stderr.read()
    assert first.startswith("routeforge: failed: ") and "tensordict to boolean" in first, first
    assert proc.stderr.read() == ""  # one line: the traceback is in the log file
    assert gone_after < 30  # the grace (10 s) and the interpreter's own exit, not the thread's lifetime
    text = log.read_text()
    assert "Converting a tensordict" in text and "left-running-by-the-step" not in first
    assert "Thread 0x" in text  # what was still running when the grace ran out, for whoever looks


def test_a_run_whose_key_the_registry_does_not_know_stops_before_any_stage(tmp_path, shared_data):
    """Issue 61, item 9: a registry whose champion was signed by a key this run does not hold (its
    storage folder, keys/ with it, was lost) stops the run in one line before anything is built,
    naming both keys and the fix, where it used to train and then fail at the gate."""
    from mlflow import MlflowClient

    state = tmp_path / "state"
    uri = f"sqlite:///{state / 'mlflow.db'}"
    state.mkdir()
    client = MlflowClient(uri)
    client.create_registered_model("lost-key-router")
    version = client.create_model_version("lost-key-router", str(tmp_path), tags={"signing_key_id": "a2af00c0ffee0001"})
    client.set_registered_model_alias("lost-key-router", "champion", version.version)
    path = write_config(tmp_path, "demo", storage_root=str(state / "demo"),
                        registry={"tracking_uri": uri, "artifact_location": str(state / "mlartifacts"),
                                  "experiment": "lost", "model_name": "lost-key-router", "alias": "challenger"})
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster"), "ROUTEFORGE_STATE": str(state),
           "ROUTEFORGE_DATA": str(shared_data), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    (tmp_path / "dagster").mkdir()
    done = subprocess.run([sys.executable, "-m", "routeforge.pipelines.run", str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    line = done.stderr.strip()
    assert "\n" not in line and "key id a2af00c0ffee0001" in line and "missing: a new key would be made" in line
    assert "routeforge keys rotate" in line
    assert not (state / "demo" / "assets").exists()  # nothing was built
    assert not (state / "demo" / "keys" / "bundle-signing.key").exists()  # and no stray key made
