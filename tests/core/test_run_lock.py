"""Two runs of one fleet on one storage root: the second waits for the first or refuses in one line."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml
from routeforge.core.run_lock import RunLocked, storage_root_lock

from tests.conftest import CONFIGS, REPO

HOLD = """
import sys, time
from pathlib import Path
from routeforge.core.run_lock import storage_root_lock
with storage_root_lock(Path(sys.argv[1]), "holder"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(folder, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_refuses_in_one_line_then_waits_when_asked(tmp_path):
    state = tmp_path / "state"
    fleet = tmp_path / "fleet.yaml"
    raw = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    raw["datasets"][0]["path"] = str(CONFIGS / raw["datasets"][0]["path"])
    fleet.write_text(yaml.safe_dump(raw | {"storage_root": str(state)}))
    holder = _holder(state, 60)
    try:
        run = subprocess.run([sys.executable, "-m", "routeforge.pipelines.run", str(fleet),
                              "--log-file", str(tmp_path / "run.log")], capture_output=True, text=True,
                             timeout=300, cwd=REPO)
        assert run.returncode == 3, run.stdout + run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "another run holds the storage root" in lines[0] and "fleet holder" in lines[0]
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_waits_for_the_holder_up_to_the_limit(tmp_path):
    holder = _holder(tmp_path, 1.5)
    try:
        with pytest.raises(RunLocked, match="after waiting 0.2 s"):
            with storage_root_lock(tmp_path, "second", wait_s=0.2):
                pass
        start = time.perf_counter()
        with storage_root_lock(tmp_path, "second", wait_s=30):
            assert time.perf_counter() - start < 30
    finally:
        holder.wait(timeout=30)
