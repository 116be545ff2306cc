"""000's state abstraction for SAC's actor and critics: a heterogeneous graph attention
network (PyTorch Geometric's HANConv) over the arrived request, the experts and their running and
waiting requests.

The network takes the flat observation of `observation_qos_graph` (so the exported ONNX
policy has one input) and rebuilds the graph inside: running/waiting request → its expert, expert
↔ arrived request. Every request slot is linked to its expert whether occupied or not, so the
graph has one fixed shape (an edge list that depends on the data breaks batching of empty queues
and the ONNX export): an empty slot is a zero row whose message is one constant vector, and the
expert's own features carry its counts. Each expert node also gets a one-hot of its
index, so embeddings can tell the experts apart (their features alone cannot when two are idle).
The head reads the arrived request's embedding and every expert's (000's actor and critic read the
arrived request's alone; with attention pooling over experts that loses which expert is which).
"""

from __future__ import annotations

import torch
import torch.nn as nn

METADATA = (["arrived", "expert", "running", "waiting"],
            [("expert", "to", "arrived"), ("arrived", "to", "expert"), ("running", "to", "expert"),
             ("waiting", "to", "expert")])


class HanHead(nn.Module):
    """Flat 000 observation → `outputs` values (action logits or Q values), through 2 HAN layers."""

    def __init__(self, spec: dict, outputs: int, hidden: int = 64, heads: int = 4):
        from torch_geometric.nn import HANConv

        super().__init__()
        self.n, self.k = spec["experts"], spec["pad"]
        self.widths = [spec["layout"][key] for key in ("arrived", "experts", "running", "waiting")]
        self.request_width = len(spec["request"])
        self.register_buffer("identity", torch.eye(self.n))
        inputs = {"arrived": self.widths[0], "expert": 3 + self.n, "running": self.request_width,
                  "waiting": self.request_width}
        self.hidden = hidden
        self.layer1 = HANConv(inputs, hidden, METADATA, heads=heads)
        self.layer2 = HANConv(hidden, hidden, METADATA, heads=heads)
        self.out = nn.Sequential(nn.Linear(hidden * (1 + self.n), hidden), nn.ReLU(), nn.Linear(hidden, outputs))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        squeeze = observation.dim() == 1
        obs = observation[None] if squeeze else observation
        b, n, k = obs.shape[0], self.n, self.k
        arrived, experts, running, waiting = torch.split(obs, self.widths, dim=1)
        x = {"arrived": arrived,
             "expert": torch.cat([experts.reshape(b, n, 3), self.identity.expand(b, n, n)], 2).reshape(b * n, -1),
             "running": running.reshape(b * n * k, -1), "waiting": waiting.reshape(b * n * k, -1)}
        expert_ids = torch.arange(b * n, device=obs.device)
        owner = torch.div(expert_ids, n, rounding_mode="floor")
        edges = {("expert", "to", "arrived"): torch.stack([expert_ids, owner]),
                 ("arrived", "to", "expert"): torch.stack([owner, expert_ids])}
        slot = torch.arange(b * n * k, device=obs.device)
        for kind in ("running", "waiting"):  # every slot, occupied or not: a fixed graph (see the module doc)
            edges[(kind, "to", "expert")] = torch.stack([slot, torch.div(slot, k, rounding_mode="floor")])
        h = self._fill(self.layer1(x, edges), x)
        h = self.layer2(h, edges)
        out = self.out(torch.cat([h["arrived"], h["expert"].reshape(b, -1)], 1))
        return out[0] if squeeze else out

    def _fill(self, h: dict, x: dict) -> dict:
        """HANConv returns None for node types no edge points at (requests): give them zeros."""
        return {key: (v if v is not None else x[key].new_zeros(x[key].shape[0], self.hidden)) for key, v in h.items()}
