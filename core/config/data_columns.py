"""The columns and tasks a fleet file maps, checked against the files it names before anything runs.

`config validate` used to pass `task_field: categroy` (no such column) and `per_task: {maths: …}`
(no such task); the first ended the run with every prompt quarantined, the second silently scored
math with the default metric. Here each local file's columns are read (a JSON-lines or JSON file's
first rows, a CSV header, a Parquet schema) and each field the fleet maps is looked up in them; the
tasks of the data are read where the files say them, so a `per_task` key that names none is an
error, or a warning where some dataset's tasks cannot be known without running (a Hugging Face
dataset, a built-in reader, traffic logs).
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Iterator
from pathlib import Path

from routeforge.core.config.base import did_you_mean
from routeforge.core.config.training import TraceSettings
from routeforge.core.text_encoding import file_encoding_problem, strip_utf8_bom

SAMPLE_ROWS = 200  # rows read for a JSON-lines or JSON file's columns
MAX_TASK_ROWS = 1_000_000  # rows read for the tasks of a file; a larger file's tasks are not checked


def _open_csv(path: Path):
    """A CSV file opened as the prompt reader opens it (undecodable bytes kept, not an error; a UTF-8
    byte-order mark dropped, not glued to the first column's name)."""
    return open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")


def _rows(path: Path, limit: int) -> Iterator[dict]:
    suffixes = "".join(path.suffixes[-2:]).lower()
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=min(limit, 65_536)):
            for row in batch.to_pylist():
                yield row
                limit -= 1
                if limit <= 0:
                    return
        return
    if path.suffix.lower() == ".csv":
        with _open_csv(path) as handle:
            for k, row in enumerate(csv.DictReader(handle)):
                if k >= limit:
                    return
                yield row
        return
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        yield from (r for r in (data if isinstance(data, list) else [])[:limit] if isinstance(r, dict))
        return
    if suffixes.endswith((".jsonl", ".ndjson")):
        with open(path, "rb") as handle:
            for k, line in enumerate(handle):
                if k >= limit:
                    return
                if line.strip():
                    try:
                        row = json.loads(strip_utf8_bom(line) if k == 0 else line)
                    except (UnicodeDecodeError, json.JSONDecodeError):
                        continue  # the run quarantines it, with the line: no column or task is read from it
                    if isinstance(row, dict):
                        yield row


def _stamp(path: Path) -> tuple[str, int, int] | None:
    """What identifies a local file's content for the caches below: path, mtime and size."""
    path = Path(path)
    if not path.is_file():
        return None
    stat = path.stat()
    return str(path), stat.st_mtime_ns, stat.st_size


def columns_of(path: Path) -> frozenset[str] | None:
    """The columns of a local file (a JSON-lines or JSON file's keys in its first rows, a CSV header,
    a Parquet schema); None for a file this cannot read (a folder, a remote URI, another format).
    Read once per file version in a process: `load_checked` and `warnings()` both ask."""
    stamp = _stamp(path)
    return None if stamp is None else _columns(stamp)


@functools.lru_cache(maxsize=64)
def _columns(stamp: tuple[str, int, int]) -> frozenset[str] | None:
    path = Path(stamp[0])
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return frozenset(pq.read_schema(path).names)
    if file_encoding_problem(path):
        return None  # not UTF-8: said once, by `data_rows`, not as columns of garbled names
    if path.suffix.lower() == ".csv":
        with _open_csv(path) as handle:
            return frozenset(next(csv.reader(handle), []))
    keys: set[str] = set()
    try:
        for row in _rows(path, SAMPLE_ROWS):
            keys |= set(row)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return frozenset(keys) or None


@functools.lru_cache(maxsize=64)
def _tasks(stamp: tuple[str, int, int], field: str) -> frozenset[str]:
    """The values of column `field` in a file's first `MAX_TASK_ROWS` rows, read once per file version."""
    return frozenset(str(r[field]) for r in _rows(Path(stamp[0]), MAX_TASK_ROWS) if r.get(field) not in (None, ""))


def _mapped(ds) -> list[tuple[str, str]]:
    """(field, column) for each column a dataset maps, where the fleet file set it or it is required."""
    given = ds.model_fields_set
    fields = [("text_field", ds.text_field)]
    for name in ("reference_field", "task_field", "id_field", "scores_field"):
        value = getattr(ds, name, None)
        # task_field unset still matters where no fixed `task` stands in for it (a score table's is None)
        if value and (name in given or (name == "task_field" and not getattr(ds, "task", None))):
            fields.append((name, value))
    fields += [(f"meta_fields[{i}]", c) for i, c in enumerate(getattr(ds, "meta_fields", []) or [])]
    return fields


def column_problems(fleet) -> list[str]:
    """One line per mapped column missing from a file the dataset reads."""
    problems = []
    for i, ds in enumerate(fleet.datasets):
        if not ds.maps_columns:
            continue  # e.g. a built-in reader maps its own columns
        for path in ds.local_files():
            columns = columns_of(path)
            if columns is None:
                continue
            for field, column in _mapped(ds):
                if column not in columns:
                    default = field not in ds.model_fields_set
                    fix = ("; set task_field to the column holding each row's task, or `task:` for one task "
                           "for every row") if field == "task_field" and default else ""
                    named = f"{column!r}{' (the default)' if default else ''}"
                    listed = ", ".join(sorted(columns))
                    problems.append(f"datasets.{i} ({ds.name}).{field}: {named} is not a column of {path.name}"
                                    f"{did_you_mean(column, columns)} (its columns: {listed}){fix}")
    return problems


def trace_problems(fleet) -> list[str]:
    """The routing evaluation's trace against the columns it is read by (`timestamp`, `prompt_tokens`,
    `output_tokens`, `hash_ids`; Azure's names where the trace is a bare path): a missing one used to
    pass validate and fail the training stage after every response was generated and scored."""
    trace = fleet.training.routing_evaluation.trace
    if trace is None:
        return []

    bare = isinstance(trace, Path)  # a path alone: read with Azure's column names (the settings' defaults)
    settings = TraceSettings.model_construct(path=trace) if bare else trace
    path = settings.path
    if settings.format is not None and not "".join(path.suffixes[-2:]).lower().endswith(
            (f".{settings.format}", ".ndjson")):
        return []  # a format its suffix does not say: read as the run reads it, not here
    columns = columns_of(path)
    if columns is None:
        return []
    problems = []
    for field in ("timestamp", "prompt_tokens", "output_tokens", "hash_ids"):
        column = getattr(settings, field)
        if column is not None and column not in columns:
            at = "training.routing_evaluation.trace" + (f" ({field})" if bare else f".{field}")
            problems.append(f"{at}: {column!r} is not a column of {path.name}{did_you_mean(column, columns)} "
                            f"(its columns: {', '.join(sorted(columns))})")
    if problems and bare:
        problems[-1] += ("; a trace with other columns names them: trace: {path: …, timestamp: …, prompt_tokens: …, "
                         "output_tokens: …}")
    return problems


def known_tasks(fleet) -> tuple[set[str], list[str]]:
    """(the tasks the data's files name, the datasets whose tasks cannot be known before a run)."""
    tasks: set[str] = set()
    unknown: list[str] = []
    for ds in fleet.datasets:
        source = ds.task_source()
        tasks |= source.fixed
        if not source.knowable:
            unknown.append(ds.name)
            continue
        if source.column is None:
            continue
        for path in ds.local_files():
            if columns_of(path) is None or path.stat().st_size > 512 << 20:
                unknown.append(ds.name)
                continue
            tasks |= _tasks(_stamp(path), source.column)
    return tasks, unknown


def task_problems(fleet) -> tuple[list[str], list[str]]:
    """(errors, warnings) for `scoring.per_task` and `templates.per_task` keys that name no task of
    the data: an error where every dataset's tasks are known from its files, a warning where some
    are only known at run time."""
    keyed = [(f"{section}.per_task.{key}", key) for section, keys in
             (("scoring", fleet.scoring.per_task), ("templates", fleet.templates.per_task)) for key in sorted(keys)]
    if not keyed:
        return [], []
    tasks, unknown = known_tasks(fleet)
    errors, warnings = [], []
    for where, key in keyed:
        if key in tasks:
            continue
        line = (f"{where}: no dataset has task {key!r}{did_you_mean(key, tasks)} "
                f"(tasks in the files: {', '.join(sorted(tasks)) or 'none'})")
        if unknown:
            warnings.append(f"warning: {line}; the tasks of {', '.join(sorted(set(unknown)))} are known only when "
                            "the prompt set is built")
        else:
            errors.append(line)
    return errors, warnings
