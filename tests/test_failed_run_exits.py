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
