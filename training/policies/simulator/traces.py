"""Request traces for the simulator: arrival times and token counts from CSV or JSON-lines files.

Azure's LLM inference traces (`TIMESTAMP`, `ContextTokens`, `GeneratedTokens`, wall-clock
timestamps) are the default mapping; any other log names its columns and the unit of its
timestamps (`TraceColumns`). Timestamps must not go backwards and token counts must be positive
integers: the first offending row fails the read with one error naming its row and column.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class TraceError(ValueError):
    """A trace row that cannot be replayed; the message names the file, row and column."""


@dataclass(frozen=True)
class TraceColumns:
    """Which fields of a trace hold what. `timestamp_unit`: `datetime` (ISO 8601 or
    `YYYY-MM-DD HH:MM:SS[.fraction]`) or a number of `s`, `ms` or `us`; `format`: `csv` or
    `jsonl`, from the file's suffix when None."""

    timestamp: str = "TIMESTAMP"
    timestamp_unit: str = "datetime"
    prompt_tokens: str = "ContextTokens"
    output_tokens: str = "GeneratedTokens"
    format: str | None = None

    def file_format(self, path: Path) -> str:
        if self.format is not None:
            return self.format
        suffix = Path(path).suffix.lower()
        return "jsonl" if suffix in (".jsonl", ".json", ".ndjson") else "csv"


AZURE = TraceColumns()


def _rows(path: Path, columns: TraceColumns) -> Iterator[tuple[int, dict]]:
    """(row number as a person counts it: the CSV header is row 1, a JSON-lines file's first line is row 1, row)."""
    needed = (columns.timestamp, columns.prompt_tokens, columns.output_tokens)
    if columns.file_format(path) == "csv":
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in needed if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(f"{path}: row 1: no column {missing[0]!r} (the header has {reader.fieldnames})")
            yield from enumerate(reader, start=2)
        return
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}: row {number}: not JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise TraceError(f"{path}: row {number}: a JSON object is expected, got {type(row).__name__}")
            yield number, row


def _field(path: Path, number: int, row: dict, column: str):
    value = row.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise TraceError(f"{path}: row {number}, column {column!r}: missing")
    return value


def _seconds(path: Path, number: int, column: str, value, unit: str) -> float:
    if unit == "datetime":
        text = str(value).strip()
        try:
            head, _, fraction = text.partition(".")
            if "T" not in head and len(head) == 19:  # Azure: 2023-11-16 18:15:46.6805900 (7 digits)
                return datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp() + (
                    float(f"0.{fraction}") if fraction else 0.0)
            return datetime.fromisoformat(text).timestamp()
        except ValueError as exc:
            raise TraceError(f"{path}: row {number}, column {column!r}: {text!r} is not a date and time") from exc
    try:
        seconds = float(value) * SECONDS_PER_UNIT[unit]
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: row {number}, column {column!r}: {value!r} is not a number of {unit}") from exc
    if not np.isfinite(seconds) or seconds < 0:
        raise TraceError(f"{path}: row {number}, column {column!r}: timestamp {value!r} is negative or not finite")
    return seconds


def _tokens(path: Path, number: int, column: str, value) -> int:
    try:
        count = float(value)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: row {number}, column {column!r}: {value!r} is not a token count") from exc
    if isinstance(value, bool) or not count.is_integer() or count < 1:
        raise TraceError(f"{path}: row {number}, column {column!r}: token counts are positive integers, got {value!r}")
    return int(count)


def read_trace(path: str | Path, limit: int | None = None, columns: TraceColumns = AZURE,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival offsets in s from the first request, prompt tokens, output tokens) of a trace."""
    if columns.timestamp_unit not in ("datetime", *SECONDS_PER_UNIT):
        raise ValueError(f"timestamp_unit {columns.timestamp_unit!r}: expected datetime, s, ms or us")
    path = Path(path)
    times, prompt, output = [], [], []
    for number, row in _rows(path, columns):
        t = _seconds(path, number, columns.timestamp, _field(path, number, row, columns.timestamp),
                     columns.timestamp_unit)
        if times and t < times[-1]:
            raise TraceError(f"{path}: row {number}, column {columns.timestamp!r}: timestamps go backwards "
                             f"(earlier than the row before); sort the trace by time")
        times.append(t)
        prompt.append(_tokens(path, number, columns.prompt_tokens, _field(path, number, row, columns.prompt_tokens)))
        output.append(_tokens(path, number, columns.output_tokens, _field(path, number, row, columns.output_tokens)))
        if limit and len(times) >= limit:
            break
    if not times:
        raise TraceError(f"{path}: no rows")
    t = np.array(times)
    return t - t[0], np.array(prompt), np.array(output)


def trace_window(times: np.ndarray, n: int, rate: float, seed: int) -> tuple[int, np.ndarray]:
    """(first row, arrival offsets) of seed's window of `n` consecutive requests of a trace, its
    timestamps rescaled to mean rate `rate` (requests per second): each seed replays another stretch
    of real burstiness at the load asked for."""
    start = seed * n % max(1, len(times) - n)
    t = times[start:start + n] - times[start]
    return start, (t * (n / rate) / t[-1] if t[-1] > 0 else np.arange(len(t)) / rate)
