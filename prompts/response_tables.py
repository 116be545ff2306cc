"""Readers for existing response tables: RouterBench and RouteLLM wide CSVs, long JSON-lines tables.

A RouterBench row holds one prompt and, per model, a 0/1 correctness column, `<model>|model_response`
and `<model>|total_cost` (USD). The `prompt` cell is a Python-list literal holding the prompt string,
parsed with `ast.literal_eval` (never `eval`).

No line stops a read: CSV files are decoded with `surrogateescape`, so an invalid byte becomes a
lone surrogate in its cell (the prompt stage quarantines such a prompt, `ImportedResponse.of` such a
response); a malformed prompt literal, a short row, or a non-finite label or cost is reported for
that row or cell alone.
"""

from __future__ import annotations

import ast
import csv
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routeforge.core.json_lines import LineError, strict_json, surrogate_field

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
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
            raise ValueError(f"{self.row_id}: prompt is not a Python list literal ({type(exc).__name__})") from None
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
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def table_models(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
        header = next(csv.reader(f))
    return [c for c in header if c not in _META_COLUMNS and "|" not in c]


def csv_records(path: Path, required: set[str], kind: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(0-based data row, the row as a dict or why it cannot be read) for each record of a CSV file.
    A header without the `required` columns is an error naming them: the file is not a `kind` table."""
    csv.field_size_limit(sys.maxsize)
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
        reader = csv.DictReader(f)
        try:
            missing = required - set(reader.fieldnames or [])
        except csv.Error as exc:
            raise ValueError(f"{path}: not a {kind} table, its header is not CSV ({exc})") from None
        if missing:
            raise ValueError(f"{path}: not a {kind} table, missing columns {sorted(missing)}")
        i = 0
        while True:
            try:
                rec = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield i, f"not a CSV row ({exc})"
            else:
                yield i, {k: v for k, v in rec.items() if isinstance(k, str)}  # extra cells (key None) dropped
            i += 1


def read_routerbench(files: dict[str, list[Path]], limit: int | None = None) -> list[TableRow]:
    """All rows of the given split → files mapping, in file order; `limit` caps rows per file. A
    record the CSV reader cannot parse keeps its place with an empty prompt cell (quarantined later)."""
    rows: list[TableRow] = []
    for split, paths in files.items():
        for path in paths:
            for i, rec in csv_records(path, {"sample_id", "prompt", "eval_name"}, "RouterBench"):
                if limit is not None and i >= limit:
                    break
                rec = rec if isinstance(rec, dict) else {"prompt": ""}
                rows.append(TableRow(file=str(path), position=i, split=split,
                                     sample_id=rec.get("sample_id") or f"row{i}", eval_name=rec.get("eval_name") or "",
                                     prompt_cell=rec.get("prompt") or "", cells=rec))
    return rows


@dataclass(frozen=True)
class ImportedResponse:
    """One (prompt, model) cell of an existing response table."""

    text: str | None
    label: float | None = None
    cost: float | None = None
    problem: str | None = None  # why the cell cannot be used, when it cannot

    @classmethod
    def of(cls, text: Any, label: float | None = None, cost: float | None = None, *, field: str) -> ImportedResponse:
        """A cell from a table's `field`, with the problem set where the text is unusable."""
        if text is None:
            return cls(None, problem=f"table has no field {field}")
        if not isinstance(text, str):
            return cls(None, problem=f"field {field!r} holds {type(text).__name__}, not a string")
        if surrogate_field(text) is not None:
            return cls(None, problem=f"field {field!r} holds invalid Unicode")
        return cls(text, label, cost)


def routerbench_responses(files: dict[str, list[Path]], column: str, limit: int | None) -> dict[str, ImportedResponse]:
    """row_id → the model column's response, 0/1 label and cost."""
    out = {}
    for row in read_routerbench(files, limit):
        out[row.row_id] = ImportedResponse.of(row.response(column), row.label(column), row.cost(column),
                                              field=f"{column}|model_response")
    return out


def _bool_label(value: str | None) -> float | None:
    return {"true": 1.0, "false": 0.0, "1": 1.0, "0": 0.0}.get((value or "").strip().lower())


def read_routellm(path: Path, limit: int | None = None) -> list[tuple[str, str, dict[str, str]]]:
    """(row_id, prompt, cells) per row of a RouteLLM response CSV (`prompt`, `<m>`, `<m>_response`);
    an unparseable record keeps its place with an empty prompt (quarantined later)."""
    rows = []
    for i, rec in csv_records(path, {"prompt"}, "RouteLLM response"):
        if limit is not None and i >= limit:
            break
        rec = rec if isinstance(rec, dict) else {}
        rows.append((f"{Path(path).name}:{i}", rec.get("prompt") or "", rec))
    return rows


def routellm_responses(path: Path, column: str, limit: int | None) -> dict[str, ImportedResponse]:
    return {row_id: ImportedResponse.of(cells.get(f"{column}_response"), _bool_label(cells.get(column)),
                                        field=f"{column}_response")
            for row_id, _, cells in read_routellm(path, limit)}


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

    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = strict_json(line)
            except LineError as exc:
                bad(str(exc).split(" at ")[0])
                continue
            try:
                if model_field and str(dotted(rec, model_field)) != model:
                    continue
                key = str(dotted(rec, key_field))
            except KeyError as exc:
                bad(exc.args[0])
                continue
            if key in out:
                bad(f"duplicate {key_field!r}: the first line is kept")
                continue
            try:
                text = dotted(rec, response_field)
                label = _float_or_none(str(dotted(rec, label_field))) if label_field else None
                cost = _float_or_none(str(dotted(rec, cost_field))) if cost_field else None
            except KeyError as exc:
                out[key] = ImportedResponse(None, problem=exc.args[0])
                continue
            out[key] = ImportedResponse.of(text, label, cost, field=response_field)
    return out, problems
