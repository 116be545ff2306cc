"""`responses`, partitioned by model: one generation per (prompt, model) from the model's engine."""


import time
from collections import Counter
from statistics import fmean

import dagster as dg
import pyarrow as pa

from assets.metadata import clean, quarantine_metadata
from pipelines.engines import make_engine, prompt_rows
from pipelines.resources import FleetResource
from pipelines.schemas import RESPONSES
from pipelines.storage import Quarantine, to_table


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def build_responses_asset(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=partitions,
        io_manager_key="parquet_io",
        group_name="generation",
        check_specs=[dg.AssetCheckSpec("every_prompt_accounted", asset="responses", blocking=True)],
        description="Greedy response per prompt for this model, with token counts and TTFT/TPOT/E2E.",
    )
    def responses(context: dg.AssetExecutionContext, fleet: FleetResource, prompts: pa.Table):
        model = context.partition_key
        config = fleet.config
        spec = config.model(model)
        start = time.perf_counter()
        engine = make_engine(spec, config, fleet.root / "models")
        load_s = time.perf_counter() - start
        quarantine = Quarantine("responses", model)
        every = max(1, len(prompts) // 10)

        def progress(done: int, total: int) -> None:
            if done == total or done % every < config.generation.batch_size:
                context.log.info(f"{model}: {done}/{total} prompts ({time.perf_counter() - start:.1f}s)")

        rows = engine.generate(prompt_rows(prompts), quarantine, progress)
        gen_s = time.perf_counter() - start - load_s
        table = to_table(rows, RESPONSES)
        qpath = quarantine.write(fleet.root)
        out_tokens = sum(r["output_tokens"] for r in rows)
        metadata = clean(
            {
                "rows": table.num_rows,
                "engine": f"{engine.name} {engine.version}",
                "load_s": load_s,
                "generate_s": gen_s,
                "output_tokens": out_tokens,
                "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
                "output_tokens_per_s": out_tokens / gen_s if spec.engine != "table_import" and gen_s > 0 else None,
                "mean_ttft_s": _mean([r["ttft_s"] for r in rows]),
                "mean_tpot_s": _mean([r["tpot_s"] for r in rows]),
                "mean_e2e_s": _mean([r["e2e_s"] for r in rows]),
            }
        )
        metadata["finish_reasons"] = dg.MetadataValue.json(dict(Counter(r["finish_reason"] for r in rows)))
        yield dg.Output(table, metadata={**metadata, **quarantine_metadata(quarantine, qpath)})
        accounted = table.num_rows + len(quarantine)
        yield dg.AssetCheckResult(
            check_name="every_prompt_accounted",
            passed=accounted == prompts.num_rows,
            metadata={"responses": table.num_rows, "quarantined": len(quarantine), "prompts": prompts.num_rows},
        )

    return responses
