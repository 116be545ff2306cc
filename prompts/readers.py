"""Readers that turn a configured dataset into raw prompts (text, task, reference, metadata).

A row a reader cannot use goes to the quarantine with a reason that names the field; the reader
goes on. Normalization, templates, hints, length limits and de-duplication happen afterwards in
`prompts.sources`, the same for every reader.
"""

from __future__ import annotations

import csv
import gzip
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routeforge.core.config import (
    FileDataset,
    HFDataset,
    RouteLLMDataset,
    RouterBenchDataset,
    ScoreTableDataset,
    TrafficLogDataset,
)
from routeforge.core.json_lines import LineError, strict_json
from routeforge.core.kinds import DATASET_KINDS
from routeforge.core.storage import Quarantine
from routeforge.core.text_encoding import foreign_encoding, strip_utf8_bom, undecodable
from routeforge.prompts.response_tables import (
    ImportedResponse,
    read_routellm,
    read_routerbench,
    routellm_responses,
    routerbench_responses,
)
from routeforge.prompts.score_tables import read_score_table, read_task_lookup, score_table_responses
from routeforge.prompts.traffic_logs import read_traffic_logs


@dataclass(frozen=True)
class RawPrompt:
    source: str
    source_row: str
    task: str
    text: str
    reference: str | None
    reference_meta: dict[str, Any] = field(default_factory=dict)
    split: str | None = None  # set when the source ships its own split


class RowError(ValueError):
    """A row that cannot become a prompt; the message is the quarantine reason."""


def final_answer(reference: str | None) -> str | None:
    """GSM8K's `#### <answer>` line, without thousands separators."""
    if reference and "####" in reference:
        return reference.rsplit("####", 1)[1].strip().replace(",", "")
    return None


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def string_field(rec: dict[str, Any], key: str, *, required: bool) -> str | None:
    value = rec.get(key)
    if value is None:
        if required:
            raise RowError(f"field {key!r} missing or empty")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RowError(f"field {key!r} is {_type_name(value)}, not a string")
    return str(value)


def text_field(rec: dict[str, Any], key: str) -> str:
    """A required string field that is not blank."""
    value = string_field(rec, key, required=True)
    if not value.strip():
        raise RowError(f"field {key!r} missing or empty")
    return value


def record_prompt(ds: FileDataset | HFDataset, rec: Any, row_id: str) -> RawPrompt:
    """Map one record through the dataset's field names, checking every type."""
    rec = as_object(rec)
    text = rec.get(ds.text_field)
    if text is None or (isinstance(text, str) and not text.strip()):
        raise RowError(f"field {ds.text_field!r} missing or empty")
    if not isinstance(text, str):
        raise RowError(f"field {ds.text_field!r} is {_type_name(text)}, not a string")
    task = ds.task or (string_field(rec, ds.task_field, required=False) if ds.task_field else None)
    if not task:
        raise RowError(f"field {ds.task_field!r} missing and no fixed task")
    reference = string_field(rec, ds.reference_field, required=False) if ds.reference_field else None
    if ds.id_field:
        ident = rec.get(ds.id_field)
        if ident is not None:
            if isinstance(ident, bool) or not isinstance(ident, (str, int)):
                raise RowError(f"field {ds.id_field!r} is {_type_name(ident)}, not a string or integer")
            row_id = str(ident)
    meta: dict[str, Any] = {}
    for key in ds.meta_fields:
        if key in rec:
            meta[key] = rec[key]
    if (answer := final_answer(reference)) is not None:
        meta["final_answer"] = answer
    return RawPrompt(ds.name, row_id, task, text, reference, meta)


def decoded_lines(path: Path) -> Iterator[tuple[int, str | RowError]]:
    """(line number, text) per non-blank line, gzip or plain, a UTF-8 byte-order mark dropped; an
    undecodable line gives a RowError naming its byte, and every line of a UTF-16 or UTF-32 file
    one naming the file's encoding (`config validate` refuses such a file before a run)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        foreign = foreign_encoding(f.peek(4096) if hasattr(f, "peek") else b"")
        for line_no, raw in enumerate(f, start=1):
            if line_no == 1:
                raw = strip_utf8_bom(raw)
            if foreign is not None:
                if raw.strip(b"\x00\r\n \t"):
                    yield line_no, RowError(f"the file is {foreign[1]}, not UTF-8")
                continue
            if not raw.strip():
                continue
            try:
                yield line_no, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield line_no, RowError(undecodable(raw, exc))


def jsonl_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(row id, record) per line; an unusable line yields a RowError instead of a record."""
    for line_no, line in decoded_lines(path):
        row_id = f"{path.name}:{line_no}"
        if isinstance(line, RowError):
            yield row_id, line
            continue
        try:
            yield row_id, strict_json(line)
        except LineError as exc:
            yield row_id, RowError(str(exc))


def _has_surrogates(text: str) -> bool:
    return any("\udc80" <= c <= "\udcff" for c in text)


def csv_records(path: Path) -> Iterator[tuple[str, Any]]:
    """A CSV file's rows by header; a row with more cells than the header, or with undecodable bytes, is
    a RowError (quarantined with its line), never the end of the file."""
    csv.field_size_limit(sys.maxsize)
    # surrogateescape keeps undecodable bytes visible per row instead of failing the file; utf-8-sig
    # drops a byte-order mark that would otherwise be glued to the first column's name
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f)
        for rec in reader:
            row_id = f"{path.name}:{reader.line_num}"
            if None in rec:
                cells = len(rec) - 1 + len(rec[None])
                yield row_id, RowError(f"CSV row has {cells} cells, header has {len(rec) - 1}")
            elif any(isinstance(v, str) and _has_surrogates(v) for v in rec.values()):
                yield row_id, RowError("invalid UTF-8 in a cell")
            else:
                yield row_id, {k: (v if v != "" else None) for k, v in rec.items()}


def parquet_records(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    for i, rec in enumerate(pq.read_table(path).to_pylist()):
        yield f"{path.name}:{i}", rec


def convert_records(records: Iterator[tuple[str, Any]], limit: int | None, quarantine: Quarantine,
             make: Callable[[str, Any], RawPrompt]) -> Iterator[RawPrompt]:
    """Apply `make` to the first `limit` records; a RowError sends the record to the quarantine."""
    for i, (row_id, rec) in enumerate(records):
        if limit is not None and i >= limit:
            break
        try:
            if isinstance(rec, RowError):
                raise rec
            yield make(row_id, rec)
        except RowError as exc:
            quarantine.add(row_id, str(exc), rec if not isinstance(rec, RowError) else None)
        except Exception as exc:  # noqa: BLE001 - no row may stop the stage: an unforeseen one is quarantined
            quarantine.add(row_id, f"unusable row: {type(exc).__name__}: {str(exc)[:200]}", None)


def as_object(rec: Any) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise RowError(f"row is {_type_name(rec)}, not an object")
    return rec


def _file_prompts(ds: FileDataset, quarantine: Quarantine, records: Iterator[tuple[str, Any]]) -> Iterator[RawPrompt]:
    return convert_records(records, ds.limit, quarantine, lambda row_id, rec: record_prompt(ds, rec, row_id))


@DATASET_KINDS.register("jsonl")
def read_jsonl(ds: FileDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    return _file_prompts(ds, quarantine, jsonl_records(ds.path))


@DATASET_KINDS.register("csv")
def read_csv(ds: FileDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    return _file_prompts(ds, quarantine, csv_records(Path(ds.path)))


@DATASET_KINDS.register("parquet")
def read_parquet(ds: FileDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    return _file_prompts(ds, quarantine, parquet_records(Path(ds.path)))


@DATASET_KINDS.register("hf")
def read_hf(ds: HFDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    from datasets import load_dataset

    data = load_dataset(ds.path, ds.subset, split=ds.split, data_files=ds.data_files, revision=ds.revision)
    if ds.limit is not None:
        data = data.select(range(min(ds.limit, len(data))))
    for i, rec in enumerate(data):
        row_id = f"{ds.path}:{ds.split}:{i}"
        try:
            yield record_prompt(ds, rec, row_id)
        except RowError as exc:
            quarantine.add(row_id, str(exc), rec)


def _routerbench_responses(ds, column: str) -> dict[str, ImportedResponse]:
    """The responses of model column `column` in the dataset's table (`table_import` reads them)."""
    return routerbench_responses(ds.files, column, ds.limit)


@DATASET_KINDS.register("routerbench", responses=_routerbench_responses)
def read_routerbench_prompts(ds: RouterBenchDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    for row in read_routerbench(ds.files, ds.limit):
        try:
            text = row.prompt_text()
        except ValueError as exc:
            quarantine.add(row.row_id, str(exc), {"prompt": row.prompt_cell[:500]})
            continue
        if not row.eval_name.strip():
            quarantine.add(row.row_id, "field 'eval_name' (the task) missing or empty", {"prompt": text[:500]})
            continue
        meta = {"sample_id": row.sample_id, "file": row.file}
        yield RawPrompt(ds.name, row.row_id, row.eval_name, text, None, meta, split=row.split)


def _score_table_responses(ds, column: str) -> dict[str, ImportedResponse]:
    """The responses of model column `column` in the dataset's table (`table_import` reads them)."""
    return score_table_responses(ds.files, column, text_field=ds.text_field,
                                 scores_field=ds.scores_field, limit=ds.limit)


@DATASET_KINDS.register("score_table", responses=_score_table_responses)
def read_score_table_prompts(ds: ScoreTableDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """A row's task: its own task field, else its file's task (`file_tasks`), else the task lookup's
    for its exact text, else the dataset's `task`; `reference_meta.task_from` says which (row / file /
    lookup / default), and lists the lookup's tasks where it gives the text more than one."""
    rows = read_score_table(ds.files, text_field=ds.text_field, scores_field=ds.scores_field,
                            task_field=ds.task_field, limit=ds.limit)
    lookup = (read_task_lookup(ds.task_lookup.files, text_field=ds.task_lookup.text_field,
                               task_field=ds.task_lookup.task_field) if ds.task_lookup is not None else None)
    matched = asked = 0  # rows the lookup matched, rows that had only the lookup left to name their task
    for row in rows:
        problem = row.problem(ds.models)
        if problem is not None:
            quarantine.add(row.row_id, problem, {"text": str(row.text)[:500], **row.raw})
            continue
        asked += row.task is None and row.file not in ds.file_tasks
        meta: dict = {"task_from": "row"}
        if row.task is not None:
            task = str(row.task)
        elif row.file in ds.file_tasks:
            task, meta = ds.file_tasks[row.file], {"task_from": "file"}
        elif lookup is not None and row.text in lookup:
            task, matched, meta = lookup[row.text][0], matched + 1, {"task_from": "lookup"}
            if len(lookup[row.text]) > 1:
                meta["lookup_tasks"] = lookup[row.text]
        else:
            task, meta = ds.task or ds.name, {"task_from": "default"}
        yield RawPrompt(ds.name, row.row_id, task, row.text, None, meta, split=row.split)
    if lookup is not None and asked and not matched:
        raise ValueError(f"dataset {ds.name!r}: task_lookup matched no prompt of the table: check that its "
                         f"text_field ({ds.task_lookup.text_field!r}) holds the same prompt texts as "
                         f"{ds.text_field!r}")


def _routellm_responses(ds, column: str) -> dict[str, ImportedResponse]:
    """The responses of model column `column` in the dataset's table (`table_import` reads them)."""
    return routellm_responses(ds.path, column, ds.limit)


@DATASET_KINDS.register("routellm", responses=_routellm_responses)
def read_routellm_prompts(ds: RouteLLMDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    for row_id, prompt, _ in read_routellm(ds.path, ds.limit):
        if not prompt.strip():
            quarantine.add(row_id, "field 'prompt' missing or empty")
            continue
        yield RawPrompt(ds.name, row_id, ds.task, prompt, None, {})


@DATASET_KINDS.register("traffic_log")
def read_traffic_log_prompts(ds: TrafficLogDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    for r in read_traffic_logs(ds.path, quarantine, ds.limit):
        reference = r.completion if ds.reference == "logged_response" else None
        yield RawPrompt(ds.name, r.row_id, r.task or ds.task, r.text, reference,
                        {"served_model": r.model, "sent_s": r.sent_s})


def read_dataset(ds, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """The dataset's rows, by the reader its kind registered (`core.kinds.DATASET_KINDS`)."""
    return DATASET_KINDS.get(ds.kind)(ds, quarantine)
