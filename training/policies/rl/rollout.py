"""Play a policy through a routing environment (any of the environments in `training.policies.simulator`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def run_episode(env, act: Callable[[np.ndarray], object], seed: int) -> list:
    """Play one episode with `act` (observation → action); returns the outcome of every request."""
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(act(obs))
        done = terminated or truncated
    return env.results()


def greedy(net) -> Callable[[np.ndarray], int]:
    """A network of Q values or action logits as a deterministic policy: its argmax."""
    import torch

    def act(obs: np.ndarray) -> int:
        with torch.no_grad():
            return int(net(torch.as_tensor(obs)).argmax())

    return act


def sampled(net, seed: int = 0) -> Callable[[np.ndarray], int]:
    """A network of action logits as a stochastic policy: an action drawn from softmax(logits), as
    SAC trains it (its argmax can be an action the policy takes only a minority of the time)."""
    import torch

    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray) -> int:
        with torch.no_grad():
            probs = torch.softmax(net(torch.as_tensor(obs)), -1).numpy().astype(np.float64)
        return int(rng.choice(len(probs), p=probs / probs.sum()))

    return act
