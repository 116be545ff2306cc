"""LLM judge (G-Eval style, 002 §4.2) through any generation engine, with cached verdicts.

The rubric asks for "Score: N" on the configured scale; N maps linearly onto [0, 1]. Where the engine
returns per-token probabilities (an OpenAI-compatible server with `top_logprobs` set on the judge's
source), the verdict is G-Eval's expectation over the score token's alternatives instead of the
single sampled integer. The judge's
generations go through the same cached driver as candidate responses (keyed by the judge prompt),
so re-scoring re-asks nothing. An answer with no score in range is recorded as missing with the
reason, never as 0: a judge that cannot answer says nothing about the response.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pyarrow as pa
from routeforge.core.config import FleetConfig, JudgeSettings, Sampling
from routeforge.core.kinds import METRICS
from routeforge.generation.partition import generate_partition
from routeforge.scoring.metrics.base import score_row

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


def weighted_score(token_logprobs: list, scale: tuple[int, int]) -> float | None:
    """G-Eval: E[score] over the alternatives of the first in-scale integer token, mapped to [0, 1]."""
    low, high = scale

    def value(token: str | None) -> int | None:
        text = (token or "").strip()
        return int(text) if text.isdigit() and low <= int(text) <= high else None

    for token, alternatives in token_logprobs:
        if value(token) is None:
            continue
        probs: dict[int, float] = {}
        for alt, logprob in (alternatives or {}).items():
            if (v := value(alt)) is not None:
                probs[v] = probs.get(v, 0.0) + math.exp(logprob)
        if not probs:
            probs = {value(token): 1.0}
        expected = sum(v * p for v, p in probs.items()) / sum(probs.values())
        return (expected - low) / (high - low)
    return None


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
    logprobs = {r["prompt_id"]: json.loads(r["token_logprobs"]) for r in result.table.to_pylist()
                if r["token_logprobs"]}
    failures = {r["row"]: r["reason"] for r in result.quarantine.rows}
    out = []
    for k in range(len(items)):
        pid = f"judge-{k}"
        if pid not in answers:
            out.append((None, f"judge request failed: {failures.get(pid, 'unknown')}", ""))
            continue
        score, reason = parse_score(answers[pid], settings.scale)
        if score is not None and pid in logprobs:
            weighted = weighted_score(logprobs[pid], settings.scale)
            if weighted is not None:
                score, reason = weighted, "weighted by token probabilities"
        out.append((score, reason, answers[pid]))
    return out


@METRICS.register("llm_judge", needs_judge=True)
def score(items, quarantine, scorer):
    """The fleet's judge model's score of each response (002 §4.2); a verdict without a score is
    quarantined with the judge's answer."""
    asks = [{"prompt_id": i["prompt_id"], "prompt": i["prompt"], "reference": i["reference"],
             "response": i["text"]} for i in items]
    verdicts = run_judge(scorer.config, asks, log=scorer.log)
    rows = []
    judge = scorer.settings.judge.model.name
    for item, (value, reason, answer) in zip(items, verdicts):
        if value is None:
            quarantine.add(item["prompt_id"], f"llm_judge: {reason}", {"judge_answer": answer[:500]})
            scorer.stats["judge_missing"] += 1
        else:
            rows.append(score_row(item, "llm_judge", value, {"judge": judge, "answer": answer[:200]}))
    return rows
