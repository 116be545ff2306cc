"""`splitwise`: the published static-batch measurements of the splitwise traces' tiers; `key` is the
tier's name in `file` (`llama2-70b@a100-80gb-tp4`). Fitted like measured static batches."""

from __future__ import annotations

from routeforge.core.kinds import PROFILE_KINDS
from routeforge.profiling.batch_fits import import_splitwise
from routeforge.profiling.profile_kinds import published_entry, published_key_check
from routeforge.profiling.profile_results import MeasuredBatches
from routeforge.profiling.tier_profile import write_batches


@PROFILE_KINDS.register("splitwise", needs=("file", "key"),
                        check=published_key_check(import_splitwise))
def measure(config, tier, routing_table, folder, log) -> MeasuredBatches:
    return write_batches(published_entry(tier, import_splitwise).measurements, folder, tier.name)
