"""The correctness label an imported response table carries (RouterBench's, RouteLLM's): the score is
the label, checked to lie in [0, 1]."""

from __future__ import annotations

from routeforge.core.kinds import METRICS
from routeforge.scoring.metrics.base import Unscorable, each


def label(item):
    value = item["label"]
    if value is None:
        raise Unscorable("no correctness label in the response table")
    if not 0.0 <= value <= 1.0:
        raise Unscorable(f"label {value} outside [0, 1]")
    return value, None


@METRICS.register("table_correctness", reads_table_labels=True)
def score(items, quarantine, scorer):
    return each(items, quarantine, "table_correctness", label)
