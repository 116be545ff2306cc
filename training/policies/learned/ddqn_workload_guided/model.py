"""The DDQN's per-instance Q network (`DdqnSettings.network: per_instance`), for environments whose
observation is global + per-instance rows: what is learned about one instance holds for all; and
`MaskFull`, which keeps it from routing to an instance whose waiting queue is full."""

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


MASKED_Q = -1e9  # the Q value of routing to a full instance: below any the network can learn


class MaskFull(nn.Module):
    """Q values of `net` with routing to each instance whose observation row says `full` set to
    `MASKED_Q`, so the greedy action, the double-DQN target's argmax and the exported ONNX graph all
    skip full instances (a departure from 001, whose DDQN learns to avoid them and, on the reference
    fleet, sent a fifth of the requests to full queues). `full_index[i]`: where instance i's flag is
    in the flat observation."""

    def __init__(self, net: nn.Module, full_index: list[int]):
        super().__init__()
        self.net = net
        self.register_buffer("full_index", torch.as_tensor(full_index, dtype=torch.long))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        q = self.net(observation)
        full = observation.index_select(-1, self.full_index) > 0.5
        routes = torch.where(full, torch.full_like(full, MASKED_Q, dtype=q.dtype), q[..., :full.shape[-1]])
        return torch.cat([routes, q[..., full.shape[-1]:]], -1)


def full_flags(spec: dict) -> list[int] | None:
    """Where each instance's `full` flag is in the flat observation of `spec` (None: not observed)."""
    per = spec.get("per_instance")
    if not isinstance(per, list) or "full" not in per:  # another environment, or one without the flag
        return None
    return [len(spec["global"]) + i * len(per) + per.index("full") for i in range(spec["instances"])]
