"""The fifth hostile round (issue 71): an attacker who can write the artifact store, the bundle cache
or the registry's database, but holds no signing key. Each test is a probe that got through before
the change it names (said in its docstring) and is refused now."""

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.keyring import load_keyring
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.signing import generate_key_pair, key_id, load_public_key
from routeforge.artifacts.bundle.verification import BundleVerificationError, parse_schema_version
from routeforge.artifacts.cli.commands import main
from routeforge.registry.publish import publish_bundle

REPO = Path(__file__).resolve().parents[2]
TS_DIST = REPO / "runtimes" / "typescript" / "dist"
SCHEMA_CASES = json.loads((Path(__file__).parent / "schema_versions.json").read_text())["cases"]


def _node():
    node = shutil.which("node")
    if node is None or not (TS_DIST / "bundle.js").is_file():
        pytest.skip("the TypeScript runtime is not built (`make ts-runtime`; Debian: apt-get install nodejs npm)")
    return node


def _ts(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run `script` on Node.js with `Bundle`, `loadKeyring` and `parseSchemaVersion` of the built runtime."""
    prelude = f"const {{ Bundle, loadKeyring, parseSchemaVersion }} = require({json.dumps(str(TS_DIST / 'bundle.js'))});"
    return subprocess.run([_node(), "-e", prelude + script, *args], capture_output=True, text=True, timeout=60)


def _kid(public: Path) -> str:
    return key_id(load_public_key(public))


@pytest.fixture
def takeover(tmp_path, component, fleet, monkeypatch):
    """A store whose champion (v1) the owner signed, then a v2 an attacker registered as champion:
    a changed component, signed by the attacker's key, and the model's `routeforge.public_key` tag
    replaced with the attacker's public key (what a store writer can do). The service's keyring
    pins the owner's key. Returns (tracking URI, owner's public key, attacker's public key)."""
    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    service_ring, attacker_ring = tmp_path / "service-keyring", tmp_path / "attacker-keyring"
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    owner, attacker = tmp_path / "owner" / "bundle.key", tmp_path / "attacker" / "bundle.key"
    generate_key_pair(owner)
    generate_key_pair(attacker)

    def register(key: Path, k: int, ring: Path) -> None:
        monkeypatch.setenv("ROUTEFORGE_KEYRING", str(ring))
        (component.folder / "nested" / "meta.json").write_text(json.dumps({"k": k}))
        publish_bundle(name="local", fleet=fleet, components=[component], staging_dir=tmp_path / f"stage{k}",
                       tracking_uri=tracking, experiment="takeover", artifact_location=str(tmp_path / "artifacts"),
                       alias="champion", input_hashes={}, params={}, metrics={"acc": 0.5}, signing_key=key)

    register(owner, 1, service_ring)  # the owner's machine pins its own key; the service pinned the same
    register(attacker, 666, attacker_ring)
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(service_ring))
    import mlflow

    tag = mlflow.MlflowClient(tracking).get_registered_model("local").tags["routeforge.public_key"]
    assert tag == Path(f"{attacker}.pub").read_text()  # the store's hint now names the attacker's key
    return tracking, Path(f"{owner}.pub"), Path(f"{attacker}.pub")


def test_a_takeover_of_the_recorded_key_is_refused_by_every_loader(takeover, tmp_path):
    """Got through: with the tag replaced and the version re-signed by the attacker, `bundle verify`
    printed "signature by the key the registry recorded valid", `load_bundle` served the attacker's
    bundle and `serve` ran it. Now each verifies with the pinned key only, and says in one line the
    key that signed and the key pinned."""
    tracking, owner, attacker = takeover
    signed, pinned = _kid(attacker), _kid(owner)
    words = f"signed by another key (key id '{signed}', which is not pinned; pinned: {pinned}"
    with pytest.raises(BundleVerificationError) as refused:
        load_bundle("models:/local@champion", tracking_uri=tracking)
    assert words in str(refused.value)
    runner = CliRunner()
    verify = runner.invoke(main, ["bundle", "verify", "models:/local@champion", "--tracking-uri", tracking])
    assert verify.exit_code == 1 and words in verify.output and len(verify.output.strip().splitlines()) == 1
    serve = runner.invoke(main, ["serve", "models:/local@champion", "--check-only", "--tracking-uri", tracking,
                                 "--dst", str(tmp_path / "serve")])
    assert serve.exit_code == 1 and words in serve.output
    # the owner's version still verifies and loads by version number
    assert load_bundle("models:/local/1", tracking_uri=tracking).manifest.name == "local"
    # the TypeScript runtime, given the service's keyring, refuses the same download
    folder = tmp_path / "download"
    assert runner.invoke(main, ["bundle", "download", "models:/local@champion", str(folder),
                                "--tracking-uri", tracking]).exit_code == 0
    ts = _ts("try { Bundle.open(process.argv[1], loadKeyring(process.argv[2])); console.log('OPENED'); } "
             "catch (e) { console.log(e.message); }", str(folder), os.environ["ROUTEFORGE_KEYRING"])
    assert f"signed by another key (key id \"{signed}\", which is not pinned; pinned: {pinned})" in ts.stdout, ts


def test_trust_on_first_use_pins_the_recorded_key_only_when_asked_and_nothing_is_pinned(takeover, tmp_path,
                                                                                         monkeypatch, capsys):
    tracking, owner, attacker = takeover
    fresh = tmp_path / "fresh-keyring"
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(fresh))
    with pytest.raises(BundleVerificationError, match="no pinned public key"):  # never the store's by itself
        load_bundle("models:/local/1", tracking_uri=tracking)
    monkeypatch.setenv("ROUTEFORGE_TRUST_ON_FIRST_USE", "1")
    # first use pins what the store names now (the attacker's, here: why it is opt-in and said)
    load_bundle("models:/local@champion", tracking_uri=tracking)
    assert f"pinned key {_kid(attacker)} from the registry's record" in capsys.readouterr().err
    assert set(load_keyring(None).keys) == {_kid(attacker)}
    # once a key is pinned, another recorded key is never added: the owner's v1 is refused here
    with pytest.raises(BundleVerificationError, match="which is not pinned"):
        load_bundle("models:/local/1", tracking_uri=tracking)


def test_rotation_keeps_the_old_key_pinned_and_the_hint_moves_only_on_promotion(tmp_path, monkeypatch):
    """Got through: after `keys rotate`, registering a version moved the recorded key to the new key
    before any gate, and the old-key champion was refused ("signed by another key"). Now the pinned
    keyring holds both, and the registry's hint is written when a version is promoted."""
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(tmp_path / "ring"))
    private = tmp_path / "keys" / "bundle.key"
    old = generate_key_pair(private)
    runner = CliRunner()
    assert runner.invoke(main, ["keys", "pin", str(old)]).exit_code == 0
    rotated = runner.invoke(main, ["keys", "rotate", str(private)])
    assert rotated.exit_code == 0 and "still pinned" in rotated.output
    listed = runner.invoke(main, ["keys", "list"]).output
    assert _kid(old) in listed and _kid(Path(f"{private}.pub")) in listed
    assert "routeforge.public_key" not in rotated.output
    unpinned = runner.invoke(main, ["keys", "unpin", _kid(old)])
    assert unpinned.exit_code == 0 and _kid(old) not in runner.invoke(main, ["keys", "list"]).output


@pytest.mark.parametrize("version, parsed", SCHEMA_CASES)
def test_schema_versions_parse_alike_in_both_runtimes(version, parsed):
    """Got through: TypeScript opened a bundle of schema_version "01.1", which Python refused."""
    expected = tuple(parsed) if parsed is not None else None
    assert parse_schema_version(version) == expected
    ts = _ts("console.log(JSON.stringify(parseSchemaVersion(JSON.parse(process.argv[1]))));", json.dumps(version))
    assert json.loads(ts.stdout) == parsed, ts.stderr


def _bundle_with_policy(tmp_path):
    from routeforge.artifacts.bundle.manifest import Fleet, Lineage, ModelEntry
    from routeforge.artifacts.bundle.signing import sign_bundle
    from routeforge.artifacts.bundle.writer import ComponentSource, write_bundle

    source = tmp_path / "src" / "policy--round_robin"
    source.mkdir(parents=True)
    (source / "policy.json").write_text(json.dumps({"kind": "heuristic", "heuristic": "round_robin",
                                                    "parameters": {}, "instances": 2}))
    fleet = Fleet(name="t", models=[ModelEntry(name="a", engine="transformers", input_per_mtok=1.0,
                                               output_per_mtok=2.0)])
    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [ComponentSource(name="policy--round_robin", kind="routing_policy",
                                                         format="json", folder=source,
                                                         metrics={}, config={"policy_kind": "heuristic"})],
                 Lineage(), "test")
    private = tmp_path / "keys" / "k"
    public = generate_key_pair(private)
    sign_bundle(root, private)
    return root, public


def test_a_component_edited_or_swapped_after_open_is_refused_in_typescript(tmp_path):
    """Got through: `heuristic()` and `router()` read their files after `open()` with no second hash,
    so an edited `policy.json`, or one replaced by a link to an outside file, was served."""
    root, public = _bundle_with_policy(tmp_path)
    policy = root / "policy--round_robin" / "policy.json"
    script = ("const b = Bundle.open(process.argv[1], loadKeyring(process.argv[2])); "
              "require('fs').writeFileSync(process.argv[3], process.argv[4]); "
              "try { b.heuristic('policy--round_robin'); console.log('SERVED'); } catch (e) { console.log(e.message); }")
    edited = _ts(script, str(root), str(public), str(policy), '{"kind": "heuristic", "heuristic": "jsq", "instances": 2}')
    assert "changed after it was verified: policy--round_robin/policy.json: sha256 mismatch" in edited.stdout, edited
    root2, public2 = _bundle_with_policy(tmp_path / "two")
    outside = tmp_path / "outside.json"
    outside.write_text('{"kind": "heuristic", "heuristic": "jsq", "instances": 2}')
    linked = _ts("const b = Bundle.open(process.argv[1], loadKeyring(process.argv[2])); const fs = require('fs'); "
                 "fs.unlinkSync(process.argv[3]); fs.symlinkSync(process.argv[4], process.argv[3]); "
                 "try { b.heuristic('policy--round_robin'); console.log('SERVED'); } catch (e) { console.log(e.message); }",
                 str(root2), str(public2), str(root2 / "policy--round_robin" / "policy.json"), str(outside))
    assert "policy--round_robin/policy.json: not a plain file" in linked.stdout, linked


def test_a_python_component_is_used_from_the_bytes_it_was_checked_on(tmp_path):
    """Got through: `simulator_spec()` read `simulator.json` as it was at the time of the call, and
    `component()` hashed a file, then let its loader open it again (a swap between the two was served
    in 969 of 182,839 loads). Now both read a private copy hashed as it was made."""
    root, public = _bundle_with_policy(tmp_path)
    bundle = load_bundle(root, public_key=public)
    policy = root / "policy--round_robin" / "policy.json"
    copy = bundle.verified_copy("policy--round_robin")
    policy.write_text('{"kind": "heuristic", "heuristic": "jsq", "instances": 2}')  # after the copy was made
    assert json.loads((copy / "policy.json").read_text())["heuristic"] == "round_robin"
    assert bundle.routing_policy("policy--round_robin").name == "round_robin"
    with pytest.raises(BundleVerificationError, match="sha256 mismatch"):
        load_bundle(root, public_key=public)


def test_the_light_reader_never_writes_a_store_and_refuses_an_ambiguous_uri(tmp_path):
    """Got through: a 0-byte database file was written into (a 954 KB schema) by a 'read-only' `bundle
    verify` falling back to MLflow; `sqlite:///…%65…` opened one file in the light reader and another
    in MLflow."""
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    runner = CliRunner()
    out = runner.invoke(main, ["bundle", "verify", "models:/local@champion", "--tracking-uri", f"sqlite:///{empty}"])
    assert out.exit_code == 1 and "not an SQLite database" in out.output and empty.stat().st_size == 0
    encoded = f"sqlite:///{tmp_path}/%65vil.db"
    out = runner.invoke(main, ["bundle", "verify", "models:/local@champion", "--tracking-uri", encoded])
    assert out.exit_code == 1 and "percent-encoded" in out.output
    assert not (tmp_path / "evil.db").exists() and not (tmp_path / "%65vil.db").exists()
    with sqlite3.connect(tmp_path / "real.db") as connection:
        connection.execute("CREATE TABLE t (x)")
    assert (tmp_path / "real.db").stat().st_size > 0


class _Recorder:
    """An HTTP server on 127.0.0.1 that records each request's path and Authorization header."""

    def __enter__(self):
        import http.server
        import threading

        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                seen.append((self.path, self.headers.get("Authorization")))
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def shared_store(tmp_path, component, fleet, monkeypatch):
    """A SQLite store whose champion stores its 2 MB component by digest (shared_components.json)."""
    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(tmp_path / "ring"))
    (component.folder / "index.bin").write_bytes(os.urandom(2 << 20))
    private = tmp_path / "keys" / "bundle.key"
    generate_key_pair(private)
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    publish_bundle(name="local", fleet=fleet, components=[component], staging_dir=tmp_path / "stage",
                   tracking_uri=tracking, experiment="shared", artifact_location=str(tmp_path / "artifacts"),
                   alias="champion", input_hashes={}, params={}, metrics={"acc": 0.5}, signing_key=private)
    refs = next((tmp_path / "artifacts").rglob("shared_components.json"))
    return tracking, refs


def test_no_credential_goes_to_a_host_the_references_file_names(shared_store, tmp_path, monkeypatch):
    """Got through: `shared_components.json` (outside the signature) rewritten to another URL made
    `bundle predict`, `bundle verify` and `serve --check-only` with an empty cache each send a request
    with `Authorization: Basic <MLFLOW_TRACKING_USERNAME:PASSWORD>` to it before refusing anything."""
    tracking, refs = shared_store
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "router")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "secret")
    runner = CliRunner()
    with _Recorder() as evil:
        data = json.loads(refs.read_text())
        refs.write_text(json.dumps({**data, "store": f"{evil.url}/api/2.0/mlflow-artifacts/artifacts"}))
        for args in (["bundle", "verify", "models:/local@champion"],
                     ["serve", "models:/local@champion", "--check-only", "--dst", str(tmp_path / "serve")]):
            shutil.rmtree(tmp_path / "cache", ignore_errors=True)
            out = runner.invoke(main, [*args, "--tracking-uri", tracking])
            assert out.exit_code == 1 and "not on the configured tracking server" in out.output, out.output
        assert evil.seen == []


def test_a_version_stored_outside_its_experiments_artifact_location_is_not_downloaded(shared_store, tmp_path):
    """Got through: a version whose storage location names a folder outside the artifact root was
    copied by `bundle download` without a word."""
    tracking, _ = shared_store
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "secret").mkdir(parents=True)
    (elsewhere / "secret" / "id_rsa").write_text("PRIVATE")
    with sqlite3.connect(tmp_path / "mlflow.db") as connection:
        tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        column = "storage_location"
        connection.execute(f"UPDATE model_versions SET {column} = ?", (elsewhere.as_uri(),))
        if "logged_models" in tables:
            connection.execute("UPDATE logged_models SET artifact_location = ?", (elsewhere.as_uri(),))
    out = CliRunner().invoke(main, ["bundle", "download", "models:/local@champion", str(tmp_path / "got"),
                                    "--tracking-uri", tracking])
    assert out.exit_code == 1 and "outside its experiment's artifact location" in out.output, out.output
    assert not (tmp_path / "got" / "secret").exists()


def _cache_with_entry(tracking, tmp_path):
    from routeforge.artifacts.bundle.bundle_cache import BundleCache

    bundle = load_bundle("models:/local@champion", tracking_uri=tracking)
    return BundleCache(tmp_path / "cache"), bundle


def test_cache_operations_never_follow_a_link_out_of_the_cache(shared_store, tmp_path):
    """Got through: a cache whose `by-digest/` or `components/` was a symbolic link made `cache
    forget` / `prune` delete files outside it; an index file that was a link was written through
    by a plain `bundle predict`."""
    tracking, _ = shared_store
    cache, bundle = _cache_with_entry(tracking, tmp_path)
    outside = tmp_path / "outside"
    victim = outside / bundle.manifest.version
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("mine")
    (outside / "component" / "f").parent.mkdir(parents=True)
    (outside / "component" / "f").write_text("mine too")
    for sub in ("by-digest", "components"):
        shutil.rmtree(cache.root / sub)
        (cache.root / sub).symlink_to(outside)
    assert cache.entries() == [] and cache.prune(0) == [] and cache.prune_components() == 0
    cache.forget(cache.root / "by-digest" / bundle.manifest.version)
    assert (victim / "keep.txt").read_text() == "mine" and (outside / "component" / "f").exists()
    # an index entry that is a link: replaced by the next add, its target never written
    for sub in ("by-digest", "components"):
        (cache.root / sub).unlink()
    shutil.rmtree(cache.root / "registry")
    load_bundle("models:/local@champion", tracking_uri=tracking)
    index = next(p for p in (cache.root / "registry").rglob("*") if p.is_file())
    target = tmp_path / "precious.txt"
    target.write_text("precious")
    index.unlink()
    index.symlink_to(target)
    shutil.rmtree(cache.root / "by-digest")
    load_bundle("models:/local@champion", tracking_uri=tracking)
    assert target.read_text() == "precious" and not index.is_symlink()


_READ_ONLY_LOAD = ("import sys; from routeforge.artifacts.bundle import bundle_cache; "
                   "bundle_cache.BundleCache.writable = lambda self: False; "
                   "from routeforge.artifacts.bundle.loader import load_bundle; "
                   "b = load_bundle('models:/local@champion', tracking_uri=sys.argv[1]); "
                   "print(b.manifest.version, b.root)")


def test_a_read_only_cache_loads_a_verified_temporary_copy_and_cleans_it_up(shared_store, tmp_path):
    """Got through: a read-only cache without the version failed every load ("Read-only file system:
    …/scratch") and left `/tmp/routeforge-bundle-*` behind; with a damaged entry it failed every
    time instead of verifying a temporary copy."""
    import sys

    tracking, _ = shared_store
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    run = subprocess.run([sys.executable, "-c", _READ_ONLY_LOAD, tracking], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "read-only and lacks" in run.stderr, run.stderr
    assert str(temporary) in run.stdout and list(temporary.iterdir()) == []  # removed at exit
    cache, bundle = _cache_with_entry(tracking, tmp_path)  # now cached, then damaged
    damaged = next(p for p in (cache.root / "by-digest").rglob("meta.json"))
    damaged.unlink()  # a new file in its place (the cached file is hard-linked to the component store)
    damaged.write_text('{"k": 666}')
    run = subprocess.run([sys.executable, "-c", _READ_ONLY_LOAD, tracking], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "holds a damaged copy" in run.stderr, run.stderr
    assert run.stdout.split()[0] == bundle.manifest.version and list(temporary.iterdir()) == []
    assert damaged.read_text() == '{"k": 666}'  # a read-only cache is left as it is


def test_what_mlflow_writes_into_the_store_on_a_load_does_not_fail_verification(shared_store, tmp_path):
    """Got through: `mlflow.pyfunc.load_model("models:/…@champion")` wrote `registered_model_meta` into
    the store's artifact folder, and `bundle verify` of the untouched champion then failed ("not in
    the signed record"). Only that file, naming exactly that version, is left unsigned."""
    import mlflow

    tracking, _ = shared_store
    mlflow.set_tracking_uri(tracking)
    local = Path(mlflow.artifacts.download_artifacts("models:/local/1"))  # a local store hands its own folder
    assert (local / "registered_model_meta").is_file() and str(tmp_path / "artifacts") in str(local)
    runner = CliRunner()
    out = runner.invoke(main, ["bundle", "verify", "models:/local@champion", "--tracking-uri", tracking])
    assert out.exit_code == 0 and "match the signed model record" in out.output, out.output
    (local / "registered_model_meta").write_text("model_name: local\nmodel_version: '1'\nloader: evil\n")
    out = runner.invoke(main, ["bundle", "verify", "models:/local@champion", "--tracking-uri", tracking])
    assert out.exit_code == 1 and "registered_model_meta: not in the signed record" in out.output, out.output


def test_the_keyring_itself_cannot_be_poisoned_through_links_garbage_or_size(tmp_path, monkeypatch, capsys):
    """A hostile round on this pass's own surface: the keyring folder. A stray, linked, special or
    oversized file in it is said and not trusted, in both runtimes; `keys pin` refuses what is not a
    key; a 10 MB key id in a signature is cut in the refusal."""
    root, public = _bundle_with_policy(tmp_path)
    ring = tmp_path / "ring"
    ring.mkdir()
    (ring / "good.pub").write_bytes(public.read_bytes())
    (ring / "garbage.pub").write_text("not a key")
    (ring / "linked.pub").symlink_to(public)
    (ring / "huge.pub").write_bytes(b"-" * (1 << 20))
    os.mkfifo(ring / "fifo.pub")
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(ring))
    keyring = load_keyring(None)
    err = capsys.readouterr().err
    assert set(keyring.keys) == {_kid(public)}
    assert all(f"{name}.pub" in err for name in ("garbage", "linked", "huge", "fifo")) and err.count("not trusted") == 4
    assert load_bundle(root).manifest.name == "router"
    ts = _ts("const keys = loadKeyring(process.argv[2]); Bundle.open(process.argv[1], keys); console.log(keys.length);",
             str(root), str(ring))
    assert ts.stdout.strip() == "1" and ts.stderr.count("not trusted") == 4, ts
    out = CliRunner().invoke(main, ["keys", "pin", str(ring / "garbage.pub")])
    assert out.exit_code == 1 and "not a PEM public key" in out.output
    signature = json.loads((root / "manifest.sig").read_text())
    (root / "manifest.sig").write_text(json.dumps({**signature, "key_id": "k" * 10_000_000}))
    with pytest.raises(BundleVerificationError) as refused:
        load_bundle(root)
    assert len(str(refused.value)) < 2000


def test_the_registry_hint_names_a_new_key_only_once_a_version_it_signed_is_promoted(tmp_path, component, fleet,
                                                                                      monkeypatch):
    """Got through: after `keys rotate`, a run killed after registration (or a version the gate held)
    left the recorded key on the new key, and the old-key champion was refused ("signed by another
    key"). Now registering as a challenger leaves the hint alone, promoting moves it, and a keyring
    holding both keys verifies both versions."""
    import mlflow
    from routeforge.registry.release import Decision, ModelRegistry

    monkeypatch.setenv("ROUTEFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(tmp_path / "ring"))
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    private = tmp_path / "keys" / "bundle.key"
    old = generate_key_pair(private)

    def register(k: int, alias: str) -> str:
        (component.folder / "nested" / "meta.json").write_text(json.dumps({"k": k}))
        registered, _ = publish_bundle(
            name="local", fleet=fleet, components=[component], staging_dir=tmp_path / f"stage{k}",
            tracking_uri=tracking, experiment="rotation", artifact_location=str(tmp_path / "artifacts"),
            alias=alias, input_hashes={}, params={}, metrics={"acc": 0.5}, signing_key=private)
        return str(registered.version)

    register(1, "champion")
    hint = lambda: mlflow.MlflowClient(tracking).get_registered_model("local").tags.get("routeforge.public_key")  # noqa: E731
    old_pem = old.read_text()
    assert hint() == old_pem
    assert CliRunner().invoke(main, ["keys", "rotate", str(private)]).exit_code == 0
    new = Path(f"{private}.pub")  # the rotation wrote the new public key where the old one was
    assert new.read_text() != old_pem
    second = register(2, "challenger")  # a run killed here, or a version the gate holds
    assert hint() == old_pem
    assert load_bundle("models:/local@champion", tracking_uri=tracking).manifest.name == "local"
    assert load_bundle(f"models:/local/{second}", tracking_uri=tracking).manifest.name == "local"
    ModelRegistry(tracking, "local").move_champion(second, Decision(promote=True, reasons=["test"], challenger={},
                                                               champion=None), None, new)
    assert hint() == new.read_text()
