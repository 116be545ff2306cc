"""Training reward less what the teacher earns on the same arrivals (a paired baseline).

Why: in 004's setting an episode's return is set mostly by its arrivals, not by the policy: it
swings by an order of magnitude with the phase of the switched process, while the best static lean
away from shortest queue is worth a tiny share of a return (docs/results.md). PPO started at
shortest queue could not tell such a gain from that noise.

Each episode, the teacher (one constant action, e.g. zero biases: shortest queue, or a heuristic
acting on the copy's state, `heuristic_teacher`) is played on a second copy of the environment with
the same workload seed, and its reward at step t is subtracted from the learner's; the learner's
last step takes whatever is left of the teacher's episode. The subtracted total is therefore the
teacher's return on that seed, whatever the learner does, so the policy that maximises the paired
return maximises the return, and advantages keep their expectation. What the subtraction removes is
the share of the return that the arrivals decide: the common-random-numbers comparison simulation
studies use to rank two systems. It removes most where step t happens at the same time under every
policy: a slot (004), an arrival (000); not 001's route-or-wait decisions. The cost is a second
simulation per episode.

The wrapper draws the episode's seed itself (from its own generator, seeded on the first seeded
reset, as `episode_seed` does for an environment), so both copies replay the same arrivals.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
from routeforge.training.policies.rl.teacher import teacher_action
from routeforge.training.policies.simulator.baselines import BASELINES
from routeforge.training.policies.simulator.episode_seed import episode_seed

Teacher = Callable[[gym.Env], Callable[[np.ndarray], object]]  # the shadow env -> its policy for one episode


class PairedBaseline(gym.Wrapper):
    """`env` whose reward is its own less the teacher's on a copy (`shadow`) given the same seed.
    `teacher`: the action to play every step (an array), or a `Teacher` (called once per episode)."""

    def __init__(self, env: gym.Env, shadow: gym.Env, teacher: np.ndarray | Teacher):
        super().__init__(env)
        if callable(teacher):
            self.teacher = teacher
        else:
            action = np.asarray(teacher, dtype=np.float32)
            self.teacher = lambda _env: (lambda _obs: action)
        self.shadow = shadow
        self._seeds = np.random.default_rng(0)
        self._baseline: list[float] = []
        self._t = 0

    def reset(self, *, seed: int | None = None, options=None):
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        seed = episode_seed(self._seeds, seed)
        self._baseline = teacher_rewards(self.shadow, self.teacher(self.shadow), seed)
        self._t = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        # the learner's last step takes whatever of the teacher's episode is left: the subtracted
        # total is the teacher's return whatever the learner does
        end = len(self._baseline) if terminated or truncated else self._t + 1
        baseline = float(sum(self._baseline[self._t:end]))
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


def heuristic_teacher(name: str) -> Teacher:
    """A simulator baseline (`BASELINES[name]`, fresh each episode) acting on the shadow's state, as
    the teacher's demonstrations are taken (`teacher.teacher_action`)."""
    def for_episode(env: gym.Env) -> Callable[[np.ndarray], object]:
        policy = BASELINES[name]()
        return lambda _obs: teacher_action(env, policy)

    return for_episode
