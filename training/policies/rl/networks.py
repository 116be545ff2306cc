"""The networks the learned policies share: an MLP. A policy's own network lives in its folder
(`learned/<policy>/model.py`)."""

from __future__ import annotations

import torch.nn as nn


def mlp(inputs: int, outputs: int, hidden: tuple[int, ...] = (64, 64)) -> nn.Module:
    layers, width = [], inputs
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, outputs))
