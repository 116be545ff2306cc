"""A learned routing policy is one folder (issue 63): `tests/extensions/toy_learned_policy/`, named by
$ROUTEFORGE_EXTENSIONS and touching nothing else, is validated in the fleet file by its name and its
settings (with "did you mean" for a misspelt one), listed by the schema, trained and evaluated by the
routing evaluation beside a heuristic, exported to ONNX, and loaded and acted on by the runtime; its own
observation (`toy_load`, registered from its folder) is built by the runtime's `Dispatcher` from live
states and by `policies evaluate`'s replay of a bundle carrying it."""

import numpy as np
import pytest
from routeforge.core.config import ConfigError, RoutingEvaluationSettings, load_fleet
from routeforge.fleet.cli import fleet_json_schema

EXTENSION = "tests.extensions.toy_learned_policy"


@pytest.fixture
def toy_policy(monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_EXTENSIONS", EXTENSION)


def test_without_the_extension_the_policy_is_unknown(monkeypatch):
    monkeypatch.delenv("ROUTEFORGE_EXTENSIONS", raising=False)
    with pytest.raises(ValueError, match=r"unknown learned policy 'toy_clone'; known: ddqn_workload_guided"):
        RoutingEvaluationSettings(learned={"toy_clone": {}})


def test_the_fleet_file_names_it_and_checks_its_settings(toy_policy, config_copy):
    settings = RoutingEvaluationSettings(policies=["join_shortest_queue", "toy_clone"],
                                         learned={"toy_clone": {"steps": 50}})
    assert settings.learned["toy_clone"]["steps"] == 50 and settings.learned["toy_clone"]["hidden"] == 32
    schema = fleet_json_schema()["$defs"]["RoutingEvaluationSettings"]["properties"]
    assert "toy_clone" in schema["policies"]["anyOf"][0]["items"]["enum"]
    toy = schema["learned"]["properties"]["toy_clone"]["properties"]
    assert toy["steps"]["description"].startswith("Adam updates")  # its comment, as every field's
    # `config validate`'s errors: a misspelt policy, a misspelt settings key, a setting out of range
    path = config_copy("demo", training={"routing_evaluation": {"enabled": True, "policies": ["toy_clon"]}})
    with pytest.raises(ConfigError, match=r"unknown routing policy 'toy_clon' \(did you mean 'toy_clone'\?\)"):
        load_fleet(path)
    path = config_copy("demo", training={"routing_evaluation": {"enabled": True, "learned": {"toy_clne": {}}}})
    with pytest.raises(ConfigError, match=r"unknown learned policy 'toy_clne' \(did you mean 'toy_clone'\?\)"):
        load_fleet(path)
    path = config_copy("demo", training={"routing_evaluation": {"learned": {"toy_clone": {"steps": 0, "hiden": 8}}}})
    with pytest.raises(ConfigError, match=r"learned: .*toy_clone: steps: Input should be greater than or equal to 1; "
                                          r"hiden: Extra inputs are not permitted"):
        load_fleet(path)


def test_it_is_trained_evaluated_exported_and_run_by_the_runtime(toy_policy, tmp_path):
    import torch
    from routeforge.artifacts.deciding.policy import RoutingPolicy
    from routeforge.training.policies.evaluation import evaluate_routing
    from routeforge.training.policies.learned.base import LEARNED_POLICIES, Setting

    from tests.training.policies.test_evaluation import FITS, _pool

    settings = RoutingEvaluationSettings(enabled=True, loads=[0.9], workloads=["poisson"], requests=60, seeds=2,
                                         queue_capacity=4, policies=["join_shortest_queue", "toy_clone"],
                                         learned={"toy_clone": {"steps": 150, "demo_episodes": 1}})
    evaluation = evaluate_routing(_pool(), FITS, [0, 1], np.array([[0.1, 0.2], [1.0, 2.0]]), settings, tmp_path,
                                  log=lambda _: None)
    assert set(evaluation.trained) == {"toy_clone"} and evaluation.trained["toy_clone"].budget["steps"] == 150
    toy_row = next(r for r in evaluation.rows if r["policy"] == "toy_clone")
    assert toy_row["served"] > 0 and len(toy_row["goodput_by_seed"]) == 2
    # cloned from join-shortest-queue, it agrees with its teacher on most of the demonstrated decisions
    assert evaluation.trained["toy_clone"].run.pretrain["agreement_with_teacher"] > 0.6

    policy = LEARNED_POLICIES.get("toy_clone")
    spec = policy.export(evaluation.trained["toy_clone"], tmp_path / "policy", settings, seed=7)
    assert spec["output"] == "logits" and spec["observation"]["kind"] == "toy_load"
    loaded = RoutingPolicy.load(tmp_path / "policy")  # the runtime, as a router service loads it
    env = evaluation.trained["toy_clone"].env
    obs, _ = env.reset(seed=3)
    net = evaluation.trained["toy_clone"].run.network
    for _ in range(20):
        with torch.no_grad():
            expected = int(net(torch.as_tensor(obs[None], dtype=torch.float32)).argmax())
        assert loaded.act(obs) == expected
        obs, _, done, _, _ = env.step(expected)
        if done:
            break
    setting = Setting(env.profiles, [0, 1], 1.0, np.ones(2), 1.0, settings)
    assert policy.settings(setting.evaluation).teacher == "join_shortest_queue"
    _dispatched_and_replayed(tmp_path, net)


def _dispatched_and_replayed(tmp_path, net):
    """The exported toy policy in a bundle: the `Dispatcher` runs it from live states through its own
    observation (each pick the network's best instance of `observation_toy_load` over the dispatcher's
    view), and replay judges it on a trace in the environment its folder registered."""
    import torch
    from routeforge.artifacts.bundle.loader import load_bundle
    from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState
    from routeforge.artifacts.deciding.observation import Scrape
    from routeforge.training.policies.replay import evaluate_bundle

    from tests.extensions.toy_learned_policy.observation import observation_toy_load
    from tests.training.policies.test_gate_and_replay import _bundle

    loaded = load_bundle(_bundle(tmp_path / "bundle", ["join_shortest_queue"], learned={"toy_clone": tmp_path / "policy"}),
                         allow_unsigned=True)
    dispatcher = Dispatcher(loaded, policy="toy_clone")
    assert dispatcher.policy_name == "toy_clone" and not dispatcher.notes
    states = [LiveState(running=3, waiting=2, kv_usage=0.6), LiveState(running=1, waiting=0, kv_usage=0.1)]
    for k in range(5):
        now, prompt = 0.1 * k, 300 + 50 * k
        for i, s in enumerate(states):
            dispatcher.view.scraped(i, Scrape(at=now, running=s.running, waiting=s.waiting, kv_usage=s.kv_usage))
        obs = observation_toy_load(prompt, dispatcher.view.observe(now))
        with torch.no_grad():
            expected = int(net(torch.as_tensor(obs[None], dtype=torch.float32)).argmax())
        decision = dispatcher.decide(states, prompt_tokens=prompt, quality=[0.9, 0.4], output_tokens=[50, 80], now=now)
        assert decision.instance == expected and decision.policy == "toy_clone"
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(0.3, 120))
    prompt, output = rng.integers(20, 400, 120), rng.integers(5, 120, 120)
    result = evaluate_bundle(loaded, times, prompt, output, load=0.6, seeds=2, requests=40, objective=None)
    toy = next(r for r in result["rows"] if r["policy"] == "toy_clone")
    assert toy["served"] > 0 and len(toy["goodput_by_seed"]) == 2
