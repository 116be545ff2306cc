"""Signed bundles: an Ed25519 signature over the manifest, checked by the loader and the CLI; paths
that leave the bundle and symbolic links are refused with or without a key."""

import json
import stat

import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.manifest import MANIFEST_FILE, Lineage
from routeforge.artifacts.bundle.signing import SIGNATURE_FILE, generate_key_pair, sign_bundle
from routeforge.artifacts.bundle.verification import BundleVerificationError, verify_bundle
from routeforge.artifacts.bundle.writer import sha256_file, write_bundle
from routeforge.artifacts.cli.commands import main


@pytest.fixture
def keys(tmp_path):
    private = tmp_path / "keys" / "signing.key"
    public = generate_key_pair(private)
    return private, public


@pytest.fixture
def signed(tmp_path, component, fleet, keys):
    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [component], Lineage(), "test")
    sign_bundle(root, keys[0])
    return root


def forge(bundle, content: bytes) -> None:
    """Rewrite a file and its checksum together, as an attacker with write access would."""
    target = bundle / "knn_estimator" / "index.bin"
    target.write_bytes(content)
    raw = json.loads((bundle / MANIFEST_FILE).read_text())
    entry = raw["components"][0]["files"][0]
    entry["sha256"], entry["bytes"] = sha256_file(target), target.stat().st_size
    (bundle / MANIFEST_FILE).write_text(json.dumps(raw, indent=2))


def test_key_pair_private_part_is_owner_only_and_never_overwritten(keys):
    private, public = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert public.name == "signing.key.pub" and b"BEGIN PUBLIC KEY" in public.read_bytes()
    with pytest.raises(FileExistsError):
        generate_key_pair(private)


def test_a_signed_bundle_verifies_and_loads_with_its_public_key(signed, keys):
    manifest = verify_bundle(signed, public_key=keys[1])
    assert manifest.name == "router"
    assert load_bundle(signed, public_key=keys[1]).manifest.version == manifest.version
    doc = json.loads((signed / SIGNATURE_FILE).read_text())
    assert doc["algorithm"] == "ed25519" and len(doc["key_id"]) == 16


def test_files_and_checksums_rewritten_together_are_refused(signed, keys):
    forge(signed, b"a different index")
    verify_bundle(signed, allow_unsigned=True)  # consistent: checksums alone cannot tell
    with pytest.raises(BundleVerificationError, match="bad signature: manifest.json was changed after it was signed"):
        verify_bundle(signed, public_key=keys[1])
    with pytest.raises(BundleVerificationError, match="bad signature"):
        load_bundle(signed, public_key=keys[1])


def test_unsigned_and_other_key_bundles_are_refused_naming_why(signed, keys, tmp_path):
    other_private = tmp_path / "other" / "k"
    other_public = generate_key_pair(other_private)
    with pytest.raises(BundleVerificationError, match="signed by another key"):
        verify_bundle(signed, public_key=other_public)
    sign_bundle(signed, other_private)  # re-signed by someone else's key
    with pytest.raises(BundleVerificationError, match="signed by another key"):
        load_bundle(signed, public_key=keys[1])
    (signed / SIGNATURE_FILE).unlink()
    with pytest.raises(BundleVerificationError, match="unsigned: no manifest.sig"):
        verify_bundle(signed, public_key=keys[1])
    with pytest.raises(BundleVerificationError, match="public key: .*not a PEM public key"):
        verify_bundle(signed, public_key=keys[0])  # the private key file is not a public key


@pytest.mark.parametrize("path", ["../outside.bin", "/etc/passwd", "knn_estimator/../../x", "C:/x"])
def test_manifest_paths_that_leave_the_bundle_are_refused(signed, path):
    raw = json.loads((signed / MANIFEST_FILE).read_text())
    raw["components"][0]["files"][0]["path"] = path
    (signed / MANIFEST_FILE).write_text(json.dumps(raw))
    with pytest.raises(BundleVerificationError, match="refused: .*(leaves the bundle folder|absolute)"):
        verify_bundle(signed, allow_unsigned=True)


def test_a_symbolic_link_in_the_bundle_is_refused(signed, tmp_path):
    (tmp_path / "secret").write_text("outside")
    (signed / "knn_estimator" / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(BundleVerificationError, match="knn_estimator/link: a symbolic link"):
        verify_bundle(signed, allow_unsigned=True)


def test_cli_verify_with_a_public_key(signed, keys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(tmp_path / "nothing-pinned"))
    runner = CliRunner()
    ok = runner.invoke(main, ["bundle", "verify", str(signed), "--public-key", str(keys[1])])
    assert ok.exit_code == 0 and f"({keys[1]}) valid" in ok.output and "signature by pinned key" in ok.output
    keyless = runner.invoke(main, ["bundle", "verify", str(signed)])
    assert keyless.exit_code == 1 and "no pinned public key" in keyless.output
    unchecked = runner.invoke(main, ["bundle", "verify", str(signed), "--insecure-skip-signature"])
    assert unchecked.exit_code == 0 and "signature NOT checked" in unchecked.output
    other = generate_key_pair(tmp_path / "o" / "k")
    refused = runner.invoke(main, ["bundle", "verify", str(signed), "--public-key", str(other)])
    assert refused.exit_code == 1 and "FAILED" in refused.output and "signed by another key" in refused.output
    assert "Traceback" not in refused.output


def test_signatures_are_required_by_default_and_the_opt_out_says_so(signed, keys, tmp_path, monkeypatch, capfd):
    monkeypatch.delenv("ROUTEFORGE_PUBLIC_KEY", raising=False)
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(tmp_path / "nothing-pinned"))
    for load in (verify_bundle, load_bundle):
        with pytest.raises(BundleVerificationError, match="no pinned public key .*ROUTEFORGE_PUBLIC_KEY"):
            load(signed)
    monkeypatch.setenv("ROUTEFORGE_PUBLIC_KEY", str(keys[1]))  # the configured key is used without arguments
    assert load_bundle(signed).manifest.name == "router"
    other = generate_key_pair(tmp_path / "other" / "k")
    monkeypatch.setenv("ROUTEFORGE_PUBLIC_KEY", str(other))
    with pytest.raises(BundleVerificationError, match="signed by another key"):
        load_bundle(signed)
    (signed / SIGNATURE_FILE).unlink()
    with pytest.raises(BundleVerificationError, match="unsigned"):
        load_bundle(signed)
    monkeypatch.delenv("ROUTEFORGE_PUBLIC_KEY")
    capfd.readouterr()
    assert load_bundle(signed, allow_unsigned=True).manifest.name == "router"
    warned = capfd.readouterr().err
    assert "signature of the bundle at" in warned and "NOT verified" in warned


@pytest.mark.parametrize("command", [["bundle", "verify"], ["bundle", "predict"], ["policies", "evaluate"]])
def test_every_command_that_reads_a_bundle_refuses_forged_unsigned_and_other_key_bundles(
        signed, keys, tmp_path, monkeypatch, command):
    """With the key configured ($ROUTEFORGE_PUBLIC_KEY) and no key argument: forged, unsigned and
    other-key bundles are refused in one line, before anything else is done with them."""
    monkeypatch.setenv("ROUTEFORGE_PUBLIC_KEY", str(keys[1]))
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,5\n2023-11-16 18:00:01,12,6\n")
    extra = {"bundle verify": [], "bundle predict": ["hello"], "policies evaluate": ["--trace", str(trace)]}
    args = extra[" ".join(command)]
    runner = CliRunner()
    forge(signed, b"forged")
    forged = runner.invoke(main, [*command, str(signed), *args])
    assert forged.exit_code == 1 and "bad signature" in forged.output and "Traceback" not in forged.output
    other_private = tmp_path / "other" / "k"
    generate_key_pair(other_private)
    sign_bundle(signed, other_private)
    assert "signed by another key" in runner.invoke(main, [*command, str(signed), *args]).output
    (signed / SIGNATURE_FILE).unlink()
    unsigned = runner.invoke(main, [*command, str(signed), *args])
    assert unsigned.exit_code == 1 and "unsigned" in unsigned.output
