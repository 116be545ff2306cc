"""`routing_table`: the per-prompt training set joining responses and quality of every model."""


import dagster as dg
import numpy as np
import pyarrow as pa
from routeforge.assets.metadata import content_version
from routeforge.assets.resources import ComponentStore, FleetResource
from routeforge.training.routing_table import (
    build_routing_table,
    check_split_sizes,
    dataset_card,
    export_hf_dataset,
    matrix,
)


@dg.asset(
    io_manager_key="parquet_io",
    group_name="labels",
    kinds={"parquet"},
    check_specs=[dg.AssetCheckSpec("every_prompt_labelled", asset="routing_table",
                                   description="Warns when a prompt has no quality label from any model (every "
                                               "model's response to it was quarantined).")],
    description="One row per prompt: per-model quality, output tokens and cost (null where missing).",
)
def routing_table(
    context: dg.AssetExecutionContext,
    fleet: FleetResource,
    store: ComponentStore,
    prompts: pa.Table,
    responses: dict[str, pa.Table],
    quality: dict[str, pa.Table],
):
    models = fleet.config.model_names
    missing = [m for m in models if m not in responses or m not in quality]
    if missing:
        raise ValueError(f"routing_table: no materialized responses/quality for models {missing}")
    table = build_routing_table(prompts, responses, quality, models)
    check_split_sizes(table, fleet.config.min_prompts_per_split())
    scoring = fleet.config.scoring
    tasks = set(table.column("task").to_pylist())
    card = dataset_card(table, fleet.config.name, {"*": scoring.metric, **{t: scoring.metric_for(t) for t in tasks}})
    export = export_hf_dataset(table, store.export_dir("routing_table_hf"), card)
    store.push(store.export_dir("routing_table_hf"))
    q = matrix(table, "quality", models)
    labelled = ~np.isnan(q)
    coverage = {m: float(labelled[:, j].mean()) for j, m in enumerate(models)}
    mean_quality = {m: float(np.nanmean(q[:, j])) if labelled[:, j].any() else None for j, m in enumerate(models)}
    unlabelled = int((~labelled.any(axis=1)).sum())
    yield dg.Output(
        table,
        data_version=content_version(table),
        metadata={
            "rows": table.num_rows,
            "models": len(models),
            "label_coverage": dg.MetadataValue.json(coverage),
            "mean_quality": dg.MetadataValue.json(mean_quality),
            "hf_dataset": dg.MetadataValue.path(str(export)),
        },
    )
    yield dg.AssetCheckResult(
        check_name="every_prompt_labelled",
        passed=unlabelled == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"prompts_without_any_label": unlabelled},
    )
