"""001's double DQN over `WorkloadAwareEnv`: TorchRL's `DQNLoss(double_dqn=True)` with a soft-updated target
network, a replay buffer and ε-greedy exploration; network obs-64-64-actions as in 001.

Episode k sets the environment's guidance weight λ_k = e^(−0.5 k) and, for the guided variant,
001's guided discount γ̃ = (1 − e^(−0.5 k)) · γ (the heuristic carries the credit early on).

With a teacher (`DdqnSettings.teacher`, `training.policies.rl.teacher`) the network starts from the
best heuristic, in the manner of DQfD (Hester et al. 2018): the teacher's demonstrations fill the
replay buffer, `pretrain_steps` updates minimise the TD loss plus the large-margin loss
max_a [Q(s, a) + l(a_E, a)] − Q(s, a_E) (l = `margin` for a ≠ a_E, the teacher's action) on them,
and during RL the margin loss on demonstration batches stays, weighted margin_weight ·
margin_decay^k in episode k, with exploration at ε_end from the start (the greedy policy is already
the teacher's).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from core.config.policies import DdqnSettings  # noqa: F401 - re-exported for callers


def train_ddqn(env, settings: DdqnSettings, log: Callable[[str], None] = print) -> tuple[object, dict]:
    """Returns the trained Q network (obs → Q values) and the learning curve per episode."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, OneHot, ReplayBuffer
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss, SoftUpdate

    from training.policies.rl.networks import PerInstanceQ, mlp
    from training.policies.rl.teacher import demonstrate, resolve_teacher

    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    n_obs, n_actions = env.observation_space.shape[0], env.action_space.n
    if settings.network == "per_instance":
        spec = env.observation_spec()
        net = PerInstanceQ(len(spec["global"]), len(spec["per_instance"]), spec["instances"],
                           wait=n_actions > spec["instances"], hidden=settings.hidden[0])
    elif settings.network == "mlp":
        net = mlp(n_obs, n_actions, settings.hidden)
    else:
        raise ValueError(f"DdqnSettings.network: {settings.network!r} is not mlp or per_instance")
    actor = QValueActor(net, in_keys=["observation"], spec=OneHot(n_actions))
    loss = DQNLoss(actor, double_dqn=True, delay_value=True, action_space="one-hot", loss_function="smooth_l1")
    updater = SoftUpdate(loss, tau=settings.target_tau)
    optim = torch.optim.Adam(loss.parameters(), lr=settings.learning_rate)
    buffer = ReplayBuffer(storage=LazyTensorStorage(settings.buffer_size), batch_size=settings.batch_size)

    def transition(obs, action, reward, nxt, done, terminated):
        return TensorDict({
            "observation": torch.as_tensor(obs), "action": torch.nn.functional.one_hot(torch.tensor(action), n_actions),
            "next": {"observation": torch.as_tensor(nxt),
                     "reward": torch.tensor([reward * settings.reward_scale], dtype=torch.float32),
                     "done": torch.tensor([bool(done)]), "terminated": torch.tensor([bool(terminated)])},
        }, batch_size=[])

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

    teacher, teacher_scores = resolve_teacher(env, settings.teacher, settings.seed, log)
    pretrain: dict = {}
    if teacher is not None:
        start = time.perf_counter()
        demos = demonstrate(env, teacher, settings.demo_episodes, settings.seed, settings.demo_noise)
        for row in demos.transitions():
            buffer.add(transition(*row))
        demo_obs, demo_expert = torch.as_tensor(demos.observation), torch.as_tensor(demos.expert)
        loss.make_value_estimator(gamma=settings.gamma)
        for _ in range(settings.pretrain_steps):
            update(buffer.sample(), settings.margin_weight)
        pretrain = demos.summary(net, teacher, teacher_scores, time.perf_counter() - start)
        log(f"pretrained on {len(demos)} {teacher} demonstrations: the greedy policy takes the teacher's action "
            f"in {pretrain['agreement_with_teacher']:.1%} of them")
    curve, steps = [], 0
    for k in range(settings.episodes):
        env.set_episode(k)
        guided = getattr(env, "variant", "") == "guided"
        gamma = (1 - math.exp(-0.5 * (k + 1))) * settings.gamma if guided else settings.gamma
        loss.make_value_estimator(gamma=gamma)
        margin_weight = settings.margin_weight * settings.margin_decay ** k if teacher is not None else 0.0
        obs, _ = env.reset(seed=settings.seed * 1000 + k)
        start, total, losses, done = time.perf_counter(), 0.0, [], False
        while not done:
            eps = settings.eps_end if teacher is not None else max(
                settings.eps_end, settings.eps_start - (settings.eps_start - settings.eps_end) * steps
                / settings.eps_decay_steps)
            if rng.random() < eps:
                action = int(rng.integers(n_actions))
            else:
                with torch.no_grad():
                    action = int(net(torch.as_tensor(obs)).argmax())
            nxt, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            buffer.add(transition(obs, action, reward, nxt, done, terminated))
            obs, total, steps = nxt, total + reward, steps + 1
            if (steps >= settings.warmup_steps or teacher is not None) and steps % settings.learn_every == 0:
                losses.append(update(buffer.sample(), margin_weight))
        curve.append({"episode": k, "return": total, "steps": steps, "epsilon": eps, "gamma": gamma,
                      "guidance": getattr(env, "guidance", 0.0), "loss": float(np.mean(losses)) if losses else None,
                      "margin_weight": margin_weight, "seconds": time.perf_counter() - start})
        learning = (f"loss {curve[-1]['loss']:.3g}" if losses
                    else f"filling the replay buffer ({steps}/{settings.warmup_steps} warm-up steps)")
        log(f"episode {k}: return {total:.0f}, {steps} steps so far, ε {eps:.2f}, {learning}")
    return net.eval(), {"settings": settings.model_dump(), "curve": curve, "pretrain": pretrain}


def large_margin(q, expert, margin: float):
    """DQfD's supervised loss: max_a [Q(s, a) + l(a_E, a)] − Q(s, a_E), l = `margin` off the expert's action."""
    import torch

    bonus = torch.full_like(q, margin).scatter_(1, expert[:, None], 0.0)
    return ((q + bonus).max(1).values - q.gather(1, expert[:, None]).squeeze(1)).mean()
