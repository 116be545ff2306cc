"""Publish to and load from a real MLflow tracking server over HTTP."""

from click.testing import CliRunner

from artifacts.cli import main
from artifacts.loader import load_bundle
from artifacts.publish import publish_bundle


def test_publish_register_and_load_over_http(mlflow_server, tmp_path, component, fleet):
    published = []
    for round_ in range(2):
        registered, manifest = publish_bundle(
            name="http-router", fleet=fleet, components=[component], staging_dir=tmp_path / f"stage{round_}",
            tracking_uri=mlflow_server, experiment="http-test", artifact_location=None, alias="challenger",
            input_hashes={"prompts": "a" * 64}, params={"k": "3"}, metrics={"acc": 0.5},
        )
        published.append(registered)
    assert [r.version for r in published] == ["1", "2"]
    assert published[-1].uri == "models:/http-router@challenger"

    loaded = load_bundle(published[-1].uri, tmp_path / "download", mlflow_server)
    assert loaded.manifest.lineage.mlflow_run_id == published[-1].run_id
    assert loaded.manifest.lineage.input_hashes == {"prompts": "a" * 64}

    runner = CliRunner()
    result = runner.invoke(main, ["bundle", "verify", "models:/http-router/1", "--tracking-uri", mlflow_server])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["bundle", "download", "models:/http-router@challenger", str(tmp_path / "dl")],
                           env={"MLFLOW_TRACKING_URI": mlflow_server})
    assert result.exit_code == 0 and (tmp_path / "dl" / "manifest.json").exists()
