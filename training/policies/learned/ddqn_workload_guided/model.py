"""The DDQN's per-instance Q network (`DdqnSettings.network: per_instance`), for environments whose
observation is global + per-instance rows: what is learned about one instance holds for all."""

from __future__ import annotations

import torch
import torch.nn as nn
from routeforge.training.policies.rl.networks import mlp


class PerInstanceQ(nn.Module):
    """Q(s, route to i) = f(global features, instance i's features), one f shared by every instance,
    and Q(s, wait) = g(global features, the mean over instances): what is learned about a loaded
    instance holds for all of them. The input is the same flat observation as `mlp`'s."""

    def __init__(self, n_global: int, n_per: int, instances: int, wait: bool, hidden: int = 64):
        super().__init__()
        self.n_global, self.n_per, self.m, self.wait = n_global, n_per, instances, wait
        self.route = mlp(n_global + n_per, 1, (hidden, hidden))
        self.hold = mlp(n_global + n_per, 1, (hidden, hidden)) if wait else None

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        squeeze = observation.dim() == 1
        obs = observation[None] if squeeze else observation
        glob = obs[:, :self.n_global]
        per = obs[:, self.n_global:].reshape(obs.shape[0], self.m, self.n_per)
        q = self.route(torch.cat([glob[:, None, :].expand(-1, self.m, -1), per], 2)).squeeze(2)
        if self.hold is not None:
            q = torch.cat([q, self.hold(torch.cat([glob, per.mean(1)], 1))], 1)
        return q[0] if squeeze else q
