"""Built-in readers for the public prompt files the project tests and benchmarks with: LLMRouter's
query files, GSM8K, HumanEval, TweetEval sentiment, WNUT-17 (CoNLL) and arena-hard, each with its
references and reference metadata (choices, final answers, tests, entities)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from routeforge.core.config import BuiltinDataset
from routeforge.core.kinds import DATASET_KINDS, READERS
from routeforge.core.storage import Quarantine
from routeforge.prompts import templates as tt
from routeforge.prompts.readers import (
    RawPrompt,
    RowError,
    as_object,
    convert_records,
    decoded_lines,
    final_answer,
    jsonl_records,
    string_field,
    text_field,
)


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


@READERS.register("llmrouter", task_column="task_name")  # its rows name their task (config validate reads it)
def read_llmrouter(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """LLMRouter query JSONL: task_name, query, ground_truth, metric, choices, task_id."""

    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = as_object(rec)
        query = text_field(rec, "query")
        task = text_field(rec, "task_name")
        reference = string_field(rec, "ground_truth", required=False)
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

    return convert_records(jsonl_records(ds.path), ds.limit, quarantine, make)


@READERS.register("gsm8k")
def read_gsm8k(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = as_object(rec)
        question = string_field(rec, "question", required=True)
        answer = string_field(rec, "answer", required=True)
        final = final_answer(answer)
        if final is None:
            raise RowError("field 'answer' has no '#### <final answer>' line")
        return RawPrompt(ds.name, row_id, "gsm8k", question, answer, {"final_answer": final})

    return convert_records(jsonl_records(ds.path), ds.limit, quarantine, make)


@READERS.register("humaneval")
def read_humaneval(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = as_object(rec)
        prompt = string_field(rec, "prompt", required=True)
        meta = {
            "task_id": string_field(rec, "task_id", required=True),
            "entry_point": string_field(rec, "entry_point", required=True),
            "tests": string_field(rec, "test", required=True),
            "program_prefix": prompt,
        }
        solution = string_field(rec, "canonical_solution", required=False)
        return RawPrompt(ds.name, meta["task_id"], "code", prompt, solution, meta)

    return convert_records(jsonl_records(ds.path), ds.limit, quarantine, make)


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.replace("_text.txt", suffix))


@READERS.register("tweeteval_sentiment")
def read_tweeteval_sentiment(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """TweetEval sentiment: `*_text.txt` (one tweet a line), `*_labels.txt`, the label mapping."""
    labels = _sibling(ds.path, "_labels.txt").read_text().split("\n")
    mapping_file = ds.path.with_name(ds.path.name.split("_val_")[0].split("_test_")[0] + "_mapping.txt")
    names = dict(line.split("\t", 1) for line in mapping_file.read_text().splitlines() if "\t" in line)
    choices = [names[k] for k in sorted(names, key=int)]
    for line_no, text in decoded_lines(ds.path):
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


@READERS.register("wnut17")
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


@READERS.register("arena_hard")
def read_arena_hard(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """arena-hard questions: uid (the row id, which answer files join on), category, cluster, prompt."""

    def make(row_id: str, rec: Any) -> RawPrompt:
        rec = as_object(rec)
        uid = string_field(rec, "uid", required=True)
        prompt = text_field(rec, "prompt")
        meta = {"category": rec.get("category"), "cluster": rec.get("cluster")}
        return RawPrompt(ds.name, uid, "open_ended", prompt, None, meta)

    return convert_records(jsonl_records(ds.path), ds.limit, quarantine, make)




@DATASET_KINDS.register("builtin")
def read_builtin(ds: BuiltinDataset, quarantine: Quarantine) -> Iterator[RawPrompt]:
    """A `builtin` dataset: the known public format its `reader` names."""
    return READERS.get(ds.reader)(ds, quarantine)
