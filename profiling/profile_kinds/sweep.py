"""`sweep`: a QPS sweep (`profiling.sweep`) against an OpenAI-compatible server: `base_url`, or the
model's own for an `openai` model, or with `serve: true` the model's engine's own server started on
this machine for the sweep (`transformers serve --continuous-batching`, vLLM's OpenAI server)."""

from __future__ import annotations

import pyarrow.parquet as pq
from routeforge.core.kinds import PROFILE_KINDS
from routeforge.profiling.profile_results import SweepRecords
from routeforge.profiling.sweep import records_table
from routeforge.profiling.tier_profile import run_tier_sweep, state_agreement


@PROFILE_KINDS.register("sweep", needs=(), exclusive=(("serve", "base_url"),))
def measure(config, tier, routing_table, folder, log) -> SweepRecords:
    result = run_tier_sweep(config, tier, routing_table, folder, log)
    pq.write_table(records_table(result.records), folder / "sweep.parquet")
    return SweepRecords(len(result.records), result.rates, result.saturation_rps, result.saturation_tok_s,
                        result.summary, result.metrics_available, state_agreement(result.records))
