"""`quality`, partitioned by model: a score in [0, 1] per response, by the metric of its task."""


import time
from collections import Counter
from statistics import fmean

import dagster as dg
import pyarrow as pa
from routeforge.assets.metadata import clean, quarantine_metadata
from routeforge.assets.resources import ComponentStore, FleetResource
from routeforge.core.schemas import QUALITY
from routeforge.core.storage import Quarantine, to_table
from routeforge.scoring.quality import Scorer, label_agreement


def build_quality_asset(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=partitions,
        io_manager_key="parquet_io",
        group_name="labels",
        kinds={"parquet"},
        check_specs=[dg.AssetCheckSpec("scores_in_unit_interval", asset="quality", blocking=True,
                                       description="Every quality score lies in [0, 1] and every response is either "
                                                   "scored or quarantined with a reason.")],
        description="Quality score per (prompt, model) by the task's metric; unscorable pairs are "
                    "quarantined with the reason, never scored 0.",
    )
    def quality(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore, responses: pa.Table,
                prompts: pa.Table):
        quarantine = Quarantine("quality", context.partition_key)
        start = time.perf_counter()
        scorer = Scorer(fleet.config, log=context.log.info)
        rows = scorer.score(responses, prompts, quarantine)
        table = to_table(rows, QUALITY)
        qpath = store.write_quarantine(quarantine)
        scores = [r["score"] for r in rows]
        by_metric: dict[str, list[float]] = {}
        for r in rows:
            by_metric.setdefault(r["metric"], []).append(r["score"])
        sandbox = scorer.stats.get("code_sandbox")
        context.log.info(f"{context.partition_key}: {len(rows)} scored, {quarantine.summary()}"
                         + (f"; generated code: {sandbox}" if sandbox else "")
                         + (f", {scorer.stats['code_cells_refused']} code cells not run (no bubblewrap)"
                            if scorer.stats.get("code_cells_refused") else ""))
        yield dg.Output(
            table,
            metadata={
                **clean({"rows": table.num_rows, "mean_score": fmean(scores) if scores else None,
                         "wall_s": time.perf_counter() - start, "code_sandbox": sandbox,
                         "code_isolation": fleet.config.scoring.code.isolation if sandbox else None}),
                "metrics": dg.MetadataValue.json({m: {"pairs": len(v), "mean": round(fmean(v), 6)}
                                                  for m, v in by_metric.items()}),
                "scorer_stats": dg.MetadataValue.json(dict(Counter(scorer.stats))),
                "table_label_agreement": dg.MetadataValue.json(label_agreement(responses, rows)),
                **quarantine_metadata(quarantine, qpath),
            },
        )
        yield dg.AssetCheckResult(
            check_name="scores_in_unit_interval",
            passed=all(0.0 <= s <= 1.0 for s in scores) and len(rows) + len(quarantine) == responses.num_rows,
            metadata={"scored": len(rows), "quarantined": len(quarantine), "responses": responses.num_rows},
        )

    return quality
