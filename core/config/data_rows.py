"""The rows of the files a fleet names, checked before anything runs: empty files, lines that do not
parse, and score tables whose models the fleet does not name as the table does.

`config validate` used to say OK to three files the run then refused or emptied: a JSON-lines file
with no rows (the run failed on an empty prompt set), one whose lines do not parse (quarantined at
run time; validate's only word was "tasks in the files: none"), and a score table whose model names
are not the fleet's (every row quarantined: "scores name models outside the dataset's models").
Here each local file is read once per version (bounded by `MAX_ROWS_READ` lines): a file without a
usable row, and a table model a fleet model or the dataset's `models` misses, are errors; lines the
run would quarantine are a warning with their count and the first.
"""

from __future__ import annotations

import csv
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from routeforge.core.config.base import did_you_mean
from routeforge.core.config.data_columns import _stamp  # one file-version key for both caches
from routeforge.core.kinds import SOURCE_KINDS
from routeforge.core.text_encoding import file_encoding_problem, strip_utf8_bom, undecodable

MAX_ROWS_READ = 1_000_000  # lines read per file; a longer file's rest is not checked
MAX_BYTES_READ = 512 << 20  # a larger file is not read here (the run reads it)


@dataclass(frozen=True)
class FileRows:
    """What a local data file holds, as far as validation reads it."""

    rows: int = 0  # rows that are objects (JSON) or records (CSV, Parquet)
    encoding: str = ""  # the file is not UTF-8: what it is and how to convert it (`text_encoding`)
    bad: int = 0  # lines that are not a JSON object
    first_bad: str = ""  # "line K: why" of the first
    score_models: frozenset[str] = field(default_factory=frozenset)  # keys of the score mappings read


def file_rows(path: Path, scores_field: str | None = None) -> FileRows | None:
    """The rows of a local JSON-lines, JSON, CSV or Parquet file (None: not one of those, a remote
    URI, or larger than `MAX_BYTES_READ`); with `scores_field`, the model names its mappings hold."""
    stamp = _stamp(Path(path))
    if stamp is None or stamp[2] > MAX_BYTES_READ:
        return None
    return _file_rows(stamp, scores_field)


@functools.lru_cache(maxsize=64)
def _file_rows(stamp: tuple[str, int, int], scores_field: str | None) -> FileRows | None:
    path = Path(stamp[0])
    suffix = path.suffix.lower()
    models: set[str] = set()

    def note(row) -> None:
        if scores_field and isinstance(row, dict) and isinstance(row.get(scores_field), dict):
            models.update(str(m) for m in row[scores_field])

    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return FileRows(rows=pq.ParquetFile(path).metadata.num_rows)
    if encoding := file_encoding_problem(path):
        return FileRows(encoding=encoding)
    if suffix == ".csv":
        with open(path, newline="", encoding="utf-8-sig", errors="surrogateescape") as handle:
            return FileRows(rows=sum(1 for _ in zip(range(MAX_ROWS_READ), csv.DictReader(handle))))
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return FileRows(bad=1, first_bad=f"the file is not JSON ({exc})")
        rows = [r for r in (data if isinstance(data, list) else []) if isinstance(r, dict)]
        for row in rows[:MAX_ROWS_READ]:
            note(row)
        return FileRows(rows=len(rows), score_models=frozenset(models))
    if not "".join(path.suffixes[-2:]).lower().endswith((".jsonl", ".ndjson")):
        return None
    rows = bad = 0
    first = ""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number > MAX_ROWS_READ:
                break
            if number == 1:
                raw = strip_utf8_bom(raw)
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
                why = None if isinstance(row, dict) else f"a JSON {type(row).__name__}, not an object"
            except UnicodeDecodeError as exc:
                why = undecodable(raw, exc)
            except json.JSONDecodeError as exc:
                why = f"not JSON ({exc.msg})"
            if why is None:
                rows += 1
                note(row)
            else:
                bad += 1
                first = first or f"line {number}: {why}"
    return FileRows(rows=rows, bad=bad, first_bad=first, score_models=frozenset(models))


def row_problems(fleet) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the rows of every local file the fleet's datasets read."""
    errors, warnings = [], []
    counted: list[int | None] = []  # prompts each dataset gives at most (None: not countable here)
    for i, ds in enumerate(fleet.datasets):
        if not hasattr(ds, "local_files"):
            counted.append(None)
            continue
        files = ds.local_files()
        rows_here: int | None = 0 if files else None  # a hub dataset: counted at run time
        scores_field = getattr(ds, "scores_field", None)  # a score table's {model: score} mappings
        table_models: set[str] = set()
        for path in files:
            found = file_rows(path, scores_field)
            if found is None:
                rows_here = None
                continue
            rows_here = None if rows_here is None else rows_here + found.rows
            where = f"datasets.{i} ({ds.name}): {path.name}"
            if found.encoding:
                errors.append(f"datasets.{i} ({ds.name}): {found.encoding}")
                rows_here = None  # its rows are not counted toward the splits: the file is unread
                continue
            bad = f"{found.bad} line(s) the run would quarantine (first: {found.first_bad})" if found.bad else ""
            if not found.rows:
                errors.append(f"{where} holds no rows{'; ' + bad if bad else ''}")
            elif bad:
                warnings.append(f"warning: {where}: {bad}")
            table_models |= found.score_models
        if scores_field and table_models:
            errors += _table_model_problems(fleet, i, ds, table_models)
        limit = getattr(ds, "limit", None)
        counted.append(rows_here if rows_here is None or limit is None else min(rows_here, limit))
    if fleet.datasets and None not in counted:
        errors += _split_problems(fleet, sum(counted))
    return errors, warnings


def _split_problems(fleet, prompts: int) -> list[str]:
    """Too few prompts for the splits training needs (`FleetConfig.min_prompts_per_split`). The count
    is the files' rows (at most `limit` each), before duplicates and quarantine: a lower bound on
    what is missing."""
    if fleet.split.mode != "seeded":
        return []
    need = fleet.min_prompts_per_split()
    test = round(prompts * fleet.split.test_fraction)
    short = [f"{split} {have} (needs {need[split]})" for split, have in (("train", prompts - test), ("test", test))
             if have < need[split]]
    if not short:
        return []
    least = max(need["test"] / fleet.split.test_fraction, need["train"] / (1 - fleet.split.test_fraction))
    return [f"datasets: {prompts} prompts in the files split into {', '.join(short)} at split.test_fraction "
            f"{fleet.split.test_fraction}; training needs at least {need['train']} train and {need['test']} test "
            f"prompts (training.knn.k, training.router.folds): give at least {int(-(-least // 1))} prompts"]


def _table_model_problems(fleet, i: int, ds, table_models: set[str]) -> list[str]:
    """A score table's models against the dataset's `models` and the fleet models that read it."""
    problems = []
    listed = getattr(ds, "models", None)
    if listed is not None:
        outside = sorted(table_models - set(listed))
        if outside:
            problems.append(f"datasets.{i} ({ds.name}).models: the table also scores {outside}; its rows that "
                            f"name them would be quarantined (list every model the table scores, or drop `models`)")
    for j, model in enumerate(fleet.models):
        source = model.source
        if (not SOURCE_KINDS.entry(source.kind).metadata.get("rows_of_dataset") or source.dataset != ds.name
                or getattr(source, "file", None) is not None):
            continue  # not this table's scores (a separate response file names its own models)
        key = getattr(source, "column", None) or model.name
        if key not in table_models:
            problems.append(f"models.{j} ({model.name}): the score table {ds.name} has no model {key!r}"
                            f"{did_you_mean(key, table_models)} (it scores {', '.join(sorted(table_models))}; "
                            f"name the model as the table does, or set source.column)")
    return problems
