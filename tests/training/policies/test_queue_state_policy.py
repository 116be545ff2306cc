"""`ppo_queue_bias` (issue 49): a learned policy whose observation is what vLLM's `/metrics` show, so
that the runtime's `Dispatcher` runs it on live servers. Its environment keeps the fleet's
continuous-batching instances; all-zero biases are join-shortest-queue exactly; PPO trains it from
there; the exported network, the replay and the dispatcher build the same observation."""

from types import SimpleNamespace

import numpy as np
import pytest
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.manifest import Fleet, Lineage, ModelEntry
from routeforge.artifacts.bundle.writer import ComponentSource, write_bundle
from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState
from routeforge.artifacts.deciding.policy import RoutingPolicy
from routeforge.artifacts.deciding.policy_inputs.queue_state import observation_queue_state
from routeforge.training.policies.learned.ppo_queue_bias.settings import PpoSettings
from routeforge.training.policies.learned.ppo_queue_bias.training import bias_policy, train_ppo
from routeforge.training.policies.packaging import export_heuristics, write_simulator
from routeforge.training.policies.rl.export import export_policy
from routeforge.training.policies.rl.rollout import run_episode
from routeforge.training.policies.simulator.baselines import BASELINES
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.metrics import summarize
from routeforge.training.policies.simulator.queue_state_env import QueueStateBiasEnv
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals

from tests.training.policies.test_gate_and_replay import FITS

RNG = np.random.default_rng(0)
POOL = RequestPool(RNG.integers(20, 400, 80), RNG.integers(5, 200, (80, 2)), RNG.random((80, 2)), ["t"] * 80,
                   ["fast", "slow"])


def _profiles():
    from routeforge.training.policies.evaluation import fleet_profiles

    return fleet_profiles(FITS, 4, 50_000)[0]


def _workload(seed: int):
    return POOL.requests(arrivals("poisson", 120, rate=12.0, seed=seed), seed=seed)


def _env(**kw):
    return QueueStateBiasEnv(_profiles(), [0, 1], [0.8, 0.5], _workload, rate_scale_rps=10.0, slot_s=0.5, **kw)


def test_zero_biases_are_join_shortest_queue_on_the_fleets_own_instances():
    """The environment keeps the instances' batch limit and buffer (not 004's single servers): with
    zero biases every request lands where the simulator's join-shortest-queue sends it, with the same
    outcome, rejections included; the reward counts a request late past its own SLO."""
    env = _env()
    assert [p.max_running for p in env.profiles] == [4, 4]
    outcomes = run_episode(env, lambda obs: np.zeros(2, dtype=np.float32), seed=3)
    reference = Cluster(_profiles(), models=[0, 1]).run(_workload(3), BASELINES["join_shortest_queue"]())
    assert [o.instance for o in outcomes] == [o.instance for o in reference]
    assert [o.reason for o in outcomes] == [o.reason for o in reference]
    mine, theirs = summarize(outcomes, profiles=_profiles()), summarize(reference, profiles=_profiles())
    assert mine["goodput"] == theirs["goodput"] and mine["served_share"] == theirs["served_share"]


def test_the_observation_is_the_runtimes_from_live_counts():
    """Mid-episode, the environment's observation is `observation_queue_state` of each instance's
    running and waiting requests, KV usage and the last slot's arrival rate: the function the
    dispatcher calls on `/metrics` counts."""
    env = _env()
    env.reset(seed=5)
    for _ in range(3):
        obs, *_ = env.step(np.zeros(2, dtype=np.float32))
    states = env.live_states()
    assert any(s["running"] for s in states)
    spec = env.observation_spec()
    assert np.array_equal(obs, observation_queue_state(states, env._last_rate, spec))
    assert obs[-1] == pytest.approx(env._last_rate / 10.0) and env._last_rate > 0
    with pytest.raises(ValueError, match="1 instances given, the policy was trained for 2"):
        observation_queue_state(states[:1], 1.0, spec)
    with pytest.raises(ValueError, match="arrivals_per_s"):
        observation_queue_state(states, float("nan"), spec)


@pytest.mark.timeout(300)
def test_ppo_trains_exports_and_the_dispatcher_runs_it_from_live_counts(tmp_path):
    """PPO from the join-shortest-queue teacher (a smoke budget), exported to ONNX with bias
    parity; a bundle that recommends it hands it to `Dispatcher`, which decides from `LiveState`s and
    leans as the biases say: with a bias of +8 toward instance 1, a request goes there even when
    instance 0 has fewer requests."""
    settings = PpoSettings(total_steps=64, n_steps=32, batch_size=16, n_epochs=2, teacher="shortest_queue",
                           demo_episodes=1, pretrain_steps=50, keep_best_round=True, validation_episodes=1)
    info = train_ppo(_env, settings, log=lambda line: None)
    net = info.network
    assert info.pretrain["max_action_error"] < 0.5 and info.curve
    env = _env()
    obs, _ = env.reset(seed=1)
    checks = [obs] + [env.step(np.zeros(2, dtype=np.float32))[0] for _ in range(4)]
    spec = export_policy(net, tmp_path / "src" / "ppo_queue_bias", env.observation_spec(), env.action_spec(),
                         np.stack(checks), output="bias", act="greedy")
    assert spec["onnx_action_agreement"] == 1.0 and spec["onnx_max_abs_diff"] < 1e-4
    runtime = RoutingPolicy.load(tmp_path / "src" / "ppo_queue_bias")
    assert np.array_equal(runtime.act(checks[2]), np.round(np.clip(bias_policy(net)(checks[2]), -8, 8) * 2) / 2)

    def bundle_with(folder) -> Dispatcher:
        heuristics = export_heuristics(["join_shortest_queue"], 2, tmp_path / "src")
        gate = {"recommended": "ppo_queue_bias", "reason": "test", "objective": "goodput",
                "best_heuristic": "join_shortest_queue"}
        simulator = write_simulator(tmp_path / "src" / "simulator", tiers=["t-fast", "t-slow"], models=["fast", "slow"],
                                    instance_models=[0, 1], fits=FITS,
                                    settings=SimpleNamespace(queue_capacity=4, kv_capacity_tokens=50_000, train_load=0.9),
                                    report={"qos_latency_per_token_s": 0.1, "capacity_rps": 10.0, "gate": gate})
        components = [ComponentSource("policy--ppo_queue_bias", "routing_policy", "onnx+json", folder,
                                      config={"policy": "ppo_queue_bias", "policy_kind": "learned", "recommended": True}),
                      ComponentSource("policy--join_shortest_queue", "routing_policy", "json",
                                      heuristics["join_shortest_queue"],
                                      config={"policy": "join_shortest_queue", "policy_kind": "heuristic",
                                              "recommended": False}),
                      ComponentSource("routing_simulator", "routing_simulator", "json", simulator.parent,
                                      config={"recommended_policy": "policy--ppo_queue_bias", "recommendation": "test",
                                              "objective": "goodput"})]
        fleet = Fleet(name="t", models=[ModelEntry(name="fast", engine="table_import"),
                                        ModelEntry(name="slow", engine="table_import")])
        write_bundle(tmp_path / folder.name / "bundle", "t", fleet, components, Lineage(), "test")
        return Dispatcher(load_bundle(tmp_path / folder.name / "bundle", allow_unsigned=True))

    dispatcher = bundle_with(tmp_path / "src" / "ppo_queue_bias")
    assert dispatcher.policy_name == "ppo_queue_bias" and not dispatcher.notes
    states = [LiveState(2, 0, 0.1), LiveState(3, 1, 0.2)]
    decision = dispatcher.decide(states, 100, [0.8, 0.5], [50, 60], arrivals_per_s=4.0)
    biases = runtime.act(observation_queue_state([{"running": s.running, "waiting": s.waiting, "kv_usage": s.kv_usage}
                                                  for s in states], 4.0, runtime.spec["observation"]))
    assert decision.instance == int(np.argmin([2 - biases[0], 4 - biases[1]])) and decision.policy == "ppo_queue_bias"
    # a network that always leans +8 toward instance 1 (its output layer's bias; weights zeroed)
    import torch

    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.policy.action_net.bias.copy_(torch.tensor([0.0, 8.0]))
    export_policy(net, tmp_path / "lean" / "ppo_queue_bias", env.observation_spec(), env.action_spec(),
                  np.stack(checks), output="bias", act="greedy")
    leaning = bundle_with(tmp_path / "lean" / "ppo_queue_bias")
    assert leaning.decide(states, 100, [0.8, 0.5], [50, 60]).instance == 1  # 4 − 8 < 2
    assert leaning.decide([LiveState(0, 0), LiveState(9, 4)], 100, [0.8, 0.5], [50, 60]).instance == 0
