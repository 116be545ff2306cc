"""`quality`, partitioned by model: a score in [0, 1] per response (BERTScore or table labels)."""


import time
from statistics import fmean

import dagster as dg
import pyarrow as pa

from assets.metadata import clean, quarantine_metadata
from pipelines.resources import FleetResource
from pipelines.schemas import QUALITY
from pipelines.scoring import BertScoreMetric, score_bertscore, score_table_labels
from pipelines.storage import Quarantine, to_table


def build_quality_asset(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=partitions,
        io_manager_key="parquet_io",
        group_name="scoring",
        check_specs=[dg.AssetCheckSpec("scores_in_unit_interval", asset="quality", blocking=True)],
        description="Quality score per (prompt, model); missing labels are quarantined, never zero.",
    )
    def quality(context: dg.AssetExecutionContext, fleet: FleetResource, responses: pa.Table, prompts: pa.Table):
        settings = fleet.config.scoring
        quarantine = Quarantine("quality", context.partition_key)
        start = time.perf_counter()
        if settings.metric == "bertscore":
            rows = score_bertscore(responses, prompts, BertScoreMetric(settings), quarantine)
        else:
            rows = score_table_labels(responses, quarantine)
        table = to_table(rows, QUALITY)
        qpath = quarantine.write(fleet.root)
        scores = [r["score"] for r in rows]
        context.log.info(f"{context.partition_key}: {len(rows)} scored, {len(quarantine)} quarantined")
        yield dg.Output(
            table,
            metadata={
                **clean({"rows": table.num_rows, "metric": settings.metric,
                         "mean_score": fmean(scores) if scores else None,
                         "wall_s": time.perf_counter() - start}),
                **quarantine_metadata(quarantine, qpath),
            },
        )
        yield dg.AssetCheckResult(
            check_name="scores_in_unit_interval",
            passed=all(0.0 <= s <= 1.0 for s in scores) and len(rows) + len(quarantine) == responses.num_rows,
            metadata={"scored": len(rows), "quarantined": len(quarantine), "responses": responses.num_rows},
        )

    return quality
