"""docs/fleet-guide.md runs as written: every file it shows is written to a scratch folder, every
command it shows is run there (each fleet's run to a registered bundle included), and each line of
output it shows must appear in what the command printed (a line of the guide may be a fragment of a
longer line, e.g. without the absolute path)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

GUIDE = REPO / "docs" / "fleet-guide.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    return [(kind, body) for kind, body in BLOCK.findall(GUIDE.read_text())]


def commands() -> list[tuple[str, list[str]]]:
    """(command, expected output fragments) of every console block, in order."""
    out = []
    for kind, body in blocks():
        if kind != "console":
            continue
        for chunk in body.split("$ ")[1:]:
            command, *expected = chunk.strip("\n").split("\n")
            out.append((command, [line for line in expected if line.strip()]))
    return out


def test_the_guide_shows_files_and_commands():
    files = [body.split("\n", 1)[0] for _, body in blocks() if body.startswith("# file: ")]
    assert len(files) >= 9 and len(commands()) >= 8


@pytest.mark.timeout(900)
def test_every_command_of_the_fleet_guide_prints_what_the_guide_shows(tmp_path, shared_data):
    """Each fleet of the guide validated, run to a registered bundle and asked for a prediction (or
    its policy), as the guide shows, in one scratch folder: about 2.5 minutes on a 2-core machine."""
    for _, body in blocks():
        if body.startswith("# file: "):
            name, content = body.split("\n", 1)
            (tmp_path / name.removeprefix("# file: ").strip()).write_text(content)
    (tmp_path / "configs").symlink_to(REPO / "configs")  # the schema the files point at
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ROUTEFORGE_DATA": str(shared_data), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    for name in ("MLFLOW_TRACKING_URI", "ROUTEFORGE_STATE", "DAGSTER_HOME", "ROUTEFORGE_SIGNING_KEY"):
        env.pop(name, None)
    before = {p.name for p in tmp_path.iterdir()}  # the guide's files and the schema's link
    for command, expected in commands():
        argv = shlex.split(command)  # as a shell reads it: a quoted prompt is one argument
        if argv[0] == "python":
            argv[0] = sys.executable
        run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        printed = run.stdout + run.stderr
        for line in expected:
            assert line in printed, f"{command}: the guide shows {line!r}; it printed:\n{printed[-3000:]}"
        assert "Traceback" not in printed, f"{command}:\n{printed[-3000:]}"
    # issue 73, item 4: the fleets write their storage roots (which hold their stores) and the state folder
    # ($ROUTEFORGE_STATE, `.state` of the folder run from: the Dagster instance, logs, the bundle cache) and
    # nothing else in the working folder: no ./mlruns of MLflow's default
    roots = {Path(re.sub(r"^sqlite:///", "", m)).parts[0] for m in re.findall(
        r"^(?:storage_root: *|.*tracking_uri: *\"?)(\S+?)\"?(?:[,}\s]|$)", GUIDE.read_text(), re.M)}
    made = {p.name for p in tmp_path.iterdir()} - before
    assert roots and made <= (roots - {"."}) | {".state"}, sorted(made)
