import json

import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.manifest import MANIFEST_FILE, Lineage
from routeforge.artifacts.bundle.verification import BundleVerificationError, verify_bundle
from routeforge.artifacts.bundle.writer import write_bundle
from routeforge.artifacts.cli.commands import main

from tests.conftest import REPO


@pytest.fixture
def bundle(tmp_path, component, fleet):
    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(input_hashes={"x": "0" * 64}), "test")
    return root


def test_manifest_lists_every_file_with_checksums(bundle):
    manifest = verify_bundle(bundle, allow_unsigned=True)
    paths = [f.path for f in manifest.components[0].files]
    assert paths == ["knn_estimator/index.bin", "knn_estimator/nested/meta.json"]
    assert manifest.components[0].metrics == {"acc": 0.5}
    assert len(manifest.version) == 12


def test_one_changed_byte_fails_naming_the_file(bundle):
    target = bundle / "knn_estimator" / "index.bin"
    data = bytearray(target.read_bytes())
    data[100] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(BundleVerificationError, match="knn_estimator/index.bin: sha256 mismatch"):
        verify_bundle(bundle, allow_unsigned=True)


def test_missing_and_unlisted_files_are_named(bundle):
    (bundle / "knn_estimator" / "nested" / "meta.json").unlink()
    (bundle / "knn_estimator" / "extra.txt").write_text("sneaky")
    with pytest.raises(BundleVerificationError) as err:
        verify_bundle(bundle, allow_unsigned=True)
    assert "knn_estimator/nested/meta.json: missing" in str(err.value)
    assert "knn_estimator/extra.txt: not listed in the manifest" in str(err.value)


def test_schema_version_and_schema_violations_are_refused(bundle):
    path = bundle / MANIFEST_FILE
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "schema_version": "2.0"}))
    with pytest.raises(BundleVerificationError, match="schema_version 2.0"):
        verify_bundle(bundle, allow_unsigned=True)
    raw["components"][0]["files"][0]["sha256"] = "xyz"
    path.write_text(json.dumps(raw))
    with pytest.raises(BundleVerificationError, match="field components/0/files/0/sha256"):
        verify_bundle(bundle, allow_unsigned=True)


def test_checked_in_json_schema_matches_the_dataclasses():
    """The schema is the contract other runtimes read; the dataclasses must carry the same fields."""
    import dataclasses

    from routeforge.artifacts.bundle import manifest as m

    schema = json.loads((REPO / "artifacts" / "manifest.schema.json").read_text())
    objects = {"Manifest": schema, **schema["$defs"]}
    for name, spec in objects.items():
        fields = {f.name for f in dataclasses.fields(getattr(m, name))}
        assert fields == set(spec["properties"]), name
        required = {f.name for f in dataclasses.fields(getattr(m, name))
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        assert required == set(spec.get("required", [])), name


def test_cli_inspect_and_verify(bundle):
    runner = CliRunner()
    ok = runner.invoke(main, ["bundle", "verify", str(bundle), "--insecure-skip-signature"])
    assert ok.exit_code == 0 and "2 files verified" in ok.output
    shown = runner.invoke(main, ["bundle", "inspect", str(bundle)])
    assert shown.exit_code == 0 and "KNN estimator: " in shown.output
    every = runner.invoke(main, ["bundle", "inspect", str(bundle), "--all"])
    assert every.exit_code == 0 and "knn_estimator [knn_estimator, test] 2 files" in every.output
    (bundle / "knn_estimator" / "index.bin").write_bytes(b"changed")
    bad = runner.invoke(main, ["bundle", "verify", str(bundle), "--insecure-skip-signature"])
    assert bad.exit_code == 1 and "knn_estimator/index.bin: sha256 mismatch" in bad.output


def test_loader_refuses_a_folder_that_is_not_a_bundle(tmp_path):
    with pytest.raises(BundleVerificationError, match="not a routeforge bundle"):
        load_bundle(tmp_path)
