"""The LLM judge: score parsing, and end to end against a real `transformers serve`."""

import pyarrow as pa
import pytest

from pipelines.config import ConfigError, load_fleet
from pipelines.metrics.judge import parse_score
from pipelines.prompt_sources import build_prompts
from pipelines.scoring import Scorer
from pipelines.storage import Quarantine


@pytest.mark.parametrize(("text", "expected"), [
    ("Score: 10", (1.0, "parsed")), ("score = 1", (0.0, "parsed")), ("**Rating:** 4", (pytest.approx(1 / 3), "parsed")),
    ("7", (pytest.approx(2 / 3), "parsed")), ("Score: 12", (None, "score 12 outside 1..10")),
    ("rendition rendition", (None, "no score in the judge's answer")),
])
def test_parse_score(text, expected):
    assert parse_score(text, (1, 10)) == expected


def judge_scoring(url, model):
    return {"metric": "llm_judge", "judge": {"model": {
        "name": "judge", "engine": "openai",
        "source": {"kind": "openai", "base_url": url, "model": model, "max_retries": 2, "backoff_s": 0.05}}}}


def test_judge_must_be_outside_the_candidate_pool(config_copy):
    scoring = judge_scoring("http://127.0.0.1:9/v1", "x")
    scoring["judge"]["model"]["name"] = "tiny-gpt2"
    with pytest.raises(ConfigError, match="scoring.judge.model.name: 'tiny-gpt2' is a candidate"):
        load_fleet(config_copy("demo", scoring=scoring))
    with pytest.raises(ConfigError, match="scoring.judge: llm_judge is used but no judge model"):
        load_fleet(config_copy("demo", scoring={"metric": "llm_judge"}))


def test_random_weight_judge_end_to_end_gives_missing_with_reason(transformers_server, config_copy):
    url, model = transformers_server
    config = load_fleet(config_copy("demo", scoring=judge_scoring(url, model)))
    prompts, _ = build_prompts(config)
    ids = prompts.column("prompt_id").to_pylist()[:6]
    responses = pa.table({"prompt_id": ids, "model": ["tiny-gpt2"] * 6, "text": ["An answer."] * 6,
                          "label": [None] * 6})
    quarantine = Quarantine("quality", "tiny-gpt2")
    scorer = Scorer(config)
    rows = scorer.score(responses, prompts, quarantine)
    assert rows == []  # no judge verdict was parseable, so nothing is scored (and nothing is 0)
    assert len(quarantine) == 6 and scorer.stats["judge_missing"] == 6
    assert all(reason.startswith("llm_judge: ") for reason in quarantine.reasons())
    # the judge's generations are cached: scoring again asks the server nothing
    again = Quarantine("quality", "tiny-gpt2")
    assert Scorer(config).score(responses, prompts, again) == [] and len(again) == 6
