"""What every quality metric shares: the `Metric` protocol, the one way a score becomes a `quality` row,
and `Unscorable`, the error whose message is a quarantine reason.

A metric is a function registered in `core.kinds.METRICS` by its own module in this folder:

    @METRICS.register("exact_match", needs_reference=True)
    def score(items, quarantine, scorer) -> list[dict]: ...

`items` are one partition's responses of the tasks that use the metric (each with its prompt, reference,
reference_meta as `meta`, the table's label and the task); it returns one row per scored item and sends
every item it cannot score to the quarantine with the reason: missing, never 0. `scorer` is what the
partition's scoring shares (`scoring.quality.Scorer`): the fleet, its scoring settings, the log, counts
for the asset's metadata, and `shared(name, build)` for what is built once per run (encoders, a judge).
What a module registers of its metric, read by the config and the stages without importing it again:
`needs_reference` (prompt sources keep only prompts that have one, `prompts.sources`), `runs_code`
(the sandbox warning), `needs_judge` (a judge model must be configured), `reads_table_labels`
(every model must import a response table) and `self_contained` (it scores from the response and the
reference alone, with no scorer: `bundle add-model` runs it to check a new model's labels).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from routeforge.core.storage import Quarantine


class Unscorable(ValueError):
    """The pair cannot be scored by its metric; the message is the quarantine reason."""


class Metric(Protocol):
    def __call__(self, items: list[dict[str, Any]], quarantine: Quarantine, scorer: Any) -> list[dict[str, Any]]: ...


def score_row(item: dict[str, Any], metric: str, score: float, details: dict[str, Any] | None) -> dict[str, Any]:
    """A `quality` row: the score clamped to [0, 1], the details as JSON."""
    return {"prompt_id": item["prompt_id"], "model": item["model"], "metric": metric,
            "score": min(1.0, max(0.0, float(score))), "details": json.dumps(details, default=str) if details else None}


def each(items: list[dict[str, Any]], quarantine: Quarantine, metric: str,
         fn: Callable[[dict[str, Any]], tuple[float, dict[str, Any] | None]]) -> list[dict[str, Any]]:
    """Score item by item; an `Unscorable` item goes to the quarantine with its reason."""
    rows = []
    for item in items:
        try:
            score, details = fn(item)
        except Unscorable as exc:
            quarantine.add(item["prompt_id"], f"{metric}: {exc}")
            continue
        rows.append(score_row(item, metric, score, details))
    return rows
