"""The LLM judge: score parsing, and end to end against a real `transformers serve`."""

import pyarrow as pa
import pytest
from routeforge.core.config import ConfigError, load_fleet
from routeforge.core.storage import Quarantine
from routeforge.prompts.sources import build_prompts
from routeforge.scoring.metrics.judge import parse_score
from routeforge.scoring.quality import Scorer


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


def test_geval_weighting_over_score_token_probabilities():
    import math

    from routeforge.scoring.metrics.judge import weighted_score

    tokens = [["Score", {}], [":", {}], [" 4", {" 4": math.log(0.6), " 5": math.log(0.3), " x": math.log(0.1)}]]
    # E = (4 * 0.6 + 5 * 0.3) / 0.9 = 4.333…, on 1..5 → 0.8333…
    assert weighted_score(tokens, (1, 5)) == pytest.approx((13 / 3 - 1) / 4)
    assert weighted_score([["3", {}]], (1, 5)) == pytest.approx(0.5)  # no alternatives: the token itself
    assert weighted_score([["none", {}]], (1, 5)) is None


async def _fake_stream(request):
    """An OpenAI-format SSE stream with logprobs, as vLLM sends it for `logprobs: k` (completions)."""
    from aiohttp import web

    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    chunks = [
        {"choices": [{"index": 0, "text": "Score:", "logprobs": {"tokens": ["Score:"], "top_logprobs": [{"Score:": 0.0}]}}]},
        {"choices": [{"index": 0, "text": " 2", "logprobs": {"tokens": [" 2"], "top_logprobs": [{" 2": -0.2231, " 3": -1.6094}]}}]},
        {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    ]
    import json as _json

    for chunk in chunks:
        await response.write(f"data: {_json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return response


def test_engine_parses_streamed_logprobs_and_the_judge_weights_them(config_copy, tmp_path):
    import asyncio
    import threading

    from aiohttp import web

    from tests.conftest import free_port

    port = free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/completions", _fake_stream)
    runner = web.AppRunner(app)

    def serve():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    scoring = judge_scoring(f"http://127.0.0.1:{port}/v1", "judge-model")
    scoring["judge"]["model"]["source"]["top_logprobs"] = 5
    config = load_fleet(config_copy("demo", scoring=scoring))
    prompts, _ = build_prompts(config)
    ids = prompts.column("prompt_id").to_pylist()[:2]
    responses = pa.table({"prompt_id": ids, "model": ["tiny-gpt2"] * 2, "text": ["a", "b"], "label": [None, None]})
    import socket
    import time

    deadline = time.time() + 30
    while time.time() < deadline:  # wait until the fake server listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    rows = Scorer(config).score(responses, prompts, Quarantine("quality", "m"))
    loop.call_soon_threadsafe(loop.stop)
    # E = (2 * 0.8 + 3 * 0.2) / 1.0 = 2.2 on 1..5 → 0.3
    assert [round(r["score"], 3) for r in rows] == [0.3, 0.3]
