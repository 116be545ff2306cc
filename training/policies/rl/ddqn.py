"""001's double DQN over `WorkloadAwareEnv`: TorchRL's `DQNLoss(double_dqn=True)` with a soft-updated target
network, a replay buffer and ε-greedy exploration; network obs-64-64-actions as in 001.

Episode k sets the environment's guidance weight λ_k = e^(−0.5 k) and, for the guided variant,
001's guided discount γ̃ = (1 − e^(−0.5 k)) · γ (the heuristic carries the credit early on).
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
    curve, steps = [], 0
    for k in range(settings.episodes):
        env.set_episode(k)
        guided = getattr(env, "variant", "") == "guided"
        gamma = (1 - math.exp(-0.5 * (k + 1))) * settings.gamma if guided else settings.gamma
        loss.make_value_estimator(gamma=gamma)
        obs, _ = env.reset(seed=settings.seed * 1000 + k)
        start, total, losses, done = time.perf_counter(), 0.0, [], False
        while not done:
            eps = max(settings.eps_end, settings.eps_start - (settings.eps_start - settings.eps_end)
                      * steps / settings.eps_decay_steps)
            if rng.random() < eps:
                action = int(rng.integers(n_actions))
            else:
                with torch.no_grad():
                    action = int(net(torch.as_tensor(obs)).argmax())
            nxt, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            buffer.add(TensorDict({
                "observation": torch.as_tensor(obs), "action": torch.nn.functional.one_hot(
                    torch.tensor(action), n_actions),
                "next": {"observation": torch.as_tensor(nxt), "reward": torch.tensor([reward * settings.reward_scale],
                                                                                dtype=torch.float32),
                         "done": torch.tensor([done]), "terminated": torch.tensor([terminated])},
            }, batch_size=[]))
            obs, total, steps = nxt, total + reward, steps + 1
            if steps >= settings.warmup_steps and steps % settings.learn_every == 0:
                batch = buffer.sample()
                value = loss(batch)["loss"]
                optim.zero_grad()
                value.backward()
                optim.step()
                updater.step()
                losses.append(float(value.detach()))
        curve.append({"episode": k, "return": total, "steps": steps, "epsilon": eps, "gamma": gamma,
                      "guidance": getattr(env, "guidance", 0.0), "loss": float(np.mean(losses)) if losses else None,
                      "seconds": time.perf_counter() - start})
        learning = (f"loss {curve[-1]['loss']:.3g}" if losses
                    else f"filling the replay buffer ({steps}/{settings.warmup_steps} warm-up steps)")
        log(f"episode {k}: return {total:.0f}, {steps} steps so far, ε {eps:.2f}, {learning}")
    return net.eval(), {"settings": settings.model_dump(), "curve": curve}
