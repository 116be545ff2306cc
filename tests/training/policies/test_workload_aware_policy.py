"""001's environment and double DQN: a smoke-train, ONNX export and the runtime observation builder."""

import numpy as np
import pytest
import torch
from routeforge.artifacts.deciding.policy import RoutingPolicy
from routeforge.artifacts.deciding.policy_inputs.workload_aware import observation_workload_aware
from routeforge.training.policies.learned.ddqn_workload_guided.training import DdqnSettings, train_ddqn
from routeforge.training.policies.rl.export import export_policy
from routeforge.training.policies.rl.rollout import greedy, run_episode
from routeforge.training.policies.simulator.baselines import RoundRobin
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.stepper import Stepper
from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals

PROFILE = InstanceProfile(prefill_intercept_s=0.01, prefill_s_per_token=1e-4, decode_w_s=0.02,
                          decode_h_s_per_token=1e-5, max_running=16, kv_capacity_tokens=50_000)


def _workload(n=120, rate=30.0):
    rng = np.random.default_rng(0)
    pool = RequestPool(rng.integers(20, 900, 64), rng.integers(5, 400, (64, 1)), np.ones((64, 1)), ["t"] * 64, ["m"])
    return lambda seed: pool.requests(arrivals("poisson", n, rate=rate, seed=seed), seed=seed)


def test_stepper_routing_round_robin_equals_the_cluster_run():
    reqs = _workload()(3)
    expected = Cluster([PROFILE] * 4).run(reqs, RoundRobin())
    stepper, i = Stepper(Cluster([PROFILE] * 4), reqs), 0
    while stepper.head() is not None:
        stepper.act(i % 4)
        i += 1
    got = stepper.results()
    assert [o.e2e for o in got] == pytest.approx([o.e2e for o in expected])


@pytest.mark.parametrize("variant,size", [("baseline", 11), ("aware", 27), ("guided", 27)])
def test_env_spaces_and_an_episode(variant, size):
    env = WorkloadAwareEnv([PROFILE] * 4, _workload(), variant=variant)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (size,) and env.action_space.n == 5
    rng = np.random.default_rng(0)  # route at random, waiting now and then
    outcomes = run_episode(env, lambda o: 4 if rng.random() < 0.1 else int(rng.integers(4)), seed=1)
    assert len(outcomes) == 120 and all(o.served for o in outcomes)


def test_in_system_reward_sums_to_the_total_e2e():
    env = WorkloadAwareEnv([PROFILE] * 4, _workload(), variant="aware", reward="in_system")
    env.reset(seed=2)
    paid, done, i = 0.0, False, 0
    while not done:  # round-robin with a wait now and then
        _, reward, done, _, info = env.step(4 if i % 5 == 4 else i % 4)
        paid += reward - 60.0 * info["completed"] + len(env.stepper.queue)
        i += 1
    outcomes = env.results()
    assert all(o.served for o in outcomes)
    assert -paid == pytest.approx(sum(o.e2e for o in outcomes), rel=1e-9)


def test_ddqn_smoke_trains_exports_and_serves(tmp_path):
    env = WorkloadAwareEnv([PROFILE] * 4, _workload(n=60), variant="guided")
    info = train_ddqn(env, DdqnSettings(episodes=2, batch_size=32, warmup_steps=50, eps_decay_steps=100, teacher=None),
                      log=lambda m: None)
    net = info.network
    assert len(info.curve) == 2 and info.curve[1]["guidance"] == pytest.approx(np.exp(-0.5))
    obs, _ = env.reset(seed=5)
    spec = export_policy(net, tmp_path / "policy", env.observation_spec(),
                         env.action_spec(), np.stack([obs, obs * 0.5]))
    assert spec["onnx_max_abs_diff"] < 1e-5 and spec["onnx_action_agreement"] == 1.0
    policy = RoutingPolicy.load(tmp_path / "policy")
    assert policy.act(obs) == greedy(net)(obs)
    with pytest.raises(ValueError, match="expects 27"):
        policy.scores(np.zeros((1, 3)))
    served = run_episode(env, policy.act, seed=6)
    assert sum(o.served for o in served) == 60


def test_ddqn_steps_environment_copies_together():
    """n_envs copies play consecutive episodes together; each episode is played whole, with its own
    guidance weight, and the curve counts every decision once."""
    env = WorkloadAwareEnv([PROFILE] * 4, _workload(n=40), variant="guided")
    info = train_ddqn(env, DdqnSettings(episodes=5, n_envs=3, batch_size=32, warmup_steps=50, eps_decay_steps=100,
                                        teacher=None), log=lambda m: None)
    curve = info.curve
    assert sorted(c["episode"] for c in curve) == [0, 1, 2, 3, 4]
    assert all(c["guidance"] == pytest.approx(np.exp(-0.5 * c["episode"])) for c in curve)
    assert len({c["steps"] for c in curve}) == 5 and max(c["steps"] for c in curve) >= 5 * 40
    assert all(c["loss"] is not None for c in curve[3:])  # learning once the warm-up is filled


def test_observe_waiting_shows_each_instances_queue_and_old_specs_keep_their_size():
    """001's observation counts running requests only; with `observe_waiting` an instance's waiting
    requests appear as its seventh feature, and a spec without it still builds 001's 27 values."""
    env = WorkloadAwareEnv([PROFILE] * 4, _workload(n=120, rate=400.0), variant="aware", observe_waiting=True)
    spec = env.observation_spec()
    assert spec["per_instance"][-1] == "waiting" and spec["size"] == 3 + 7 * 4
    obs, _ = env.reset(seed=1)
    waiting = 0
    for _ in range(60):  # everything to instance 0: a queue forms behind its batch of 16
        obs, *_ = env.step(0)
        waiting = env.stepper.cluster.instances[0].n_waiting
        if waiting:
            break
    assert waiting > 0 and obs[3 + 6] == pytest.approx(waiting / PROFILE.max_running)
    assert obs[3 + 7 + 6] == 0.0  # instance 1 has no queue
    plain = WorkloadAwareEnv([PROFILE] * 4, _workload(), variant="aware")
    old = observation_workload_aware(0, 100, 50.0, env.telemetry(), plain.observation_spec())
    assert old.shape == (27,)


def test_the_ddqn_masks_full_instances_in_training_and_in_its_exported_graph(tmp_path):
    """Issue 60, item 5 (a departure from 001): each instance's row says whether its waiting queue is
    full, and the DDQN's Q value for routing there is masked. Before, on the reference fleet, the
    DDQN sent a fifth of its requests to full queues; here, with buffers of 2 and traffic far above
    what four instances serve, the masked policy rejects none for a full buffer, trained or exported."""
    from routeforge.training.policies.learned.ddqn_workload_guided.model import MASKED_Q, MaskFull, full_flags
    from routeforge.training.policies.rl.networks import mlp
    from routeforge.training.policies.simulator.instance import BUFFER_FULL

    small = InstanceProfile(prefill_intercept_s=0.01, prefill_s_per_token=1e-4, decode_w_s=0.02,
                            decode_h_s_per_token=1e-5, max_running=2, kv_capacity_tokens=50_000, buffer=2)
    env = WorkloadAwareEnv([small] * 4, _workload(n=80, rate=200.0), variant="guided", observe_waiting=True,
                           observe_full=True)
    spec = env.observation_spec()
    flags = full_flags(spec)
    assert spec["per_instance"][-1] == "full" and spec["size"] == 3 + 8 * 4 and flags == [3 + 7, 3 + 15, 3 + 23, 3 + 31]
    net = MaskFull(mlp(spec["size"], 5, (16,)), flags)
    obs = np.zeros(spec["size"], dtype=np.float32)
    obs[flags[0]] = obs[flags[2]] = 1.0
    import torch

    q = net(torch.as_tensor(obs)).detach().numpy()
    assert q[0] == q[2] == MASKED_Q and (q[[1, 3, 4]] > MASKED_Q).all()
    info = train_ddqn(env, DdqnSettings(episodes=2, batch_size=32, warmup_steps=50, eps_decay_steps=100, teacher=None),
                      log=lambda m: None)
    trained = run_episode(env, greedy(info.network), seed=7)
    assert not any(o.reason == BUFFER_FULL for o in trained)
    export_policy(info.network, tmp_path / "policy", spec, env.action_spec(), np.stack([obs]))
    policy = RoutingPolicy.load(tmp_path / "policy")
    assert policy.act(obs) not in (0, 2)  # the mask is in the ONNX graph: any runtime keeps it
    served = run_episode(env, policy.act, seed=8)
    assert not any(o.reason == BUFFER_FULL for o in served)
    # the same policy without the mask, on the same traffic, does send requests to full queues
    unmasked = run_episode(env, greedy(info.network.net), seed=8)
    assert any(o.reason == BUFFER_FULL for o in unmasked)


def _block_requests(seed: int = 0):
    """Two models, two instances: requests 0 and 1 share their first two 16-token blocks."""
    from routeforge.training.policies.simulator.cluster import Request

    def req(rid, t, blocks, quality):
        return Request(rid, t, 16 * len(blocks), np.array([8, 8]), np.array(quality, dtype=float), hash_ids=blocks)

    return [req(0, 0.0, (1, 2, 3, 4), [0.2, 0.9]), req(1, 5.0, (1, 2, 9, 10), [0.3, 0.7]),
            req(2, 10.0, (7,), [0.5, 0.5])]


def test_the_ddqn_observes_the_requests_cached_prefix_and_its_quality_on_each_instances_model():
    """Issue 60, item 5: with a prefix cache in the environment each instance's row shows the share of
    the next request's prompt blocks it holds as a leading run, and that request's predicted quality
    on the instance's model; the runtime's observation builder gives the same vector from the same
    telemetry, and a completion earns `quality_reward` × its true quality on the model that served it."""
    env = WorkloadAwareEnv([PROFILE] * 2, _block_requests, variant="guided", models=[0, 1], observe_waiting=True,
                           observe_full=True, block_tokens=16, observe_prefix=True, observe_quality=True,
                           quality_reward=30.0)
    spec = env.observation_spec()
    assert spec["per_instance"][-2:] == ["prefix_overlap", "predicted_quality"] and spec["size"] == 3 + 10 * 2
    obs, _ = env.reset(seed=0)
    row = lambda o, i: o[3 + 10 * i: 3 + 10 * (i + 1)]  # noqa: E731
    assert [row(obs, i)[-2] for i in (0, 1)] == [0.0, 0.0]  # nothing cached yet
    assert [row(obs, i)[-1] for i in (0, 1)] == pytest.approx([0.2, 0.9])
    rewards = []
    while env.stepper.head() is not None and env.stepper.head().rid == 0:
        obs, reward, *_ = env.step(1)  # request 0 to instance 1 (model 1): its blocks are cached there
        rewards.append(reward)
    seen = 0
    while env.stepper.head() is not None and env.stepper.head().rid == 1:  # request 1 at the head
        seen += 1
        assert row(obs, 1)[-2] == pytest.approx(0.5) and row(obs, 0)[-2] == 0.0  # blocks 1, 2 of 1, 2, 9, 10
        assert [row(obs, i)[-1] for i in (0, 1)] == pytest.approx([0.3, 0.7])
        np.testing.assert_array_equal(obs, observation_workload_aware(
            len(env.stepper.queue), 64, env._predicted_tokens(env.stepper.head()), env.telemetry(), spec))
        obs, reward, *_ = env.step(1)
        rewards.append(reward)
    assert seen == 1
    outcomes = {o.request.rid: o for o in env.stepper.results()}
    assert outcomes[1].job.cached_tokens == 32  # it prefilled only the two blocks not cached
    plain = WorkloadAwareEnv([PROFILE] * 2, _block_requests, variant="guided", models=[0, 1], block_tokens=16)
    plain.reset(seed=0)
    base = [plain.step(1)[1] for _ in range(len(rewards))]
    completed = sum(o.served and o.job.finished <= env.stepper.t for o in outcomes.values())
    assert completed and sum(rewards) - sum(base) == pytest.approx(30.0 * sum(
        o.request.quality[o.model] for o in outcomes.values() if o.served and o.job.finished <= env.stepper.t))


def test_the_deployed_routers_teach_only_where_instances_cache_prompt_blocks():
    from routeforge.training.policies.rl.teacher import candidates_for, teachers

    cached = WorkloadAwareEnv([PROFILE] * 2, _block_requests, models=[0, 1], block_tokens=16)
    assert candidates_for(cached) == teachers("load") + teachers("prefix")
    assert candidates_for(WorkloadAwareEnv([PROFILE] * 2, _block_requests, models=[0, 1])) == teachers("load")


def test_the_first_token_reward_charges_each_served_requests_ttft_once():
    """`reward="first_token"`: over an episode the latency charged is the sum of the served requests'
    TTFTs (each paid once, when its first token comes), beside +60 per completion and the queue term."""
    env = WorkloadAwareEnv([PROFILE] * 4, _workload(n=60, rate=40.0), variant="guided", reward="first_token",
                           wait_action=False)
    env.set_episode(10_000)  # the guidance term off
    env.reset(seed=2)
    total, done, queue = 0.0, False, 0.0
    while not done:
        _, reward, done, _, _ = env.step(int(env.stepper.head().rid % 4))
        queue += len(env.stepper.queue)
        total += reward
    served = [o for o in env.results() if o.served]
    assert len(served) == 60
    assert total == pytest.approx(60.0 * len(served) - sum(o.ttft for o in served) - queue)


def test_a_bundles_ddqn_that_observes_prefix_and_quality_replays_in_the_environment_its_spec_names(tmp_path):
    """`policies evaluate` rebuilt 001's environment from the spec's waiting and full flags only; a
    DDQN observing prefix overlap and quality then failed (99 features for a policy of 111)."""
    from routeforge.training.policies.replay import _learned_runner
    from routeforge.training.policies.rl.networks import mlp

    env = WorkloadAwareEnv([PROFILE] * 2, _block_requests, variant="guided", models=[0, 1], observe_waiting=True,
                           observe_full=True, block_tokens=16, observe_prefix=True, observe_quality=True)
    spec = env.observation_spec()
    obs, _ = env.reset(seed=0)
    # a network that always routes to instance 0: what is checked is that the replay builds the
    # observation the spec names (its random weights once made it wait, by the tests run before it)
    net = mlp(spec["size"], 3, (8,))
    with torch.no_grad():
        for weight in net.parameters():
            weight.zero_()
        list(net.parameters())[-1][0] = 1.0
    export_policy(net, tmp_path / "policy", spec, env.action_spec(), np.stack([obs]))
    outcomes = _learned_runner(RoutingPolicy.load(tmp_path / "policy"), [PROFILE] * 2, [0, 1], _block_requests, 3)
    assert len(outcomes) == 3 and all(o.served for o in outcomes)
