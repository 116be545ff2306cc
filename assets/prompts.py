"""`prompts`: every configured dataset, templated, hashed and split."""


import time
from collections import Counter

import dagster as dg
from routeforge.assets.metadata import content_version, quarantine_metadata
from routeforge.assets.resources import ComponentStore, FleetResource
from routeforge.prompts.sources import NoUsablePrompts, build_prompts


@dg.asset(
    io_manager_key="parquet_io",
    group_name="labels",
    kinds={"parquet"},
    check_specs=[dg.AssetCheckSpec("unique_nonempty_prompts", asset="prompts", blocking=True,
                                   description="Every prompt id is unique, no text is empty, and the set is not empty; "
                                               "blocks generation otherwise.")],
    description="Prompt set: prompt_id (content hash), task, templated text, hint, reference, split.",
)
def prompts(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore):
    start = time.perf_counter()
    try:
        table, quarantine = build_prompts(fleet.config)
    except NoUsablePrompts as exc:  # the rows' reasons are kept: the file is what the user reads next
        qpath = store.write_quarantine(exc.quarantine)
        raise NoUsablePrompts(f"{exc}; every row with its reason: {qpath}", exc.quarantine) from None
    qpath = store.write_quarantine(quarantine)
    ids = table.column("prompt_id").to_pylist()
    empty = sum(1 for t in table.column("text").to_pylist() if not t.strip())
    context.log.info(f"{table.num_rows} prompts, {quarantine.summary()}")
    yield dg.Output(
        table,
        data_version=content_version(table),  # an identical set leaves everything downstream up to date
        metadata={
            "rows": table.num_rows,
            "tasks": dg.MetadataValue.json(dict(Counter(table.column("task").to_pylist()))),
            "splits": dg.MetadataValue.json(dict(Counter(table.column("split").to_pylist()))),
            "wall_s": round(time.perf_counter() - start, 3),
            **quarantine_metadata(quarantine, qpath),
        },
    )
    yield dg.AssetCheckResult(
        check_name="unique_nonempty_prompts",
        passed=len(set(ids)) == len(ids) and empty == 0 and table.num_rows > 0,
        metadata={"duplicate_ids": len(ids) - len(set(ids)), "empty_texts": empty},
    )


