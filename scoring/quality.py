"""Score every response of a model partition with its task's metric; every score lands in [0, 1].

The metric of a task comes from the fleet (`scoring.per_task`, else `scoring.metric`), so the
estimators downstream stay metric-agnostic (METHODS.md). A response that cannot be scored (no
reference or tests where its metric needs them, a missing table label, a judge that gave no
score) goes to the quarantine with the reason: missing, never 0. A response that can be scored but
contains no recognizable answer is wrong, and scores 0, with the extraction recorded in `details`.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
from routeforge.core.config import FleetConfig
from routeforge.core.storage import Quarantine
from routeforge.scoring.metrics.extraction import (
    best_token_f1,
    extract_choice,
    extract_label,
    extract_math,
    normalize_number,
    squad_normalize,
)


class Unscorable(ValueError):
    """The pair cannot be scored by its metric; the message is the quarantine reason."""


def _row(item: dict[str, Any], metric: str, score: float, details: dict[str, Any] | None) -> dict[str, Any]:
    return {"prompt_id": item["prompt_id"], "model": item["model"], "metric": metric,
            "score": min(1.0, max(0.0, float(score))), "details": json.dumps(details, default=str) if details else None}


def exact_match(response: str, reference: str | None, meta: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Extract the answer the way the task's reference is shaped, then compare."""
    choices = meta.get("choices")
    if isinstance(choices, dict) and "labels" in choices:  # multiple choice with lettered options
        labels, texts = choices["labels"], choices["texts"]
        gold = reference if reference in labels else next(
            (lab for lab, t in zip(labels, texts) if reference and t.strip().lower() == reference.strip().lower()),
            None)
        if gold is None:
            raise Unscorable(f"reference {reference!r} is not one of the options {labels}")
        got = extract_choice(response, labels, texts)
        return float(got == gold), {"extracted": got, "gold": gold, "rule": "choice"}
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):  # label sets
        got = extract_label(response, choices)
        return float(got is not None and got.lower() == (reference or "").lower()), {
            "extracted": got, "gold": reference, "rule": "label"}
    if "final_answer" in meta or (reference and extract_math(reference) is not None and
                                  normalize_number(reference.strip()) is not None):
        gold = normalize_number(str(meta["final_answer"])) if "final_answer" in meta else extract_math(reference)
        got = extract_math(response)
        return float(got is not None and got == gold), {"extracted": got, "gold": gold, "rule": "math"}
    if reference is None:
        raise Unscorable("no reference for exact match")
    if squad_normalize(reference) in ("yes", "no"):
        got = extract_label(response, ["yes", "no"])
        return float(got == squad_normalize(reference)), {"extracted": got, "gold": reference, "rule": "yes_no"}
    return float(squad_normalize(response) == squad_normalize(reference)), {"rule": "normalized_string"}


def _references(reference: str | None, meta: dict[str, Any]) -> list[str]:
    answers = meta.get("answers")
    if isinstance(answers, list):
        return [str(a) for a in answers]
    if reference and reference.startswith("[") and reference.endswith("]"):
        try:
            parsed = ast.literal_eval(reference)
            if isinstance(parsed, list) and parsed:
                return [str(a) for a in parsed]
        except (ValueError, SyntaxError):
            pass
    if not reference:
        raise Unscorable("no reference for token F1")
    return [reference]


def code_program(response: str, meta: dict[str, Any]) -> str:
    from routeforge.scoring.metrics.code_exec import assert_program, humaneval_program

    tests = meta.get("tests")
    if isinstance(tests, list) and tests:
        return assert_program(response, [str(t) for t in tests], setup=str(meta.get("test_setup") or ""))
    if isinstance(tests, str) and tests.strip():
        if "entry_point" not in meta or "program_prefix" not in meta:
            raise Unscorable("code tests need an entry point and the prompt's code (reference_meta)")
        return humaneval_program(meta["program_prefix"], response, tests, meta["entry_point"])
    raise Unscorable("no tests for this code task (reference_meta.tests)")


def label_agreement(responses: pa.Table, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where responses carry the table's own 0/1 labels, how often score ≥ 0.5 agrees with them."""
    labels = {r["prompt_id"]: r["label"] for r in responses.select(["prompt_id", "label"]).to_pylist()
              if r["label"] is not None}
    pairs = [(r["score"] >= 0.5, labels[r["prompt_id"]] >= 0.5) for r in rows
             if r["prompt_id"] in labels and r["metric"] != "table_correctness"]
    if not pairs:
        return None
    return {"pairs": len(pairs), "agreement": sum(a == b for a, b in pairs) / len(pairs),
            "metric_positive": sum(a for a, _ in pairs) / len(pairs),
            "label_positive": sum(b for _, b in pairs) / len(pairs)}


class Scorer:
    """Scores partitions of one fleet; metric objects (encoders, judge) are built once, on first use."""

    def __init__(self, config: FleetConfig, log=print):
        self.config = config
        self.settings = config.scoring
        self.log = log
        self._bertscore_metric = None
        self.stats: dict[str, Any] = defaultdict(int)

    @property
    def cache_dir(self) -> Path:
        return self.config.storage.path("cache", "quality")

    def bertscore(self):
        if self._bertscore_metric is None:
            from routeforge.scoring.metrics.bertscore import BertScoreMetric

            self._bertscore_metric = BertScoreMetric(self.settings, self.cache_dir / "bertscore")
        return self._bertscore_metric

    def score(self, responses: pa.Table, prompts: pa.Table, quarantine: Quarantine) -> list[dict[str, Any]]:
        info = {r["prompt_id"]: r for r in prompts.select(["prompt_id", "task", "text", "reference",
                                                           "reference_meta"]).to_pylist()}
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in responses.select(["prompt_id", "model", "text", "label"]).to_pylist():
            p = info.get(r["prompt_id"])
            if p is None:
                quarantine.add(r["prompt_id"], "response to a prompt not in the prompt set")
                continue
            meta = json.loads(p["reference_meta"] or "{}")
            groups[self.settings.metric_for(p["task"])].append(
                {**r, "prompt": p["text"], "reference": p["reference"], "meta": meta, "task": p["task"]})
        rows: list[dict[str, Any]] = []
        for metric, items in groups.items():
            self.stats[f"pairs/{metric}"] += len(items)
            rows.extend(getattr(self, f"_{metric}")(items, quarantine))
        return rows

    def _each(self, items, quarantine, metric: str, fn) -> list[dict[str, Any]]:
        rows = []
        for item in items:
            try:
                score, details = fn(item)
            except Unscorable as exc:
                quarantine.add(item["prompt_id"], f"{metric}: {exc}")
                continue
            rows.append(_row(item, metric, score, details))
        return rows

    def _exact_match(self, items, quarantine):
        return self._each(items, quarantine, "exact_match",
                          lambda i: exact_match(i["text"], i["reference"], i["meta"]))

    def _token_f1(self, items, quarantine):
        return self._each(items, quarantine, "token_f1",
                          lambda i: (best_token_f1(i["text"], _references(i["reference"], i["meta"])), None))

    def _table_correctness(self, items, quarantine):
        def label(item):
            value = item["label"]
            if value is None:
                raise Unscorable("no correctness label in the response table")
            if not 0.0 <= value <= 1.0:
                raise Unscorable(f"label {value} outside [0, 1]")
            return value, None

        return self._each(items, quarantine, "table_correctness", label)

    def _bertscore(self, items, quarantine):
        ready = []
        for item in items:
            if item["reference"]:
                ready.append(item)
            else:
                quarantine.add(item["prompt_id"], "bertscore: prompt has no reference")
        metric = self.bertscore()
        scores = metric.score_prf([i["text"] for i in ready], [i["reference"] for i in ready])
        details = json.loads(metric.details())
        return [_row(i, "bertscore_f1", f, {**details, "precision": p, "recall": r})
                for i, (p, r, f) in zip(ready, scores)]

    def _code_pass_at_1(self, items, quarantine):
        from routeforge.scoring.metrics.code_exec import run_many, sandbox_status

        c = self.settings.code
        sandbox = sandbox_status()
        self.stats["code_sandbox"] = sandbox
        if sandbox != "bubblewrap":
            if c.isolation == "required":  # refuse rather than run hostile code unconfined
                reason = (f"code_pass_at_1: not run: {sandbox.removeprefix('fallback: ')}; generated code runs "
                          "only inside bubblewrap (apt-get install bubblewrap), or set "
                          "scoring.code.isolation: allow_fallback")
                for item in items:
                    quarantine.add(item["prompt_id"], reason)
                self.stats["code_cells_refused"] += len(items)
                self.log(f"warning: {len(items)} code-task cells quarantined: {reason}")
                return []
            self.log(f"warning: generated code runs OUTSIDE bubblewrap ({sandbox}): scoring.code.isolation is "
                     "allow_fallback (rlimits and an empty network namespace, as this user)")
        ready, programs = [], []
        for item in items:
            try:
                programs.append(code_program(item["text"], item["meta"]))
                ready.append(item)
            except Unscorable as exc:
                quarantine.add(item["prompt_id"], f"code_pass_at_1: {exc}")
        results = run_many(programs, c.timeout_s, c.memory_mb, c.workers)
        return [_row(i, "code_pass_at_1", float(res.passed),
                     {"reason": res.reason, "wall_s": round(res.wall_s, 3), "sandbox": res.sandbox})
                for i, res in zip(ready, results)]

    def _llm_judge(self, items, quarantine):
        from routeforge.scoring.metrics.judge import run_judge

        asks = [{"prompt_id": i["prompt_id"], "prompt": i["prompt"], "reference": i["reference"],
                 "response": i["text"]} for i in items]
        verdicts = run_judge(self.config, asks, log=self.log)
        rows = []
        judge = self.settings.judge.model.name
        for item, (score, reason, answer) in zip(items, verdicts):
            if score is None:
                quarantine.add(item["prompt_id"], f"llm_judge: {reason}", {"judge_answer": answer[:500]})
                self.stats["judge_missing"] += 1
            else:
                rows.append(_row(item, "llm_judge", score, {"judge": judge, "answer": answer[:200]}))
        return rows
