"""Learned policies that start from the best heuristic: the teacher chosen by evaluation, its
demonstrations, and the DQN / SAC pretrained on them before RL."""

import numpy as np
import pytest
from routeforge.training.policies.evaluation import fleet_profiles
from routeforge.training.policies.learned.ddqn_workload_guided.settings import DdqnSettings
from routeforge.training.policies.learned.sac_qos.settings import SacSettings
from routeforge.training.policies.rl.rollout import training_seed, validation_seeds
from routeforge.training.policies.rl.teacher import choose_teacher, demonstrate, teacher_action, teachers
from routeforge.training.policies.simulator.baselines import JoinShortestQueue
from routeforge.training.policies.simulator.qos_graph_env import QosGraphEnv
from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals

FITS = [{"prefill_intercept_s": 0.005, "prefill_grad_s_per_token": 5e-5, "decode_w_s": 0.01,
         "decode_h_s_per_token": 1e-6}] * 3


def _setting(n: int = 120, rate: float = 40.0):
    rng = np.random.default_rng(0)
    pool = RequestPool(rng.integers(20, 400, 60), rng.integers(5, 200, (60, 3)), rng.random((60, 3)), ["t"] * 60,
                       ["a", "b", "c"])
    profiles, _ = fleet_profiles(FITS, 4, 50_000)
    return profiles, lambda seed: pool.requests(arrivals("poisson", n, rate=rate, seed=seed), seed=seed)


def test_teacher_acts_in_each_environment_as_the_heuristic():
    profiles, workload = _setting()
    qos = QosGraphEnv(profiles, [0, 1, 2], workload, 0.05, variant="baseline", pad=4)
    qos.reset(seed=1)
    aware = WorkloadAwareEnv(profiles, workload, variant="baseline", models=[0, 1, 2])
    aware.reset(seed=1)
    for _ in range(40):  # JSQ's choice, as the action that carries it out (QoS env: 0 is drop)
        for env, offset in ((qos, 1), (aware, 0)):
            expected = JoinShortestQueue().assign([env.stepper.head()], env.stepper.cluster.router(env.stepper.t), env.stepper.t)[0]
            action = teacher_action(env, JoinShortestQueue())
            assert action == expected + offset
            env.step(action)
    demos = demonstrate(aware, "join_shortest_queue", episodes=1, seed=0, noise=0.2)
    assert len(demos) >= 120 and demos.observation.shape == (len(demos), aware.observation_space.shape[0])
    assert 0.6 < float(np.mean(demos.action == demos.expert)) < 1.0  # a fifth of the actions are random


def test_teacher_is_chosen_by_episode_return_on_training_seeds():
    profiles, workload = _setting()
    env = WorkloadAwareEnv(profiles, workload, variant="aware", models=[0, 1, 2])
    chosen, scores = choose_teacher(env, ("join_shortest_queue",), seeds=(5, 6),
                                    log=lambda _: None)
    assert chosen == "join_shortest_queue" and set(scores) == {"join_shortest_queue"}
    chosen, scores = choose_teacher(env, ("join_shortest_queue", "least_work_left", "route_balance"), seeds=(5, 6, 7),
                                    log=lambda _: None)
    best = max(scores, key=scores.get)
    assert chosen in scores and scores[chosen] <= scores[best]


@pytest.mark.parametrize("trainer", ["ddqn", "sac"])
def test_pretrained_policy_imitates_its_teacher_before_rl(trainer):
    """With a teacher, the trainers report how often the pretrained network picks the teacher's
    action; on 000's baseline features (every expert's running and waiting counts) JSQ is
    readable from the observation, so a short pretraining imitates it closely."""
    from routeforge.training.policies.learned.ddqn_workload_guided.training import train_ddqn
    from routeforge.training.policies.learned.sac_qos.training import train_sac

    profiles, workload = _setting(n=150, rate=60.0)
    env = QosGraphEnv(profiles, [0, 1, 2], workload, 0.05, variant="baseline", pad=4)
    if trainer == "ddqn":
        env.set_episode = lambda k: None  # the DQN trainer sets 001's guidance per episode
        info = train_ddqn(env, DdqnSettings(episodes=1, teacher="join_shortest_queue", demo_episodes=3,
                                            pretrain_steps=400, batch_size=64), log=lambda _: None)
    else:
        info = train_sac(env, SacSettings(total_steps=150, teacher="join_shortest_queue", demo_episodes=3,
                                          pretrain_steps=400), log=lambda _: None)
    assert info.pretrain["teacher"] == "join_shortest_queue" and info.pretrain["demonstrations"] >= 450
    assert info.pretrain["agreement_with_teacher"] > 0.6
    assert info.curve and info.curve[0]["steps"] > 0


def test_sac_steps_environment_copies_together_within_its_budget():
    from routeforge.training.policies.learned.sac_qos.training import train_sac

    profiles, workload = _setting(n=40, rate=60.0)
    env = QosGraphEnv(profiles, [0, 1, 2], workload, 0.05, variant="baseline", pad=4)
    info = train_sac(env, SacSettings(total_steps=100, n_envs=4, teacher=None, warmup_steps=20, batch_size=16),
                     log=lambda _: None)
    curve = info.curve
    assert [c["episode"] for c in curve] == list(range(len(curve))) and len(curve) % 4 == 0
    assert max(c["steps"] for c in curve) == 100  # the last round is cut at the budget
    assert curve[-1]["loss"] is not None


def test_margin_pull_decays_to_its_floor_and_stays():
    """The teacher's large-margin pull decays per episode but never below `margin_floor` (DQfD keeps
    it for the whole run); without a floor it fades toward zero."""
    from routeforge.training.policies.learned.ddqn_workload_guided.training import train_ddqn

    profiles, workload = _setting(n=40, rate=60.0)
    env = WorkloadAwareEnv(profiles, workload, variant="aware", models=[0, 1, 2])
    weights = {}
    for floor in (0.0, 0.3):
        info = train_ddqn(env, DdqnSettings(episodes=4, teacher="join_shortest_queue", demo_episodes=1,
                                            pretrain_steps=10, batch_size=16, margin_decay=0.5,
                                            margin_floor=floor), log=lambda _: None)
        weights[floor] = [row["margin_weight"] for row in info.curve]
    assert weights[0.0] == pytest.approx([1.0, 0.5, 0.25, 0.125])
    assert weights[0.3] == pytest.approx([1.0, 0.5, 0.3, 0.3])


def test_keep_best_round_returns_the_weights_of_the_best_training_round():
    """With `keep_best_round` the trainer returns the weights it had at the end of the round whose
    greedy policy earned the highest validation return: the same weights as a run stopped right
    after that round, and the validation episodes play on seeds no training episode used."""
    import torch
    from routeforge.training.policies.learned.ddqn_workload_guided.training import train_ddqn

    profiles, workload = _setting(n=40, rate=60.0)
    base = dict(teacher="join_shortest_queue", demo_episodes=1, pretrain_steps=10, batch_size=16, n_envs=2)
    env = WorkloadAwareEnv(profiles, workload, variant="aware", models=[0, 1, 2])
    info = train_ddqn(env, DdqnSettings(episodes=8, keep_best_round=True, **base), log=lambda _: None)
    net = info.network
    rounds = [v["validation_score"] for v in info.validation]
    kept = info.kept_round
    # the pretrained weights are the first candidate: RL has to beat its own start to be kept
    assert [v["first_episode"] for v in info.validation] == [None, 0, 2, 4, 6]
    assert kept == info.validation[int(np.argmax(rounds))]
    assert kept["first_episode"] is not None and kept["first_episode"] < 6  # on these seeds: a middle round
    assert not set(validation_seeds(0, 2)) & {training_seed(0, k) for k in range(10**4)}
    env = WorkloadAwareEnv(profiles, workload, variant="aware", models=[0, 1, 2])
    run = train_ddqn(env, DdqnSettings(episodes=kept["first_episode"] + 2, **base), log=lambda _: None)
    stopped = run.network
    for name, value in stopped.state_dict().items():
        assert torch.equal(value, net.state_dict()[name]), name


def test_teacher_can_be_judged_by_the_return_of_the_students_clone():
    """With a student, `choose_teacher` compares the returns of the student's clones of the
    candidates, not the candidates' own: the scores are `clone_return`'s, reproducibly; and the DQN
    trainer judges every candidate that way with `teacher_choice: clone`, leaving its own training
    untouched."""
    import torch
    from routeforge.training.policies.learned.ddqn_workload_guided.training import train_ddqn
    from routeforge.training.policies.rl.networks import mlp
    from routeforge.training.policies.rl.teacher import Student, clone_return, teacher_return

    profiles, workload = _setting(n=80, rate=40.0)
    env = WorkloadAwareEnv(profiles, workload, variant="baseline", models=[0, 1, 2])
    n_obs, n_actions = env.observation_space.shape[0], int(env.action_space.n)
    student = Student(lambda: mlp(n_obs, n_actions), demo_episodes=2, steps=200)
    seeds = (5, 6, 7)
    chosen, scores = choose_teacher(env, ("join_shortest_queue", "route_balance"), seeds=seeds,
                                    log=lambda _: None, student=student)
    again = {name: float(clone_return(env, name, student, seeds).mean()) for name in scores}
    assert scores == pytest.approx(again) and chosen in scores
    own = np.mean([teacher_return(env, "join_shortest_queue", s) for s in seeds])
    assert scores["join_shortest_queue"] != pytest.approx(own)  # the clone's return, not JSQ's own

    base = dict(episodes=1, teacher="auto", demo_episodes=1, pretrain_steps=20, batch_size=16)
    small = WorkloadAwareEnv(profiles, _setting(n=40, rate=60.0)[1], variant="aware", models=[0, 1, 2])
    info = train_ddqn(small, DdqnSettings(teacher_choice="clone", **base), log=lambda _: None)
    judged = info.network
    assert set(info.pretrain["teacher_returns"]) == set(teachers("load"))
    chosen = info.pretrain["teacher"]
    # the trainer's own draws are those of a run told the chosen teacher outright
    run = train_ddqn(small, DdqnSettings(**{**base, "teacher": chosen}), log=lambda _: None)
    fixed = run.network
    for name, value in fixed.state_dict().items():
        assert torch.equal(value, judged.state_dict()[name]), name


def test_sac_actor_alone_can_be_cloned_before_the_joint_pretraining():
    """`clone_steps` trains the actor alone by cross-entropy on the teacher's demonstrations: with
    no joint update at all it already imitates JSQ on 000's baseline features, where an untrained
    actor does not."""
    from routeforge.training.policies.learned.sac_qos.training import train_sac

    profiles, workload = _setting(n=150, rate=60.0)
    agreement = {}
    for clone_steps in (0, 400):
        env = QosGraphEnv(profiles, [0, 1, 2], workload, 0.05, variant="baseline", pad=4)
        info = train_sac(env, SacSettings(total_steps=20, teacher="join_shortest_queue", demo_episodes=3,
                                          pretrain_steps=0, clone_steps=clone_steps), log=lambda _: None)
        agreement[clone_steps] = info.pretrain["agreement_with_teacher"]
    assert agreement[400] > 0.6 and agreement[400] > agreement[0] + 0.2


def test_sac_keep_best_round_returns_the_actor_that_delivered_the_best_validation_qos():
    """SAC with `keep_best_round` on 000's HAN: the cloned actor and the actor after each round are
    judged on the validation seeds by the QoS they deliver (the environment's objective, not the
    shaped reward), routing as `act` says (sampled here), and the actor returned delivers exactly
    the kept candidate's QoS when replayed on those seeds."""
    from routeforge.training.policies.learned.sac_qos.training import train_sac
    from routeforge.training.policies.rl.rollout import episode_return, sampled

    profiles, workload = _setting(n=60, rate=60.0)
    env = QosGraphEnv(profiles, [0, 1, 2], workload, 0.05, variant="han", pad=4)
    settings = SacSettings(total_steps=180, teacher="join_shortest_queue", demo_episodes=1, pretrain_steps=5,
                           clone_steps=50, keep_best_round=True, batch_size=16, hidden=16, heads=2)
    info = train_sac(env, settings, log=lambda _: None)
    actor = info.network
    firsts = [v["first_episode"] for v in info.validation]
    assert firsts[0] is None and firsts[1:] == sorted(firsts[1:]) and len(firsts) >= 3
    assert {v["metric"] for v in info.validation} == {"qos"}
    scores = [v["validation_score"] for v in info.validation]
    assert info.kept_round == info.validation[int(np.argmax(scores))]
    judge = QosGraphEnv(profiles, [0, 1, 2], workload, 0.05, variant="han", pad=4)
    replayed = np.mean([episode_return(judge, sampled(actor, settings.seed), s, "qos")
                        for s in validation_seeds(settings.seed, settings.validation_episodes)])
    assert replayed == pytest.approx(max(scores))
