"""Publish to and load from a real MLflow tracking server over HTTP."""

from click.testing import CliRunner
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.signing import generate_key_pair, key_id, load_public_key
from routeforge.artifacts.cli.commands import main
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
    from routeforge.artifacts.bundle import registry

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
    assert "bundle inspected, content digest" in result.stdout and "registry: inspected version 1" in result.stdout
    assert "KNN estimator: " in result.stdout
    assert asked == ["models:/inspected@champion/data/artifacts/stage/manifest.json",  # the staged folder's name
                     "models:/inspected@champion/data/artifacts/stage/manifest.sig"]


def test_registered_bundles_are_downloaded_once_into_one_cache_and_pruned(mlflow_server, tmp_path, component, fleet,
                                                                          monkeypatch):
    """`load_bundle` and the CLI on `models:/` go through the local bundle cache: a version is
    downloaded once, an alias is resolved anew each time (it moves), a damaged entry is downloaded
    again, nothing is left in temporary folders, and `cache prune` trims it."""
    import tempfile

    from routeforge.artifacts.bundle import download
    from routeforge.artifacts.bundle.bundle_cache import BundleCache

    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    private = tmp_path / "keys" / "bundle.key"
    public = generate_key_pair(private)

    def publish(k: int):
        (component.folder / "nested" / "meta.json").write_text(f'{{"k": {k}}}')
        return publish_bundle(name="cached", fleet=fleet, components=[component], staging_dir=tmp_path / f"stage{k}",
                              tracking_uri=mlflow_server, experiment="http-test", artifact_location=None,
                              alias="champion", input_hashes={}, params={}, metrics={"acc": 0.5}, signing_key=private)[0]

    first = publish(1)
    downloads = []
    real = download.download_bundle
    monkeypatch.setattr(download, "download_bundle", lambda *a, **kw: downloads.append(a[0]) or real(*a, **kw))
    a = load_bundle("models:/cached@champion", tracking_uri=mlflow_server, public_key=public)
    b = load_bundle("models:/cached@champion", tracking_uri=mlflow_server, public_key=public)
    assert a.root == b.root and downloads == [f"models:/cached/{first.version}"]
    assert a.root.parent == tmp_path / "cache" / "by-digest" and a.root.name == a.manifest.version
    second = publish(2)  # the alias moves: the new version is fetched, the old one stays cached
    c = load_bundle("models:/cached@champion", tracking_uri=mlflow_server, public_key=public)
    assert c.manifest.version != a.manifest.version and downloads[-1] == f"models:/cached/{second.version}"
    # a cached file damaged since: verification fails, the entry is downloaded again and verified
    (c.root / "knn_estimator" / "index.bin").write_bytes(b"tampered")
    d = load_bundle("models:/cached@champion", tracking_uri=mlflow_server, public_key=public)
    assert len(downloads) == 3 and (d.root / "knn_estimator" / "index.bin").read_bytes() != b"tampered"
    runner = CliRunner()
    listed = runner.invoke(main, ["cache", "list"])
    assert listed.exit_code == 0 and "2 bundles" in listed.output
    assert not list((tmp_path / "tmp").iterdir()) and not list((tmp_path / "cache" / "scratch").iterdir())
    pruned = runner.invoke(main, ["cache", "prune", "--max-bytes", str(BundleCache().entries()[0].bytes)])
    assert pruned.exit_code == 0 and "removed 1 bundles" in pruned.output
    assert [e.digest for e in BundleCache().entries()] == [d.manifest.version]  # the most recently used kept
    # a router service's warm start: the alias and the recorded key read over REST, the bundle from
    # the cache; MLflow is never imported (importing it alone took 3.7 s of a 7 s `predict`)
    import os
    import subprocess
    import sys

    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from routeforge.artifacts.bundle.loader import load_bundle; "
         "b = load_bundle('models:/cached@champion', tracking_uri=sys.argv[1]); "
         "print(b.manifest.version, 'mlflow' in sys.modules)", mlflow_server],
        env={**os.environ, "ROUTEFORGE_CACHE": str(tmp_path / "cache")}, capture_output=True, text=True, timeout=120)
    assert probe.stdout.split() == [d.manifest.version, "False"], probe.stderr


def test_a_component_that_did_not_change_is_stored_and_downloaded_once(mlflow_server, tmp_path, component, fleet,
                                                                        monkeypatch):
    """Issue 50, item 6: a large component (here 2 MiB, like the encoder) is stored once in the
    experiment's artifact store by digest; a second version that changed only a small component adds
    its small files; a router service moving to it downloads only those; the signature still covers
    every file; pyfunc loads assemble in the cache, never in the model folder; and a stored component
    changed behind the manifest's back is refused."""
    import os

    import mlflow
    import pytest
    from routeforge.artifacts.bundle import registry, shared_components
    from routeforge.artifacts.bundle.bundle_cache import BundleCache
    from routeforge.artifacts.bundle.shared_components import REFS_FILE, SHARED_MIN_BYTES
    from routeforge.artifacts.bundle.verification import BundleVerificationError
    from routeforge.artifacts.bundle.writer import ComponentSource

    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    private = tmp_path / "keys" / "bundle.key"
    public = generate_key_pair(private)
    big = tmp_path / "src" / "encoder"
    big.mkdir(parents=True)
    (big / "model.onnx").write_bytes(os.urandom(2 * SHARED_MIN_BYTES))
    encoder = ComponentSource(name="sentence_encoder", kind="sentence_encoder", format="test", folder=big)

    def publish(k: int, experiment: str = "shared-test", name: str = "shared"):
        (component.folder / "nested" / "meta.json").write_text(f'{{"k": {k}}}')
        return publish_bundle(name=name, fleet=fleet, components=[encoder, component],
                              staging_dir=tmp_path / f"stage{k}", tracking_uri=mlflow_server, experiment=experiment,
                              artifact_location=None, alias="champion", input_hashes={}, params={},
                              metrics={"acc": 0.5}, signing_key=private)[0]

    def stored_bytes(uri: str) -> int:
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        repo, total, folders = get_artifact_repository(uri), 0, [None]
        while folders:
            for info in repo.list_artifacts(folders.pop()):
                if info.is_dir:
                    folders.append(info.path)
                else:
                    total += info.file_size
        return total

    first, second = publish(1), publish(2)
    mlflow.set_tracking_uri(mlflow_server)
    client = mlflow.MlflowClient()
    sources = [client.get_model_version("shared", v.version).source.removeprefix("models:/") for v in (first, second)]
    sizes = [stored_bytes(mlflow.get_logged_model(s).artifact_location) for s in sources]
    assert all(size < SHARED_MIN_BYTES for size in sizes), sizes  # neither version holds the encoder
    experiment = mlflow.get_experiment_by_name("shared-test")
    # the server's default layout (<root>/<experiment id>): the store is beside the experiments, so another
    # experiment (another fleet) on the same server shares the encoder too (issue 73, item 4)
    root, _, leaf = experiment.artifact_location.rstrip("/").rpartition("/")
    assert leaf == experiment.experiment_id
    store = f"{root}/routeforge-components"
    publish(3, experiment="another-fleet", name="another")
    digests = [a.path.rsplit("/", 1)[-1] for a in mlflow.artifacts.list_artifacts(artifact_uri=store)]
    assert len(digests) == 1 and stored_bytes(f"{store}/{digests[0]}") == 2 * SHARED_MIN_BYTES  # stored once

    # a router service: its own cache (the publishing process's already holds the encoder)
    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "service-cache"))
    fetched = []
    real = registry.download_artifacts
    counting = lambda uri, *a: fetched.append(uri) or real(uri, *a)  # noqa: E731
    monkeypatch.setattr(registry, "download_artifacts", counting)
    monkeypatch.setattr(shared_components, "download_artifacts", counting)  # where a shared component is fetched
    a = load_bundle(f"models:/shared/{first.version}", tracking_uri=mlflow_server, public_key=public)
    b = load_bundle("models:/shared@champion", tracking_uri=mlflow_server, public_key=public)
    assert a.manifest.version != b.manifest.version
    assert [u for u in fetched if "routeforge-components" in u] == [f"{store}/{digests[0]}"]  # the encoder, once
    assert (b.root / "sentence_encoder" / "model.onnx").stat().st_nlink >= 3  # cache, and two bundles: linked
    # MLflow's own loader: assembled in the cache from the model folder, which gets nothing written
    model_dir = tmp_path / "pyfunc"
    mlflow.artifacts.download_artifacts(second.uri.replace("@champion", f"/{second.version}"), dst_path=str(model_dir))
    before = sorted(p.relative_to(model_dir) for p in model_dir.rglob("*"))
    assert any(p.name == REFS_FILE for p in before) and not any(p.name == "model.onnx" for p in before)
    monkeypatch.setenv("ROUTEFORGE_PUBLIC_KEY", str(public))
    loaded = mlflow.pyfunc.load_model(str(model_dir))
    assert loaded._model_impl.bundle.root.parent == tmp_path / "service-cache" / "by-digest"
    assert sorted(p.relative_to(model_dir) for p in model_dir.rglob("*")) == before
    # cache prune: components no kept bundle links to go with the bundles
    pruned = CliRunner().invoke(main, ["cache", "prune", "--max-bytes", "0"])
    assert pruned.exit_code == 0 and "removed 2 bundles" in pruned.output and "and 1 shared components" in pruned.output
    assert not BundleCache().entries() and not list((tmp_path / "service-cache" / "components").iterdir())
    # the stored encoder changed behind the manifest's back: refused, naming the component
    stored = tmp_path / "tampered"
    mlflow.artifacts.download_artifacts(f"{store}/{digests[0]}", dst_path=str(stored))
    (stored / digests[0] / "sentence_encoder" / "model.onnx").write_bytes(os.urandom(2 * SHARED_MIN_BYTES))
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    get_artifact_repository(store).log_artifacts(str(stored / digests[0]), digests[0])
    with pytest.raises((ValueError, BundleVerificationError), match="sentence_encoder"):
        load_bundle("models:/shared@champion", tracking_uri=mlflow_server, public_key=public)
