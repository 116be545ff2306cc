"""The routing evaluation's workloads read from data, beside the arrival processes of
`profiling.arrivals` in `core.kinds.WORKLOADS`.

Each registers `factory(pool, rate, n, times, traffic, blocks) -> (seed -> requests)` with metadata
`source`: the evaluation setting it reads (`trace`: `training.routing_evaluation.trace`;
`traffic_logs`: the fleet's own production logs), so `config validate` can say it is missing and the
evaluation knows to read it.
"""

from __future__ import annotations

from routeforge.core.kinds import WORKLOADS


@WORKLOADS.register("trace", source="trace")
def trace(pool, rate: float, n: int, times, traffic=None, blocks=None):
    """A window of the trace's real timestamps, rescaled to the mean rate; a block-hash trace
    (Mooncake's format) replays its own token counts and shared prefixes too."""
    from routeforge.training.policies.evaluation import Traffic, traffic_workload  # lazy: gymnasium
    from routeforge.training.policies.simulator.traces import trace_window  # lazy: fsspec, pyarrow on first use

    if times is None:
        raise ValueError("training.routing_evaluation.trace: the 'trace' workload needs a trace file")
    if len(times) < n + 1:
        raise ValueError(f"training.routing_evaluation.trace: {len(times)} rows, fewer than requests = {n}")
    if blocks is not None:
        return traffic_workload(pool, Traffic(blocks.times, blocks.prompt_tokens, blocks.output_tokens,
                                              blocks.hash_ids), rate, n)

    def replay(seed: int):
        return pool.requests(trace_window(times, n, rate, seed)[1], seed=seed)

    return replay


@WORKLOADS.register("traffic", source="traffic_logs")
def traffic(pool, rate: float, n: int, times, traffic=None, blocks=None):
    """The fleet's own production traffic (`evaluation.traffic_workload`)."""
    from routeforge.training.policies.evaluation import traffic_workload  # lazy: gymnasium, pydantic on first use

    if traffic is None:
        raise ValueError("training.routing_evaluation: the 'traffic' workload needs traffic logs "
                         "(training.routing_evaluation.traffic_logs, or a traffic_log dataset)")
    return traffic_workload(pool, traffic, rate, n)
