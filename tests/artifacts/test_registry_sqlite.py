"""A local SQLite registry read without MLflow's client (`artifacts/bundle/registry_sqlite.py`): a router
service's warm start reads the alias and the recorded key with sqlite3 and the bundle from the cache,
never importing MLflow; what the module cannot read, MLflow's client answers."""

import os
import sqlite3
import subprocess
import sys

import pytest
from routeforge.artifacts.bundle import registry_sqlite
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.registry_rest import NotFound
from routeforge.artifacts.bundle.signing import generate_key_pair
from routeforge.registry.publish import publish_bundle


@pytest.fixture
def store(tmp_path, component, fleet, monkeypatch):
    """A SQLite store with `local` v1 and v2 (@champion on v2), and the cache the tests share."""
    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    private = tmp_path / "keys" / "bundle.key"
    generate_key_pair(private)
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    versions = []  # (the registered version, its manifest)
    for k in (1, 2):
        (component.folder / "nested" / "meta.json").write_text(f'{{"k": {k}}}')
        versions.append(publish_bundle(
            name="local", fleet=fleet, components=[component], staging_dir=tmp_path / f"stage{k}",
            tracking_uri=tracking, experiment="sqlite-test", artifact_location=str(tmp_path / "artifacts"),
            alias="champion", input_hashes={}, params={}, metrics={"acc": 0.5}, signing_key=private))
    return tracking, versions


def test_aliases_versions_and_tags_are_read_as_mlflow_reads_them(store):
    import mlflow

    tracking, versions = store
    client = mlflow.MlflowClient(tracking)
    model = registry_sqlite.registered_model(tracking, "local")
    assert model["aliases"] == {"champion": str(versions[1][0].version)}
    assert model["tags"] == client.get_registered_model("local").tags
    assert registry_sqlite.version_of(tracking, "models:/local@champion") == ("local", str(versions[1][0].version))
    assert registry_sqlite.version_of(tracking, f"models:/local/{versions[0][0].version}") == ("local",
                                                                                         str(versions[0][0].version))
    for missing in ("models:/local@staging", "models:/local/9", "models:/nobody@champion"):
        with pytest.raises(NotFound):
            registry_sqlite.version_of(tracking, missing)


def test_a_warm_start_never_imports_mlflow_and_an_unknown_schema_falls_back(store, tmp_path):
    tracking, versions = store
    first = load_bundle("models:/local@champion", tracking_uri=tracking)  # downloads into the cache
    assert first.manifest.version == versions[1][1].version
    probe = [sys.executable, "-c", "import sys; from routeforge.artifacts.bundle.loader import load_bundle; "
             "b = load_bundle('models:/local@champion', tracking_uri=sys.argv[1]); "
             "print(b.manifest.version, 'mlflow' in sys.modules)"]
    env = {**os.environ, "ROUTEFORGE_CACHE": str(tmp_path / "cache")}
    warm = subprocess.run([*probe, tracking], env=env, capture_output=True, text=True, timeout=120)
    assert warm.stdout.split() == [first.manifest.version, "False"], warm.stderr
    # a store this module cannot read (another MLflow schema, a locked file) says so; the caller then
    # asks MLflow's client (below)
    with sqlite3.connect(tmp_path / "other.db") as connection:
        connection.execute("CREATE TABLE registered_models (name TEXT)")
        connection.execute("INSERT INTO registered_models VALUES ('local')")
    with pytest.raises(registry_sqlite.Unreadable, match="no such column: workspace"):
        registry_sqlite.registered_model(f"sqlite:///{tmp_path / 'other.db'}", "local")


def test_what_it_cannot_read_mlflow_reads(store, monkeypatch):
    tracking, versions = store

    def unreadable(*args):
        raise registry_sqlite.Unreadable("a schema it does not know")

    monkeypatch.setattr(registry_sqlite, "_rows", unreadable)
    bundle = load_bundle("models:/local@champion", tracking_uri=tracking)
    assert bundle.manifest.version == versions[1][1].version
