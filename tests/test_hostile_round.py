"""A hostile round on what issue 49 and 53's first items added (issue 53, item 7): run tags, the live
state a dispatcher reads, outcome sources, fleet names. Each probe below is one that got through
before this round (said in its test), or one that held and is kept so it keeps holding."""

import json
import os
from pathlib import Path

import pytest
import yaml
from routeforge.artifacts.deciding.dispatch import LiveState
from routeforge.core.config.base import plain_name
from routeforge.core.storage import Quarantine
from routeforge.pipelines.recovery import HOST_TAG, PID_START_TAG, PID_TAG, process_alive, process_tags
from routeforge.prompts.traffic_logs import UNAUTHENTICATED, parse_line, read_traffic_logs

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("pid, start", [("abc", "1.0"), ("12", "nan"), ("-1", "1.0"), (str(2**70), "1.0"),
                                        ("12", "inf"), ("12", "x")])
def test_run_tags_that_are_not_ours_are_not_judged(pid, start):
    """Got through: a run tagged `routeforge/pid: abc` (by hand, or by another tool) made `recover`
    raise ValueError at the start of every later `pipelines.run`, so no run could start."""
    assert process_alive({**process_tags(), PID_TAG: pid, PID_START_TAG: start}) is None


def test_this_process_is_alive_and_another_hosts_is_not_judged():
    assert process_alive(process_tags()) is True
    assert process_alive({**process_tags(), HOST_TAG: "elsewhere"}) is None


@pytest.mark.parametrize("metrics, message", [
    ("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc NaN\n", "kv_usage"),
    ("vllm:num_requests_running -3\nvllm:num_requests_waiting 0\n", "LiveState.running"),
    ("vllm:num_requests_running +Inf\nvllm:num_requests_waiting 0\n", "LiveState.running"),
    ("vllm:num_requests_running 1\n", "no vllm:num_requests_waiting"),
    ("<html>502 Bad Gateway</html>", "not a vLLM server's metrics"),
])
def test_a_dispatcher_refuses_live_state_it_cannot_trust(metrics, message):
    """Got through: a NaN KV-cache gauge (a server mid-restart) read as a full cache, 1.0, silently."""
    with pytest.raises(ValueError, match=message):
        LiveState.from_vllm_metrics(metrics)


def test_a_full_cache_over_one_is_clamped_not_refused():
    assert LiveState.from_vllm_metrics("vllm:num_requests_running 2\nvllm:num_requests_waiting 1\n"
                                       "vllm:gpu_cache_usage_perc 1.00001\n").kv_usage == 1.0


def _line(**extra):
    return {"timestamp": 1, "request": {"prompt": "hi"}, "outcome": 1,
            "response": {"model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}, **extra}


@pytest.mark.parametrize("extra, source", [
    ({"auth": {"client_id": "x" * 10_000_000}}, "auth:" + "x" * 200),  # a 10 MB id is cut, not kept per line
    ({"auth": {"client_id": ["a", "b"]}}, UNAUTHENTICATED),  # not an id
    ({"auth": {"client_id": True}}, UNAUTHENTICATED),
    ({"auth": {"client_id": 42}}, "auth:42"),
    # issue 61, item 7: fields the caller sets itself were sources, so 600 lines with 600 invented
    # users each weighed as a client of their own; now they are all the one unauthenticated source
    ({"client": "end-user-7"}, UNAUTHENTICATED),
    ({"metadata": {"api_key_id": 42, "user": "u"}}, UNAUTHENTICATED),
    ({"request": {"prompt": "hi", "user": "end-user-7"}}, UNAUTHENTICATED),
])
def test_an_outcome_source_is_the_gateways_authenticated_id_or_the_one_unauthenticated_source(extra, source):
    assert parse_line(_line(**extra), "l:1").source == source


def test_the_authenticated_source_field_is_the_fleets_to_name():
    line = _line(gateway={"key": "team-a"}, auth={"client_id": "spoofed"})
    assert parse_line(line, "l:1", source_field="gateway.key").source == "auth:team-a"


def test_one_client_repeating_a_line_cannot_fill_the_quarantine_or_the_reader(tmp_path):
    """5,000 identical lines read as 5,000 requests (the replay counts them once, tested with the
    router); a hostile `outcome` on each is quarantined with its field named, and reading goes on."""
    path = tmp_path / "t.jsonl"
    lines = [_line(client="c")] * 5000 + [_line(outcome={"score": "1e999"})]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    quarantine = Quarantine("t")
    assert sum(1 for _ in read_traffic_logs(str(path), quarantine)) == 5000
    assert len(quarantine) == 1 and "outcome.score" in quarantine.rows[0]["reason"]


@pytest.mark.parametrize("name", ["../evil", "a/../b", "model\nname", "x" * 129, "/abs", "", "a b", "-flag"])
def test_names_that_become_paths_or_flags_are_refused(name):
    with pytest.raises(ValueError, match="is not a plain name"):
        plain_name(name)


def test_a_registered_model_name_is_a_plain_name(config_copy):
    from routeforge.core.config import ConfigError, load_fleet

    path = config_copy("demo", registry={"tracking_uri": "sqlite:///x.db", "experiment": "e",
                                         "model_name": "../../other-team/router"})
    with pytest.raises(ConfigError, match="registry.model_name"):
        load_fleet(path)


# ---- issue 61: what a router service loads is exactly what was signed. Each test below failed before
# ---- the change that it names, and passes after it.

def _signed_bundle(tmp_path, files: dict[str, bytes] | None = None, name: str = "knn_estimator", provenance=None):
    """A signed bundle with one component (`files` relative to its folder), and its public key."""
    from routeforge.artifacts.bundle.manifest import Fleet, Lineage, ModelEntry
    from routeforge.artifacts.bundle.signing import generate_key_pair, sign_bundle
    from routeforge.artifacts.bundle.writer import ComponentSource, write_bundle

    source = tmp_path / "src" / name
    for rel, data in (files or {"index.bin": bytes(range(256)) * 4, "policy.json": b'{"k": 3}'}).items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_bytes(data)
    fleet = Fleet(name="t", models=[ModelEntry(name="a", engine="transformers", input_per_mtok=1.0,
                                               output_per_mtok=2.0)])
    root = tmp_path / "bundle"
    write_bundle(root, "router", fleet, [ComponentSource(name=name, kind="knn_estimator", format="test",
                                                         folder=source, metrics={})], Lineage(), "test",
                 provenance)
    private = tmp_path / "keys" / "k"
    public = generate_key_pair(private)
    sign_bundle(root, private)
    return root, public, private


def _resign(root, private, edit) -> None:
    """Edit the manifest (as a dict) and sign it again with the signing key: a bundle its owner signed."""
    from routeforge.artifacts.bundle.signing import sign_bundle

    raw = json.loads((root / "manifest.json").read_text())
    edit(raw)
    (root / "manifest.json").write_text(json.dumps(raw, indent=2))
    sign_bundle(root, private)


def test_the_manifest_is_read_once_and_parsed_from_the_bytes_whose_signature_was_checked(tmp_path, monkeypatch):
    """Got through: `verify_bundle` parsed manifest.json, then read it again to check the signature;
    a swap between the two reads returned an unsigned manifest (87 of 286 loads in 50 s)."""
    from routeforge.artifacts.bundle import verification

    root, public, _ = _signed_bundle(tmp_path)
    reads = []
    real = verification.read_plain

    def counting(path, limit):
        reads.append(path.name)
        return real(path, limit)

    monkeypatch.setattr(verification, "read_plain", counting)
    verification.verify_bundle(root, public)
    assert reads.count("manifest.json") == 1 and reads.count("manifest.sig") == 1


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw["components"][0].update(name="../../x"), "not a plain name"),
    (lambda raw: raw["components"][0]["files"][0].update(path="/etc/hostname"), "absolute"),
    (lambda raw: raw["components"][0]["files"][0].update(path="other/index.bin"), "outside its component"),
])
def test_a_signed_manifest_naming_paths_outside_the_bundle_is_refused(tmp_path, edit, message):
    """Got through: a component *named* `../../x` loaded files outside the bundle in both runtimes.
    Even signed by the owner's key, such a manifest is refused before any file is read."""
    from routeforge.artifacts.bundle.verification import BundleVerificationError, verify_bundle

    root, public, private = _signed_bundle(tmp_path)
    _resign(root, private, edit)
    with pytest.raises(BundleVerificationError, match=message):
        verify_bundle(root, public)


def test_filling_shared_components_deletes_nothing_outside_the_bundle(tmp_path):
    """Got through: `shared_components.fill()` acted on the paths of a manifest it had not verified and
    `link_files` removed what was at each path first: a component listing an absolute path deleted
    that file during `bundle verify`."""
    import hashlib

    from routeforge.artifacts.bundle import shared_components
    from routeforge.artifacts.bundle.manifest import Component

    victim = tmp_path / "victim.pem"
    victim.write_bytes(b"a public key with a predictable hash")
    root, _, private = _signed_bundle(tmp_path)
    digest = hashlib.sha256(victim.read_bytes()).hexdigest()

    def point_at_victim(raw):
        raw["components"][0]["files"] = [{"path": str(victim), "sha256": digest, "bytes": victim.stat().st_size}]

    _resign(root, private, point_at_victim)
    component = Component.from_dict(json.loads((root / "manifest.json").read_text())["components"][0])
    refs = {"format": 1, "store": str(tmp_path / "store"),
            "components": {component.name: shared_components.component_digest(component)}}
    with pytest.raises(ValueError, match="refused before any file was linked"):
        shared_components.fill(root, refs, tmp_path / "cache")
    with pytest.raises(ValueError, match="not a path inside the bundle"):
        shared_components.link_files([str(victim)], tmp_path / "src", root)
    assert victim.read_bytes() == b"a public key with a predictable hash"


def test_a_link_in_a_component_folder_cannot_lead_a_link_outside(tmp_path):
    from routeforge.artifacts.bundle import shared_components

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "index.bin").write_bytes(b"keep me")
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "comp").symlink_to(outside, target_is_directory=True)
    (tmp_path / "src" / "comp").mkdir(parents=True)
    (tmp_path / "src" / "comp" / "index.bin").write_bytes(b"new")
    with pytest.raises(ValueError, match="leads outside"):
        shared_components.link_files(["comp/index.bin"], tmp_path / "src", dst)
    assert (outside / "index.bin").read_bytes() == b"keep me"


@pytest.mark.parametrize("attack", ["manifest link", "component folder link", "fifo"])
def test_links_and_special_files_in_a_bundle_are_refused(tmp_path, attack):
    """Held for a linked file already; now also a linked manifest.json, a linked component folder and
    a named pipe (which blocked a read forever)."""
    import os
    import shutil

    from routeforge.artifacts.bundle.verification import BundleVerificationError, verify_bundle

    root, public, _ = _signed_bundle(tmp_path)
    if attack == "manifest link":
        (tmp_path / "real.json").write_bytes((root / "manifest.json").read_bytes())
        (root / "manifest.json").unlink()
        (root / "manifest.json").symlink_to(tmp_path / "real.json")
        expected = "not a plain file"
    elif attack == "component folder link":
        shutil.move(str(root / "knn_estimator"), str(tmp_path / "elsewhere"))
        (root / "knn_estimator").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
        expected = "a symbolic link"
    else:
        os.mkfifo(root / "knn_estimator" / "pipe")
        expected = "special file"
    with pytest.raises(BundleVerificationError, match=expected):
        verify_bundle(root, public)


@pytest.mark.parametrize("tamper, message", [
    (lambda doc: doc.update(signature=doc["signature"] + "AAAA"), "malformed"),  # trailing base64
    (lambda doc: doc.update(signature=doc["signature"].rstrip("=")), "malformed"),
    (lambda doc: doc.update(signature=7), "malformed"),
])
def test_a_signature_with_trailing_or_non_canonical_base64_is_refused(tmp_path, tamper, message):
    from routeforge.artifacts.bundle.verification import BundleVerificationError, verify_bundle

    root, public, _ = _signed_bundle(tmp_path)
    doc = json.loads((root / "manifest.sig").read_text())
    tamper(doc)
    (root / "manifest.sig").write_text(json.dumps(doc))
    with pytest.raises(BundleVerificationError, match=message):
        verify_bundle(root, public)


@pytest.mark.parametrize("version", ["abc", None, "1", "1.0.0", 1.0])
def test_a_signed_schema_version_that_is_not_a_version_is_refused(tmp_path, version):
    from routeforge.artifacts.bundle.verification import BundleVerificationError, verify_bundle

    root, public, private = _signed_bundle(tmp_path)
    _resign(root, private, lambda raw: raw.update(schema_version=version) if version is not None
            else raw.pop("schema_version"))
    with pytest.raises(BundleVerificationError, match="schema_version"):
        verify_bundle(root, public)


def test_the_code_isolation_setting_is_signed_inside_the_manifest(tmp_path):
    """Issue 61, item 10. Before: whether pass@1 labels could come from code run unconfined was a tag
    on the registry version, which anyone who can write the store can change. Now it is a claim in the
    manifest (schema 1.1, `provenance`), covered by the signature; a 1.0-only loader refuses a 1.1
    manifest at its schema, naming the field it does not know, and this loader refuses a newer minor."""
    import jsonschema
    from routeforge.artifacts.bundle.manifest import Provenance
    from routeforge.artifacts.bundle.verification import BundleVerificationError, _schema, verify_bundle

    root, public, private = _signed_bundle(tmp_path, provenance=Provenance(code_isolation="allow_fallback"))
    manifest = verify_bundle(root, public)
    assert manifest.schema_version == "1.1" and manifest.provenance.code_isolation == "allow_fallback"
    raw = json.loads((root / "manifest.json").read_text())
    raw["provenance"]["code_isolation"] = "required"  # claimed after signing: the signature says no
    (root / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(BundleVerificationError, match="bad signature"):
        verify_bundle(root, public)
    older = _schema()
    older = {**older, "properties": {k: v for k, v in older["properties"].items() if k != "provenance"}}
    with pytest.raises(jsonschema.ValidationError, match="provenance"):
        jsonschema.validate(raw, older)  # what a 1.0 loader (schema without `provenance`) does with it


def test_a_component_changed_after_verification_is_refused_when_it_is_loaded(tmp_path):
    """Got through: components load lazily after verification and were never checked again; a cached
    `policy.json` edited after `load_bundle` changed the routing policy served."""
    from routeforge.artifacts.bundle.loader import load_bundle
    from routeforge.artifacts.bundle.verification import BundleVerificationError

    root, public, _ = _signed_bundle(tmp_path)
    bundle = load_bundle(root, public_key=public)
    (root / "knn_estimator" / "policy.json").write_bytes(b'{"k": 999}')
    with pytest.raises(BundleVerificationError, match="changed after it was verified"):
        bundle.component("knn_estimator")


def test_a_poisoned_cache_index_is_ignored_and_nothing_outside_the_cache_is_removed(tmp_path):
    """Got through: an index entry naming any folder with a manifest.json got that folder rmtree'd
    when its verification failed."""
    from routeforge.artifacts.bundle.bundle_cache import BundleCache

    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "manifest.json").write_text("{}")
    cache = BundleCache(tmp_path / "cache")
    index = cache._index("sqlite:///x.db", "m", "1")
    index.parent.mkdir(parents=True)
    index.write_text("../../../precious")
    assert cache.lookup("sqlite:///x.db", "m", "1") is None
    cache.forget(victim)
    cache.forget(tmp_path / "cache" / "by-digest" / ".." / ".." / "precious")
    assert (victim / "manifest.json").is_file()


def test_a_read_only_cache_is_read_as_it_is(tmp_path, monkeypatch):
    """Got through: a read-only cache (a pre-warmed one shipped in a container image) failed every load
    with `Read-only file system` (touching the entry it had just found)."""
    import errno
    import os

    from routeforge.artifacts.bundle.bundle_cache import BundleCache

    cache = BundleCache(tmp_path / "cache")
    entry = tmp_path / "cache" / "by-digest" / ("a" * 64)
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text("{}")
    index = cache._index("sqlite:///x.db", "m", "1")
    index.parent.mkdir(parents=True)
    index.write_text("a" * 64)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "utime", read_only)
    assert cache.lookup("sqlite:///x.db", "m", "1") == entry
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    assert not cache.writable()


@pytest.mark.parametrize("flag", [["--budget-per-1k", "nan"], ["--lam", "nan"], ["--lam", "-1e308"],
                                  ["--max-share", "a=nan"], ["--min-quality", "nan"], ["--max-share", "a=2"]])
def test_non_finite_budgets_shares_qualities_and_lambdas_are_refused_naming_the_flag(tmp_path, flag):
    """Got through: `--budget-per-1k nan` read as no budget and reported as met; `--max-share m=nan`,
    `--min-quality nan`, `--lam nan` and `-1e308` were accepted and routed."""
    from click.testing import CliRunner
    from routeforge.artifacts.cli.commands import main

    result = CliRunner().invoke(main, ["bundle", "predict", str(tmp_path / "no-bundle"), "hi", *flag])
    assert result.exit_code == 2 and flag[0] in result.output, result.output


def test_route_refuses_non_finite_numbers_from_python_callers(tmp_path):
    from routeforge.artifacts.bundle.loader import RouterBundle
    from routeforge.artifacts.bundle.verification import read_manifest

    root, _, _ = _signed_bundle(tmp_path)
    bundle = RouterBundle(root, read_manifest(root))
    for kwargs in ({"lam": float("nan")}, {"lam": -1.0}, {"budget_per_1k": float("inf")},
                   {"max_share": {"a": float("nan")}}, {"min_quality": float("nan")}):
        with pytest.raises(ValueError, match="finite|negative"):
            bundle.route(["hi"], **kwargs)


def test_one_logged_line_cannot_steer_an_off_policy_estimate():
    """Got through: one line with propensity 1e-300 made the DR estimate 1.5e298 with an unbounded
    interval, so the release gate's replay check could never hold a worse challenger."""
    import numpy as np
    from routeforge.artifacts.operating.off_policy import PROPENSITY_FLOOR, difference, estimate

    rng = np.random.default_rng(0)
    n, m = 400, 3
    actions = rng.integers(0, m, n)
    propensities = np.full(n, 1 / m)
    rewards = rng.random(n)
    target = np.eye(m)[rng.integers(0, m, n)]
    q_hat = np.full((n, m), 0.5)
    propensities[7], rewards[7], target[7] = 1e-300, 1.0, np.eye(m)[actions[7]]
    found = estimate(actions, propensities, rewards, target, q_hat)
    assert all(e.below_floor == 1 and 0 <= e.value <= 1 and np.isfinite(e.high) for e in found.values())
    paired = difference(actions, propensities, rewards, target, np.eye(m)[actions], q_hat, q_hat)
    assert paired.below_floor == 1 and abs(paired.value) <= 1 and PROPENSITY_FLOOR == 1e-3


def test_two_identical_lines_give_the_outcome_range_not_a_zero_width_interval():
    """Got through: two identical lines gave a zero-width interval from an effective sample of 0."""
    import numpy as np
    from routeforge.artifacts.operating.off_policy import estimate

    found = estimate([0, 0], [0.5, 0.5], [0.2, 0.9], np.array([[0.0, 1.0], [0.0, 1.0]]))
    assert all(e.thin and e.high - e.low >= 0.7 - 1e-9 for e in found.values())


def test_an_ips_estimate_above_the_outcome_range_is_flagged():
    """Got through: IPS above 1 on outcomes in [0, 1] passed silently."""
    import numpy as np
    from routeforge.artifacts.operating.off_policy import estimate

    n = 50
    found = estimate(np.zeros(n, dtype=int), np.full(n, 0.2), np.ones(n), np.tile([1.0, 0.0], (n, 1)))
    assert found["ips"].value > 1 and found["ips"].outside_range and not found["snips"].outside_range


# ---- issue 61, item 4: the same hostile bundles, refused by both runtimes (artifacts/bundle/loader.py and
# ---- runtimes/typescript/src/bundle.ts)

def _tamper_signature(edit):
    def apply(root, private):
        doc = json.loads((root / "manifest.sig").read_text())
        edit(doc)
        (root / "manifest.sig").write_text(json.dumps(doc))
    return apply


def _manifest_link(root, private):
    (root.parent / "real.json").write_bytes((root / "manifest.json").read_bytes())
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to(root.parent / "real.json")


def _component_link(root, private):
    import shutil

    shutil.move(str(root / "knn_estimator"), str(root.parent / "elsewhere"))
    (root / "knn_estimator").symlink_to(root.parent / "elsewhere", target_is_directory=True)


def _fifo(root, private):
    import os

    os.mkfifo(root / "knn_estimator" / "pipe")


HOSTILE_BUNDLES = {
    "a linked manifest.json": _manifest_link,
    "a linked component folder": _component_link,
    "a named pipe": _fifo,
    "trailing base64 in the signature": _tamper_signature(lambda d: d.update(signature=d["signature"] + "AAAA")),
    "non-canonical base64": _tamper_signature(lambda d: d.update(signature=d["signature"].rstrip("="))),
    "schema_version abc": lambda root, private: _resign(root, private, lambda r: r.update(schema_version="abc")),
    "no schema_version": lambda root, private: _resign(root, private, lambda r: r.pop("schema_version")),
    "schema_version 2.0": lambda root, private: _resign(root, private, lambda r: r.update(schema_version="2.0")),
    # a newer minor may carry signed claims a reader cannot honour (issue 61, item 10): refused, not ignored
    "schema_version 1.2": lambda root, private: _resign(root, private, lambda r: r.update(schema_version="1.2")),
    "a component named ../../x": lambda root, private: _resign(
        root, private, lambda r: r["components"][0].update(name="../../x")),
    "an absolute file path": lambda root, private: _resign(
        root, private, lambda r: r["components"][0]["files"][0].update(path="/etc/hostname")),
    "a file outside its component": lambda root, private: _resign(
        root, private, lambda r: r["components"][0]["files"][0].update(path="other/index.bin")),
    "a changed file": lambda root, private: (root / "knn_estimator" / "index.bin").write_bytes(b"changed"),
}


def _typescript_verdict(root, public) -> tuple[bool, str]:
    """(accepted, what the TypeScript runtime said) for the bundle at `root`."""
    import shutil
    import subprocess
    from pathlib import Path

    runtime = Path(__file__).resolve().parent.parent / "runtimes" / "typescript" / "dist" / "bundle.js"
    node = shutil.which("node")
    if node is None or not runtime.is_file():
        pytest.skip("the TypeScript runtime is not built (Node.js and `make ts-runtime`): its half is not run")
    script = ("const {Bundle} = require(process.argv[1]); const fs = require('fs');"
              "try { Bundle.open(process.argv[2], fs.readFileSync(process.argv[3], 'utf8')); console.log('OK'); }"
              "catch (e) { console.log('REFUSED ' + e.message); }")
    run = subprocess.run([node, "-e", script, str(runtime), str(root), str(public)], capture_output=True, text=True,
                         timeout=60)
    return run.stdout.startswith("OK"), run.stdout + run.stderr


@pytest.mark.parametrize("case", sorted(HOSTILE_BUNDLES))
def test_both_runtimes_refuse_the_same_hostile_bundles(tmp_path, case):
    """Got through the TypeScript runtime: a linked component folder and a linked manifest.json, a
    signature with trailing base64, a signed schema_version of "abc" or none, and (both runtimes)
    files outside the bundle through a component named `../../x`."""
    from routeforge.artifacts.bundle.verification import BundleVerificationError, verify_bundle

    root, public, private = _signed_bundle(tmp_path)
    assert _typescript_verdict(root, public)[0]  # the untouched bundle loads there
    HOSTILE_BUNDLES[case](root, private)
    with pytest.raises(BundleVerificationError):
        verify_bundle(root, public)
    accepted, said = _typescript_verdict(root, public)
    assert not accepted and said.startswith("REFUSED"), said


def test_replay_reads_logs_as_the_pipeline_does_and_one_line_cannot_stop_or_flood_it(tmp_path, monkeypatch):
    """Got through: one nested-JSON bomb or lone surrogate aborted `bundle replay` and `bundle
    calibrate` (the pipeline's reader quarantines the same line); 10^6 copies of one request weighed
    10^6 times with no progress shown; one 50 MB line was held whole (7.5 GB)."""
    from routeforge.artifacts.operating import traffic_prompts
    from routeforge.artifacts.operating.replay import read_logged_decisions
    from routeforge.artifacts.operating.traffic_prompts import logged_prompts

    good = {"timestamp": 1, "request": {"prompt": "hi"}, "outcome": 1, "routing": {"propensity": 0.5},
            "response": {"model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}}
    lines = [json.dumps(good)] * 5 + ["[" * 2000 + "]" * 2000, '{"request": {"prompt": "\\ud800"}}',
                                      json.dumps({**good, "request": {"prompt": "x" * 5000}}),
                                      json.dumps({**good, "request": {"prompt": "other"}})]
    log = tmp_path / "t.jsonl"
    log.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(traffic_prompts, "MAX_LINE_BYTES", 4096)
    seen = []
    found = read_logged_decisions(log, progress=seen.append, every=2)
    assert found.texts == ["hi", "other"]  # the repeats count once
    reasons = " | ".join(found.skipped)
    assert found.skipped["a repeat of an earlier request (same id or time, prompt, model and outcome: counted once)"] == 4
    assert "nested too deeply" in reasons and "lone surrogate" in reasons and "longer than 4,096 bytes" in reasons
    assert seen == [2, 4, 6, 8]
    assert logged_prompts(log) == ["hi"] * 5 + ["other"]  # calibrate's reader skips the same lines


# ---- issue 61, item 11: the surfaces this pass added (key rotation, the keyring, outcome sources)

def test_a_stray_file_among_retired_keys_is_said_and_not_trusted(tmp_path, capsys):
    from routeforge.artifacts.bundle.signing import generate_key_pair, key_for, rotate_key, trusted_keys

    private = tmp_path / "keys" / "k"
    generate_key_pair(private)
    retired, public = rotate_key(private)
    (public.parent / "retired" / "notes.pub").write_text("not a key")
    keys = trusted_keys(public)
    assert len(keys) == 2 and keys[retired[0]].name == f"{retired[0]}.pub" and public in keys.values()
    assert "notes.pub: not a PEM public key" in capsys.readouterr().err
    # a version tag naming a key id nobody trusts falls back to the current key, which then names the mismatch
    assert key_for(public, "0123456789abcdef") == public


def test_a_rotation_given_something_that_is_not_a_public_key_keeps_the_current_key(tmp_path):
    from click.testing import CliRunner
    from routeforge.artifacts.bundle.signing import generate_key_pair
    from routeforge.artifacts.cli.commands import main

    private = tmp_path / "keys" / "k"
    generate_key_pair(private)
    before = private.read_bytes()
    (tmp_path / "junk.pub").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    result = CliRunner().invoke(main, ["keys", "rotate", str(private), "--retire-public", str(private)])
    assert result.exit_code == 1 and "not a PEM public key" in result.output  # a private key is not retired
    result = CliRunner().invoke(main, ["keys", "rotate", str(private), "--retire-public", str(tmp_path / "junk.pub")])
    assert result.exit_code == 1 and "junk.pub" in result.output
    assert private.read_bytes() == before  # nothing was deleted on the way to the error


@pytest.mark.parametrize("field", ["../etc", "auth..id", "", "auth.", "a b"])
def test_an_outcome_source_field_that_is_not_a_dotted_name_is_refused(field):
    from pydantic import ValidationError
    from routeforge.core.config.training import OutcomeSettings

    assert OutcomeSettings(source_field="gateway.key-id").source_field == "gateway.key-id"
    with pytest.raises(ValidationError, match="source_field"):
        OutcomeSettings(source_field=field)


# ---- issue 71, item 5: fleet files that cannot hang validate or carry numbers no run can use. Each
# ---- case got through `config validate` before (the alias bomb hung it past 90 s at 730 MB).

def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    import time

    from routeforge.core.config import ConfigError, load_fleet

    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(levels) + "\nname: bomb\n")
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"bomb.yaml: its YAML aliases \(\*name\) expand to more than 100,000"):
        load_fleet(path)
    assert time.monotonic() - started < 5


def test_a_fleet_file_past_its_size_limit_or_not_a_file_is_refused(tmp_path):
    from routeforge.core.config import ConfigError, load_fleet

    big = tmp_path / "big.yaml"
    big.write_text("name: big\n" + "# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="more than a fleet file may hold"):
        load_fleet(big)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_fleet("/dev/zero")


@pytest.mark.parametrize("overrides, field", [
    ({"loads": [float("nan")]}, "loads"), ({"loads": [-1.0]}, "loads"), ({"loads": [1e308]}, "loads"),
    ({"requests": 10**9}, "requests"), ({"seeds": 10**6}, "seeds"), ({"train_load": float("inf")}, "train_load"),
    ({"qos_latency_per_token_s": float("nan")}, "qos_latency_per_token_s"),
    ({"kv_capacity_tokens": 10**18}, "kv_capacity_tokens"), ({"trace": "/dev/zero"}, "trace"),
])
def test_numbers_no_run_can_use_and_device_paths_are_refused_naming_the_field(config_copy, overrides, field):
    from routeforge.core.config import ConfigError, load_fleet

    training = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text()).get("training", {})
    evaluation = {**training.get("routing_evaluation", {}), "enabled": True, **overrides}
    path = config_copy("demo", training={**training, "routing_evaluation": evaluation})
    with pytest.raises(ConfigError, match=f"routing_evaluation.{field}"):
        load_fleet(path)


def test_an_infinite_price_is_refused(config_copy):
    from routeforge.core.config import ConfigError, load_fleet

    models = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())["models"]
    models[0]["price"] = {**(models[0].get("price") or {"input_per_mtok": 1.0}), "output_per_mtok": float("inf")}
    with pytest.raises(ConfigError, match="output_per_mtok"):
        load_fleet(config_copy("demo", models=models))


# ---- issue 71, item 6: replay that one log writer cannot steer

def test_near_identical_lines_and_one_prompt_at_a_tiny_propensity_cannot_steer_a_replay():
    """Got through: 5,000 near-identical lines (an extra `nonce` field each) with propensity 0.01
    passed deduplication and moved SNIPS from 0.54 to 0.9997, unflagged. Now a repeat is the same
    request whatever its other fields, and no prompt holds more than 5% of the estimate's weight."""
    import numpy as np
    from routeforge.artifacts.operating.off_policy import estimate
    from routeforge.artifacts.operating.replay import LoggedDecisions, cap_shares

    honest = LoggedDecisions(texts=[f"q{i}" for i in range(300)], served=["a"] * 300, propensity=[0.5] * 300,
                             outcome=[float(i % 2) for i in range(300)], rows=[f"l:{i}" for i in range(300)])
    flood = LoggedDecisions(texts=["steer"] * 5000, served=["a"] * 5000, propensity=[0.01] * 5000,
                            outcome=[1.0] * 5000, rows=[f"f:{i}" for i in range(5000)])
    both = LoggedDecisions(*(a + b for a, b in zip((honest.texts, honest.served, honest.propensity, honest.outcome,
                                                    honest.rows), (flood.texts, flood.served, flood.propensity,
                                                                   flood.outcome, flood.rows))))

    def snips(d):
        n = len(d)
        probabilities = np.ones((n, 1))
        return estimate(np.zeros(n, dtype=int), np.asarray(d.propensity), np.asarray(d.outcome), probabilities,
                        np.zeros((n, 1)), 0.95)["snips"].value

    assert snips(honest) == pytest.approx(0.5) and snips(both) > 0.99  # what one writer could do before
    capped = cap_shares(both)
    assert abs(snips(capped) - 0.5) <= 0.05 + 1e-9
    assert any(flag.startswith("prompt 'steer'") for flag in capped.flags)
    assert capped.skipped["left out by the share caps (flags say which)"] > 4900
    assert both.flags == [] and not both.skipped  # the caller's decisions are left as read


def test_replay_encodes_each_distinct_prompt_once(tmp_path):
    """Got through: 10^5 lines of 36 distinct prompts did not finish in 600 s (every line encoded again)."""
    from routeforge.artifacts.operating.replay import LoggedDecisions, policy_on_log

    class Counting:
        models = ["a", "b"]

        def __init__(self):
            self.routed = 0

        def route(self, texts, lam):
            import numpy as np
            from routeforge.artifacts.bundle.loader import Routing

            self.routed += len(texts)
            prediction = type("P", (), {"quality": np.full((len(texts), 2), 0.5), "models": ["a", "b"]})()
            return Routing(prediction, ["a"] * len(texts), "router")

    n = 100_000
    decisions = LoggedDecisions(texts=[f"p{i % 36}" for i in range(n)], served=["a"] * n, propensity=[0.5] * n,
                                outcome=[1.0] * n, rows=[str(i) for i in range(n)])
    bundle = Counting()
    on_log = policy_on_log(bundle, decisions, ["a", "b"])
    assert bundle.routed == 36 and on_log.probabilities.shape == (n, 2) and on_log.agreement == 1.0


def test_temporary_folders_of_killed_processes_are_swept_and_no_other(tmp_path):
    """Got through: runs killed mid-verification left `/tmp/routeforge-verify-*` folders behind."""
    import subprocess
    import sys

    from routeforge.artifacts.common import temporary

    child = subprocess.run([sys.executable, "-c", "import os, sys; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    dead = tmp_path / f"routeforge-verify-{child.stdout.strip()}-abc123"
    live = tmp_path / f"routeforge-verify-{os.getppid()}-abc123"
    mine = tmp_path / f"routeforge-verified-{os.getpid()}-abc123"
    other = tmp_path / "routeforge-notes"
    for folder in (dead, live, mine, other):
        (folder / "f").parent.mkdir(parents=True)
        (folder / "f").write_text("x")
    link = tmp_path / f"routeforge-bundle-{child.stdout.strip()}-linked"
    link.symlink_to(other)
    assert temporary.sweep(tmp_path) == [dead]
    assert all(p.exists() for p in (live, mine, other, link)) and not dead.exists()


def test_calibration_holds_each_logged_prompt_within_its_bound(tmp_path):
    """Got through: `bundle calibrate --logs` on 300 distinct 4 MB prompts (a 1.2 MB gzip) held 2.34 GB
    and did not finish in 300 s. Each prompt is now held to its two ends, which is all an encoder reads."""
    import gzip

    from routeforge.artifacts.operating.traffic_prompts import MAX_PROMPT_CHARS, logged_prompts

    path = tmp_path / "big.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(30):
            f.write(json.dumps({"request": {"prompt": f"head{i} " + "x" * 3_000_000 + f" tail{i}"}}) + "\n")
    prompts = logged_prompts(path)
    assert len(prompts) == 30 and all(len(p) <= MAX_PROMPT_CHARS + 1 for p in prompts)
    assert prompts[7].startswith("head7 ") and prompts[7].endswith(" tail7")


def test_a_trace_reader_holds_no_line_past_its_bound(tmp_path):
    """Got through: the trace readers held a line whole, however long (a trace at /dev/zero grew its
    reader to 1.9 GB in 25 s); a line past 1 MiB is now one quarantined row, and reading goes on."""
    from routeforge.core.storage import Quarantine
    from routeforge.training.policies.simulator.traces import MAX_ROW_BYTES, read_block_trace

    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": i, "input_length": 600, "output_length": 10, "hash_ids": [i, i + 1]} for i in range(3)]
    with path.open("w") as f:
        f.write(json.dumps(rows[0]) + "\n")
        f.write('{"timestamp": 1, "pad": "' + "x" * (3 * MAX_ROW_BYTES) + '"}\n')
        f.write(json.dumps(rows[2]) + "\n")
    quarantine = Quarantine("trace")
    trace = read_block_trace(path, quarantine=quarantine)
    assert len(trace) == 2 and len(quarantine) == 1
    assert f"longer than {MAX_ROW_BYTES:,} bytes" in quarantine.rows[0]["reason"]


def test_the_bundle_caches_scratch_of_a_killed_download_is_swept(tmp_path):
    import subprocess
    import sys

    from routeforge.artifacts.bundle.bundle_cache import BundleCache

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    dead = child.stdout.strip()
    cache = BundleCache(tmp_path / "cache")
    names = [f"{dead}-1", f"component-{dead}-2", f"bundle-{dead}-3", f"{os.getpid()}-4", f"{os.getppid()}-5", "notes"]
    for name in names:
        (cache.root / "scratch" / name).mkdir(parents=True)
    assert cache.sweep_scratch() == 3
    assert sorted(p.name for p in (cache.root / "scratch").iterdir()) == sorted(names[3:])
