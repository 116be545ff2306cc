"""Score tables: prompts with a per-model quality score and no response text.

LLMRouter's dcrouter files and RouterDC's training data hold rows such as
``{"question": "...", "scores": {"model-a": 0.7, "model-b": 0.0}, "cluster_id": 2}``. This module
reads them (JSON list, JSON-lines or Parquet; Parquet's scores column may be a map, a struct or a
JSON string) and checks them: a row is usable as a prompt when its text is a non-empty string and
its scores are a mapping; a single score is usable when it is a number in [0, 1]. Row problems are
returned for the prompt reader to quarantine; score problems travel with the cell, so the engine
quarantines that (prompt, model) pair only and keeps the row's other models. A JSON-lines line that
is not valid UTF-8 or strict JSON, and a JSON file that is not a list, become one unusable row each
with the reason: no line stops the stage.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from routeforge.core.json_lines import LineError, strict_json
from routeforge.prompts.response_tables import ImportedResponse


@dataclass(frozen=True)
class ScoreRow:
    row_id: str  # "<file name>:<0-based row>"
    split: str
    text: Any
    task: Any
    scores: Any
    raw: dict[str, Any] = field(default_factory=dict)
    file: str = ""  # the file's name, without its folder
    unreadable: str | None = None  # why the record could not be read at all

    def problem(self, models: list[str] | None) -> str | None:
        """Why this row cannot become a prompt, or None."""
        if self.unreadable is not None:
            return self.unreadable
        if not isinstance(self.text, str) or not self.text.strip():
            return "prompt text missing, empty or not a string"
        if self.task is not None and (isinstance(self.task, bool) or not isinstance(self.task, (str, int))):
            return f"task field holds {type(self.task).__name__}, not a string"
        if not isinstance(self.scores, dict) or not self.scores:
            return "scores missing or not a {model: score} mapping"
        if models is not None:
            unknown = sorted(str(m) for m in self.scores if m not in models)
            if unknown:
                return f"scores name models outside the dataset's models: {unknown}"
        return None


def _records(path: Path) -> list[Any]:
    """The file's records (parsed once per process while the file is unchanged: the prompt set and
    every model's partition read the same table; callers must not mutate them)."""
    info = Path(path).stat()
    return _parsed(str(path), info.st_mtime_ns, info.st_size)


def _compact(record: Any, shared: dict[float, float]) -> Any:
    """The record with its keys interned and its float scores shared, one level down too: a JSON
    parse makes a new string per key and a new float per score on every line, ~1 KB of a 10-model
    row's ~2.4 KB once the table is held for all its readers (10^6 rows: 1 GB)."""
    if not isinstance(record, dict):
        return record
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            value = {sys.intern(k): shared.setdefault(v, v) if type(v) is float else v for k, v in value.items()}
        elif type(value) is float:
            value = shared.setdefault(value, value)
        out[sys.intern(key)] = value
    if len(shared) > 4096:  # continuous scores: nothing to share
        shared.clear()
    return out


@lru_cache(maxsize=2)
def _parsed(path_str: str, mtime_ns: int, size: int) -> list[Any]:
    """The file's records, compacted (`_compact`); an unreadable line (or a JSON file that is not a
    list) is a LineError in its place."""
    path = Path(path_str)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        shared: dict[float, float] = {}
        return [_compact(r, shared) for r in pq.read_table(path).to_pylist()]
    data = path.read_bytes()
    shared = {}
    if path.suffix == ".jsonl":
        out: list[Any] = []
        # JSON-lines separates records by \n only: str.splitlines would also cut a prompt at the
        # U+0085 / U+2028 characters JSON leaves unescaped (one dcrouter prompt holds U+0085)
        for i, line in enumerate(data.split(b"\n")):
            if line.strip():
                try:
                    out.append(_compact(strict_json(line), shared))
                except LineError as exc:
                    out.append(LineError(f"line {i + 1}: {exc}"))
        return out
    try:
        records = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return [LineError(f"the file is not a JSON list of objects ({type(exc).__name__})")]
    if not isinstance(records, list):
        return [LineError(f"a JSON score table must be a list of objects, found {type(records).__name__}")]
    return [_compact(r, shared) for r in records]


def _mapping(value: Any) -> Any:
    """Parquet maps arrive as [(key, value), ...] and JSON strings as text: both become dicts."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, list) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return dict(value)
    return value


def read_score_table(files: dict[str, list[Path]], *, text_field: str, scores_field: str,
                     task_field: str | None, limit: int | None = None) -> list[ScoreRow]:
    rows: list[ScoreRow] = []
    for split, paths in files.items():
        for path in paths:
            name = Path(path).name
            for i, rec in enumerate(_records(Path(path))):
                if limit is not None and i >= limit:
                    break
                row_id = f"{name}:{i}"
                if not isinstance(rec, dict):
                    reason = str(rec) if isinstance(rec, LineError) else (
                        f"a JSON object is expected, got {type(rec).__name__}")
                    rows.append(ScoreRow(row_id, split, None, None, None, {}, name, unreadable=reason))
                    continue
                task = rec.get(task_field) if task_field else None
                rows.append(ScoreRow(row_id, split, rec.get(text_field), task, _mapping(rec.get(scores_field)),
                                     {k: v for k, v in rec.items() if k not in (text_field, scores_field)}, name))
    return rows


def read_task_lookup(files: list[Path], *, text_field: str, task_field: str) -> dict[str, list[str]]:
    """Prompt text → the tasks the lookup files give it, most frequent first (ties: first seen).
    Rows that are not objects or lack either field are skipped; a lookup none of whose rows has
    both fields is a configuration error, named here."""
    counts: dict[str, dict[str, int]] = {}
    for path in files:
        for rec in _records(Path(path)):
            if not isinstance(rec, dict):
                continue
            text, task = rec.get(text_field), rec.get(task_field)
            if isinstance(text, str) and task is not None and str(task).strip():
                seen = counts.setdefault(text, {})
                seen[str(task)] = seen.get(str(task), 0) + 1
    if not counts:
        raise ValueError(f"task_lookup: no row of {[str(f) for f in files]} has both a text field {text_field!r} "
                         f"and a task field {task_field!r}")
    return {text: sorted(seen, key=lambda t: -seen[t]) for text, seen in counts.items()}  # stable: ties keep order


def score_cell(scores: Any, model: str) -> ImportedResponse:
    """One model's score as an imported cell (empty text: the table holds no response)."""
    if not isinstance(scores, dict) or model not in scores:
        return ImportedResponse(None, problem=f"no score for model {model!r}")
    value = scores[model]
    try:
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        return ImportedResponse(None, problem=f"score {str(value)[:80]!r} for model {model!r} is not a finite number")
    if not 0.0 <= float(value) <= 1.0:
        return ImportedResponse(None, problem=f"score {value} for model {model!r} is outside [0, 1]")
    return ImportedResponse("", label=float(value))


def score_table_responses(files: dict[str, list[Path]], column: str, *, text_field: str, scores_field: str,
                          limit: int | None = None) -> dict[str, ImportedResponse]:
    """row_id → the model's score cell."""
    return {row.row_id: score_cell(row.scores, column)
            for row in read_score_table(files, text_field=text_field, scores_field=scores_field, task_field=None,
                                        limit=limit)}
