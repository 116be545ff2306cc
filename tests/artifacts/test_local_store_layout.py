"""Issue 73, item 4: a local SQLite store's artifacts live beside its database, not in `./mlruns` of
the folder a fleet is run from, and the experiments of one store share one copy of each large
component (the encoder) instead of one per experiment."""

from __future__ import annotations

import os

from routeforge.artifacts.bundle.shared_components import SHARED_MIN_BYTES
from routeforge.artifacts.bundle.signing import generate_key_pair
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.registry.publish import publish_bundle
from routeforge.registry.store import default_artifact_location


def test_experiments_of_a_local_store_keep_artifacts_beside_it_and_share_the_encoder(tmp_path, component, fleet,
                                                                                   monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # where a user runs the fleet from: MLflow's default wrote ./mlruns here
    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    tracking = "sqlite:///state/mlflow.db"  # relative, as the guide's fleets write it
    (work / "state").mkdir()
    assert default_artifact_location(tracking) == str(work / "state" / "mlartifacts")
    assert default_artifact_location("http://127.0.0.1:5000") is None
    big = tmp_path / "src" / "encoder"
    big.mkdir(parents=True)
    (big / "model.onnx").write_bytes(os.urandom(2 * SHARED_MIN_BYTES))
    encoder = ComponentSource(name="sentence_encoder", kind="sentence_encoder", format="test", folder=big)
    key = tmp_path / "keys" / "bundle.key"
    generate_key_pair(key)
    for k, experiment in enumerate(("fleet-a", "fleet-b")):
        (component.folder / "nested" / "meta.json").write_text(f'{{"k": {k}}}')
        publish_bundle(name=f"router-{experiment}", fleet=fleet, components=[encoder, component],
                       staging_dir=tmp_path / f"stage{k}", tracking_uri=tracking, experiment=experiment,
                       artifact_location=None, alias="challenger", input_hashes={}, params={}, metrics={},
                       signing_key=key)
    assert sorted(p.name for p in work.iterdir()) == ["state"]  # no ./mlruns
    store = work / "state" / "mlartifacts" / "routeforge-components"
    assert len(list(store.iterdir())) == 1  # one encoder for both experiments
    held = sum(p.stat().st_size for p in (work / "state").rglob("*") if p.is_file() and p.name == "model.onnx")
    assert held == 2 * SHARED_MIN_BYTES


def test_a_read_refuses_a_store_its_mlflow_would_migrate(tmp_path):
    """A router service with a newer mlflow-skinny than the pipeline's migrated the pipeline's SQLite store
    by reading it, and the pipeline's MLflow then refused the store ("out-of-date database schema"). A
    read now compares the store's schema with its own MLflow's first, and changes nothing."""
    import sqlite3

    import pytest
    from routeforge.artifacts.bundle.registry import _mlflow_schema, check_store_exists

    head, known, _ = _mlflow_schema()
    older = next(r for r in sorted(known) if r != head)
    database = tmp_path / "mlflow.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES (?)", (head,))
    uri = f"sqlite:///{database}"
    check_store_exists("models:/m@champion", uri)  # the same schema: read
    for revision, said in ((older, "holds an older MLflow schema"), ("ffffffffffff", "newer than this process's")):
        with sqlite3.connect(database) as conn:
            conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        with pytest.raises(ValueError, match=said):
            check_store_exists("models:/m@champion", uri)
        with sqlite3.connect(database) as conn:  # untouched
            assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (revision,)
