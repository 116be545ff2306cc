"""The routing table: one row per prompt with every model's quality, output length and cost.

It is the training set of every predictor. Cells are null where a model has no usable label for the
prompt (quarantined upstream), never zero.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
from routeforge.core.schemas import ROUTING_KEYS, routing_column, routing_models, routing_table_schema


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


def dataset_card(table: pa.Table, fleet: str, metrics: dict[str, str]) -> str:
    """A README.md for the exported routing table: models, metric per task, splits, coverage."""
    models = routing_models(table.schema)
    splits = pa.compute.value_counts(table.column("split")).to_pylist()
    tasks = pa.compute.value_counts(table.column("task")).to_pylist()
    quality = matrix(table, "quality", models)
    lines = [
        "---", f"pretty_name: routeforge routing table ({fleet})", "task_categories: [text-classification]", "---",
        f"# Routing table of fleet `{fleet}`", "",
        "One row per prompt: `quality/<model>` (score in [0, 1]), `output_tokens/<model>` and `cost/<model>` "
        "(USD) for every candidate model; null where the pair was quarantined. Written by routeforge.", "",
        "## Models", "", "| model | labelled prompts | mean quality |", "|---|---|---|",
    ]
    for j, m in enumerate(models):
        col = quality[:, j]
        n = int((~np.isnan(col)).sum())
        lines.append(f"| {m} | {n} | {np.nanmean(col):.4f} |" if n else f"| {m} | 0 | — |")
    lines += ["", "## Tasks and metrics", "", "| task | prompts | metric |", "|---|---|---|"]
    lines += [f"| {t['values']} | {t['counts']} | {metrics.get(t['values'], metrics.get('*', '?'))} |" for t in tasks]
    lines += ["", "## Splits", "", "| split | prompts |", "|---|---|"]
    lines += [f"| {s['values']} | {s['counts']} |" for s in splits]
    return "\n".join(lines) + "\n"


def export_hf_dataset(table: pa.Table, path: Path, card: str | None = None) -> Path:
    """Save as a Hugging Face `datasets` DatasetDict by split (`load_from_disk` reads it back),
    with the dataset card as README.md."""
    from datasets import Dataset, DatasetDict

    splits = sorted(set(table.column("split").to_pylist()))
    data = DatasetDict({s: Dataset(table.filter(pa.compute.equal(table.column("split"), s))) for s in splits})
    data.save_to_disk(str(path))
    if card:
        (Path(path) / "README.md").write_text(card)
    return Path(path)
