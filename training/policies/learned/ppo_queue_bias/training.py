"""004's PPO (RL-PO) over `SlotDistributionEnv` with Stable-Baselines3: a Gaussian policy over m logits that the
environment maps to the simplex; tanh MLP 90-60, clip 0.2, GAE λ 0.95, γ 0.99 as in 004. Rewards
are normalised by a running return estimate (VecNormalize); observations are not, so the exported
network takes the observation exactly as `observation_slot_distribution` builds it.

With `teacher: fixed_split` the actor starts as the best fixed routing distribution
(`slot_teacher`): its Gaussian's mean is fitted (squared error) to the split's logits on the states
the split visits, before any PPO update. Unlike the DQN and SAC, PPO keeps no pull toward the
teacher during RL (Stable-Baselines3's loss has no slot for one); `keep_best_round` judges the
cloned actor and the actor after every rollout on validation episodes and returns the best.

With the environment's `dispatch: biased_shortest_queue` the action is a bias per instance instead
of a distribution; `teacher: shortest_queue` fits the mean to all-zero biases (join-shortest-queue
exactly) and the returned network outputs the biases (`mean_actor(..., "bias")`).

`paired_baseline` trains on the reward less the teacher's on the same arrivals
(`rl.paired_baseline`); `keep_best_round` still judges candidates by the plain return, every one on
the same validation seeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from routeforge.core.progress import format_count
from routeforge.training.policies.learned.ppo_queue_bias.settings import PpoSettings  # noqa: F401 - re-exported for callers
from routeforge.training.policies.rl.rollout import BestRound, TrainerRun
from routeforge.training.policies.rl.slot_teacher import best_fixed_split, constant_action_observations


def train_ppo(make_env: Callable[[], object], settings: PpoSettings,
              log: Callable[[str], None] = print) -> TrainerRun:
    """Returns the network that maps an observation to the action the environment takes (the routing
    distribution, or the biases where the environment dispatches by biased shortest queue;
    `mean_actor`) and the learning curve (return, length and wall time of every training episode)."""
    import torch.nn as nn
    from routeforge.training.policies.rl.paired_baseline import PairedBaseline  # lazy: gymnasium, numpy on first use
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    curve: list[dict] = []
    start = time.perf_counter()

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    curve.append({"episode": len(curve), "return": float(info["episode"]["r"]),
                                  "slots": int(info["episode"]["l"]), "steps": int(self.num_timesteps),
                                  "seconds": time.perf_counter() - start})
                    log(format_count("ppo", min(int(self.num_timesteps), settings.total_steps), settings.total_steps,
                                     "steps", f"(episode {len(curve) - 1}: return {curve[-1]['return']:.1f} over "
                                              f"{curve[-1]['slots']} slots)"))
            return True

    if settings.n_steps % settings.n_envs:
        raise ValueError(f"PpoSettings: n_steps ({settings.n_steps}) must be a multiple of n_envs ({settings.n_envs})")
    probe = make_env()
    output = "bias" if getattr(probe, "dispatch", "sample") == "biased_shortest_queue" else "probabilities"
    wanted = {"probabilities": "fixed_split", "bias": "shortest_queue"}[output]
    if settings.teacher not in (None, wanted):
        raise ValueError(f"PpoSettings.teacher: {settings.teacher!r} does not fit an environment whose action is "
                         f"{'a bias per instance' if output == 'bias' else 'a routing distribution'}; use {wanted!r}")
    demo_seeds = range(settings.seed * 1000 + 600, settings.seed * 1000 + 600 + settings.demo_episodes)
    teacher: dict = {}
    if settings.teacher == "fixed_split":
        teacher = best_fixed_split(make_env, demo_seeds, settings.teacher_resolution, log)
    elif settings.teacher == "shortest_queue":
        teacher = {"logits": np.zeros(probe.action_space.shape, dtype=np.float32)}
    if settings.paired_baseline and not teacher:
        raise ValueError("PpoSettings.paired_baseline needs a teacher (fixed_split or shortest_queue): its reward "
                         "on the same arrivals is what is subtracted")

    def copy():
        env = make_env()
        return Monitor(PairedBaseline(env, make_env(), teacher["logits"]) if settings.paired_baseline else env)

    # forked workers inherit the parent's workload tables instead of unpickling them
    vec = (SubprocVecEnv([copy] * settings.n_envs, start_method="fork") if settings.subprocess
           else DummyVecEnv([copy] * settings.n_envs))
    venv = VecNormalize(vec, norm_obs=False, norm_reward=True, gamma=settings.gamma)
    model = PPO("MlpPolicy", venv, learning_rate=settings.learning_rate, n_steps=settings.n_steps // settings.n_envs,
                batch_size=settings.batch_size, n_epochs=settings.n_epochs, gamma=settings.gamma,
                gae_lambda=settings.gae_lambda, clip_range=settings.clip_range, seed=settings.seed, device="cpu",
                policy_kwargs={"net_arch": {"pi": list(settings.hidden), "vf": list(settings.hidden)},
                               "activation_fn": nn.Tanh}, verbose=0)
    pretrain: dict = {}
    if teacher:
        observations = constant_action_observations(make_env, teacher["logits"], demo_seeds)
        pretrain = clone_mean(model.policy, observations, teacher["logits"], settings.pretrain_steps,
                              settings.learning_rate, settings.batch_size, settings.seed, output)
        pretrain |= {"teacher": settings.teacher, "demonstrations": len(observations)}
        pretrain |= {key: teacher[key] for key in ("shares", "grid") if key in teacher}
        if "return" in teacher:
            pretrain["teacher_return"] = teacher["return"]
        log(f"pretrained the actor on {len(observations)} states of the {settings.teacher.replace('_', ' ')} "
            f"teacher: largest action error {pretrain['max_action_error']:.3f}")
    best = (BestRound(probe, settings.seed, settings.validation_episodes,
                      lambda policy: env_policy(mean_actor(policy, output, train=True), output))
            if settings.keep_best_round else None)

    class Rounds(BaseCallback):
        """Judges the weights each PPO update left: at the start of every rollout after the first
        (the first would judge the pretrained weights again), and once more after the last update."""

        def _on_rollout_start(self) -> None:
            if self.num_timesteps > 0:
                best.offer(model.policy, log, len(curve), int(self.num_timesteps))

        def _on_step(self) -> bool:
            return True

    if best is not None:
        best.offer(model.policy, log, None, 0)
    try:
        model.learn(total_timesteps=settings.total_steps,
                    callback=[Curve(), Rounds()] if best is not None else Curve())
    finally:
        venv.close()  # stops the worker processes
    run = TrainerRun(None, settings.model_dump(), curve, pretrain,
                     curve_return="less the teacher's on the same arrivals" if settings.paired_baseline else "return",
                     train_seconds=time.perf_counter() - start)
    if best is not None:
        best.offer(model.policy, log, len(curve), int(model.num_timesteps))
        best.restore(model.policy, run, log)
    run.network = mean_actor(model.policy, output)
    return run


def clone_mean(policy, observations: np.ndarray, logits: np.ndarray, steps: int, learning_rate: float,
               batch_size: int, seed: int, output: str = "probabilities") -> dict:
    """Fit the Gaussian policy's mean action to `logits` on `observations` (the actor's layers only);
    returns how far the cloned actions (routing probabilities, or biases) are from the teacher's."""
    import torch

    rng = np.random.default_rng(seed)
    params = list(policy.mlp_extractor.policy_net.parameters()) + list(policy.action_net.parameters())
    optim = torch.optim.Adam(params, lr=learning_rate)
    obs, target = torch.as_tensor(observations), torch.as_tensor(logits)[None]
    policy.set_training_mode(True)
    for _ in range(steps):
        batch = obs[torch.as_tensor(rng.integers(len(obs), size=batch_size))]
        mean = policy.action_net(policy.mlp_extractor.forward_actor(
            policy.extract_features(batch, policy.pi_features_extractor)))
        loss = torch.nn.functional.mse_loss(mean, target.expand_as(mean))
        optim.zero_grad()
        loss.backward()
        optim.step()
    with torch.no_grad():
        cloned = mean_actor(policy, output, train=True)(obs)
    goal = torch.softmax(target, -1) if output == "probabilities" else target
    return {"pretrain_steps": steps, "max_action_error": float((cloned - goal).abs().max())}


def mean_actor(policy, output: str = "probabilities", train: bool = False):
    """The deterministic policy (the Gaussian's mean) as observation → routing probabilities
    (softmax of the mean, 004) or → biases (the mean, `dispatch: biased_shortest_queue`); put in
    eval mode unless `train` (a view used during training must leave SB3's modes alone)."""
    import torch
    import torch.nn as nn

    class MeanActor(nn.Module):
        def __init__(self):
            super().__init__()
            self.policy = policy

        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            features = self.policy.extract_features(observation, self.policy.pi_features_extractor)
            mean = self.policy.action_net(self.policy.mlp_extractor.forward_actor(features))
            return torch.softmax(mean, dim=-1) if output == "probabilities" else mean

    actor = MeanActor()
    return actor if train else actor.eval()


def env_policy(actor, output: str) -> Callable[[np.ndarray], np.ndarray]:
    """An exported-style actor as an `SlotDistributionEnv` policy, for either action meaning."""
    return distribution_policy(actor) if output == "probabilities" else bias_policy(actor)


def bias_policy(actor) -> Callable[[np.ndarray], np.ndarray]:
    """A bias actor (`mean_actor(..., "bias")`) as an `SlotDistributionEnv` policy: its output is the action."""
    import torch

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return actor(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()

    return act


def distribution_policy(actor) -> Callable[[np.ndarray], np.ndarray]:
    """An exported-style actor as an `SlotDistributionEnv` policy: the environment applies softmax to what it is
    given, so hand it log-probabilities."""
    import torch

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            probs = actor(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()
        return np.log(np.maximum(probs, 1e-12))

    return act
