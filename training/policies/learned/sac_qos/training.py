"""000's discrete SAC over `QosGraphEnv` with TorchRL's `DiscreteSACLoss` (two Q networks, soft-updated
targets, learned temperature): the actor and the critics read the state through a HAN
(`model.HanHead`) or, for 000's baseline RL, an MLP over the expert-level features.

With a teacher (`SacSettings.teacher`, `training.policies.rl.teacher`) the actor starts as the best
heuristic: the teacher's demonstrations fill the replay buffer, `pretrain_steps` updates fit the
actor to the teacher's actions (cross-entropy) and the critics to the demonstrations (TD), and
during RL the cross-entropy on demonstration batches stays, weighted max(bc_floor, bc_weight ·
bc_decay^k) in episode k (`teacher.pull_weight`, the DQN's schedule); exploration comes from the
policy itself from the first step (no random warm-up).
With `keep_best_round`, the pretrained actor and the actor after each round are judged on validation
episodes, routing as `act` says, and the best is returned (`rollout.BestRound`).
With `n_envs` > 1, copies of the environment play consecutive episodes together (one batched
forward pass of the actor per step; `rollout.play_round`), updates per decision unchanged.
With `paired_baseline` the copies earn their reward less the teacher's on the same arrivals
(`rl.paired_baseline`: 000 decides at each arrival, so decision k happens at the same time for
every policy); `keep_best_round` judges on the environment's own objective as before.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import numpy as np
from routeforge.core.progress import format_count
from routeforge.training.policies.learned.sac_qos.settings import SacSettings  # noqa: F401 - re-exported for callers
from routeforge.training.policies.rl.rollout import (
    BestRound,
    TrainerRun,
    greedy,
    play_round,
    round_label,
    sampled,
    training_seed,
    transitions,
)
from routeforge.training.policies.rl.teacher import Student, demonstrate, fit_clone, pull_weight, resolve_teacher


def networks(env, settings: SacSettings):
    """(actor logits network, Q network) for the environment's variant."""
    from routeforge.training.policies.learned.sac_qos.model import HanHead  # lazy: dill, torch on first use
    from routeforge.training.policies.rl.networks import mlp  # lazy: dill, torch on first use

    spec, n_actions = env.observation_spec(), env.action_space.n
    if spec["variant"] == "han":
        return (HanHead(spec, n_actions, settings.hidden, settings.heads),
                HanHead(spec, n_actions, settings.hidden, settings.heads))
    return mlp(spec["size"], n_actions, (settings.hidden,) * 2), mlp(spec["size"], n_actions, (settings.hidden,) * 2)


def train_sac(env, settings: SacSettings, log: Callable[[str], None] = print) -> TrainerRun:
    """Returns the actor's logits network (obs → action logits) and the learning curve per episode."""
    import torch
    from routeforge.training.policies.rl.paired_baseline import PairedBaseline, heuristic_teacher  # lazy: gymnasium
    from tensordict.nn import TensorDictModule
    from torchrl.data import LazyTensorStorage, OneHot, ReplayBuffer
    from torchrl.modules import OneHotCategorical, ProbabilisticActor
    from torchrl.objectives import DiscreteSACLoss, SoftUpdate

    torch.manual_seed(settings.seed)
    n_actions = env.action_space.n
    spec = OneHot(n_actions)
    actor_net, q_net = networks(env, settings)
    actor = ProbabilisticActor(TensorDictModule(actor_net, in_keys=["observation"], out_keys=["logits"]),
                               in_keys=["logits"], out_keys=["action"], spec=spec,
                               distribution_class=OneHotCategorical)
    qvalue = TensorDictModule(q_net, in_keys=["observation"], out_keys=["action_value"])
    # vmap over the Q networks cannot trace the HAN's data-dependent edge lists
    loss = DiscreteSACLoss(actor, qvalue, action_space=spec, num_actions=n_actions, deactivate_vmap=True,
                           target_entropy_weight=settings.target_entropy_weight, alpha_init=settings.alpha_init)
    loss.make_value_estimator(gamma=settings.gamma)
    updater = SoftUpdate(loss, tau=settings.target_tau)
    optim = torch.optim.Adam(loss.parameters(), lr=settings.learning_rate)
    buffer = ReplayBuffer(storage=LazyTensorStorage(settings.buffer_size), batch_size=settings.batch_size)
    rng = np.random.default_rng(settings.seed)
    updates = 0

    def behaviour_cloning(weight: float):
        idx = torch.as_tensor(rng.integers(len(demo_expert), size=settings.batch_size))
        return weight * torch.nn.functional.cross_entropy(actor_net(demo_obs[idx]), demo_expert[idx])

    student = (Student(lambda: networks(env, settings)[0], settings.demo_episodes,
                       settings.clone_steps + settings.pretrain_steps, settings.seed,
                       settings.learning_rate, settings.batch_size)
               if settings.teacher_choice == "clone" else None)
    teacher, teacher_scores = resolve_teacher(env, settings.teacher, settings.seed, log, student)
    pretrain: dict = {}
    start = time.perf_counter()
    if teacher is not None:
        demos = demonstrate(env, teacher, settings.demo_episodes, settings.seed, settings.demo_noise)
        buffer.extend(transitions(list(demos.transitions()), n_actions))
        demo_obs, demo_expert = torch.as_tensor(demos.observation), torch.as_tensor(demos.expert)
        # the actor alone first: cheap, and most of the imitation
        fit_clone(actor_net, demos, settings.clone_steps, settings.learning_rate, settings.batch_size, rng)
        for _ in range(settings.pretrain_steps):
            value = loss(buffer.sample())["loss_qvalue"] + behaviour_cloning(settings.bc_weight)
            optim.zero_grad()
            value.backward()
            optim.step()
            updater.step()
        pretrain = demos.summary(actor_net, teacher, teacher_scores, time.perf_counter() - start)
        log(f"pretrained on {len(demos)} {teacher} demonstrations: the actor's most probable action is the "
            f"teacher's in {pretrain['agreement_with_teacher']:.1%} of them")
    best = (BestRound(env, settings.seed, settings.validation_episodes,
                      lambda net: sampled(net, settings.seed) if settings.act == "sample" else greedy(net))
            if settings.keep_best_round else None)
    if best is not None and teacher is not None:
        best.offer(actor_net, log, None, 0)
    warmup = 0 if teacher is not None else settings.warmup_steps
    envs = [env] + [copy.deepcopy(env) for _ in range(settings.n_envs - 1)]
    if settings.paired_baseline:
        if teacher is None:
            raise ValueError("SacSettings.paired_baseline needs a teacher: its reward on the same arrivals is what "
                             "is subtracted")
        envs = [PairedBaseline(e, copy.deepcopy(env), heuristic_teacher(teacher)) for e in envs]
    curve, steps, episode, alpha = [], 0, 0, float("nan")
    while steps < settings.total_steps:  # rounds of n_envs episodes stepped together, cut at the budget
        bc_weight = (pull_weight(settings.bc_weight, settings.bc_decay, episode, settings.bc_floor)
                     if teacher is not None else 0.0)
        losses: list[float] = []
        steps_before = steps

        def act(observations: np.ndarray) -> list[int]:
            if steps < warmup:
                return rng.integers(n_actions, size=len(observations)).tolist()
            with torch.no_grad():
                logits = actor_net(torch.as_tensor(observations))
            return torch.distributions.Categorical(logits=logits).sample().tolist()

        def after_step(rows) -> None:
            nonlocal steps, updates, alpha
            buffer.extend(transitions(rows, n_actions))
            steps += len(rows)
            if steps < warmup:
                updates = steps // settings.learn_every
            while steps >= warmup and updates < steps // settings.learn_every:
                parts = loss(buffer.sample())
                value = parts["loss_actor"] + parts["loss_qvalue"] + parts["loss_alpha"]
                if bc_weight > 0:
                    value = value + behaviour_cloning(bc_weight)
                optim.zero_grad()
                value.backward()
                optim.step()
                updater.step()
                losses.append(float(value.detach()))
                alpha = float(parts["alpha"])
                updates += 1

        ks = list(range(episode, episode + len(envs)))
        played = play_round(envs, ks, lambda k: training_seed(settings.seed, k), act, after_step,
                            budget=settings.total_steps - steps)
        for p in played:
            curve.append({"episode": p["episode"], "return": p["return"],
                          "steps": steps if p["finished_at"] is None else steps_before + p["finished_at"],
                          "loss": float(np.mean(losses)) if losses else None, "alpha": alpha, "bc_weight": bc_weight,
                          "seconds": time.perf_counter() - start})
        learning = (f"loss {curve[-1]['loss']:.3g}, α {curve[-1]['alpha']:.3f}" if losses
                    else f"filling the replay buffer ({steps}/{warmup} warm-up steps)")
        returns = ", ".join(f"{p['return']:.1f}" for p in played)
        log(format_count("sac", min(steps, settings.total_steps), settings.total_steps, "steps",
                         f"({round_label(ks)}: return {returns}, {learning})"))
        if best is not None:
            best.offer(actor_net, log, episode, steps)
        episode += len(envs)
    run = TrainerRun(actor_net, settings.model_dump(), curve, pretrain,
                     curve_return="less the teacher's on the same arrivals" if settings.paired_baseline else "return",
                     train_seconds=time.perf_counter() - start)
    if best is not None:
        best.restore(actor_net, run, log)
    actor_net.eval()
    return run
