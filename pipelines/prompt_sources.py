"""Build the `prompts` table: read every configured dataset, template it, hash it, split it.

Rows that cannot be used (empty text, malformed cells, duplicates) go to the quarantine with a
reason; they never fail the whole stage.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pipelines.config import FleetConfig, HFDataset, JsonlDataset, RouterBenchDataset, Templates
from pipelines.response_tables import read_routerbench
from pipelines.schemas import PROMPTS
from pipelines.storage import Quarantine, to_table

_FINAL_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.S)


@dataclass(frozen=True)
class RawPrompt:
    source: str
    source_row: str
    task: str
    text: str
    reference: str | None
    reference_meta: dict[str, Any]
    split: str | None = None  # set when the source ships its own split


def prompt_id(source: str, task: str, text: str) -> str:
    return hashlib.sha256(f"{source}\x1f{task}\x1f{text}".encode()).hexdigest()[:16]


def apply_template(templates: Templates, task: str, text: str) -> tuple[str, str]:
    """(templated text, task hint). The hint is appended when `add_hint` (001 §5.1: +70 points)."""
    body = templates.per_task.get(task, templates.default).format(text=text)
    hint = templates.hint.format(task=task.replace("_", " "))
    return (f"{body}\n{hint}" if templates.add_hint else body), hint


def _reference_meta(reference: str | None) -> dict[str, Any]:
    if reference and (m := _FINAL_ANSWER.search(reference)):
        return {"final_answer": m.group(1).replace(",", "")}
    return {}


def _read_jsonl(ds: JsonlDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    with open(ds.path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if ds.limit is not None and line_no > ds.limit:
                break
            if not line.strip():
                continue
            row_id = f"{ds.path.name}:{line_no}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                quarantine.add(row_id, f"invalid JSON: {exc.msg}", line[:500])
                continue
            text = rec.get(ds.text_field)
            if not isinstance(text, str) or not text.strip():
                quarantine.add(row_id, f"field {ds.text_field!r} missing or empty", rec)
                continue
            task = ds.task or (rec.get(ds.task_field) if ds.task_field else None)
            if not task:
                quarantine.add(row_id, f"field {ds.task_field!r} missing and no fixed task", rec)
                continue
            reference = rec.get(ds.reference_field) if ds.reference_field else None
            if ds.id_field and rec.get(ds.id_field) is not None:
                row_id = str(rec[ds.id_field])
            yield RawPrompt(ds.name, row_id, str(task), text, reference, _reference_meta(reference))


def _read_hf(ds: HFDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    from datasets import load_dataset

    data = load_dataset(ds.path, ds.subset, split=ds.split, data_files=ds.data_files)
    if ds.limit is not None:
        data = data.select(range(min(ds.limit, len(data))))
    for i, rec in enumerate(data):
        text = rec.get(ds.text_field)
        row_id = f"{ds.path}:{ds.split}:{i}"
        if not isinstance(text, str) or not text.strip():
            quarantine.add(row_id, f"field {ds.text_field!r} missing or empty", rec)
            continue
        reference = rec.get(ds.reference_field) if ds.reference_field else None
        reference = None if reference is None else str(reference)
        yield RawPrompt(ds.name, row_id, ds.task, text, reference, _reference_meta(reference))


def _read_routerbench(ds: RouterBenchDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    for row in read_routerbench(ds.files, ds.limit):
        try:
            text = row.prompt_text()
        except ValueError as exc:
            quarantine.add(row.row_id, str(exc), {"prompt": row.prompt_cell[:500]})
            continue
        meta = {"sample_id": row.sample_id, "file": row.file}
        yield RawPrompt(ds.name, row.row_id, row.eval_name, text, None, meta, split=row.split)


_READERS = {"jsonl": _read_jsonl, "hf": _read_hf, "routerbench": _read_routerbench}


def assign_splits(rows: list[dict[str, Any]], test_fraction: float, seed: int) -> None:
    """Seeded split stratified by task: within a task, the prompts whose salted hash ranks lowest
    form the test set. Hash ranking keeps a prompt's split stable when other prompts are added."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r)
    for members in by_task.values():
        members.sort(key=lambda r: hashlib.sha256(f"{seed}:{r['prompt_id']}".encode()).hexdigest())
        n_test = round(len(members) * test_fraction) if len(members) > 1 else 0
        for i, r in enumerate(members):
            r["split"] = "test" if i < n_test else "train"


def build_prompts(config: FleetConfig) -> tuple[pa.Table, Quarantine]:
    quarantine = Quarantine("prompts")
    rows: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for ds in config.datasets:
        for raw in _READERS[ds.kind](ds, quarantine):
            text, hint = apply_template(config.templates, raw.task, raw.text)
            pid = prompt_id(raw.source, raw.task, text)
            if pid in seen:
                quarantine.add(raw.source_row, f"duplicate of {seen[pid]}", {"task": raw.task})
                continue
            seen[pid] = raw.source_row
            rows.append(
                {
                    "prompt_id": pid,
                    "source": raw.source,
                    "source_row": raw.source_row,
                    "task": raw.task,
                    "text": text,
                    "task_hint": hint,
                    "reference": raw.reference,
                    "reference_meta": json.dumps(raw.reference_meta, ensure_ascii=False),
                    "split": raw.split,
                }
            )
    if config.split.mode == "seeded":
        assign_splits(rows, config.split.test_fraction, config.split.seed)
    else:
        for r in rows:
            if r["split"] is None:
                raise ValueError(f"split.mode is 'source' but {r['source']} row {r['source_row']} has no split")
    if not rows:
        raise ValueError(f"fleet {config.name!r}: no usable prompts ({len(quarantine)} quarantined)")
    return to_table(rows, PROMPTS), quarantine
