"""Training reward less what the teacher earns on the same arrivals (a paired baseline).

Why: in 004's setting an episode's return is set mostly by its arrivals, not by the policy. Over
training episodes of 128 slots it ranges from ~1,000 to ~19,000 with the phase of the switched
process, while the best static lean away from shortest queue is worth ~0.1% of a return
(docs/results.md). PPO started at shortest queue could not tell such a gain from that noise.

Each episode, the teacher (one constant action, e.g. zero biases: shortest queue) is played on a
second copy of the environment with the same workload seed, and its reward at slot t is subtracted
from the learner's. The teacher's rewards depend on the seed alone, never on the learner's actions
(and the slot count at which an episode ends is set by its arrivals and `max_slots`), so the
subtracted sum has the same expectation under every policy: the policy that maximises the paired
return maximises the return, and advantages keep their expectation. What the subtraction removes is
the share of the return that the arrivals decide, the common-random-numbers comparison simulation
studies use to rank two systems. The cost is a second simulation per episode.

The wrapper draws the episode's seed itself (from its own generator, seeded on the first seeded
reset, as `episode_seed` does for an environment), so both copies replay the same arrivals.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from training.policies.simulator.episode_seed import episode_seed


class PairedBaseline(gym.Wrapper):
    """`env` whose reward is its own less `teacher`'s on a copy (`shadow`) given the same seed."""

    def __init__(self, env: gym.Env, shadow: gym.Env, teacher_action: np.ndarray):
        super().__init__(env)
        self.shadow, self.teacher_action = shadow, np.asarray(teacher_action, dtype=np.float32)
        self._seeds = np.random.default_rng(0)
        self._baseline: list[float] = []
        self._t = 0

    def reset(self, *, seed: int | None = None, options=None):
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        seed = episode_seed(self._seeds, seed)
        self._baseline = teacher_rewards(self.shadow, lambda _obs: self.teacher_action, seed)
        self._t = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        baseline = self._baseline[self._t] if self._t < len(self._baseline) else 0.0
        self._t += 1
        info = dict(info, reward=reward, teacher_reward=baseline)
        return obs, reward - baseline, terminated, truncated, info


def teacher_rewards(env: gym.Env, act: Callable[[np.ndarray], np.ndarray], seed: int) -> list[float]:
    """The per-step rewards of one episode of `act` on `env` with workload seed `seed`."""
    obs, _ = env.reset(seed=seed)
    rewards, done = [], False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(act(obs))
        rewards.append(float(reward))
        done = terminated or truncated
    return rewards
