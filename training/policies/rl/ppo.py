"""004's PPO (RL-PO) over `SlotDistributionEnv` with Stable-Baselines3: a Gaussian policy over m logits that the
environment maps to the simplex; tanh MLP 90-60, clip 0.2, GAE λ 0.95, γ 0.99 as in 004. Rewards
are normalised by a running return estimate (VecNormalize); observations are not, so the exported
network takes the observation exactly as `artifacts.policy.observation_slot_distribution` builds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from core.config.policies import PpoSettings  # noqa: F401 - re-exported for callers


def train_ppo(make_env: Callable[[], object], settings: PpoSettings,
              log: Callable[[str], None] = print) -> tuple[object, dict]:
    """Returns the network that maps an observation to the routing distribution (`simplex_actor`)
    and the learning curve (return, length and wall time of every training episode)."""
    import torch.nn as nn
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
                    log(f"episode {len(curve) - 1}: return {curve[-1]['return']:.1f} over {curve[-1]['slots']} slots, "
                        f"{self.num_timesteps} steps")
            return True

    if settings.n_steps % settings.n_envs:
        raise ValueError(f"PpoSettings: n_steps ({settings.n_steps}) must be a multiple of n_envs ({settings.n_envs})")
    copies = [lambda: Monitor(make_env())] * settings.n_envs
    # forked workers inherit the parent's workload tables instead of unpickling them
    vec = SubprocVecEnv(copies, start_method="fork") if settings.subprocess else DummyVecEnv(copies)
    venv = VecNormalize(vec, norm_obs=False, norm_reward=True, gamma=settings.gamma)
    model = PPO("MlpPolicy", venv, learning_rate=settings.learning_rate, n_steps=settings.n_steps // settings.n_envs,
                batch_size=settings.batch_size, n_epochs=settings.n_epochs, gamma=settings.gamma,
                gae_lambda=settings.gae_lambda, clip_range=settings.clip_range, seed=settings.seed, device="cpu",
                policy_kwargs={"net_arch": {"pi": list(settings.hidden), "vf": list(settings.hidden)},
                               "activation_fn": nn.Tanh}, verbose=0)
    try:
        model.learn(total_timesteps=settings.total_steps, callback=Curve())
    finally:
        venv.close()  # stops the worker processes
    return simplex_actor(model.policy), {"settings": settings.model_dump(), "curve": curve,
                                         "train_seconds": time.perf_counter() - start}


def simplex_actor(policy):
    """The deterministic policy (the Gaussian's mean) as observation → routing probabilities."""
    import torch
    import torch.nn as nn

    class SimplexActor(nn.Module):
        def __init__(self):
            super().__init__()
            self.policy = policy

        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            features = self.policy.extract_features(observation, self.policy.pi_features_extractor)
            logits = self.policy.action_net(self.policy.mlp_extractor.forward_actor(features))
            return torch.softmax(logits, dim=-1)

    return SimplexActor().eval()


def distribution_policy(actor) -> Callable[[np.ndarray], np.ndarray]:
    """An exported-style actor as an `SlotDistributionEnv` policy: the environment applies softmax to what it is
    given, so hand it log-probabilities."""
    import torch

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            probs = actor(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()
        return np.log(np.maximum(probs, 1e-12))

    return act
