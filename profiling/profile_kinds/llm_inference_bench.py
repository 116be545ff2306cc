"""`llm_inference_bench`: LLM-Inference-Bench's published static-batch vLLM rows; `key` is
`<Model>@<Hardware>x<count>@<Framework>` in `file`. Gives a coarse prior for the heads and the
continuous-batching step model the simulator runs (`coarse_priors.continuous_batching_fit`)."""

from __future__ import annotations

from routeforge.core.kinds import PROFILE_KINDS
from routeforge.profiling.coarse_priors import coarse_prior, continuous_batching_fit, read_llm_inference_bench
from routeforge.profiling.profile_kinds import published_entry, published_key_check
from routeforge.profiling.profile_results import FittedPrior


@PROFILE_KINDS.register("llm_inference_bench", needs=("file", "key"),
                        check=published_key_check(read_llm_inference_bench))
def measure(config, tier, routing_table, folder, log) -> FittedPrior:
    rows = published_entry(tier, read_llm_inference_bench)
    key = tier.profile.key
    return FittedPrior(coarse_prior(key, rows).to_dict(), continuous_batching_fit(key, rows))
