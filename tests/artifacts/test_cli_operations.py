"""The CLI as operators meet it (issue 40, item 4): an unreachable tracking server fails fast in one
line, default paths follow $ROUTEFORGE_STATE, `inspect` downloads the manifest alone, and every
`--json` output parses with a strict parser (no NaN)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.manifest import Lineage
from routeforge.artifacts.bundle.writer import write_bundle
from routeforge.artifacts.cli.commands import _tracking_default, main


def strict(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))


@pytest.fixture
def silent_server():
    """A loopback port that accepts connections and never answers (a hung server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held, stop = [], threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once it is closed


@pytest.mark.parametrize("command", [["bundle", "verify", "models:/m@champion"],
                                     ["bundle", "inspect", "models:/m@champion"],
                                     ["bundle", "download", "models:/m@champion", "out"],
                                     ["bundle", "promote", "m"], ["bundle", "rollback", "m"]])
@pytest.mark.parametrize("server", ["refused", "silent"])
def test_an_unreachable_tracking_server_fails_fast_in_one_line(command, server, silent_server, tmp_path):
    url = silent_server if server == "silent" else _closed_port()
    start = time.monotonic()
    result = CliRunner().invoke(main, ["--timeout", "3", *command, "--tracking-uri", url],
                                env={"MLFLOW_TRACKING_USERNAME": None, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": None})
    seconds = time.monotonic() - start
    assert result.exit_code == 1 and seconds <= 15, (seconds, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"tracking server {url} unreachable" in lines[0] and "timeout 3 s" in lines[0]


def test_default_paths_follow_routeforge_state(tmp_path, monkeypatch):
    from routeforge.pipelines.run import default_log_file

    state = tmp_path / "state"
    state.mkdir()
    (state / "mlflow.db").write_bytes(b"")
    monkeypatch.chdir(tmp_path)  # a ./.state here too, which must not be used
    (tmp_path / ".state").mkdir()
    (tmp_path / ".state" / "mlflow.db").write_bytes(b"")
    monkeypatch.setenv("ROUTEFORGE_STATE", str(state))
    assert _tracking_default(None, None, None) == f"sqlite:///{(state / 'mlflow.db').resolve()}"
    assert default_log_file("demo", "20260101-000000") == state / "logs" / "demo-20260101-000000.log"
    monkeypatch.delenv("ROUTEFORGE_STATE")
    assert _tracking_default(None, None, None) == f"sqlite:///{(tmp_path / '.state' / 'mlflow.db').resolve()}"
    assert default_log_file("demo", "x") == tmp_path / ".state" / "logs" / "demo-x.log"


def test_predict_and_inspect_json_is_strict(tmp_path, component, fleet):
    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(), "test")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["components"][0]["metrics"]["unknown"] = float("nan")  # as a failed evaluation leaves it
    (root / "manifest.json").write_text(json.dumps(manifest))
    shown = CliRunner().invoke(main, ["bundle", "inspect", str(root), "--json"])
    assert shown.exit_code == 0, shown.output
    assert strict(shown.stdout)["components"][0]["metrics"]["unknown"] is None


def test_no_progress_bars_off_a_terminal(tmp_path, component, fleet):
    """CliRunner's stderr is not a terminal: MLflow's download bars are switched off for the process."""
    import os

    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(), "test")
    assert CliRunner().invoke(main, ["bundle", "inspect", str(root)]).exit_code == 0
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    assert os.environ["ROUTEFORGE_HTTP_TIMEOUT"] == "10"  # the default, for every registry request
