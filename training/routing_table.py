"""The routing table: one row per prompt with every model's quality, output length and cost.

It is the training set of every predictor. Cells are null where a model has no usable label for the
prompt (quarantined upstream), never zero.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from pipelines.schemas import ROUTING_KEYS, routing_column, routing_models, routing_table_schema


def build_routing_table(
    prompts: pa.Table, responses: dict[str, pa.Table], quality: dict[str, pa.Table], models: list[str]
) -> pa.Table:
    base = prompts.select(list(ROUTING_KEYS)).to_pylist()
    index = {r["prompt_id"]: i for i, r in enumerate(base)}
    columns: dict[str, list[float | None]] = {
        routing_column(m_, model): [None] * len(base)
        for m_ in ("quality", "output_tokens", "cost")
        for model in models
    }
    for model in models:
        for r in responses[model].select(["prompt_id", "output_tokens", "cost_usd"]).to_pylist():
            i = index.get(r["prompt_id"])
            if i is not None:
                columns[routing_column("output_tokens", model)][i] = float(r["output_tokens"])
                columns[routing_column("cost", model)][i] = r["cost_usd"]
        for r in quality[model].select(["prompt_id", "score"]).to_pylist():
            i = index.get(r["prompt_id"])
            if i is not None:
                columns[routing_column("quality", model)][i] = r["score"]
    schema = routing_table_schema(models)
    data = {k: [r[k] for r in base] for k in ROUTING_KEYS} | columns
    return pa.Table.from_pydict(data, schema=schema)


def matrix(table: pa.Table, measure: str, models: list[str] | None = None) -> np.ndarray:
    """(n_prompts, n_models) float64 with NaN for missing cells."""
    models = models or routing_models(table.schema)
    return np.column_stack(
        [
            table.column(routing_column(measure, m)).to_numpy(zero_copy_only=False).astype(np.float64)
            for m in models
        ]
    )


def export_hf_dataset(table: pa.Table, path: Path) -> Path:
    """Save as a Hugging Face `datasets` dataset (`load_from_disk` reads it back)."""
    from datasets import Dataset

    Dataset(table).save_to_disk(str(path))
    return Path(path)
