"""Token F1 (SQuAD's): the best F1 of the response's tokens against any of the reference answers."""

from __future__ import annotations

import ast
from typing import Any

from routeforge.core.kinds import METRICS
from routeforge.scoring.metrics.base import Unscorable, each
from routeforge.scoring.metrics.extraction import best_token_f1


def references(reference: str | None, meta: dict[str, Any]) -> list[str]:
    """The accepted answers: `reference_meta.answers`, a reference that is a Python list literal, or the
    reference itself."""
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


@METRICS.register("token_f1", needs_reference=True, self_contained=True)
def score(items, quarantine, scorer):
    return each(items, quarantine, "token_f1",
                lambda i: (best_token_f1(i["text"], references(i["reference"], i["meta"])), None))
