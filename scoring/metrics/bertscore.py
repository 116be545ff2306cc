"""BERTScore (000: s = BERTScore(reference, response)) through the `bert-score` library, cached.

`bert_score.BERTScorer` does the work, batched, with the configured backbone and layer, optional
idf weighting and baseline rescaling; routeforge adds a cache keyed by (reference, response,
scorer settings), so re-scoring after adding a model or prompts scores only the new pairs. With idf
on, the weights depend on the whole reference set, so its hash joins the settings key.

Empty candidates score 0 without calling the scorer: there is nothing to match, and bert-score's
empty-string path is broken on transformers 5. F1 is the quality score; scores are clipped to
[0, 1] (rescaled scores can fall below 0).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import pyarrow as pa
from routeforge.core.config import ScoringSettings
from routeforge.core.kinds import METRICS
from routeforge.core.model_sources import resolve_pretrained
from routeforge.core.storage import ShardCache
from routeforge.scoring.metrics.base import score_row

CACHE_SCHEMA = pa.schema([
    pa.field("cache_key", pa.string(), nullable=False),
    pa.field("precision", pa.float64(), nullable=False),
    pa.field("recall", pa.float64(), nullable=False),
    pa.field("f1", pa.float64(), nullable=False),
])


class BertScoreMetric:
    name = "bertscore_f1"

    def __init__(self, settings: ScoringSettings, cache_dir: Path | None = None):
        self.settings = settings
        self.cache_dir = cache_dir
        self._scorer = None
        self.hits = 0
        self.scored = 0

    def scorer(self, references: list[str]):
        """The BERTScorer, built once; with idf on, its weights are recomputed from `references`
        (bert-score's `compute_idf`), without reloading the model."""
        from bert_score import BERTScorer

        s = self.settings
        if self._scorer is None:
            self._scorer = BERTScorer(
                model_type=resolve_pretrained(s.backbone), num_layers=s.num_layers, batch_size=s.batch_size,
                idf=s.idf, rescale_with_baseline=s.rescale_with_baseline,
                baseline_path=str(s.baseline_path) if s.baseline_path else None, lang=s.lang, device=_device(),
                nthreads=0,  # idf counts in this process: bert-score's Pool forks a process that holds torch,
                # tokenizer and server threads, and a fork there can deadlock (a CI run hung in it)
            )
        if s.idf:
            with warnings.catch_warnings():  # recomputed on purpose: not worth bert-score's warning
                warnings.filterwarnings("ignore", message="Overwriting the previous importance weights")
                self._scorer.compute_idf(references)
        return self._scorer

    def settings_key(self, references: list[str]) -> str:
        s = self.settings
        payload = {"backbone": s.backbone, "num_layers": s.num_layers, "idf": s.idf,
                   "rescale": s.rescale_with_baseline, "baseline": str(s.baseline_path), "lang": s.lang}
        if s.idf:
            payload["idf_refs"] = hashlib.sha256("\x1f".join(sorted(set(references))).encode()).hexdigest()
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def details(self) -> str:
        s = self.settings
        return json.dumps({"backbone": s.backbone, "num_layers": s.num_layers, "idf": s.idf,
                           "rescale_with_baseline": s.rescale_with_baseline})

    def score_prf(self, candidates: list[str], references: list[str]) -> list[tuple[float, float, float]]:
        """(precision, recall, F1) per pair, from the cache where present."""
        settings_key = self.settings_key(references)
        keys = [hashlib.sha256(f"{settings_key}\x1f{r}\x1f{c}".encode()).hexdigest()[:24]
                for c, r in zip(candidates, references)]
        cache = ShardCache(self.cache_dir / settings_key, CACHE_SCHEMA) if self.cache_dir else None
        known = cache.load() if cache else {}
        todo = {k: i for i, k in enumerate(keys) if k not in known and candidates[i].strip()}
        if todo:
            idx = list(todo.values())
            p, r, f = self.scorer(references).score([candidates[i] for i in idx], [references[i] for i in idx])
            new = [{"cache_key": keys[i], "precision": float(pv), "recall": float(rv), "f1": float(fv)}
                   for i, pv, rv, fv in zip(idx, p.tolist(), r.tolist(), f.tolist())]
            known.update({row["cache_key"]: row for row in new})
            if cache:
                cache.append(new)
        fresh = set(todo.values())
        self.scored += len(fresh)
        self.hits += sum(1 for i, c in enumerate(candidates) if c.strip() and i not in fresh)
        out = []
        for c, k in zip(candidates, keys):
            row = known.get(k)
            out.append((row["precision"], row["recall"], row["f1"]) if row and c.strip() else (0.0, 0.0, 0.0))
        return out

    def score(self, candidates: list[str], references: list[str]) -> list[float]:
        return [min(1.0, max(0.0, f)) for _, _, f in self.score_prf(candidates, references)]


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@METRICS.register("bertscore", needs_reference=True)
def score(items, quarantine, scorer):
    """BERTScore F1 against the reference (rows name it `bertscore_f1`, with precision and recall in the
    details); the encoder is built once per run."""
    ready = []
    for item in items:
        if item["reference"]:
            ready.append(item)
        else:
            quarantine.add(item["prompt_id"], "bertscore: prompt has no reference")
    metric = scorer.shared("bertscore", lambda: BertScoreMetric(scorer.settings, scorer.cache_dir / "bertscore"))
    scores = metric.score_prf([i["text"] for i in ready], [i["reference"] for i in ready])
    details = json.loads(metric.details())
    return [score_row(i, "bertscore_f1", f, {**details, "precision": p, "recall": r})
            for i, (p, r, f) in zip(ready, scores)]
