"""001's double DQN over `WorkloadAwareEnv`: TorchRL's `DQNLoss(double_dqn=True)` with a soft-updated target
network, a replay buffer and ε-greedy exploration; network obs-64-64-actions as in 001.

Episode k sets the environment's guidance weight λ_k = e^(−0.5 k) and, for the guided variant,
001's guided discount γ̃ = (1 − e^(−0.5 k)) · γ (the heuristic carries the credit early on).
With `n_envs` > 1, that many copies of the environment play episodes k … k + n_envs − 1 together
(one batched forward pass per step, transitions added to the buffer as one batch) and the round
uses episode k's discount and margin weight; updates per decision stay `1 / learn_every`.

With a teacher (`DdqnSettings.teacher`, `training.policies.rl.teacher`) the network starts from the
best heuristic, in the manner of DQfD (Hester et al. 2018): the teacher's demonstrations fill the
replay buffer, `pretrain_steps` updates minimise the TD loss plus the large-margin loss
max_a [Q(s, a) + l(a_E, a)] − Q(s, a_E) (l = `margin` for a ≠ a_E, the teacher's action) on them,
and during RL the margin loss on demonstration batches stays, weighted max(margin_floor,
margin_weight · margin_decay^k) in episode k (DQfD keeps it constant), with exploration at ε_end
from the start (the greedy policy is already the teacher's).

`keep_best_round` returns the pretrained weights or those at the end of the round whose greedy policy
scores the highest return on `validation_episodes` fixed episodes of the training workload (seeds no
training or evaluation episode uses), instead of the last ones (`rollout.BestRound`): a long run can
collapse after holding the teacher's level.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable

import numpy as np
from routeforge.core.progress import format_count
from routeforge.training.policies.learned.ddqn_workload_guided.settings import DdqnSettings  # noqa: F401 - re-exported for callers
from routeforge.training.policies.rl.rollout import (
    BestRound,
    TrainerRun,
    greedy,
    play_round,
    round_label,
    training_seed,
    transitions,
)
from routeforge.training.policies.rl.teacher import Student, demonstrate, pull_weight, resolve_teacher


def train_ddqn(env, settings: DdqnSettings, log: Callable[[str], None] = print) -> TrainerRun:
    """Returns the trained Q network (obs → Q values) and the learning curve per episode."""
    import torch
    from routeforge.training.policies.learned.ddqn_workload_guided.model import (  # lazy: dill, torch on first use
        MASKED_Q,
        MaskFull,
        PerInstanceQ,
        full_flags,
    )
    from routeforge.training.policies.rl.networks import mlp  # lazy: dill, torch on first use
    from torchrl.data import LazyTensorStorage, OneHot, ReplayBuffer
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss, SoftUpdate

    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    n_obs, n_actions = env.observation_space.shape[0], env.action_space.n

    def make_net():
        if settings.network == "per_instance":
            spec = env.observation_spec()
            return PerInstanceQ(len(spec["global"]), len(spec["per_instance"]), spec["instances"],
                                wait=n_actions > spec["instances"], hidden=settings.hidden[0])
        if settings.network == "mlp":
            return mlp(n_obs, n_actions, settings.hidden)
        raise ValueError(f"DdqnSettings.network: {settings.network!r} is not mlp or per_instance")

    flags = full_flags(env.observation_spec())

    def masked_net():  # `DdqnSettings.mask_full`: the network never routes to a full instance
        return make_net() if flags is None else MaskFull(make_net(), flags)

    net = masked_net()
    actor = QValueActor(net, in_keys=["observation"], spec=OneHot(n_actions))
    loss = DQNLoss(actor, double_dqn=True, delay_value=True, action_space="one-hot", loss_function="smooth_l1")
    updater = SoftUpdate(loss, tau=settings.target_tau)
    optim = torch.optim.Adam(loss.parameters(), lr=settings.learning_rate)
    buffer = ReplayBuffer(storage=LazyTensorStorage(settings.buffer_size), batch_size=settings.batch_size)

    def update(batch, margin_weight: float) -> float:
        value = loss(batch)["loss"]
        if margin_weight > 0:
            idx = torch.as_tensor(rng.integers(len(demo_expert), size=settings.batch_size))
            value = value + margin_weight * large_margin(net(demo_obs[idx]), demo_expert[idx], settings.margin)
        optim.zero_grad()
        value.backward()
        optim.step()
        updater.step()
        return float(value.detach())

    student = (Student(masked_net, settings.demo_episodes, settings.pretrain_steps, settings.seed,
                       settings.learning_rate, settings.batch_size)
               if settings.teacher_choice == "clone" else None)
    teacher, teacher_scores = resolve_teacher(env, settings.teacher, settings.seed, log, student)
    pretrain: dict = {}
    if teacher is not None:
        start = time.perf_counter()
        demos = demonstrate(env, teacher, settings.demo_episodes, settings.seed, settings.demo_noise)
        buffer.extend(transitions(list(demos.transitions()), n_actions, settings.reward_scale))
        demo_obs, demo_expert = torch.as_tensor(demos.observation), torch.as_tensor(demos.expert)
        loss.make_value_estimator(gamma=settings.gamma)
        for _ in range(settings.pretrain_steps):
            update(buffer.sample(), settings.margin_weight)
        pretrain = demos.summary(net, teacher, teacher_scores, time.perf_counter() - start)
        log(f"pretrained on {len(demos)} {teacher} demonstrations: the greedy policy takes the teacher's action "
            f"in {pretrain['agreement_with_teacher']:.1%} of them")
    envs = [env] + [copy.deepcopy(env) for _ in range(settings.n_envs - 1)]
    curve, steps, updates, eps = [], 0, 0, settings.eps_start
    guided = getattr(env, "variant", "") == "guided"
    # transitions reach the buffer in one write just before an update samples it (a TorchRL write per
    # decision cost ~0.9 ms, as much as an environment step): every update sees the buffer it would
    # have seen with a write per decision
    pending: list[tuple] = []

    def flush() -> None:
        if pending:
            buffer.extend(transitions(pending, n_actions, settings.reward_scale))
            pending.clear()

    best = BestRound(env, settings.seed, settings.validation_episodes, greedy) if settings.keep_best_round else None
    if best is not None and teacher is not None:
        best.offer(net, log, None, 0)
    for first in range(0, settings.episodes, len(envs)):  # a round: one episode per copy, stepped together
        ks = list(range(first, min(first + len(envs), settings.episodes)))
        gamma = (1 - math.exp(-0.5 * (first + 1))) * settings.gamma if guided else settings.gamma
        loss.make_value_estimator(gamma=gamma)
        margin_weight = (pull_weight(settings.margin_weight, settings.margin_decay, first, settings.margin_floor)
                         if teacher is not None else 0.0)
        for e, k in zip(envs, ks):
            e.set_episode(k)
        losses: list[float] = []
        start, steps_before = time.perf_counter(), steps

        def act(observations: np.ndarray) -> list[int]:
            nonlocal eps
            eps = settings.eps_end if teacher is not None else max(
                settings.eps_end, settings.eps_start - (settings.eps_start - settings.eps_end) * steps
                / settings.eps_decay_steps)
            with torch.no_grad():
                q = net(torch.as_tensor(observations))
            allowed = (q > MASKED_Q / 2).numpy()  # exploration, too, never routes to a full instance
            return [int(rng.choice(np.flatnonzero(ok))) if rng.random() < eps else a
                    for a, ok in zip(q.argmax(1).tolist(), allowed)]

        def after_step(rows) -> None:
            nonlocal steps, updates
            pending.extend(rows)
            steps += len(rows)
            if steps >= settings.warmup_steps or teacher is not None:
                while updates < steps // settings.learn_every:  # the same updates per decision as one copy
                    flush()
                    losses.append(update(buffer.sample(), margin_weight))
                    updates += 1
            else:
                updates = steps // settings.learn_every

        played = play_round(envs[:len(ks)], ks, lambda k: training_seed(settings.seed, k), act, after_step)
        flush()
        for e, p in zip(envs, played):
            curve.append({"episode": p["episode"], "return": p["return"], "steps": steps_before + p["finished_at"],
                          "epsilon": eps, "gamma": gamma, "guidance": getattr(e, "guidance", 0.0),
                          "margin_weight": margin_weight, "loss": float(np.mean(losses)) if losses else None,
                          "seconds": time.perf_counter() - start})
        learning = (f"loss {curve[-1]['loss']:.3g}" if losses
                    else f"filling the replay buffer ({steps}/{settings.warmup_steps} warm-up steps)")
        returns = ", ".join(f"{p['return']:.0f}" for p in played)
        log(format_count("ddqn", ks[-1] + 1, settings.episodes, "episodes",
                         f"({round_label(ks)}: return {returns}, {steps} steps so far, ε {eps:.2f}, {learning})"))
        if best is not None:
            best.offer(net, log, first, steps)
    run = TrainerRun(net, settings.model_dump(), curve, pretrain)
    if best is not None:
        best.restore(net, run, log)
    net.eval()
    return run


def large_margin(q, expert, margin: float):
    """DQfD's supervised loss: max_a [Q(s, a) + l(a_E, a)] − Q(s, a_E), l = `margin` off the expert's action."""
    import torch

    bonus = torch.full_like(q, margin).scatter_(1, expert[:, None], 0.0)
    return ((q + bonus).max(1).values - q.gather(1, expert[:, None]).squeeze(1)).mean()
