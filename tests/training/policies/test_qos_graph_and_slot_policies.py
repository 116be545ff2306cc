"""000's environment with SAC over the HAN, 004's environment with PPO: rewards as the papers
define them, smoke-training, ONNX export and the runtime observation builders."""

import numpy as np
import pytest
from routeforge.artifacts.deciding.policy import RoutingPolicy
from routeforge.training.policies.learned.ppo_queue_bias.training import PpoSettings, distribution_policy, train_ppo
from routeforge.training.policies.learned.sac_qos.training import SacSettings, train_sac
from routeforge.training.policies.rl.export import export_policy
from routeforge.training.policies.rl.rollout import greedy, run_episode
from routeforge.training.policies.simulator.baselines import JoinShortestQueue
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.qos_graph_env import QosGraphEnv, qos
from routeforge.training.policies.simulator.slot_distribution_env import SlotDistributionEnv
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals, switched_poisson

FAST = InstanceProfile(prefill_intercept_s=0.005, prefill_s_per_token=5e-5, decode_w_s=0.01,
                       decode_h_s_per_token=1e-6, kv_capacity_tokens=40_000)
SLOW = InstanceProfile(prefill_intercept_s=0.01, prefill_s_per_token=1e-4, decode_w_s=0.03,
                       decode_h_s_per_token=2e-6, kv_capacity_tokens=20_000)


def _pool(n_models=3, rows=64):
    rng = np.random.default_rng(0)
    return RequestPool(rng.integers(20, 600, rows), rng.integers(5, 200, (rows, n_models)),
                       rng.random((rows, n_models)), ["t"] * rows, [f"m{i}" for i in range(n_models)])


def _qos_graph_env(variant="han", n=80, rate=40.0):
    pool = _pool()
    return QosGraphEnv([FAST, SLOW, SLOW], [0, 1, 2],
                  lambda s: pool.requests(arrivals("poisson", n, rate=rate, seed=s), seed=s),
                  requirement_s=0.05, variant=variant, pad=3)


def test_qos_graph_env_qos_reward_and_spaces():
    env = _qos_graph_env()
    obs, _ = env.reset(seed=1)
    spec = env.observation_spec()
    # arrived 1 + 2·3, experts 3·3, running and waiting 3 experts × 3 slots × 7 features each
    assert obs.shape == (7 + 9 + 2 * 63,) == (spec["size"],) and env.action_space.n == 4
    total_qos, done = 0.0, False
    while not done:  # route everything to the fast expert: queues fill, then requests get rejected
        obs, reward, done, _, info = env.step(1)
        total_qos += info["qos"]
    outcomes = env.results()
    expected = sum(qos(o.job, o.request, o.model, 0.05) for o in outcomes if o.job is not None)
    assert total_qos == pytest.approx(expected)
    assert any(o.reason == "buffer full" for o in outcomes)  # 3 running + 3 waiting at most
    assert env.reset(seed=1)[0].shape == obs.shape


def test_qos_graph_env_impact_penalises_joining_a_busy_expert():
    env = _qos_graph_env(rate=400.0)
    env.reset(seed=2)
    for _ in range(3):
        env.step(2)  # three requests onto the slow expert
    assert env.impact(1) >= 0.0 and env.impact(0) == 0.0  # the fast expert holds nothing
    env.stepper.cluster.advance(env.stepper.t + 0.02)
    slow_risk = env.impact(1)
    _, reward, *_ , info = env.step(2)
    assert info["impact"] == pytest.approx(slow_risk) and reward == pytest.approx(info["qos"] - info["impact"])


def test_qos_graph_env_drop_action_and_baseline_variant():
    env = _qos_graph_env(variant="baseline")
    obs, _ = env.reset(seed=3)
    assert obs.shape == (9,)
    outcomes = run_episode(env, lambda o: 0, seed=3)  # drop everything
    assert all(o.instance == -1 and o.reason == "dropped by the policy" for o in outcomes)


@pytest.mark.parametrize("variant", ["han", "baseline"])
def test_sac_smoke_trains_exports_and_serves(tmp_path, variant):
    env = _qos_graph_env(variant=variant, n=60)
    info = train_sac(env, SacSettings(total_steps=160, warmup_steps=64, batch_size=16, learn_every=4, teacher=None),
                     log=lambda m: None)
    net = info.network
    assert info.curve and info.curve[-1]["steps"] == 160
    obs, _ = env.reset(seed=4)
    checks = [obs]
    for a in (1, 2, 3, 1, 2, 3, 1):
        obs, *_ = env.step(a)
        checks.append(obs)
    spec = export_policy(net, tmp_path / "policy", env.observation_spec(), env.action_spec(), np.stack(checks),
                         output="logits")
    assert spec["onnx_max_abs_diff"] < 1e-4 and spec["onnx_action_agreement"] == 1.0
    policy = RoutingPolicy.load(tmp_path / "policy")
    assert [policy.act(o) for o in checks] == [greedy(net)(o) for o in checks]
    assert len(run_episode(env, policy.act, seed=7)) == 60
    # with a generator the runtime samples as SAC acted in training: frequencies follow softmax(logits)
    logits = policy.scores(checks[-1])[0]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    rng = np.random.default_rng(0)
    counts = np.bincount([policy.act(checks[-1], rng=rng) for _ in range(3000)], minlength=len(probs))
    assert np.abs(counts / 3000 - probs).max() < 0.04


def _slot_env(max_slots=None, n=400):
    pool = _pool(n_models=2)
    d0, d1 = [[-42.0, 2.0], [1.0, -11.0]], np.diag([40.0, 10.0])  # a fast-switching toy process
    return SlotDistributionEnv([SLOW, SLOW, FAST, FAST], [0, 0, 1, 1], [0.9, 0.9, 0.7, 0.7],
                  lambda s: pool.requests(switched_poisson(n, d0, d1, seed=s), seed=s),
                  requirement_s=0.5, slot_s=0.5, buffer=4, pad=5, max_slots=max_slots)


def test_slot_env_reward_counts_and_observation():
    env = _slot_env()
    obs, _ = env.reset(seed=1)
    assert obs.shape == (4 * (5 + 1 + 5),) and env.action_space.shape == (4,)
    late = rejected = 0
    on_time = np.zeros(4)
    rewards, done = 0.0, False
    while not done:  # everything to instance 0: its buffer of 4 overflows
        obs, reward, done, _, info = env.step(np.array([20.0, 0.0, 0.0, 0.0], dtype=np.float32))
        rewards += reward
        late, rejected, on_time = late + info["late"], rejected + info["rejected"], on_time + info["on_time"]
    outcomes = env.results()
    served = [o for o in outcomes if o.served]
    assert rejected == sum(o.reason == "buffer full" for o in outcomes) > 0
    assert late == sum(o.e2e > 0.5 for o in served) and on_time.sum() == sum(o.e2e <= 0.5 for o in served)
    assert rewards == pytest.approx(-late - rejected + float(np.array([0.9, 0.9, 0.7, 0.7]) @ on_time))
    assert len(outcomes) == 400 and all(o.instance == 0 for o in outcomes)


def test_slot_env_observation_reports_ages_and_service():
    env = _slot_env()
    env.reset(seed=2)
    obs, *_ = env.step(np.array([0.0, 0.0, 20.0, 0.0], dtype=np.float32))
    per = obs.reshape(4, 11)
    tele = env.telemetry()
    for i in range(4):
        assert per[i, :5].sum() == 1.0 and per[i, :5].argmax() == len(tele[i]["ages_s"])
        assert per[i, 5] == pytest.approx(tele[i]["elapsed_service_s"] / 0.5, rel=1e-5)
    assert (per[[0, 1, 3], 5] == 0).all()  # nothing was sent there


def _export_after_busy_slots(net, env, tmp_path, output: str):
    """Export `net` with parity checked on the observations of six slots of `env` under action zero;
    returns (spec, those observations, the runtime policy loaded back)."""
    obs, _ = env.reset(seed=3)
    checks = [obs]
    for _ in range(5):
        obs, *_ = env.step(np.zeros(4, dtype=np.float32))
        checks.append(obs)
    spec = export_policy(net, tmp_path / "policy", env.observation_spec(), env.action_spec(), np.stack(checks),
                         output=output)
    return spec, checks, RoutingPolicy.load(tmp_path / "policy")


def test_ppo_smoke_trains_exports_and_beats_nothing_silently(tmp_path):
    env = _slot_env(max_slots=16, n=300)
    info = train_ppo(lambda: _slot_env(max_slots=16, n=300),
                     PpoSettings(total_steps=128, n_steps=64, batch_size=32, n_epochs=2), log=lambda m: None)
    net = info.network
    assert info.curve and info.curve[-1]["slots"] == 16
    spec, checks, policy = _export_after_busy_slots(net, env, tmp_path, "probabilities")
    assert spec["onnx_max_abs_diff"] < 1e-5
    probs = policy.act(checks[-1])
    assert probs.shape == (4,) and probs.sum() == pytest.approx(1.0, abs=1e-5)
    outcomes = run_episode(_slot_env(), distribution_policy(net), seed=9)
    assert len(outcomes) == 400


def test_single_model_baseline_keeps_to_its_instances():
    pool = _pool(n_models=2)
    reqs = pool.requests(arrivals("poisson", 100, rate=20.0, seed=1), seed=1)
    outcomes = Cluster([SLOW, SLOW, FAST, FAST], models=[0, 0, 1, 1]).run(reqs, JoinShortestQueue(among=(2, 3)))
    assert {o.instance for o in outcomes} == {2, 3}


def _arrivals_of(env) -> list[float]:
    return [r.arrival for r in env.stepper.arrivals] if hasattr(env, "stepper") else env.arrivals.tolist()


@pytest.mark.parametrize("make", [_slot_env, _qos_graph_env], ids=["004_slot", "000_qos_graph"])
def test_unseeded_resets_draw_new_reproducible_episodes(make):
    """Vectorised trainers reset an environment unseeded after its first episode: each such reset must
    bring new arrivals (not seed 0's again), the same ones for the same first seed."""
    first, second = make(), make()
    runs = []
    for env in (first, second):
        env.reset(seed=7)
        episodes = [_arrivals_of(env)]
        for _ in range(3):
            env.reset()
            episodes.append(_arrivals_of(env))
        runs.append(episodes)
    assert runs[0] == runs[1]
    assert len({tuple(e) for e in runs[0]}) == 4
    fixed = make()
    fixed.reset(seed=0)
    assert _arrivals_of(fixed) not in runs[0][1:]


def test_ppo_steps_copies_in_worker_processes():
    info = train_ppo(lambda: _slot_env(max_slots=16, n=300),
                     PpoSettings(total_steps=128, n_steps=64, batch_size=32, n_epochs=1, n_envs=2,
                                 subprocess=True), log=lambda m: None)
    assert len(info.curve) == 8 and {c["slots"] for c in info.curve} == {16}
    assert len({round(c["return"], 6) for c in info.curve}) > 1  # each episode has its own arrivals
    with pytest.raises(ValueError, match="n_steps"):
        train_ppo(lambda: _slot_env(max_slots=16), PpoSettings(total_steps=64, n_steps=63, n_envs=2),
                  log=lambda m: None)


def test_fixed_split_grid_covers_the_simplex_and_becomes_routing_logits():
    from routeforge.training.policies.rl.slot_teacher import share_grid, split_logits
    from routeforge.training.policies.simulator.slot_distribution_env import softmax

    grid = share_grid(3, 4)
    assert len(grid) == 15 and all(abs(g.sum() - 1) < 1e-12 and (g >= 0).all() for g in grid)
    assert len({tuple(g) for g in grid}) == 15
    probs = softmax(split_logits([0, 0, 1, 1], np.array([0.4, 0.6])))
    assert probs == pytest.approx([0.2, 0.2, 0.3, 0.3], abs=1e-6)
    assert softmax(split_logits([0, 0, 1, 1], np.array([1.0, 0.0])))[2:].sum() < 1e-4  # empty share: ~nothing


def test_ppo_starts_from_the_best_fixed_split_and_keeps_its_best_rollout():
    """With `teacher: fixed_split` the split searched on training seeds is the one with the highest
    return of the grid, the actor's routing probabilities are fitted to it before PPO, and with
    `keep_best_round` the returned actor routes as the validation-best candidate did."""
    from routeforge.training.policies.rl.rollout import episode_return, validation_seeds

    settings = PpoSettings(total_steps=192, n_steps=64, batch_size=32, n_epochs=2, teacher="fixed_split",
                           teacher_resolution=4, demo_episodes=2, pretrain_steps=300, keep_best_round=True)
    info = train_ppo(lambda: _slot_env(max_slots=16, n=300), settings, log=lambda m: None)
    net = info.network
    pre = info.pretrain
    assert len(pre["grid"]) == 5 and pre["teacher_return"] == max(row["return"] for row in pre["grid"])
    assert pre["max_action_error"] < 0.05
    # every weight set judged once: the clone, and after each of the three updates
    assert [v["steps"] for v in info.validation] == [0, 64, 128, 192]
    assert info.validation[0]["first_episode"] is None
    scores = [v["validation_score"] for v in info.validation]
    judge = _slot_env(max_slots=16, n=300)
    replayed = np.mean([episode_return(judge, distribution_policy(net), s)
                        for s in validation_seeds(settings.seed, settings.validation_episodes)])
    assert replayed == pytest.approx(max(scores), rel=1e-5)


def _biased_env(engine="single_server", max_slots=None, n=400):
    base = _slot_env(max_slots=max_slots, n=n)
    return SlotDistributionEnv([SLOW, SLOW, FAST, FAST], [0, 0, 1, 1], [0.9, 0.9, 0.7, 0.7], base.workload,
                               requirement_s=0.5, slot_s=0.5, buffer=4, pad=5, max_slots=max_slots, engine=engine,
                               dispatch="biased_shortest_queue")


@pytest.mark.parametrize("engine", ["single_server", "batching"])
def test_zero_biases_route_exactly_as_join_shortest_queue(engine):
    """`dispatch: biased_shortest_queue` with all-zero biases is the JSQ baseline request for request
    (same instance, same rejection, same E2E), so PPO's shortest_queue teacher starts at JSQ's level."""
    env = _biased_env(engine)
    for seed in (1, 2):
        got = run_episode(env, lambda _obs: np.zeros(4, dtype=np.float32), seed)
        ref = Cluster(env.profiles, models=env.models).run(env.workload(seed), JoinShortestQueue())
        assert [(o.instance, o.reason) for o in got] == [(o.instance, o.reason) for o in ref]
        assert [o.e2e for o in got if o.served] == pytest.approx([o.e2e for o in ref if o.served], abs=1e-9)
    # a bias larger than any buffer sends every request of the slot to instance 3 (rejected once full)
    env.reset(seed=1)
    _, _, _, _, info = env.step(np.array([0.0, 0.0, 0.0, 10.0], dtype=np.float32))
    assert info["bias"] == [0.0, 0.0, 0.0, 10.0] and "probabilities" not in info
    outcomes = env.results()
    assert outcomes and {o.instance for o in outcomes} == {3}
    with pytest.raises(ValueError, match="dispatch"):
        SlotDistributionEnv([SLOW], [0], [0.9], env.workload, requirement_s=0.5, dispatch="round_robin")


def test_ppo_over_queue_biases_starts_at_jsq_exports_and_dispatches(tmp_path):
    from routeforge.artifacts.deciding.heuristics import queue_biases, shortest_queue
    from routeforge.training.policies.learned.ppo_queue_bias.training import bias_policy

    settings = PpoSettings(total_steps=128, n_steps=64, batch_size=32, n_epochs=2, teacher="shortest_queue",
                           demo_episodes=1, pretrain_steps=300, keep_best_round=True)
    info = train_ppo(lambda: _biased_env(max_slots=16, n=300), settings, log=lambda m: None)
    net = info.network
    assert info.pretrain["teacher"] == "shortest_queue" and info.pretrain["max_action_error"] < 0.05
    spec, checks, policy = _export_after_busy_slots(net, _biased_env(), tmp_path, "bias")
    assert spec["onnx_max_abs_diff"] < 1e-5 and spec["action"]["kind"] == "queue_bias"
    biases = policy.act(checks[-1])
    assert biases.shape == (4,) and np.all(np.abs(biases) <= 10.0) and np.all(biases * 2 == np.round(biases * 2))
    assert biases == pytest.approx(queue_biases(bias_policy(net)(checks[-1])))
    assert queue_biases([0.2, -0.3, 0.74, 12.0]).tolist() == [0.0, -0.5, 0.5, 10.0]
    assert policy.dispatch(np.zeros(4), [3, 1, 1, 2]) == shortest_queue([3, 1, 1, 2]) == 1
    assert policy.dispatch(np.array([0.0, 0.0, 0.0, 1.5]), [3, 1, 1, 2]) == 3
    assert len(run_episode(_biased_env(), bias_policy(net), seed=9)) == 400
    with pytest.raises(ValueError, match="fixed_split"):  # a distribution's teacher for a bias action
        train_ppo(lambda: _biased_env(max_slots=16), PpoSettings(total_steps=64, n_steps=64, teacher="fixed_split"),
                  log=lambda m: None)


def test_paired_baseline_subtracts_the_teachers_reward_on_the_same_arrivals():
    """The teacher itself earns exactly zero every slot; any other policy earns its own return less
    the teacher's on the same seed; unseeded resets still bring new (reproducible) arrivals to both."""
    from routeforge.training.policies.rl.paired_baseline import PairedBaseline, teacher_rewards
    from routeforge.training.policies.rl.rollout import episode_return

    zeros = np.zeros(4, dtype=np.float32)
    paired = PairedBaseline(_biased_env(max_slots=16), _biased_env(max_slots=16), zeros)
    lean = np.array([1.0, 1.0, 0.0, 0.0], dtype=np.float32)
    for seed in (4, 5):
        assert set(teacher_rewards(paired, lambda _obs: zeros, seed)) == {0.0}
        teacher = episode_return(_biased_env(max_slots=16), lambda _obs: zeros, seed)
        own = episode_return(_biased_env(max_slots=16), lambda _obs: lean, seed)
        assert sum(teacher_rewards(paired, lambda _obs: lean, seed)) == pytest.approx(own - teacher)
        assert own != pytest.approx(teacher)  # the check above compares two different policies
    paired.reset(seed=7)
    drawn = []
    for _ in range(3):
        paired.reset()
        drawn.append(_arrivals_of(paired.env))
        assert _arrivals_of(paired.shadow) == drawn[-1]
    assert len({tuple(a) for a in drawn}) == 3
    with pytest.raises(ValueError, match="paired_baseline needs a teacher"):
        train_ppo(lambda: _biased_env(max_slots=16), PpoSettings(total_steps=64, n_steps=64, paired_baseline=True),
                  log=lambda m: None)


def test_ppo_trains_on_the_paired_reward_and_is_judged_on_the_plain_return():
    settings = PpoSettings(total_steps=128, n_steps=64, batch_size=32, n_epochs=1, teacher="shortest_queue",
                           demo_episodes=1, pretrain_steps=300, keep_best_round=True, paired_baseline=True)
    info = train_ppo(lambda: _biased_env(max_slots=16, n=300), settings, log=lambda m: None)
    assert info.curve_return == "less the teacher's on the same arrivals" and len(info.curve) == 8
    # the clone routes as its teacher: its paired return would be 0, its validation score is the plain return
    from routeforge.training.policies.rl.rollout import episode_return, validation_seeds

    assert info.pretrain["max_action_error"] < 0.25  # rounds to zero biases
    plain = np.mean([episode_return(_biased_env(max_slots=16, n=300), lambda _obs: np.zeros(4), s)
                     for s in validation_seeds(settings.seed, settings.validation_episodes)])
    assert plain != 0.0 and info.validation[0]["validation_score"] == pytest.approx(plain)


def test_sac_pairs_its_reward_with_a_heuristic_teacher_on_the_same_arrivals():
    """000 decides at each arrival, so a heuristic teacher's reward pairs step for step: JSQ on the
    paired environment earns exactly 0 per decision; SAC trains on it and is judged on delivered QoS."""
    from routeforge.training.policies.rl.paired_baseline import PairedBaseline, heuristic_teacher, teacher_rewards

    teacher = heuristic_teacher("join_shortest_queue")
    paired = PairedBaseline(_qos_graph_env(), _qos_graph_env(), teacher)
    assert set(teacher_rewards(paired, teacher(paired.env), seed=3)) == {0.0}
    # dropping every request earns 0 (no QoS, no impact penalty): paired, minus JSQ's own return
    plain = _qos_graph_env()
    jsq_return = sum(teacher_rewards(plain, teacher(plain), seed=3))
    assert jsq_return != 0.0 and sum(teacher_rewards(paired, lambda _obs: 0, seed=3)) == pytest.approx(-jsq_return)
    settings = SacSettings(total_steps=80, warmup_steps=0, learn_every=8, batch_size=16, teacher="join_shortest_queue",
                           demo_episodes=1, pretrain_steps=10, keep_best_round=True, paired_baseline=True)
    info = train_sac(_qos_graph_env(), settings, log=lambda m: None)
    assert info.curve_return == "less the teacher's on the same arrivals" and info.curve
    assert info.validation[0]["metric"] == "qos"
    with pytest.raises(ValueError, match="paired_baseline needs a teacher"):
        train_sac(_qos_graph_env(), SacSettings(total_steps=16, teacher=None, paired_baseline=True), log=lambda m: None)
