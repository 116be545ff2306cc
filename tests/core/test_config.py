from pathlib import Path

import pytest
from routeforge.core.config import ConfigError, load_fleet

from tests.conftest import CONFIGS


def test_shipped_configs_load(state_dir, shared_data, monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    demo = load_fleet(CONFIGS / "demo.yaml")
    assert demo.model_names == ["tiny-gpt2", "tiny-llama", "tiny-qwen2"]
    assert demo.storage_root == (state_dir / "demo").resolve()
    assert demo.registry.tracking_uri == f"sqlite:///{(state_dir / 'mlflow.db').resolve()}"
    assert demo.datasets[0].path == CONFIGS / "data" / "demo_prompts.jsonl"
    assert [t.name for t in demo.tiers] == ["tiny-gpt2@cpu", "tiny-llama@cpu", "tiny-qwen2@cpu"]

    rb = load_fleet(CONFIGS / "routerbench.yaml")
    assert len(rb.models) == 11
    assert all(p.exists() for paths in rb.datasets[0].files.values() for p in paths)
    assert rb.datasets[0].files["test"][0].parent.resolve() == (shared_data / "responses").resolve()


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"models": [{"name": "m", "engine": "vllm_typo", "source": {"kind": "hub", "id": "x"}}]}, "models.0.engine"),
        ({"generation": {"sampling": {"max_tokens": 0}}}, "generation.sampling.max_tokens"),
        ({"generation": {"max_tokens": 5}}, "generation.max_tokens"),
        ({"models": [{"name": "m", "engine": "openai", "source": {"kind": "hub", "id": "x"}}]}, "models.0"),
        ({"datasets": [{"kind": "builtin", "name": "x", "reader": "nope", "path": "x"}]}, "datasets.0.builtin.reader"),
        ({"prompts": {"max_prompt_tokens": -1}}, "prompts.max_prompt_tokens"),
        ({"tiers": [{"model": "nope", "hardware": "cpu"}]}, "tiers.0.model"),
        ({"templates": {"default": "no placeholder"}}, "templates.default"),
        ({"scoring": {"metric": "table_correctness"}}, "scoring.metric"),
        ({"owners": {"training": ["ml platform"]}}, "owners.training.0"),
        ({"training": {"routing_evaluation": {"workloads": ["traffic"]}}}, "training.routing_evaluation.traffic_logs"),
        ({"training": {"routing_evaluation": {"policies": ["join_shortest_queu"]}}},
         "training.routing_evaluation.policies.0"),
    ],
)
def test_bad_config_names_the_field(config_copy, override, field):
    path = config_copy("demo", **override)
    with pytest.raises(ConfigError) as err:
        load_fleet(path)
    assert field in str(err.value)
    assert str(path) in str(err.value)


def test_a_misspelt_routing_policy_is_refused_at_validate_with_the_close_name(config_copy):
    path = config_copy("demo", training={"routing_evaluation": {"policies": ["join_shortest_queu", "ppo_queue_bias"]}})
    with pytest.raises(ConfigError, match=r"unknown routing policy 'join_shortest_queu' \(did you mean "
                                          r"'join_shortest_queue'\?\); known: .*ppo_queue_bias"):
        load_fleet(path)


def test_table_model_needs_a_table_that_holds_responses(config_copy):
    models = [{"name": "gpt", "engine": "table_import", "source": {"kind": "table", "dataset": "demo"}}]
    with pytest.raises(ConfigError, match="models.0.source.file: dataset 'demo' .* holds no responses"):
        load_fleet(config_copy("demo", models=models, tiers=[], scoring={"metric": "table_correctness"}))
    models[0]["source"]["dataset"] = "nope"
    with pytest.raises(ConfigError, match="models.0.source.dataset: no dataset named 'nope'"):
        load_fleet(config_copy("demo", models=models, tiers=[], scoring={"metric": "table_correctness"}))


def test_env_default_and_override(config_copy, monkeypatch, tmp_path):
    monkeypatch.delenv("ROUTEFORGE_STATE", raising=False)
    (tmp_path / "elsewhere-run").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere-run")
    path = tmp_path / "copied-demo.yaml"  # a plain copy: unset, the state folder is ./.state where the run starts
    path.write_text((CONFIGS / "demo.yaml").read_text())
    (tmp_path / "data").symlink_to(CONFIGS / "data")
    assert load_fleet(path).storage_root == tmp_path / "elsewhere-run" / ".state" / "demo"
    path = config_copy("demo")
    monkeypatch.setenv("ROUTEFORGE_STATE", str(tmp_path / "elsewhere"))
    assert load_fleet(path).storage_root == tmp_path / "elsewhere" / "demo"


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_fleet(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_fleet(bad)


def test_production_example_validates(state_dir, shared_data, monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    config = load_fleet(CONFIGS / "fleet.example.yaml")
    assert [m.engine for m in config.models] == ["vllm", "vllm", "openai"]
    assert config.tier_of("llama-3.1-70b-instruct").tensor_parallel_size == 4
    assert config.sampling("llama-3.1-70b-instruct").frequency_penalty == 1.2
    assert config.scoring.metric_for("mbpp") == "code_pass_at_1" and config.scoring.metric_for("x") == "bertscore"
    evaluation = config.training.routing_evaluation
    assert evaluation.enabled and evaluation.trace.is_absolute() and evaluation.trace.exists()


def test_signing_key_from_the_fleet_file_the_environment_or_the_state_folder(config_copy, monkeypatch, tmp_path):
    monkeypatch.delenv("ROUTEFORGE_SIGNING_KEY", raising=False)
    config = load_fleet(config_copy("demo"))
    assert config.signing_key_path() == (config.storage_root / "keys" / "bundle-signing.key", True)
    monkeypatch.setenv("ROUTEFORGE_SIGNING_KEY", str(tmp_path / "env.key"))
    assert config.signing_key_path() == (tmp_path / "env.key", False)  # configured: never created for you
    configured = load_fleet(config_copy("demo", registry={**config.registry.model_dump(mode="json"),
                                                          "signing_key": str(tmp_path / "fleet.key")}))
    assert configured.signing_key_path() == (tmp_path / "fleet.key", False)


def test_a_configured_signing_key_that_is_missing_is_named(tmp_path):
    from routeforge.assets.resources import MlflowRegistry

    registry = MlflowRegistry(tracking_uri="sqlite:///x.db", experiment="e", model_name="m",
                              signing_key=str(tmp_path / "nope.key"))
    with pytest.raises(FileNotFoundError, match="registry.signing_key / \\$ROUTEFORGE_SIGNING_KEY: no key at"):
        registry.signing_key_path()
    created = MlflowRegistry(tracking_uri="sqlite:///x.db", experiment="e", model_name="m",
                             signing_key=str(tmp_path / "keys" / "k.key"), create_signing_key=True)
    assert created.public_key_path() == tmp_path / "keys" / "k.key.pub" and created.public_key_path().is_file()


def test_production_example_declares_release_rules_and_sensors(state_dir, shared_data, monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    config = load_fleet(CONFIGS / "fleet.example.yaml")
    assert config.release.tolerance["router_quality"] == 0.005 and config.release.floors == {"router_quality": 0.5}
    assert [w.jobs for w in config.automation.watch] == [["build_prompts"]]
    assert config.automation.cron == "0 3 * * 1" and config.automation.on_fleet_change == ["build_prompts"]
    assert Path(config.automation.watch[0].uri).is_absolute()


def test_the_routing_evaluation_replays_the_fleets_traffic_logs(config_copy, tmp_path):
    """Traffic logs configured as a dataset are what the routing evaluation replays, unless it names
    its own or is told not to."""
    log = tmp_path / "traffic.jsonl"
    log.write_text("")
    demo = load_fleet(CONFIGS / "demo.yaml")
    datasets = [d.model_dump(mode="json") for d in demo.datasets] + [
        {"kind": "traffic_log", "name": "prod", "path": str(log)}]
    fleet = load_fleet(config_copy("demo", datasets=datasets))
    assert fleet.routing_traffic_logs() == str(log)
    own = tmp_path / "other.jsonl"
    training = {"routing_evaluation": {"enabled": True, "traffic_logs": str(own)}}
    assert load_fleet(config_copy("demo", datasets=datasets, training=training)).routing_traffic_logs() == str(own)
    training = {"routing_evaluation": {"enabled": True, "replay_traffic": False}}
    assert load_fleet(config_copy("demo", datasets=datasets, training=training)).routing_traffic_logs() is None
    assert load_fleet(CONFIGS / "demo.yaml").routing_traffic_logs() is None


@pytest.mark.parametrize("name", ["../../../../tmp/x/evil", "a\nb", "/abs", "sp ace", "a/../b", ""])
def test_model_and_hardware_names_are_plain_names(config_copy, name):
    """Issue 53, item 6: a name becomes file names, metric keys and bundle paths."""
    models = [{"name": name, "engine": "transformers", "source": {"kind": "hub", "id": "x"}}]
    with pytest.raises(ConfigError, match="models.0.name"):
        load_fleet(config_copy("demo", models=models, tiers=[]))
    with pytest.raises(ConfigError, match="hardware.0.name"):
        load_fleet(config_copy("demo", hardware=[{"name": name}], tiers=[]))


def test_routerbench_style_names_with_an_owner_segment_pass(config_copy):
    models = [{"name": "mistralai/mixtral-8x7b-chat", "engine": "transformers", "source": {"kind": "hub", "id": "x"}}]
    assert load_fleet(config_copy("demo", models=models, tiers=[])).model_names == ["mistralai/mixtral-8x7b-chat"]


def test_an_unset_variable_without_a_default_names_the_variable_and_field(config_copy, monkeypatch):
    monkeypatch.delenv("ROUTEFORGE_SURELY_UNSET", raising=False)
    path = config_copy("demo", storage_root="${ROUTEFORGE_SURELY_UNSET}/demo")
    with pytest.raises(ConfigError, match=r"storage_root: \$\{ROUTEFORGE_SURELY_UNSET\} is not set and has no "
                                          r"default"):
        load_fleet(path)
    monkeypatch.setenv("ROUTEFORGE_SURELY_UNSET", "/tmp/x")
    assert str(load_fleet(path).storage_root) == "/tmp/x/demo"
    empty = config_copy("demo", storage_root="/tmp/y${ROUTEFORGE_OTHER_UNSET:-}/demo")
    assert str(load_fleet(empty).storage_root) == "/tmp/y/demo"  # an empty default is a default


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        # a mistyped key names the close field (it used to say only "Extra inputs are not permitted")
        ({"datasets": [{"kind": "jsonl", "name": "x", "path": "p.jsonl", "text_feild": "q"}]},
         "datasets.0.jsonl.text_feild: Extra inputs are not permitted (did you mean 'text_field'?)"),
        ({"training": {"routing_evaluation": {"objective": "goodptu"}}},
         "training.routing_evaluation.objective: Input should be"),
        ({"models": [{"name": "m", "engine": "vlm", "source": {"kind": "hub", "id": "x"}}]},
         "(did you mean 'vllm'?)"),
    ],
)
def test_mistakes_say_did_you_mean(config_copy, override, expected):
    with pytest.raises(ConfigError) as err:
        load_fleet(config_copy("demo", **override))
    assert expected in str(err.value)
    if "goodptu" in str(override):
        assert "(did you mean 'goodput'?)" in str(err.value)
