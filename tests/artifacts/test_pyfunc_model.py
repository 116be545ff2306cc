"""The registered MLflow model holds no code: what runs on `mlflow.pyfunc.load_model` is the
installed package's loader, and a model folder that carries code is refused before it runs (issue 53,
item 4: a line appended to the stored `pyfunc_entry.py` used to run on load while the bundle verified)."""

from pathlib import Path

import mlflow
import pytest
import yaml
from routeforge.artifacts.manifest import Lineage
from routeforge.artifacts.registry import bundle_folder
from routeforge.artifacts.signing import generate_key_pair, sign_bundle
from routeforge.artifacts.writer import write_bundle
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
