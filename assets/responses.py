"""`responses`, partitioned by model: one generation per (prompt, model), cached and resumable."""


import time
from collections import Counter
from statistics import fmean

import dagster as dg
import pyarrow as pa
from routeforge.assets.metadata import clean, quarantine_metadata
from routeforge.assets.resources import ComponentStore, FleetResource
from routeforge.core.kinds import ENGINES
from routeforge.core.progress import Counted
from routeforge.generation.partition import generate_partition


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def build_responses_asset(partitions: dg.PartitionsDefinition, op_tags: dict | None = None) -> dg.AssetsDefinition:
    """`op_tags`: what the step asks of a Ray or Kubernetes executor (an accelerator)."""

    @dg.asset(
        partitions_def=partitions,
        op_tags=op_tags or None,
        io_manager_key="parquet_io",
        group_name="labels",
        kinds={"parquet"},
        # Generation holds an accelerator (or a server's capacity): runs share the `generation`
        # pool, limited to 1 by dagster.yaml; raise it with `dagster instance concurrency set`.
        pool="generation",
        check_specs=[dg.AssetCheckSpec("every_prompt_accounted", asset="responses", blocking=True,
                                       description="Each prompt of the set has exactly one response or one quarantine "
                                                   "row for this model: nothing was lost or generated twice.")],
        description="Greedy response per prompt for this model, with token counts, TTFT/TPOT/E2E and "
                    "filter flags; cached by content key, so re-runs generate only what is missing.",
    )
    def responses(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore, prompts: pa.Table):
        model = context.partition_key
        config = fleet.config
        start = time.perf_counter()
        generated = Counted(context.log.info, model, prompts.num_rows, "prompts")

        def progress(done: int, total: int) -> None:
            generated.total = total
            generated.count(done, f"({time.perf_counter() - start:.1f}s)")

        result = generate_partition(config, model, prompts, progress, log=context.log.info)
        table, quarantine = result.table, result.quarantine
        qpath = store.write_quarantine(quarantine)
        rows = table.to_pylist()
        flags = Counter(f for r in rows for f in r["flags"])
        metadata = clean(
            {
                "rows": table.num_rows,
                "engine": f"{result.engine} {result.engine_version or '(not loaded: all cached)'}",
                "cache_hits": result.cache_hits,
                "generated": result.generated,
                "generated_output_tokens": result.generated_output_tokens,
                "shards_written": result.shards_written,
                "generate_s": result.generate_s,
                "output_tokens_per_s": result.generated_output_tokens / result.generate_s
                if result.generate_s > 0 and ENGINES.entry(result.engine).metadata.get("generates", True) else None,
                "wall_s": time.perf_counter() - start,
                "mean_ttft_s": _mean([r["ttft_s"] for r in rows]),
                "mean_tpot_s": _mean([r["tpot_s"] for r in rows]),
                "mean_e2e_s": _mean([r["e2e_s"] for r in rows]),
                "retried_requests": sum(1 for r in rows if r["attempts"] > 1),
            }
        )
        metadata["finish_reasons"] = dg.MetadataValue.json(dict(Counter(r["finish_reason"] for r in rows)))
        metadata["flags"] = dg.MetadataValue.json(dict(flags))
        yield dg.Output(table, metadata={**metadata, **quarantine_metadata(quarantine, qpath)})
        accounted = table.num_rows + len(quarantine)
        yield dg.AssetCheckResult(
            check_name="every_prompt_accounted",
            passed=accounted == prompts.num_rows,
            metadata={"responses": table.num_rows, "quarantined": len(quarantine), "prompts": prompts.num_rows},
        )

    return responses
