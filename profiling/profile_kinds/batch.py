"""`batch`: controlled static batches in-process with transformers (the grid in `profiling.batch`),
timing the prefill and every decode iteration; for a `vllm` model, its weights under transformers'
implementation (a controlled measurement of the model, not of vLLM's engine)."""

from __future__ import annotations

from routeforge.core.kinds import PROFILE_KINDS
from routeforge.profiling.profile_results import MeasuredBatches
from routeforge.profiling.tier_profile import measure_batches, write_batches


@PROFILE_KINDS.register("batch", needs=())
def measure(config, tier, routing_table, folder, log) -> MeasuredBatches:
    return write_batches(measure_batches(config, tier, log), folder, tier.name)
