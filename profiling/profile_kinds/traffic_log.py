"""`traffic_log`: what production saw: the timed requests of the logs at `logs` that this tier served
(the line's `tier`, else `served_model` or the tier's model), their state at dispatch rebuilt by
replaying the log (`profiling.traffic_records`), in the sweep's record format."""

from __future__ import annotations

import pyarrow.parquet as pq
from routeforge.core.kinds import PROFILE_KINDS
from routeforge.profiling.profile_results import TrafficRecords


def log_inputs(profile) -> list:
    """New logs are new measurements: the files and their sizes enter the profile's key."""
    from routeforge.prompts.traffic_logs import log_files  # lazy: pyarrow on first use

    return [(str(p), p.stat().st_size) for p in log_files(profile.logs)]


@PROFILE_KINDS.register("traffic_log", needs=("logs",), key_inputs=log_inputs)
def measure(config, tier, routing_table, folder, log) -> TrafficRecords:
    from routeforge.core.storage import Quarantine  # lazy: pyarrow on first use
    from routeforge.profiling.traffic_records import replay  # lazy: httpx, rich on first use
    from routeforge.prompts.traffic_logs import read_traffic_logs  # lazy: pyarrow on first use

    profile = tier.profile
    quarantine = Quarantine("tier_profiles", tier.name)
    served = profile.served_model or tier.model
    mine = [r for r in read_traffic_logs(profile.logs, quarantine)
            if r.tier == tier.name or (r.tier is None and r.model == served)]
    records = replay(mine, tier.name, config.profiling.sweep.window_s)
    pq.write_table(records, folder / "sweep.parquet")
    log(f"{tier.name}: {records.num_rows} timed requests from the traffic logs ({len(quarantine)} lines quarantined)")
    return TrafficRecords(records.num_rows, len(mine), len(quarantine), quarantine.reasons())
