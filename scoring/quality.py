"""Score every response of a model partition with its task's metric; every score lands in [0, 1].

The metric of a task comes from the fleet (`scoring.per_task`, else `scoring.metric`), so the
estimators downstream stay metric-agnostic (METHODS.md). Each metric is a module of
`scoring/metrics/` registered in `core.kinds.METRICS` (`scoring/metrics/base.py` says what one takes and
returns). A response that cannot be scored (no reference or tests where its metric needs them, a
missing table label, a judge that gave no score) goes to the quarantine with the reason: missing,
never 0. A response that can be scored but contains no recognizable answer is wrong, and scores 0,
with the extraction recorded in `details`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from routeforge.core.config import FleetConfig
from routeforge.core.config.scoring import metric_says
from routeforge.core.kinds import METRICS
from routeforge.core.storage import Quarantine


def label_agreement(responses: pa.Table, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where responses carry the table's own 0/1 labels, how often score ≥ 0.5 agrees with them."""
    labels = {r["prompt_id"]: r["label"] for r in responses.select(["prompt_id", "label"]).to_pylist()
              if r["label"] is not None}
    the_labels = {m for m in METRICS.names() if metric_says(m, "reads_table_labels")}  # agree with themselves
    pairs = [(r["score"] >= 0.5, labels[r["prompt_id"]] >= 0.5) for r in rows
             if r["prompt_id"] in labels and r["metric"] not in the_labels]
    if not pairs:
        return None
    return {"pairs": len(pairs), "agreement": sum(a == b for a, b in pairs) / len(pairs),
            "metric_positive": sum(a for a, _ in pairs) / len(pairs),
            "label_positive": sum(b for _, b in pairs) / len(pairs)}


class Scorer:
    """Scores partitions of one fleet with the registered metrics; what a metric builds once (an
    encoder, a judge) is kept here for the run (`shared`)."""

    def __init__(self, config: FleetConfig, log=print):
        self.config = config
        self.settings = config.scoring
        self.log = log
        self._shared: dict[str, Any] = {}
        self.stats: dict[str, Any] = defaultdict(int)

    @property
    def cache_dir(self) -> Path:
        return self.config.storage.path("cache", "quality")

    def shared(self, name: str, build: Callable[[], Any]) -> Any:
        """`build()` once per scorer, under `name`."""
        if name not in self._shared:
            self._shared[name] = build()
        return self._shared[name]

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
            rows.extend(METRICS.get(metric)(items, quarantine, self))
        return rows
