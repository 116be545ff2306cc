"""Readers for existing response tables: RouterBench and RouteLLM wide CSVs, long JSON-lines tables.

A RouterBench row holds one prompt and, per model, a 0/1 correctness column, `<model>|model_response`
and `<model>|total_cost` (USD). The `prompt` cell is a Python-list literal holding the prompt string,
parsed with `ast.literal_eval` (never `eval`).
"""

from __future__ import annotations

import ast
import csv
import json
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


@dataclass(frozen=True)
class ImportedResponse:
    """One (prompt, model) cell of an existing response table."""

    text: str | None
    label: float | None = None
    cost: float | None = None
    problem: str | None = None  # why the cell cannot be used, when it cannot


def routerbench_responses(files: dict[str, list[Path]], column: str, limit: int | None) -> dict[str, ImportedResponse]:
    """row_id → the model column's response, 0/1 label and cost."""
    out = {}
    for row in read_routerbench(files, limit):
        text = row.response(column)
        problem = None if text is not None else f"table has no column {column}|model_response"
        out[row.row_id] = ImportedResponse(text, row.label(column), row.cost(column), problem)
    return out


def _bool_label(value: str | None) -> float | None:
    return {"true": 1.0, "false": 0.0, "1": 1.0, "0": 0.0}.get((value or "").strip().lower())


def read_routellm(path: Path, limit: int | None = None) -> list[tuple[str, str, dict[str, str]]]:
    """(row_id, prompt, cells) per row of a RouteLLM response CSV (`prompt`, `<m>`, `<m>_response`)."""
    csv.field_size_limit(sys.maxsize)
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if "prompt" not in (reader.fieldnames or []):
            raise ValueError(f"{path}: not a RouteLLM response table, no 'prompt' column")
        for i, rec in enumerate(reader):
            if limit is not None and i >= limit:
                break
            rows.append((f"{Path(path).name}:{i}", rec["prompt"], rec))
    return rows


def routellm_responses(path: Path, column: str, limit: int | None) -> dict[str, ImportedResponse]:
    out = {}
    for row_id, _, cells in read_routellm(path, limit):
        text = cells.get(f"{column}_response")
        problem = None if text is not None else f"table has no column {column}_response"
        out[row_id] = ImportedResponse(text, _bool_label(cells.get(column)), None, problem)
    return out


def dotted(record: object, path: str) -> object:
    """`record` at a dotted path (`messages.1.content.answer`); KeyError naming the missing step."""
    node = record
    for step in path.split("."):
        if isinstance(node, list) and step.lstrip("-").isdigit() and -len(node) <= int(step) < len(node):
            node = node[int(step)]
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            raise KeyError(f"field {path!r}: no {step!r}")
    return node


def jsonl_responses(
    path: Path, *, key_field: str, response_field: str, model_field: str | None, model: str,
    label_field: str | None, cost_field: str | None,
) -> tuple[dict[str, ImportedResponse], dict[str, int]]:
    """key → response from a long JSON-lines table, plus counts of lines that could not be used."""
    out: dict[str, ImportedResponse] = {}
    problems: dict[str, int] = {}

    def bad(reason: str) -> None:
        problems[reason] = problems.get(reason, 0) + 1

    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad("invalid JSON line")
                continue
            try:
                if model_field and str(dotted(rec, model_field)) != model:
                    continue
                key = str(dotted(rec, key_field))
            except KeyError as exc:
                bad(exc.args[0])
                continue
            try:
                text = dotted(rec, response_field)
                label = _float_or_none(str(dotted(rec, label_field))) if label_field else None
                cost = _float_or_none(str(dotted(rec, cost_field))) if cost_field else None
            except KeyError as exc:
                out[key] = ImportedResponse(None, problem=exc.args[0])
                continue
            if not isinstance(text, str):
                out[key] = ImportedResponse(None, problem=f"field {response_field!r} is not a string")
                continue
            out.setdefault(key, ImportedResponse(text, label, cost))
    return out, problems
