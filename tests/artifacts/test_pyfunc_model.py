"""The registered MLflow model holds no code: what runs on `mlflow.pyfunc.load_model` is the
installed package's loader, and a model folder that carries code is refused before it runs (issue 53,
item 4: a line appended to the stored `pyfunc_entry.py` used to run on load while the bundle verified)."""

from pathlib import Path

import mlflow
import pytest
import yaml
from routeforge.artifacts.bundle.download import bundle_folder
from routeforge.artifacts.bundle.manifest import Lineage
from routeforge.artifacts.bundle.signing import generate_key_pair, sign_bundle
from routeforge.artifacts.bundle.writer import write_bundle
from routeforge.registry.mlflow_model import LOADER_MODULE, log_bundle_model
from routeforge.registry.pyfunc_loader import BundleModel, UnsignedCode


@pytest.fixture
def logged(tmp_path, component, fleet, monkeypatch):
    """A signed bundle logged as the pipeline logs it, downloaded as a router service would."""
    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(), "test")
    public = generate_key_pair(tmp_path / "keys" / "signing.key")
    sign_bundle(root, tmp_path / "keys" / "signing.key")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("pyfunc", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=experiment):
        info = log_bundle_model(root)
    monkeypatch.setenv("ROUTEFORGE_PUBLIC_KEY", str(public))
    return Path(mlflow.artifacts.download_artifacts(info.model_uri, dst_path=str(tmp_path / "download")))



@pytest.fixture
def registry(tmp_path, component, fleet, monkeypatch):
    """A signed bundle, its keys, and a local store to register it in: `register()` adds a version
    (its model record signed) under `router@champion`; returns (register, public key, tracking URI)."""
    from routeforge.registry.store import register_bundle

    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(), "test")
    key = tmp_path / "keys" / "signing.key"
    public = generate_key_pair(key)
    sign_bundle(root, key)
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(tracking)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    experiment = mlflow.create_experiment("records", artifact_location=(tmp_path / "artifacts").as_uri())

    def register() -> str:
        with mlflow.start_run(experiment_id=experiment) as run:
            return register_bundle(root, run.info.run_id, "router", "champion", signing_key=key).version

    return register, public, tracking


def _stored_mlmodel(version: str) -> Path:
    """The MLmodel file of a registered version, where the local artifact store keeps it."""
    model_id = mlflow.MlflowClient().get_model_version("router", version).source.removeprefix("models:/")
    return Path(mlflow.get_logged_model(model_id).artifact_location.removeprefix("file://")) / "MLmodel"

def test_the_logged_model_holds_data_only_and_loads_through_the_installed_loader(logged):
    files = [p for p in logged.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".py", ".pyc", ".pkl", ".pickle")]
    flavor = yaml.safe_load((logged / "MLmodel").read_text())["flavors"]["python_function"]
    assert flavor["loader_module"] == LOADER_MODULE and not flavor.get("code")
    assert (bundle_folder(logged) / "manifest.sig").is_file()
    model = mlflow.pyfunc.load_model(str(logged))
    assert isinstance(model._model_impl, BundleModel)


@pytest.mark.parametrize("where", ["pyfunc_entry.py", "data/artifacts/evil.py", "code/routeforge/__init__.py"])
def test_code_added_to_a_registered_model_is_refused_not_run(logged, tmp_path, where):
    marker = tmp_path / "ran"
    target = logged / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    if where.startswith("code/"):  # and MLmodel made to put it on the path
        meta = yaml.safe_load((logged / "MLmodel").read_text())
        meta["flavors"]["python_function"]["code"] = "code"
        (logged / "MLmodel").write_text(yaml.safe_dump(meta))
    with pytest.raises(UnsignedCode, match="refusing to load it"):
        mlflow.pyfunc.load_model(str(logged))
    assert not marker.exists()


def test_bundle_verify_covers_mlmodel_and_the_environment_files_by_a_signed_record(registry):
    """Issue 61, item 1. Got through before: with `MLmodel` edited to name another loader module or a
    code path, `bundle verify models:/…` printed "signature … valid" while `mlflow.pyfunc.load_model`
    would run the attacker's code. Now the version's files outside the bundle are signed as a record
    bound to its name and number, and verify refuses an edited file, a record copied from another
    version, and a version without one."""
    from click.testing import CliRunner
    from mlflow import MlflowClient
    from routeforge.artifacts.bundle.model_record import MODEL_RECORD_TAG
    from routeforge.artifacts.cli.commands import main

    register, public, _ = registry
    versions = [register(), register()]

    def verify(ref: str):
        return CliRunner().invoke(main, ["bundle", "verify", ref, "--public-key", str(public)])

    ok = verify("models:/router/1")
    assert ok.exit_code == 0 and "match the signed model record" in ok.output, ok.output
    client = MlflowClient()
    mlmodel = _stored_mlmodel("1")
    meta = yaml.safe_load(mlmodel.read_text())
    meta["flavors"]["python_function"]["loader_module"] = "mlflow.pyfunc.model"
    meta["flavors"]["python_function"]["model_code_path"] = "code/evil.py"
    mlmodel.write_text(yaml.safe_dump(meta))
    edited = verify("models:/router/1")
    assert edited.exit_code == 1 and "MLmodel: changed since it was signed" in edited.output, edited.output
    # version 2's record put on version 1 (both hold the same bundle): bound to its own number
    client.set_model_version_tag("router", "1", MODEL_RECORD_TAG,
                                 client.get_model_version("router", versions[1]).tags[MODEL_RECORD_TAG])
    copied = verify("models:/router/1")
    assert copied.exit_code == 1 and "copied from another version" in copied.output, copied.output
    client.delete_model_version_tag("router", versions[1], MODEL_RECORD_TAG)
    bare = verify(f"models:/router/{versions[1]}")
    assert bare.exit_code == 1 and "no signed model record" in bare.output, bare.output


def test_serve_verifies_a_downloaded_copy_and_serves_only_that(tmp_path, registry):
    """Issue 61, item 1: the safe path to serve is one command. `routeforge serve models:/…` downloads the
    version once, verifies that copy (bundle and model record) and hands MLflow the copy; an edited
    MLmodel in the store is refused before any server starts. The server itself answers on loopback."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from click.testing import CliRunner
    from routeforge.artifacts.cli.commands import main

    from tests.conftest import free_port
    from tests.services import stop

    register, public, tracking = registry
    register()
    port = free_port()
    checked = CliRunner().invoke(main, ["serve", "models:/router@champion", "--check-only", "--port", str(port),
                                        "--public-key", str(public), "--dst", str(tmp_path / "served")])
    assert checked.exit_code == 0, checked.output
    command = checked.stdout.strip().split(" ")
    assert command[1:5] == ["-m", "mlflow", "models", "serve"] and str(tmp_path / "served") in command[6]
    server = subprocess.Popen([sys.executable, "-m", "routeforge.artifacts.cli", "serve", "models:/router@champion",
                               "--port", str(port), "--public-key", str(public), "--dst", str(tmp_path / "live")],
                              env={**__import__("os").environ, "MLFLOW_TRACKING_URI": tracking},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        assert server.poll() is None, server.stderr.read().decode()[-3000:]
        # the scoring server answers /ping once it has loaded the model (this bundle's stand-in component
        # cannot route; the demo e2e routes through the pyfunc model)
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=60).status == 200
    finally:
        stop(server)
    mlmodel = _stored_mlmodel("1")
    mlmodel.write_text(mlmodel.read_text().replace("routeforge.registry.pyfunc_loader", "mlflow.pyfunc.model"))
    refused = CliRunner().invoke(main, ["serve", "models:/router@champion", "--check-only",
                                        "--public-key", str(public), "--dst", str(tmp_path / "again")])
    assert refused.exit_code == 1 and "MLmodel: changed since it was signed" in refused.output, refused.output
