"""LLM judge (G-Eval style, 002 §4.2) through any generation engine, with cached verdicts.

The rubric asks for "Score: N" on the configured scale; N maps linearly onto [0, 1]. The judge's
generations go through the same cached driver as candidate responses (keyed by the judge prompt),
so re-scoring re-asks nothing. An answer with no score in range is recorded as missing with the
reason, never as 0: a judge that cannot answer says nothing about the response.

Token-probability weighting (G-Eval's expectation over score tokens) is not implemented: none of
the engines here return per-token probabilities yet, so scores are the parsed integer.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from pipelines.config import FleetConfig, JudgeSettings, Sampling

_SCORE = re.compile(r"(?:score|rating)\s*[:=]?\s*\**\s*(\d+(?:\.\d+)?)", re.I)
_LEADING = re.compile(r"^\s*\**(\d+(?:\.\d+)?)\s*(?:/\s*\d+)?\**\s*$")


def parse_score(text: str, scale: tuple[int, int]) -> tuple[float | None, str]:
    """(score in [0, 1] or None, reason)."""
    low, high = scale
    m = _SCORE.search(text) or _LEADING.match(text)
    if not m:
        return None, "no score in the judge's answer"
    value = float(m.group(1))
    if not low <= value <= high:
        return None, f"score {value:g} outside {low}..{high}"
    return (value - low) / (high - low), "parsed"


def judge_prompt(settings: JudgeSettings, prompt: str, reference: str | None, response: str) -> str:
    return settings.rubric.format(prompt=prompt, reference=reference or settings.no_reference, response=response)


def judge_config(config: FleetConfig) -> FleetConfig:
    """A fleet whose only model is the judge, greedy with the judge's token budget."""
    judge = config.scoring.judge
    sampling = Sampling(max_tokens=judge.max_tokens)
    return config.model_copy(update={
        "models": [judge.model],
        "generation": config.generation.model_copy(update={"sampling": sampling}),
    })


def run_judge(config: FleetConfig, items: list[dict[str, Any]], log=print) -> list[tuple[float | None, str, str]]:
    """items: {prompt_id, prompt, reference, response}. Returns (score, reason, raw answer) per item."""
    from pipelines.generation import generate_partition

    settings = config.scoring.judge
    jconfig = judge_config(config)
    texts = [judge_prompt(settings, i["prompt"], i["reference"], i["response"]) for i in items]
    table = pa.table({
        "prompt_id": [f"judge-{k}" for k in range(len(items))],
        "text": texts,
        "source": ["judge"] * len(items),
        "source_row": [i["prompt_id"] for i in items],
    })
    result = generate_partition(jconfig, settings.model.name, table, log=log)
    answers = {r["prompt_id"]: r["text"] for r in result.table.to_pylist()}
    failures = {r["row"]: r["reason"] for r in result.quarantine.rows}
    out = []
    for k in range(len(items)):
        pid = f"judge-{k}"
        if pid not in answers:
            out.append((None, f"judge request failed: {failures.get(pid, 'unknown')}", ""))
            continue
        score, reason = parse_score(answers[pid], settings.scale)
        out.append((score, reason, answers[pid]))
    return out
