"""Readers that turn a configured dataset into raw prompts (text, task, reference, metadata).

A row a reader cannot use goes to the quarantine with a reason that names the field; the reader
goes on. Normalization, templates, hints, length limits and de-duplication happen afterwards in
`prompts.sources`, the same for every reader.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config import (
    BuiltinDataset,
    FileDataset,
    HFDataset,
    RouteLLMDataset,
    RouterBenchDataset,
    ScoreTableDataset,
)
from core.storage import Quarantine
from prompts import templates as tt
from prompts.response_tables import read_routellm, read_routerbench
from prompts.score_tables import read_score_table


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


def _string(rec: dict[str, Any], key: str, *, required: bool) -> str | None:
    value = rec.get(key)
    if value is None:
        if required:
            raise RowError(f"field {key!r} missing or empty")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RowError(f"field {key!r} is {_type_name(value)}, not a string")
    return str(value)


def _text(rec: dict[str, Any], key: str) -> str:
    """A required string field that is not blank."""
    value = _string(rec, key, required=True)
    if not value.strip():
        raise RowError(f"field {key!r} missing or empty")
    return value


def record_prompt(ds: FileDataset | HFDataset, rec: Any, row_id: str) -> RawPrompt:
    """Map one record through the dataset's field names, checking every type."""
    rec = _object(rec)
    text = rec.get(ds.text_field)
    if text is None or (isinstance(text, str) and not text.strip()):
        raise RowError(f"field {ds.text_field!r} missing or empty")
    if not isinstance(text, str):
        raise RowError(f"field {ds.text_field!r} is {_type_name(text)}, not a string")
    task = ds.task or (_string(rec, ds.task_field, required=False) if ds.task_field else None)
    if not task:
        raise RowError(f"field {ds.task_field!r} missing and no fixed task")
    reference = _string(rec, ds.reference_field, required=False) if ds.reference_field else None
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


def _decoded_lines(path: Path) -> Iterator[tuple[int, str | RowError]]:
    """(line number, text) per non-blank line, gzip or plain; an undecodable line gives a RowError."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield line_no, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield line_no, RowError(f"invalid UTF-8 at byte {exc.start}")


def _jsonl_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(row id, record) per line; an unusable line yields a RowError instead of a record."""
    for line_no, line in _decoded_lines(path):
        row_id = f"{path.name}:{line_no}"
        if isinstance(line, RowError):
            yield row_id, line
            continue
        try:
            yield row_id, json.loads(line)
        except json.JSONDecodeError as exc:
            yield row_id, RowError(f"invalid JSON: {exc.msg}")


def _has_surrogates(text: str) -> bool:
    return any("\udc80" <= c <= "\udcff" for c in text)


def _table_records(ds: FileDataset) -> Iterator[tuple[str, Any]]:
    if ds.kind == "jsonl":
        yield from _jsonl_records(ds.path)
    elif ds.kind == "csv":
        csv.field_size_limit(sys.maxsize)
        # surrogateescape keeps undecodable bytes visible per row instead of failing the file
        with open(ds.path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            reader = csv.DictReader(f)
            for rec in reader:
                row_id = f"{ds.path.name}:{reader.line_num}"
                if None in rec:
                    cells = len(rec) - 1 + len(rec[None])
                    yield row_id, RowError(f"CSV row has {cells} cells, header has {len(rec) - 1}")
                elif any(isinstance(v, str) and _has_surrogates(v) for v in rec.values()):
                    yield row_id, RowError("invalid UTF-8 in a cell")
                else:
                    yield row_id, {k: (v if v != "" else None) for k, v in rec.items()}
    else:
        import pyarrow.parquet as pq

        for i, rec in enumerate(pq.read_table(ds.path).to_pylist()):
            yield f"{ds.path.name}:{i}", rec


def _convert(records: Iterator[tuple[str, Any]], limit: int | None, quarantine: Quarantine,
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


def _object(rec: Any) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise RowError(f"row is {_type_name(rec)}, not an object")
    return rec


def read_file(ds: FileDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    return _convert(_table_records(ds), ds.limit, quarantine, lambda row_id, rec: record_prompt(ds, rec, row_id))


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


def read_routerbench_prompts(ds: RouterBenchDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    for row in read_routerbench(ds.files, ds.limit):
        try:
            text = row.prompt_text()
        except ValueError as exc:
            quarantine.add(row.row_id, str(exc), {"prompt": row.prompt_cell[:500]})
            continue
        meta = {"sample_id": row.sample_id, "file": row.file}
        yield RawPrompt(ds.name, row.row_id, row.eval_name, text, None, meta, split=row.split)


def read_score_table_prompts(ds: ScoreTableDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    rows = read_score_table(ds.files, text_field=ds.text_field, scores_field=ds.scores_field,
                            task_field=ds.task_field, limit=ds.limit)
    for row in rows:
        problem = row.problem(ds.models)
        if problem is not None:
            quarantine.add(row.row_id, problem, {"text": str(row.text)[:500], **row.raw})
            continue
        task = str(row.task) if row.task is not None else (ds.task or ds.name)
        yield RawPrompt(ds.name, row.row_id, task, row.text, None, {}, split=row.split)


def read_routellm_prompts(ds: RouteLLMDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    for row_id, prompt, _ in read_routellm(ds.path, ds.limit):
        if not prompt.strip():
            quarantine.add(row_id, "field 'prompt' missing or empty")
            continue
        yield RawPrompt(ds.name, row_id, ds.task, prompt, None, {})


# ---- built-in public prompt files -------------------------------------------------------------


def parse_choices(value: Any) -> tuple[list[str], list[str]] | None:
    """(labels, texts) from a `choices` value: a list, or a dict with label(s) and text(s), possibly
    as a Python-literal string (LLMRouter's cells)."""
    if isinstance(value, str):
        if value.strip() in ("", "None"):
            return None
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, dict):
        texts = value.get("text") or value.get("texts")
        labels = value.get("label") or value.get("labels")
        if isinstance(texts, list):
            labels = labels if isinstance(labels, list) and len(labels) == len(texts) else None
            return [str(x) for x in (labels or [chr(65 + i) for i in range(len(texts))])], [str(t) for t in texts]
        return None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [chr(65 + i) for i in range(len(value))], value
    return None


_CODE_METRICS = {"code_eval"}
_MC_METRICS = {"em_mc"}


def read_llmrouter(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """LLMRouter query JSONL: task_name, query, ground_truth, metric, choices, task_id."""

    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = _object(rec)
        query = _text(rec, "query")
        task = _text(rec, "task_name")
        reference = _string(rec, "ground_truth", required=False)
        metric = rec.get("metric")
        meta: dict[str, Any] = {"metric": metric, "task_id": rec.get("task_id")}
        choices = parse_choices(rec.get("choices")) if metric in _MC_METRICS else None
        text = query
        if choices:
            meta["choices"] = {"labels": choices[0], "texts": choices[1]}
            if ds.templates:
                text = tt.in_context_qna(query, *choices)
        if metric in _CODE_METRICS:
            if task != "mbpp":  # HumanEval-style: the query is the signature and docstring
                meta["program_prefix"] = query
                if defs := re.findall(r"^def\s+(\w+)\s*\(", query, re.M):
                    meta["entry_point"] = defs[-1]
            tests = rec.get("choices") if task == "mbpp" else reference
            if isinstance(tests, str) and tests.startswith("["):
                try:
                    tests = ast.literal_eval(tests)
                except (ValueError, SyntaxError):
                    pass
            meta["tests"] = tests
        if (answer := final_answer(reference)) is not None:
            meta["final_answer"] = answer
        return RawPrompt(ds.name, row_id, task, text, reference, meta)

    return _convert(_jsonl_records(ds.path), ds.limit, quarantine, make)


def read_gsm8k(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = _object(rec)
        question = _string(rec, "question", required=True)
        answer = _string(rec, "answer", required=True)
        final = final_answer(answer)
        if final is None:
            raise RowError("field 'answer' has no '#### <final answer>' line")
        return RawPrompt(ds.name, row_id, "gsm8k", question, answer, {"final_answer": final})

    return _convert(_jsonl_records(ds.path), ds.limit, quarantine, make)


def read_humaneval(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = _object(rec)
        prompt = _string(rec, "prompt", required=True)
        meta = {
            "task_id": _string(rec, "task_id", required=True),
            "entry_point": _string(rec, "entry_point", required=True),
            "tests": _string(rec, "test", required=True),
            "program_prefix": prompt,
        }
        solution = _string(rec, "canonical_solution", required=False)
        return RawPrompt(ds.name, meta["task_id"], "code", prompt, solution, meta)

    return _convert(_jsonl_records(ds.path), ds.limit, quarantine, make)


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.replace("_text.txt", suffix))


def read_tweeteval_sentiment(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """TweetEval sentiment: `*_text.txt` (one tweet a line), `*_labels.txt`, the label mapping."""
    labels = _sibling(ds.path, "_labels.txt").read_text().split("\n")
    mapping_file = ds.path.with_name(ds.path.name.split("_val_")[0].split("_test_")[0] + "_mapping.txt")
    names = dict(line.split("\t", 1) for line in mapping_file.read_text().splitlines() if "\t" in line)
    choices = [names[k] for k in sorted(names, key=int)]
    for line_no, text in _decoded_lines(ds.path):
        i = line_no - 1  # labels are aligned with lines
        if ds.limit is not None and i >= ds.limit:
            break
        row_id = f"{ds.path.name}:{line_no}"
        if isinstance(text, RowError):
            quarantine.add(row_id, str(text))
            continue
        label = labels[i].strip() if i < len(labels) else ""
        if label not in names:
            quarantine.add(row_id, f"label {label!r} not in the mapping", {"text": text})
            continue
        if ds.templates:
            text = tt.sentiment(text.strip(), tt.row_rng(ds.seed, row_id), item="tweet", subject="topic")
        yield RawPrompt(ds.name, row_id, "sentiment", text, names[label], {"label": names[label], "choices": choices})


def conll_sentences(path: Path) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """(first line number, [(token, BIO tag)]) per blank-line separated sentence."""
    tokens: list[tuple[str, str]] = []
    start = 1
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                if tokens:
                    yield start, tokens
                tokens, start = [], line_no + 1
                continue
            token, _, tag = line.partition("\t")
            tokens.append((token, tag.strip() or "O"))
    if tokens:
        yield start, tokens


def bio_entities(tokens: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Entity strings per type from BIO tags (an I- without a B- starts a new entity)."""
    found: dict[str, list[str]] = {}
    current: tuple[str, list[str]] | None = None
    for token, tag in tokens + [("", "O")]:
        kind = tag[2:] if tag[:2] in ("B-", "I-") else None
        if current and (tag.startswith("B-") or kind != current[0]):
            found.setdefault(current[0], []).append(" ".join(current[1]))
            current = None
        if kind and current is None:
            current = (kind, [token])
        elif kind and current:
            current[1].append(token)
    return found


# 001 asks for a person, place or object; WNUT-17's types that answer each.
_WNUT_KINDS = {"person": ("person",), "place": ("location",), "object": ("product", "creative-work")}


def read_wnut17(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    for i, (line_no, tokens) in enumerate(conll_sentences(ds.path)):
        if ds.limit is not None and i >= ds.limit:
            break
        row_id = f"{ds.path.name}:{line_no}"
        sentence = " ".join(t for t, _ in tokens)
        entities = bio_entities(tokens)
        meta: dict[str, Any] = {"entities": entities}
        text, reference = sentence, None
        if ds.templates:
            text, kind = tt.entity_recognition(sentence, tt.row_rng(ds.seed, row_id))
            wanted = [e for t in _WNUT_KINDS[kind] for e in entities.get(t, [])]
            meta["asked"] = kind
            reference = ", ".join(wanted) if wanted else "none"
        else:
            reference = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(entities.items())) or "none"
        yield RawPrompt(ds.name, row_id, "entity_recognition", text, reference, meta)


def read_arena_hard(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """arena-hard questions: uid (the row id, which answer files join on), category, cluster, prompt."""

    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = _object(rec)
        uid = _string(rec, "uid", required=True)
        prompt = _text(rec, "prompt")
        meta = {"category": rec.get("category"), "cluster": rec.get("cluster")}
        return RawPrompt(ds.name, uid, "open_ended", prompt, None, meta)

    return _convert(_jsonl_records(ds.path), ds.limit, quarantine, make)


BUILTIN = {
    "llmrouter": read_llmrouter,
    "gsm8k": read_gsm8k,
    "humaneval": read_humaneval,
    "tweeteval_sentiment": read_tweeteval_sentiment,
    "wnut17": read_wnut17,
    "arena_hard": read_arena_hard,
}


def read_dataset(ds, quarantine: Quarantine) -> Iterator[RawPrompt]:
    if ds.kind in ("jsonl", "csv", "parquet"):
        return read_file(ds, quarantine)
    if ds.kind == "hf":
        return read_hf(ds, quarantine)
    if ds.kind == "builtin":
        return BUILTIN[ds.reader](ds, quarantine)
    if ds.kind == "routerbench":
        return read_routerbench_prompts(ds, quarantine)
    if ds.kind == "routellm":
        return read_routellm_prompts(ds, quarantine)
    if ds.kind == "score_table":
        return read_score_table_prompts(ds, quarantine)
    raise ValueError(f"dataset {ds.name!r}: unknown kind {ds.kind!r}")
