"""Quality scores in [0, 1] per (prompt, model): BERTScore F1 and imported table correctness.

BERTScore follows 000 (s = BERTScore(reference, response)) through the `bert-score` package, with a
configurable backbone (any BERT-family model; `num_layers` picks the layer). Scores are clipped to
[0, 1]. An empty response scores 0 without calling the scorer (there is nothing to match, and
bert-score's empty-string path is broken on transformers 5).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from pipelines.config import ScoringSettings
from pipelines.model_sources import resolve_pretrained
from pipelines.storage import Quarantine


class BertScoreMetric:
    name = "bertscore_f1"

    def __init__(self, settings: ScoringSettings):
        from bert_score import BERTScorer

        self.backbone = settings.backbone
        self.num_layers = settings.num_layers
        self.scorer = BERTScorer(
            model_type=resolve_pretrained(settings.backbone),
            num_layers=settings.num_layers,
            batch_size=settings.batch_size,
            device="cpu",
        )

    def score(self, candidates: list[str], references: list[str]) -> list[float]:
        scores = [0.0] * len(candidates)
        live = [i for i, c in enumerate(candidates) if c.strip()]
        if live:
            _, _, f1 = self.scorer.score([candidates[i] for i in live], [references[i] for i in live])
            for i, value in zip(live, f1.tolist()):
                scores[i] = min(1.0, max(0.0, float(value)))
        return scores


def score_bertscore(
    responses: pa.Table, prompts: pa.Table, metric: BertScoreMetric, quarantine: Quarantine
) -> list[dict[str, Any]]:
    references = dict(zip(prompts.column("prompt_id").to_pylist(), prompts.column("reference").to_pylist()))
    todo = []
    for r in responses.select(["prompt_id", "model", "text"]).to_pylist():
        ref = references.get(r["prompt_id"])
        if not ref:
            quarantine.add(r["prompt_id"], "prompt has no reference for BERTScore")
            continue
        todo.append((r, ref))
    scores = metric.score([r["text"] for r, _ in todo], [ref for _, ref in todo])
    details = json.dumps({"backbone": metric.backbone, "num_layers": metric.num_layers})
    return [
        {"prompt_id": r["prompt_id"], "model": r["model"], "metric": metric.name, "score": s, "details": details}
        for (r, _), s in zip(todo, scores)
    ]


def score_table_labels(responses: pa.Table, quarantine: Quarantine) -> list[dict[str, Any]]:
    """Imported 0/1 correctness; a missing label is quarantined, never counted as 0."""
    rows = []
    for r in responses.select(["prompt_id", "model", "label"]).to_pylist():
        label = r["label"]
        if label is None:
            quarantine.add(r["prompt_id"], "no correctness label in the response table")
        elif not 0.0 <= label <= 1.0:
            quarantine.add(r["prompt_id"], f"label {label} outside [0, 1]")
        else:
            rows.append(
                {"prompt_id": r["prompt_id"], "model": r["model"], "metric": "table_correctness",
                 "score": float(label), "details": None}
            )
    return rows
