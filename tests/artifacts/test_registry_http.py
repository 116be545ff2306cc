"""Publish to and load from a real MLflow tracking server over HTTP."""

from click.testing import CliRunner
from routeforge.artifacts.cli import main
from routeforge.artifacts.loader import load_bundle
from routeforge.artifacts.signing import generate_key_pair, key_id, load_public_key
from routeforge.registry.publish import publish_bundle


def test_publish_register_and_load_over_http(mlflow_server, tmp_path, component, fleet):
    private = tmp_path / "keys" / "bundle.key"
    public = generate_key_pair(private)
    published = []
    for round_ in range(3):
        if round_ == 2:  # new content: a new version (the same content again registered nothing)
            (component.folder / "nested" / "meta.json").write_text('{"k": 4}')
        registered, manifest = publish_bundle(
            name="http-router", fleet=fleet, components=[component], staging_dir=tmp_path / f"stage{round_}",
            tracking_uri=mlflow_server, experiment="http-test", artifact_location=None, alias="challenger",
            input_hashes={"prompts": "a" * 64}, params={"k": "3"}, metrics={"acc": 0.5}, signing_key=private,
        )
        published.append(registered)
    assert [(r.version, r.unchanged) for r in published] == [("1", False), ("1", True), ("2", False)]
    assert published[1].run_id == published[0].run_id  # no new run either
    assert published[-1].uri == "models:/http-router@challenger"

    # the signature travels with the bundle through the server's artifact store
    loaded = load_bundle(published[-1].uri, tmp_path / "download", mlflow_server, public_key=public)
    assert loaded.manifest.lineage.mlflow_run_id == published[-1].run_id
    from mlflow import MlflowClient

    tags = MlflowClient(mlflow_server).get_model_version("http-router", "2").tags
    assert tags["signing_key_id"] == key_id(load_public_key(public))
    assert loaded.manifest.lineage.input_hashes == {"prompts": "a" * 64}

    runner = CliRunner()
    result = runner.invoke(main, ["bundle", "verify", "models:/http-router/1", "--tracking-uri", mlflow_server,
                                  "--public-key", str(public)])
    assert result.exit_code == 0 and "signature by" in result.output, result.output
    result = runner.invoke(main, ["bundle", "download", "models:/http-router@challenger", str(tmp_path / "dl")],
                           env={"MLFLOW_TRACKING_URI": mlflow_server})
    assert result.exit_code == 0 and (tmp_path / "dl" / "manifest.json").exists()


def test_inspect_downloads_the_manifest_alone(mlflow_server, tmp_path, component, fleet, monkeypatch):
    from routeforge.artifacts import registry

    private = tmp_path / "keys" / "bundle.key"
    generate_key_pair(private)
    publish_bundle(name="inspected", fleet=fleet, components=[component], staging_dir=tmp_path / "stage",
                   tracking_uri=mlflow_server, experiment="http-test", artifact_location=None, alias="champion",
                   input_hashes={}, params={}, metrics={"acc": 0.5}, signing_key=private)
    asked = []
    real = registry.download_artifacts
    monkeypatch.setattr(registry, "download_artifacts", lambda uri, dst=None: asked.append(uri) or real(uri, dst))
    result = CliRunner().invoke(main, ["bundle", "inspect", "models:/inspected@champion", "--tracking-uri",
                                       mlflow_server])
    assert result.exit_code == 0, result.output
    assert "bundle inspected version" in result.stdout and "knn_estimator [knn_estimator, test] 2 files" in result.stdout
    assert asked == ["models:/inspected@champion/data/artifacts/stage/manifest.json",  # the staged folder's name
                     "models:/inspected@champion/data/artifacts/stage/manifest.sig"]
