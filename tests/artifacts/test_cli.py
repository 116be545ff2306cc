"""The `routeforge` CLI as a user meets it: a version, JSON output, and errors as one line naming
the cause with exit code 1 (2 for usage), a traceback only with --debug."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.manifest import Lineage
from routeforge.artifacts.bundle.writer import write_bundle
from routeforge.artifacts.cli.commands import _tracking_default, main


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("ROUTEFORGE_DEBUG", raising=False)
    return CliRunner()


def test_version(runner):
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("routeforge ")


@pytest.mark.parametrize("args", [
    ["bundle", "inspect", "/nonexistent/bundle"],
    ["bundle", "predict", "/nonexistent/bundle", "hello"],
])
def test_errors_are_one_line_without_a_traceback(runner, args):
    result = runner.invoke(main, args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    # a folder that does not exist is said to be missing, not to lack a manifest
    assert len(lines) == 1 and lines[0] == "error: /nonexistent/bundle: no such folder"
    assert "Traceback" not in result.output


def test_a_folder_without_a_manifest_says_so(runner, tmp_path):
    result = runner.invoke(main, ["bundle", "inspect", str(tmp_path)])
    assert result.exit_code == 1 and result.output.strip() == f"error: {tmp_path}: no manifest.json; not a routeforge bundle"


def test_a_registry_reference_without_a_tracking_uri_says_what_to_do(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .state/mlflow.db here
    monkeypatch.delenv("ROUTEFORGE_STATE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = runner.invoke(main, ["bundle", "inspect", "models:/router@champion"])
    state = tmp_path / ".state"
    assert result.exit_code == 1 and result.output.strip() == (
        f"error: cannot resolve models:/router@champion: $MLFLOW_TRACKING_URI is unset, no pipeline run recorded "
        f"router's registry in {state / 'registries.json'}, and there is no {state / 'mlflow.db'}: pass a "
        "tracking URI or set MLFLOW_TRACKING_URI")


def test_load_bundle_finds_the_store_as_the_cli_does(tmp_path, monkeypatch):
    """Issue 73, item 1: the Python API resolves `models:/` where the CLI does (here the state folder's
    own store), and says in one line where it looked when nothing is there."""
    from routeforge.artifacts.bundle.loader import load_bundle

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ROUTEFORGE_STATE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ValueError, match=r"cannot resolve models:/router@champion: \$MLFLOW_TRACKING_URI is unset"):
        load_bundle("models:/router@champion", tmp_path / "dl")
    (tmp_path / ".state").mkdir()
    (tmp_path / ".state" / "mlflow.db").write_bytes(b"")  # found, and then refused as not a database
    with pytest.raises(ValueError, match=r"mlflow.db is not an SQLite database"):
        load_bundle("models:/router@champion", tmp_path / "dl")


def test_inside_a_checkout_the_local_store_is_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _tracking_default(None, None, None) is None
    (tmp_path / ".state").mkdir()
    (tmp_path / ".state" / "mlflow.db").write_bytes(b"")
    assert _tracking_default(None, None, None) == f"sqlite:///{tmp_path / '.state' / 'mlflow.db'}"
    assert _tracking_default(None, None, "http://mlflow:5000") == "http://mlflow:5000"


def test_a_fleets_own_store_is_found_from_the_record_its_run_left(tmp_path, monkeypatch):
    """After `pipelines.run` registers a fleet's model in the fleet's own store, `routeforge bundle …
    models:/<that model>@…` looks there first, with no --tracking-uri; other models keep the default."""
    import click
    from routeforge.artifacts.common.state_folder import record_registry, recorded_registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROUTEFORGE_STATE", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "mlflow.db").write_bytes(b"")
    own = tmp_path / "fleet" / "mlflow.db"
    own.parent.mkdir()
    own.write_bytes(b"")
    record_registry("my-fleet-router", f"sqlite:///{own}")
    assert recorded_registry("my-fleet-router") == f"sqlite:///{own}"
    ctx = click.Context(main)
    ctx.params = {"ref": "models:/my-fleet-router@champion"}
    assert _tracking_default(ctx, None, None) == f"sqlite:///{own}"
    ctx.params = {"ref": "models:/routeforge-demo-router@champion"}
    assert _tracking_default(ctx, None, None) == f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}"
    ctx.params = {"ref": "models:/my-fleet-router@champion"}
    assert _tracking_default(ctx, None, "http://mlflow:5000") == "http://mlflow:5000"  # a given one wins
    own.unlink()  # a store that is gone is not offered
    assert _tracking_default(ctx, None, None) == f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}"


def test_debug_shows_the_traceback(runner):
    result = runner.invoke(main, ["--debug", "bundle", "inspect", "/nonexistent/bundle"])
    assert result.exit_code == 1 and result.exception is not None and "no such folder" in str(result.exception)


def test_usage_errors_exit_2(runner):
    result = runner.invoke(main, ["bundle", "verify"])
    assert result.exit_code == 2 and "Missing argument" in result.output


def test_json_output_of_inspect_and_verify(runner, tmp_path, component, fleet):
    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(), "test")
    shown = runner.invoke(main, ["bundle", "inspect", str(root), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output)["name"] == "router"
    ok = runner.invoke(main, ["bundle", "verify", str(root), "--json", "--insecure-skip-signature"])
    assert json.loads(ok.stdout) == {"ok": True, "ref": str(root), "name": "router",
                                     "version": json.loads(shown.output)["version"], "files": 2,
                                     "signature": "not checked"}
    Path(root / "knn_estimator" / "index.bin").write_bytes(b"changed")
    bad = runner.invoke(main, ["bundle", "verify", str(root), "--json", "--insecure-skip-signature"])
    report = json.loads(bad.stdout)
    assert bad.exit_code == 1 and report["ok"] is False and "index.bin: sha256 mismatch" in report["error"]


def test_output_lines_fit_120_characters_unless_wide(runner, tmp_path, component, fleet):
    """Prose is wrapped at words, a table row cut with …, JSON never touched; `--wide` prints whole lines.
    A terminal gets narrow lines by default, a pipe whole ones; $ROUTEFORGE_WIDE=0 narrows a pipe."""
    import io

    from routeforge.artifacts.cli.narrow_output import NarrowStream, narrow

    prose = "lineage: " + " ".join(f"word{i}" for i in range(60))
    assert all(len(line) <= 120 for line in narrow(prose).splitlines()) and narrow(prose).replace("\n  ", " ") == prose
    row = "1     route_balance           bundle    " + "0.905 ± 0.025  " * 12
    assert narrow(row).endswith("…") and len(narrow(row)) == 120
    blob = '{"rows": [' + ", ".join(["1.0"] * 80) + "]}"
    assert narrow(blob) == blob
    out = io.StringIO()
    stream = NarrowStream(out)
    stream.write(prose[:50])
    stream.write(prose[50:] + "\nshort\n")
    stream.flush()
    assert out.getvalue().splitlines()[-1] == "short" and max(map(len, out.getvalue().splitlines())) <= 120

    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(input_hashes={f"input_{i}": "f" * 40 for i in range(8)}), "t")
    narrow_run = runner.invoke(main, ["bundle", "inspect", str(root)], env={"ROUTEFORGE_WIDE": "0"})
    wide_run = runner.invoke(main, ["--wide", "bundle", "inspect", str(root)], env={"ROUTEFORGE_WIDE": "0"})
    piped = runner.invoke(main, ["bundle", "inspect", str(root)])  # CliRunner's output is no terminal
    assert narrow_run.exit_code == wide_run.exit_code == piped.exit_code == 0
    assert max(map(len, narrow_run.stdout.splitlines())) <= 120 < max(map(len, wide_run.stdout.splitlines()))
    assert piped.stdout == wide_run.stdout
