"""QLM's request waiting time (RWT) estimator (003 §6) and its parameters.

C_q = W_q + P + D_q: a request at queue position q waits while the q − 1 requests ahead generate
their outputs at the tier's token throughput Θ (W_q = Σ O_i / Θ, with Σ O_i ~ Normal((q − 1) μ_o,
(q − 1) σ_o²) by the central limit theorem), is prefilled in P, then decodes its own output
conservatively at the model's maximum output tokens: D_q = O_max · ε · d.

P, d, ε and Θ come from one profile of the tier (a batch run, or a sweep's idle and saturation
phases); μ_o and σ_o per request group (task × model) from observed output lengths.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
from routeforge.core.schemas import routing_column, routing_models

Z = {0.5: 0.0, 0.9: 1.2815515655446004, 0.95: 1.6448536269514722, 0.99: 2.3263478740408408}


@dataclass(frozen=True)
class RwtParams:
    prefill_s: float  # P
    decode_s: float  # d, per output token of one request decoding alone
    epsilon: float  # ε, slowdown of a decode iteration under load (batching and preemption)
    theta_tok_s: float  # Θ, output tokens per second at saturation
    max_output_tokens: int  # O_max for D_q

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GroupStats:
    mean: float  # μ_o
    std: float  # σ_o
    n: int


def group_stats(pairs: Iterable[tuple[str, float]]) -> dict[str, GroupStats]:
    """(group, output tokens) pairs → μ_o, σ_o per group (σ is the sample standard deviation)."""
    by: dict[str, list[float]] = defaultdict(list)
    for group, n in pairs:
        if n is not None and not math.isnan(n):
            by[group].append(float(n))
    return {g: GroupStats(float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, len(v))
            for g, v in sorted(by.items())}


def routing_table_groups(table: pa.Table) -> dict[str, GroupStats]:
    """Request groups `task|model` from the routing table's observed output lengths."""
    tasks = table.column("task").to_pylist()
    pairs = []
    for model in routing_models(table.schema):
        lengths = table.column(routing_column("output_tokens", model)).to_pylist()
        pairs += [(f"{task}|{model}", n) for task, n in zip(tasks, lengths)]
    return group_stats(pairs)


def waiting_time(queue_ahead: float, group: GroupStats, theta_tok_s: float, quantile: float = 0.5) -> float:
    """W_q for a request with `queue_ahead` = q − 1 requests of `group` ahead of it (seconds)."""
    if queue_ahead <= 0:
        return 0.0
    mean = queue_ahead * group.mean
    spread = math.sqrt(queue_ahead) * group.std
    return max(0.0, mean + Z[quantile] * spread) / theta_tok_s


def completion_time(queue_ahead: float, group: GroupStats, params: RwtParams, quantile: float = 0.5) -> float:
    """C_q = W_q + P + O_max · ε · d (an upper bound by design for short queues)."""
    w = waiting_time(queue_ahead, group, params.theta_tok_s, quantile)
    return w + params.prefill_s + params.max_output_tokens * params.epsilon * params.decode_s
