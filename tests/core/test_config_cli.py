"""`routeforge config validate|schema`: the fleet file checked without running anything, and the
JSON Schema editors use, generated from the pydantic models and kept in sync with them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml
from click.testing import CliRunner
from routeforge.artifacts.cli.commands import main
from routeforge.fleet.cli import fleet_json_schema

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def test_committed_schema_is_current_and_accepts_every_shipped_fleet():
    committed = json.loads((CONFIGS / "fleet.schema.json").read_text())
    assert committed == json.loads(json.dumps(fleet_json_schema())), (
        "configs/fleet.schema.json is stale: run `routeforge config schema -o configs/fleet.schema.json`")
    validator = jsonschema.Draft202012Validator(committed)
    for name in ("demo", "routerbench", "dcrouter", "fleet.example"):
        text = (CONFIGS / f"{name}.yaml").read_text()
        assert text.startswith("# yaml-language-server: $schema=./fleet.schema.json")
        assert not list(validator.iter_errors(yaml.safe_load(text))), name
    # the schema catches what the loader would refuse
    bad = yaml.safe_load((CONFIGS / "demo.yaml").read_text()) | {"modles": []}
    assert any("modles" in e.message for e in validator.iter_errors(bad))


def test_validate_reports_ok_and_one_line_errors(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(main, ["config", "validate", str(CONFIGS / "demo.yaml")])
    assert ok.exit_code == 0 and ok.output.startswith(f"OK: {CONFIGS / 'demo.yaml'}: fleet demo, 3 models")

    resolved = runner.invoke(main, ["config", "validate", "--json", str(CONFIGS / "demo.yaml")])
    assert json.loads(resolved.output)["name"] == "demo"

    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "demo.yaml").read_text().replace("storage_root:", "storage_rot:", 1))
    for path in (bad, tmp_path / "missing.yaml"):
        result = subprocess.run([sys.executable, "-m", "routeforge.artifacts.cli", "config", "validate", str(path)],
                                capture_output=True, text=True, timeout=120, cwd=REPO)
        assert result.returncode == 1
        assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert "storage_rot" in subprocess.run(
        [sys.executable, "-m", "routeforge.artifacts.cli", "config", "validate", str(bad)],
        capture_output=True, text=True, timeout=120, cwd=REPO).stderr


def test_schema_command_writes_the_file(tmp_path):
    out = tmp_path / "fleet.schema.json"
    result = CliRunner().invoke(main, ["config", "schema", "-o", str(out)])
    assert result.exit_code == 0
    assert json.loads(out.read_text())["title"] == "FleetConfig"


def test_missing_input_files_malformed_yaml_and_run_errors_are_one_line(tmp_path):
    """`config validate` checks that every file the fleet names exists; YAML errors carry line and
    column; `pipelines.run` prints one line for any config error, not a traceback."""
    missing = tmp_path / "missing-data.yaml"
    raw = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    raw["datasets"][0]["path"] = str(tmp_path / "nope.jsonl")
    missing.write_text(yaml.safe_dump(raw))
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nmodels: [a, b\n  - c: d\n")
    expected = {missing: f"datasets.0.path: {tmp_path / 'nope.jsonl'} does not exist",
                broken: f"{broken}:3:6: not valid YAML: expected ',' or ']', but got ':'"}
    for path, message in expected.items():
        for command in (["-m", "routeforge.artifacts.cli", "config", "validate"], ["-m", "routeforge.pipelines.run"]):
            result = subprocess.run([sys.executable, *command, str(path)], capture_output=True, text=True,
                                    timeout=120, cwd=REPO)
            assert result.returncode in (1, 2), result.stderr
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, (command, lines)


def test_validate_warns_of_a_model_without_a_tier(config_copy):
    """A model added without a tier: the router may pick it, the simulator and policies do not know
    it; validate says so (and every run says it at its start)."""
    raw = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    path = config_copy("demo", tiers=[t for t in raw["tiers"] if t["model"] != raw["models"][0]["name"]])
    out = CliRunner().invoke(main, ["config", "validate", str(path)])
    assert out.exit_code == 0
    assert f"warning: models ['{raw['models'][0]['name']}'] have no tier" in out.output
    assert "have no tier" not in CliRunner().invoke(main, ["config", "validate", str(CONFIGS / "demo.yaml")]).output


def test_old_policy_keys_are_read_into_the_learned_map_with_a_note(config_copy):
    """Fleet files written before `learned` validate and run as they did: `ddqn`, `sac` (both SAC
    policies), `ppo` and `ppo_slot_s` land in the map, and validate names where each now is."""
    evaluation = {"enabled": True, "ddqn": {"episodes": 3}, "sac": {"total_steps": 90}, "ppo_slot_s": 0.25}
    path = config_copy("demo", training={"routing_evaluation": evaluation})
    out = CliRunner().invoke(main, ["config", "validate", str(path)])
    assert out.exit_code == 0, out.output
    assert "note: training.routing_evaluation.sac is now learned.sac_qos_han and learned.sac_qos_mlp" in out.output
    assert "note: training.routing_evaluation.ppo_slot_s is now learned.ppo_queue_bias.slot_s" in out.output
    resolved = json.loads(CliRunner().invoke(main, ["config", "validate", "--json", str(path)]).output)
    learned = resolved["training"]["routing_evaluation"]["learned"]
    assert learned["ddqn_workload_guided"]["episodes"] == 3 and learned["sac_qos_mlp"]["total_steps"] == 90
    assert learned["ppo_queue_bias"]["slot_s"] == 0.25 and learned["ppo_queue_bias"]["total_steps"] == 2048
    assert "note:" not in CliRunner().invoke(main, ["config", "validate", str(CONFIGS / "demo.yaml")]).output


def test_a_poor_tier_fit_is_named():
    from routeforge.profiling.fit_quality import fit_warnings

    assert fit_warnings("t@cpu", {"prefill_r2": 0.99, "decode_r2": 0.97, "prefill_intercept_s": 0.01}) == []
    lines = fit_warnings("t@cpu", {"prefill_r2": 0.05, "decode_r2": 0.9, "decode_w_s": -0.002})
    assert len(lines) == 2 and lines[0].startswith("t@cpu: decode_w_s -0.002 s is negative")
    assert lines[1].startswith("t@cpu: prefill_r2 0.050 is below 0.5")


def test_the_schema_describes_fields_from_the_models_comments_and_docs():
    """Editors show each field's words: its Field description, else the comment beside it in the
    config model, else the doc of the model it holds. Issue 62, item 7: every property has words (a
    new field without a comment fails here, named)."""
    from routeforge.core.config.field_docs import coverage, properties

    schema = fleet_json_schema()
    described, total = coverage(schema)
    bare = [name for name, prop in properties(schema) if not prop.get("description", "").strip()]
    assert bare == [] and described == total > 400, bare
    defs = schema["$defs"]
    assert "Every offered request counts" in defs["RoutingEvaluationSettings"]["properties"]["objective"]["description"]
    assert schema["properties"]["scoring"]["description"].startswith("`metric` scores every task")
    # each learned policy's settings, from its folder's settings model, described as the rest
    learned = defs["RoutingEvaluationSettings"]["properties"]["learned"]["properties"]
    assert set(learned) == {"ddqn_workload_guided", "ppo_queue_bias", "sac_qos_han", "sac_qos_mlp"}
    assert learned["ppo_queue_bias"]["properties"]["slot_s"]["description"].startswith("seconds between")


def test_validate_takes_several_files_and_names_a_misspelt_cross_reference(tmp_path):
    """Issue 62, item 2: `config validate configs/*.yaml` took one file; a misspelt tier model said
    `<root>: tiers.1.model: unknown model` with no suggestion. Now each file gets its line, the exit
    status says whether any failed, and the error suggests the model meant."""
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "demo.yaml").read_text().replace("{model: tiny-llama,", "{model: tiny-lama,", 1)
                   .replace("path: data/", f"path: {CONFIGS}/data/"))
    result = subprocess.run([sys.executable, "-m", "routeforge.artifacts.cli", "config", "validate",
                             str(CONFIGS / "demo.yaml"), str(bad)], capture_output=True, text=True, timeout=120,
                            cwd=REPO)
    assert result.returncode == 1 and result.stdout.startswith(f"OK: {CONFIGS / 'demo.yaml'}")
    assert result.stderr.strip().splitlines() == [
        f"error: fleet config {bad}: tiers.1.model: unknown model 'tiny-lama' (did you mean 'tiny-llama'?) "
        "(models: tiny-gpt2, tiny-llama, tiny-qwen2)"]
