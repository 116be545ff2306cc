"""The routing table: one row per prompt with every model's quality, output length and cost.

It is the training set of every predictor. Cells are null where a model has no usable label for the
prompt (quarantined upstream), never zero.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from routeforge.core.schemas import ROUTING_KEYS, routing_column, routing_models, routing_table_schema


def _placed(table: pa.Table, column: str, ids: pa.Array) -> pa.Array:
    """`column` of `table` moved to the row of its prompt in `ids` (float64, null where the table has
    no row for the prompt or a null value; a prompt listed twice takes its last row)."""
    position = pc.index_in(table.column("prompt_id"), value_set=ids)
    known = pc.is_valid(position)
    rows = pc.filter(position, known).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.filter(table.column(column), known).cast(pa.float64())
    out = np.full(len(ids), np.nan)
    missing = np.ones(len(ids), dtype=bool)
    out[rows] = values.to_numpy(zero_copy_only=False)  # nulls arrive as NaN
    missing[rows] = pc.is_null(values).to_numpy(zero_copy_only=False)
    return pa.array(out, mask=missing, type=pa.float64())


def build_routing_table(
    prompts: pa.Table, responses: dict[str, pa.Table], quality: dict[str, pa.Table], models: list[str]
) -> pa.Table:
    """Columnar joins on prompt_id (no row becomes a Python object: 10^6 prompts × 10 models in
    ~1 GiB beyond the inputs)."""
    schema = routing_table_schema(models)
    ids = prompts.column("prompt_id").combine_chunks()
    columns = {k: prompts.column(k).cast(schema.field(k).type) for k in ROUTING_KEYS}
    for measure, source, column in (("quality", quality, "score"), ("output_tokens", responses, "output_tokens"),
                                    ("cost", responses, "cost_usd")):
        for model in models:
            columns[routing_column(measure, model)] = _placed(source[model], column, ids)
    return pa.table([columns[f.name] for f in schema], schema=schema)


def check_split_sizes(table: pa.Table, need: dict[str, int]) -> None:
    """Refuse, in one line, a routing table whose splits are smaller than training needs
    (`FleetConfig.min_prompts_per_split`): `config validate` counts the files' rows, this counts the
    prompts left after duplicates and quarantine."""
    counts = {split: 0 for split in need} | {s["values"]: s["counts"] for s in
                                             pc.value_counts(table.column("split")).to_pylist()}
    short = [f"{split} {counts[split]} (needs {n})" for split, n in need.items() if counts[split] < n]
    if short:
        raise ValueError(f"routing_table: the prompts split into {', '.join(short)}; training needs at least "
                         f"{need['train']} train and {need['test']} test prompts (training.knn.k, "
                         "training.router.folds): add prompts, or change split.test_fraction")


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
    splits = pc.value_counts(table.column("split")).to_pylist()
    tasks = pc.value_counts(table.column("task")).to_pylist()
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
    data = DatasetDict({s: Dataset(table.filter(pc.equal(table.column("split"), s))) for s in splits})
    data.save_to_disk(str(path))
    if card:
        (Path(path) / "README.md").write_text(card)
    return Path(path)
