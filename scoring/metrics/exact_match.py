"""Exact match: the answer extracted the way the task's reference is shaped (a lettered option, a label
of a label set, a number, yes/no, else the SQuAD-normalized string), compared with the reference."""

from __future__ import annotations

from typing import Any

from routeforge.core.kinds import METRICS
from routeforge.scoring.metrics.base import Unscorable, each
from routeforge.scoring.metrics.extraction import (
    extract_choice,
    extract_label,
    extract_math,
    normalize_number,
    squad_normalize,
)


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


@METRICS.register("exact_match", needs_reference=True, self_contained=True)
def score(items, quarantine, scorer):
    return each(items, quarantine, "exact_match", lambda i: exact_match(i["text"], i["reference"], i["meta"]))
