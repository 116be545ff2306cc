"""Readers for existing response tables (RouterBench wide CSVs).

A RouterBench row holds one prompt and, per model, a 0/1 correctness column, `<model>|model_response`
and `<model>|total_cost` (USD). The `prompt` cell is a Python-list literal holding the prompt string,
parsed with `ast.literal_eval` (never `eval`).
"""

from __future__ import annotations

import ast
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

_META_COLUMNS = {"", "sample_id", "prompt", "eval_name", "oracle_model_to_route_to"}


@dataclass(frozen=True)
class TableRow:
    file: str
    position: int  # 0-based data row in the file
    split: str
    sample_id: str
    eval_name: str
    prompt_cell: str
    cells: dict[str, str]

    @property
    def row_id(self) -> str:
        """Unique row key. `sample_id` is not: RouterBench repeats ids within and across files."""
        return f"{Path(self.file).name}:{self.position}"

    def prompt_text(self) -> str:
        """The prompt string; raises ValueError naming the row when the cell is malformed."""
        try:
            value = ast.literal_eval(self.prompt_cell)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"{self.row_id}: prompt is not a Python list literal ({exc})") from exc
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return "\n".join(value)
        raise ValueError(f"{self.row_id}: prompt literal holds {type(value).__name__}, not strings")

    def label(self, model: str) -> float | None:
        """0/1 correctness, or None when the table has no label for this model."""
        return _float_or_none(self.cells.get(model))

    def response(self, model: str) -> str | None:
        return self.cells.get(f"{model}|model_response")

    def cost(self, model: str) -> float | None:
        return _float_or_none(self.cells.get(f"{model}|total_cost"))


def _float_or_none(value: str | None) -> float | None:
    if value is None or value.strip() == "":
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) else number


def table_models(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    return [c for c in header if c not in _META_COLUMNS and "|" not in c]


def read_routerbench(files: dict[str, list[Path]], limit: int | None = None) -> list[TableRow]:
    """All rows of the given split → files mapping, in file order; `limit` caps rows per file."""
    csv.field_size_limit(sys.maxsize)
    rows: list[TableRow] = []
    for split, paths in files.items():
        for path in paths:
            with open(path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                missing = {"sample_id", "prompt", "eval_name"} - set(reader.fieldnames or [])
                if missing:
                    raise ValueError(f"{path}: not a RouterBench table, missing columns {sorted(missing)}")
                for i, rec in enumerate(reader):
                    if limit is not None and i >= limit:
                        break
                    rows.append(
                        TableRow(
                            file=str(path),
                            position=i,
                            split=split,
                            sample_id=rec["sample_id"] or f"row{i}",
                            eval_name=rec["eval_name"],
                            prompt_cell=rec["prompt"],
                            cells=rec,
                        )
                    )
    return rows
