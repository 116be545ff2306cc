"""A new model's labels checked against routeforge's own scoring of its responses (`bundle add-model`).

Why: `add-model` fits a new model from the scores a label file gives, and the release gate judges it
on the labels held out of that same file. Labels that lie consistently (every score raised, the
held-out ones too) therefore move the router and pass the gate. Where a label row also gives the
model's `response` to a prompt of the frozen evaluation set, that set keeps the prompt's reference,
and the prompt's metric scores from the response and the reference alone (`self_contained`: exact
match, token F1), routeforge scores the response itself:
- the gate credits that score on that prompt, never the label (`holdout.verified`);
- a file whose labels claim more than its responses earn, beyond `OVERCLAIM_TOLERANCE` with
  one-sided 95% confidence over at least `MIN_AUDITED` prompts, is refused whole.
What cannot be checked (no response, no reference kept, a metric that needs the pipeline's scorer:
BERTScore, code execution, a judge) is counted by reason; the gate gives unchecked labels no credit
unless the release rules say to trust them (`release.trust_added_labels`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.router import text_key
from routeforge.core.kinds import METRICS

MIN_AUDITED = 5  # prompts scored before an overclaim can refuse a file (fewer say too little)
OVERCLAIM_TOLERANCE = 0.1  # how far the mean label may exceed the mean own score (metric noise, rounding)
ONE_SIDED_Z = 1.645  # the overclaim's lower bound: mean difference less this many standard errors


@dataclass
class LabelAudit:
    """Per audited prompt (text key, hex): the label's score and routeforge's own score of the response."""

    claimed: dict[str, float] = field(default_factory=dict)
    scored: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, int] = field(default_factory=dict)  # metric -> prompts it scored
    unverified: dict[str, int] = field(default_factory=dict)  # why an evaluation-prompt label was not checked

    def overclaim(self) -> tuple[float, float] | None:
        """(mean label − mean own score, its one-sided lower bound) over the audited prompts; None when
        fewer than two were scored."""
        keys = list(self.scored)
        if len(keys) < 2:
            return None
        diff = np.array([self.claimed[k] - self.scored[k] for k in keys])
        mean = float(diff.mean())
        return mean, mean - ONE_SIDED_Z * float(diff.std(ddof=1)) / np.sqrt(len(diff))

    def refusal(self, model: str) -> str | None:
        """Why the label file is refused (labels that claim more than the responses earn), or None."""
        found = self.overclaim()
        if found is None or len(self.scored) < MIN_AUDITED or found[1] <= OVERCLAIM_TOLERANCE:
            return None
        claimed = np.mean([self.claimed[k] for k in self.scored])
        scored = np.mean(list(self.scored.values()))
        return (f"labels for {model}: on the {len(self.scored)} evaluation prompts whose responses routeforge "
                f"scored itself ({', '.join(f'{m} {n}' for m, n in sorted(self.metrics.items()))}), the labels "
                f"claim a mean of {claimed:.3f} where the responses score {scored:.3f} (more by {found[0]:.3f}, "
                f"at least {found[1]:.3f} with 95% confidence; tolerance {OVERCLAIM_TOLERANCE}); a label file "
                f"whose scores its own responses do not reproduce is refused")

    def summary(self) -> dict[str, Any]:
        found = self.overclaim()
        return {"scored": len(self.scored), "metrics": dict(self.metrics), "unverified": dict(self.unverified),
                "label_mean": float(np.mean([self.claimed[k] for k in self.scored])) if self.scored else None,
                "scored_mean": float(np.mean(list(self.scored.values()))) if self.scored else None,
                "overclaim": None if found is None else {"mean": found[0], "lower": found[1]},
                "tolerance": OVERCLAIM_TOLERANCE, "min_audited": MIN_AUDITED}


def audit_labels(rows: list[dict[str, Any]], evaluation, model: str) -> LabelAudit:
    """Score the `response` of each label row on a prompt of `evaluation` (the frozen evaluation set,
    a pyarrow table; None: none frozen) with the prompt's own metric where that metric is
    self-contained and the set keeps the prompt's reference."""
    from routeforge.core.config.scoring import metric_says  # lazy: pydantic, yaml on first use
    from routeforge.core.storage import Quarantine  # lazy: fsspec, pyarrow on first use

    audit = LabelAudit()
    if evaluation is None:
        return audit
    columns = set(evaluation.column_names)
    kept = {"reference", "reference_meta", "metric"} <= columns
    prompts = {}
    for r in evaluation.select([c for c in ("text", "task", "reference", "reference_meta", "metric")
                                if c in columns]).to_pylist():
        prompts[text_key(r["text"]).hex()] = r
    for row in rows:
        key = text_key(row["text"]).hex()
        prompt = prompts.get(key)
        if prompt is None:
            continue  # not an evaluation prompt: nothing kept to score it against
        # the first thing that stops the check, in the order a user could act on it
        metric = prompt.get("metric")
        reason = (None if kept else "the evaluation set was frozen without references")
        if reason is None and (metric not in METRICS.names() or not metric_says(metric, "self_contained")):
            reason = f"its metric ({metric}) needs the pipeline's scorer"
        if reason is None and prompt["reference"] is None:
            reason = "no reference kept for the prompt"
        if reason is None and not row.get("response"):
            reason = "no response given"
        if reason is None:
            quarantine = Quarantine("label_audit")
            item = {"prompt_id": key, "model": model, "text": row["response"], "prompt": row["text"],
                    "reference": prompt["reference"], "meta": json.loads(prompt["reference_meta"] or "{}"),
                    "task": prompt["task"], "label": None}
            scored = METRICS.get(metric)([item], quarantine, None)
            if scored:
                audit.claimed[key], audit.scored[key] = float(row["score"]), float(scored[0]["score"])
                audit.metrics[metric] = audit.metrics.get(metric, 0) + 1
                continue
            reason = f"{metric} could not score it"
        audit.unverified[reason] = audit.unverified.get(reason, 0) + 1
    return audit
