"""`sweep`: a QPS sweep (`profiling.sweep`) against an OpenAI-compatible server: `base_url`, or the
model's own for an `openai` model, or with `serve: true` the model's engine's own server started on
this machine for the sweep (`transformers serve --continuous-batching`, vLLM's OpenAI server)."""

from __future__ import annotations

import pyarrow.parquet as pq
from routeforge.core.kinds import PROFILE_KINDS
from routeforge.profiling.sweep import records_table
from routeforge.profiling.tier_profile import run_tier_sweep, state_agreement


@PROFILE_KINDS.register("sweep", needs=(), exclusive=(("serve", "base_url"),))
def measure(config, tier, routing_table, folder, log) -> dict:
    result = run_tier_sweep(config, tier, routing_table, folder, log)
    pq.write_table(records_table(result.records), folder / "sweep.parquet")
    return {"requests": len(result.records), "rates": result.rates, "saturation_rps": result.saturation_rps,
            "saturation_output_tok_s": result.saturation_tok_s, "phases": result.summary,
            "server_metrics_endpoint": result.metrics_available, "state_agreement": state_agreement(result.records)}
