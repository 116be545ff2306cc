"""Build the `prompts` table: read every configured dataset, normalize, template, hash, split.

Rows that cannot be used go to the quarantine with a reason and are counted by reason; they never
fail the stage and are never dropped silently: empty or whitespace text, invalid UTF-8 or Unicode
(lone surrogates), NaN / Infinity, wrong field types, malformed cells, a missing reference where the
scoring metric needs one, a prompt over `prompts.max_prompt_chars` (100,000 by default) or
`prompts.max_prompt_tokens`, an id the dataset names twice with different text, and duplicates (same
source, task and templated text). A row that fails in a way nobody foresaw is quarantined with its
exception's type, never raised.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import defaultdict
from typing import Any

import pyarrow as pa
from routeforge.core.config import FleetConfig, Templates
from routeforge.core.config.scoring import metric_says
from routeforge.core.json_lines import surrogate_field
from routeforge.core.model_sources import load_tokenizer
from routeforge.core.schemas import PROMPTS
from routeforge.core.storage import Quarantine, to_table
from routeforge.prompts import templates as tt
from routeforge.prompts.builtin_readers import parse_choices
from routeforge.prompts.readers import RawPrompt, RowError, read_dataset

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class NoUsablePrompts(ValueError):
    """Every row was quarantined; carries the quarantine, which the asset writes before it fails (the
    file says why each row was refused)."""

    def __init__(self, message: str, quarantine):
        super().__init__(message)
        self.quarantine = quarantine


def prompt_id(source: str, task: str, text: str) -> str:
    return hashlib.sha256(f"{source}\x1f{task}\x1f{text}".encode()).hexdigest()[:16]


def normalize(text: str) -> str:
    """Unicode NFC, LF line ends, no control characters but tab and newline, trimmed."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text).strip()


def apply_template(templates: Templates, task: str, text: str) -> tuple[str, str]:
    """(templated text, task hint). The hint is appended when `add_hint` (001 §5.1)."""
    body = templates.per_task.get(task, templates.default).format(text=text)
    hint = templates.hint.format(task=task.replace("_", " "))
    return (f"{body}\n{hint}" if templates.add_hint else body), hint


def apply_task_template(ds, raw: RawPrompt) -> RawPrompt:
    """Seed 001's task template named by a file/HF dataset's `task_template`."""
    kind = getattr(ds, "task_template", None)
    if kind is None or kind == "qna":
        return raw
    rng = tt.row_rng(ds.template_seed, raw.source_row)
    meta = dict(raw.reference_meta)
    if kind == "sentiment":
        text = tt.sentiment(raw.text, rng)
    elif kind == "entity_recognition":
        text, meta["asked"] = tt.entity_recognition(raw.text, rng)
    elif kind == "translation":
        language = meta.get("language")
        if not isinstance(language, str) or not language.strip():
            raise RowError("task_template 'translation' needs a string meta field 'language'")
        text = tt.translation(raw.text, language, rng)
    else:
        choices = parse_choices(meta.get("choices"))
        if not choices:
            raise RowError("task_template 'in_context_qna' needs meta field 'choices' with options")
        text = tt.in_context_qna(raw.text, *choices)
    return RawPrompt(raw.source, raw.source_row, raw.task, text, raw.reference, meta, raw.split)


def reference_required(config: FleetConfig, ds, task: str) -> bool:
    """The dataset's explicit setting, else whether the task's scoring metric compares with one."""
    explicit = getattr(ds, "reference_required", None)
    return metric_says(config.scoring.metric_for(task), "needs_reference") if explicit is None else explicit


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


def _over_length(config: FleetConfig, rows: list[dict[str, Any]], quarantine: Quarantine) -> list[dict[str, Any]]:
    limit = config.prompts.max_prompt_tokens
    if limit is None or not rows:
        return rows

    tokenizer = load_tokenizer(config.prompts.tokenizer)
    tokenizer.model_max_length = 1 << 30  # counting only
    counts = [len(ids) for ids in tokenizer([r["text"] for r in rows], add_special_tokens=False)["input_ids"]]
    kept = []
    for r, n in zip(rows, counts):
        if n > limit:
            quarantine.add(r["source_row"], f"over max_prompt_tokens ({limit})",
                           {"tokens": n, "source": r["source"], "task": r["task"]})
        else:
            kept.append(r)
    return kept


def build_prompts(config: FleetConfig) -> tuple[pa.Table, Quarantine]:
    quarantine = Quarantine("prompts")
    rows: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    ids: dict[tuple[str, str], str] = {}  # (source, row id) -> prompt id, for ids a dataset names
    limit = config.prompts.max_prompt_chars
    for ds in config.datasets:
        for raw in read_dataset(ds, quarantine):
            payload = {"task": raw.task, "text": str(raw.text)[:2000].encode("utf-8", "replace").decode()}
            if surrogate_field(raw.text) is not None or surrogate_field(raw.task) is not None:
                quarantine.add(raw.source_row, "text or task holds invalid Unicode (a lone surrogate)", None)
                continue
            if limit is not None and len(raw.text) > limit:
                quarantine.add(raw.source_row, f"longer than prompts.max_prompt_chars ({len(raw.text):,} > {limit:,})",
                               {"task": raw.task, "text": raw.text[:500]})
                continue
            try:
                raw = apply_task_template(ds, raw)
            except RowError as exc:
                quarantine.add(raw.source_row, str(exc), payload)
                continue
            text = normalize(raw.text) if config.prompts.normalize else raw.text
            if not text.strip():
                quarantine.add(raw.source_row, "text empty after normalization", payload)
                continue
            reference = raw.reference
            if reference is not None and config.prompts.normalize:
                reference = normalize(reference) or None
            if not reference and reference_required(config, ds, raw.task):
                metric = config.scoring.metric_for(raw.task)
                quarantine.add(raw.source_row, f"missing reference (scoring metric {metric} needs one)", payload)
                continue
            text, hint = apply_template(config.templates, raw.task, text)
            pid = prompt_id(raw.source, raw.task, text)
            first = ids.setdefault((raw.source, raw.source_row), pid)
            if first != pid:
                quarantine.add(raw.source_row, f"duplicate id {raw.source_row!r} with different text (first: prompt "
                                               f"{first})", payload)
                continue
            if pid in seen:
                quarantine.add(raw.source_row, "duplicate prompt", {**payload, "duplicate_of": seen[pid]})
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
                    "reference": reference,
                    "reference_meta": json.dumps(raw.reference_meta, ensure_ascii=False, default=str),
                    "split": raw.split,
                }
            )
    rows = _over_length(config, rows, quarantine)
    if config.split.mode == "seeded":
        assign_splits(rows, config.split.test_fraction, config.split.seed)
    else:
        for r in rows:
            if r["split"] is None:
                raise ValueError(f"split.mode is 'source' but {r['source']} row {r['source_row']} has no split")
    if not rows:
        raise NoUsablePrompts(f"fleet {config.name!r}: no usable prompts ({quarantine.summary()})", quarantine)
    return to_table(rows, PROMPTS), quarantine
