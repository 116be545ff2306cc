"""Request traces for the simulator: arrival times and token counts from CSV or JSON-lines files.

Azure's LLM inference traces (`TIMESTAMP`, `ContextTokens`, `GeneratedTokens`, wall-clock
timestamps) are the default mapping; any other log names its columns and the unit of its
timestamps (`TraceColumns`). Mooncake's format (`MOONCAKE`: JSON lines of `timestamp` in ms,
`input_length`, `output_length` and `hash_ids`, the ids of the prompt's fixed-size blocks, equal ids
meaning the same prefix up to and including that block) also carries what a KV cache can reuse;
`read_block_trace` reads it with the hashes. A row that cannot be replayed (not JSON, invalid UTF-8, a missing or
non-finite timestamp, a timestamp earlier than the row before, a token count that is not a positive
integer) goes to the quarantine with its row and column named, and the read goes on: one bad line in a
day's trace must not stop an evaluation. Without a quarantine (`strict`), the first such row raises
`TraceError` instead, for callers that would rather stop. A file with no usable row, or without the
mapped columns, is always an error.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
from routeforge.core.json_lines import LineError, bounded_lines, strict_json, surrogate_field
from routeforge.core.storage import Quarantine

SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# no served model reads or writes more tokens in one request: a row past it is a unit or parsing error
MAX_TOKENS = 10_000_000


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
    hash_ids: str | None = None  # a column of prompt block ids (Mooncake's `hash_ids`); None: no sharing known
    block_tokens: int | None = None  # tokens per hashed block (Mooncake: 512); needed with `hash_ids`

    def file_format(self, path: Path) -> str:
        if self.format is not None:
            return self.format
        suffix = Path(path).suffix.lower()
        return "jsonl" if suffix in (".jsonl", ".json", ".ndjson") else "csv"


AZURE = TraceColumns()
MOONCAKE = TraceColumns(timestamp="timestamp", timestamp_unit="ms", prompt_tokens="input_length",
                        output_tokens="output_length", format="jsonl", hash_ids="hash_ids", block_tokens=512)


@dataclass(frozen=True)
class BlockTrace:
    """A trace's usable rows as columns: arrival offsets (s) from the first request, token counts,
    and each prompt's block ids (empty tuples where the trace has none: nothing is shared)."""

    times: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list[tuple[int, ...]]
    block_tokens: int | None

    def __len__(self) -> int:
        return len(self.times)

    def repeated_block_share(self) -> float:
        """The share of all prompt blocks whose id appeared in an earlier request (the most a
        cache of unbounded size, shared by every instance, could reuse)."""
        seen, repeated, total = set(), 0, 0
        for ids in self.hash_ids:
            repeated += sum(i in seen for i in ids)
            total += len(ids)
            seen.update(ids)
        return repeated / total if total else 0.0


MAX_ROW_BYTES = 1 << 20  # a Mooncake row of a 126K-token prompt is about 3 KB
MAX_ROWS = 20_000_000  # rows a trace is read to (Azure's week-long traces have about 17 million)


def trace_columns(path: Path, fmt: str | None = None) -> set[str] | None:
    """The columns of a trace: its CSV header, or the keys of its first JSON-lines row (None where the
    first row is not an object, or the file cannot be read): what a command looks at before deciding
    how to read the trace (a `hash_ids` column read as block ids)."""
    try:
        for _, row in _rows(Path(path), TraceColumns(format=fmt, timestamp="", prompt_tokens="", output_tokens="")):
            return set(row) if isinstance(row, dict) else None
    except (OSError, TraceError):
        return None
    return None


def _rows(path: Path, columns: TraceColumns) -> Iterator[tuple[int, dict | TraceError]]:
    """(row number as a person counts it: the CSV header is row 1, a JSON-lines file's first line is
    row 1, the row or the TraceError that makes it unusable)."""
    needed = (columns.timestamp, columns.prompt_tokens, columns.output_tokens)
    if columns.file_format(path) == "csv":
        # surrogateescape: an invalid byte becomes a lone surrogate in its cell, caught per row below
        with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
            reader = csv.DictReader(line for line, _ in bounded_lines(f, MAX_ROW_BYTES))
            try:
                fieldnames = reader.fieldnames or []
            except csv.Error as exc:
                raise TraceError(f"{path}: row 1: not a CSV header ({exc})") from None
            missing = [c for c in needed if c not in fieldnames]
            if missing:
                raise TraceError(f"{path}: row 1: no column {missing[0]!r} (the header has {fieldnames})")
            number = 1
            while True:
                number = reader.line_num + 1
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    yield number, TraceError(f"{path}: row {number}: not a CSV row ({exc})")
                    continue
                bad = next((c for c in needed if surrogate_field(row.get(c)) is not None), None)
                yield number, (TraceError(f"{path}: row {number}, column {bad!r}: invalid UTF-8") if bad else row)
    with open(path, "rb") as f:
        for number, (line, whole) in enumerate(bounded_lines(f, MAX_ROW_BYTES), start=1):
            if not whole:
                yield number, TraceError(f"{path}: row {number}: longer than {MAX_ROW_BYTES:,} bytes")
                continue
            if not line.strip():
                continue
            try:
                row = strict_json(line)
            except LineError as exc:
                yield number, TraceError(f"{path}: row {number}: {exc}")
                continue
            if not isinstance(row, dict):
                yield number, TraceError(f"{path}: row {number}: a JSON object is expected, got {type(row).__name__}")
                continue
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
                seconds = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp() + (
                    float(f"0.{fraction}") if fraction.isdigit() else 0.0 if not fraction else float("nan"))
            else:
                seconds = datetime.fromisoformat(text).timestamp()
        except (ValueError, OverflowError, OSError) as exc:
            raise TraceError(f"{path}: row {number}, column {column!r}: {text[:80]!r} is not a date and time") from exc
        if not np.isfinite(seconds):
            raise TraceError(f"{path}: row {number}, column {column!r}: {text[:80]!r} is not a date and time")
        return seconds
    try:
        seconds = float(value) * SECONDS_PER_UNIT[unit]
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceError(f"{path}: row {number}, column {column!r}: {str(value)[:80]!r} is not a number of {unit}"
                         ) from exc
    if not np.isfinite(seconds) or seconds < 0:
        raise TraceError(f"{path}: row {number}, column {column!r}: timestamp {value!r} is negative or not finite")
    return seconds


def _tokens(path: Path, number: int, column: str, value) -> int:
    try:
        count = float(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceError(f"{path}: row {number}, column {column!r}: {str(value)[:80]!r} is not a token count"
                         ) from exc
    if isinstance(value, bool) or not np.isfinite(count) or not count.is_integer() or count < 1:
        raise TraceError(f"{path}: row {number}, column {column!r}: token counts are positive integers, "
                         f"got {str(value)[:80]!r}")
    if count > MAX_TOKENS:
        raise TraceError(f"{path}: row {number}, column {column!r}: {int(count):,} tokens is beyond any model's "
                         f"context (at most {MAX_TOKENS:,})")
    return int(count)


def _block_ids(path: Path, number: int, columns: TraceColumns, value, prompt_tokens: int) -> tuple[int, ...]:
    """A row's prompt block ids: a list of non-negative integers, no more than the prompt's blocks."""
    column = columns.hash_ids
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                              for i in value):
        raise TraceError(f"{path}: row {number}, column {column!r}: a list of non-negative integer block ids "
                         f"is expected, got {str(value)[:80]!r}")
    most = -(-prompt_tokens // columns.block_tokens)
    if len(value) > most:
        raise TraceError(f"{path}: row {number}, column {column!r}: {len(value)} block ids for {prompt_tokens} "
                         f"prompt tokens (at most {most} blocks of {columns.block_tokens})")
    return tuple(value)


def read_trace(path: str | Path, limit: int | None = None, columns: TraceColumns = AZURE,
               quarantine: Quarantine | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival offsets in s from the first request, prompt tokens, output tokens) of a trace's
    usable rows. Unusable rows go to `quarantine` (row id `<file name>:<row>`, the reason naming the
    column); without one, the first unusable row raises TraceError. `limit` counts usable rows."""
    trace = read_block_trace(path, limit, columns, quarantine)
    return trace.times, trace.prompt_tokens, trace.output_tokens


def read_block_trace(path: str | Path, limit: int | None = None, columns: TraceColumns = MOONCAKE,
                     quarantine: Quarantine | None = None) -> BlockTrace:
    """`read_trace`'s rows with their prompt block ids (`columns.hash_ids`; Mooncake's by default).
    A row whose ids are not a list of non-negative integers, or more than its prompt's blocks, is
    unusable like any other bad row."""
    if columns.timestamp_unit not in ("datetime", *SECONDS_PER_UNIT):
        raise ValueError(f"timestamp_unit {columns.timestamp_unit!r}: expected datetime, s, ms or us")
    if columns.hash_ids is not None and not (columns.block_tokens or 0) >= 1:
        raise ValueError(f"trace columns: hash_ids {columns.hash_ids!r} needs block_tokens, the tokens per block")
    path = Path(path)
    times, prompt, output, hashes = [], [], [], []
    for number, row in _rows(path, columns):
        try:
            if isinstance(row, TraceError):
                raise row
            t = _seconds(path, number, columns.timestamp, _field(path, number, row, columns.timestamp),
                         columns.timestamp_unit)
            if times and t < times[-1]:
                raise TraceError(f"{path}: row {number}, column {columns.timestamp!r}: timestamps go backwards "
                                 f"(earlier than the row before); sort the trace by time")
            counts = (_tokens(path, number, columns.prompt_tokens, _field(path, number, row, columns.prompt_tokens)),
                      _tokens(path, number, columns.output_tokens, _field(path, number, row, columns.output_tokens)))
            ids = (() if columns.hash_ids is None else
                   _block_ids(path, number, columns, _field(path, number, row, columns.hash_ids), counts[0]))
        except TraceError as exc:
            if quarantine is None:
                raise
            reason = re.sub(r"^row \d+(, |: )", "", str(exc).removeprefix(f"{path}: "))  # the row is in its id
            quarantine.add(f"{path.name}:{number}", reason, None if isinstance(row, TraceError) else row)
            continue
        times.append(t)
        prompt.append(counts[0])
        output.append(counts[1])
        hashes.append(ids)
        if limit and len(times) >= limit:
            break
        if len(times) >= MAX_ROWS:
            import sys

            print(f"routeforge: {path}: read to its first {MAX_ROWS:,} usable rows (the most a trace is read to; "
                  "pass a limit, or split the trace)", file=sys.stderr)
            break
    if not times:
        raise TraceError(f"{path}: no usable rows" + (f" ({len(quarantine)} quarantined: "
                                                       f"{next(iter(quarantine.reasons()))})" if quarantine else ""))
    t = np.array(times)
    return BlockTrace(t - t[0], np.array(prompt), np.array(output), hashes,
                      columns.block_tokens if columns.hash_ids is not None else None)


def trace_window(times: np.ndarray, n: int, rate: float, seed: int) -> tuple[int, np.ndarray]:
    """(first row, arrival offsets) of seed's window of `n` consecutive requests of a trace, its
    timestamps rescaled to mean rate `rate` (requests per second): each seed replays another stretch
    of real burstiness at the load asked for."""
    start = seed * n % max(1, len(times) - n)
    t = times[start:start + n] - times[start]
    return start, (t * (n / rate) / t[-1] if t[-1] > 0 else np.arange(len(t)) / rate)


class TooFewRows(ValueError):
    """Too few trace rows are left after the evaluation windows' for a held-out window."""


def held_out_window(times: np.ndarray, n: int, rate: float, seed: int, first_row: int) -> tuple[int, np.ndarray]:
    """`trace_window`'s (first row, arrival offsets) for a window that starts at or after `first_row`:
    the rows `trace_window`'s first `first_row // n` seeds never replay, on which settings (a
    heuristic's weights) are learned before they are judged on those seeds' windows. Raises TooFewRows
    where too few rows are left."""
    rows = len(times) - first_row
    if rows < n + 1:
        raise TooFewRows(f"{rows} trace rows after the first {first_row} the evaluation windows replay; learning "
                         f"on windows of {n} requests needs at least {n + 1}")
    start = first_row + (seed * 7919) % (rows - n)
    t = times[start:start + n] - times[start]
    return start, (t * (n / rate) / t[-1] if t[-1] > 0 else np.arange(n) / rate)
