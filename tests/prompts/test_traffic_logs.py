"""Production request logs: chat and completions lines become requests; bad lines are quarantined
with a reason naming the field, and the rest is read."""

import json

import pytest
from routeforge.core.storage import Quarantine
from routeforge.prompts.traffic_logs import log_files, read_traffic_logs

from tests.traffic import synthetic_log


def test_chat_and_completion_lines_plain_and_gzipped(tmp_path):
    synthetic_log(tmp_path / "logs" / "a.jsonl", n=20, chat=True)
    synthetic_log(tmp_path / "logs" / "day2" / "b.jsonl.gz", n=10, chat=False, seed=1)
    (tmp_path / "logs" / "notes.txt").write_text("not a log")
    assert [p.name for p in log_files(str(tmp_path / "logs"))] == ["a.jsonl", "b.jsonl.gz"]
    q = Quarantine("prompts")
    requests = list(read_traffic_logs(str(tmp_path / "logs"), q))
    assert len(requests) == 30 and len(q) == 0
    first = requests[0]
    assert first.text == "What is 0 plus 0?" and first.model == "tiny-llama" and first.task == "math"
    assert first.timed and first.ttft_s < first.e2e_s and first.completion_tokens >= 8
    last = requests[-1]  # from the completions log: its `prompt`
    assert last.row_id == "b.jsonl.gz:10" and last.text == "Translate 'cat number 9' to French."


@pytest.mark.parametrize(("line", "reason"), [
    ("{not json", "invalid JSON"),
    ('["a list"]', "line is not a JSON object"),
    ({"timestamp": 1, "response": {"model": "m", "usage": {}}}, "field 'request' missing"),
    ({"timestamp": 1, "request": {"messages": []}, "response": {"model": "m", "usage": {}}},
     "field 'request.messages' is not a non-empty list"),
    ({"timestamp": 1, "request": {"prompt": "hi"}, "response": {"model": "m", "usage": {"prompt_tokens": 3}}},
     "field 'response.usage.completion_tokens' missing"),
    ({"timestamp": "yesterday", "request": {"prompt": "hi"},
      "response": {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}},
     "field 'timestamp': 'yesterday' is not ISO 8601"),
    ({"timestamp": 1, "request": {"prompt": "hi"}, "timing": {"ttft_s": 2.0, "e2e_s": 1.0},
      "response": {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}},
     "ttft_s 2.0 is after e2e_s 1.0"),
    ({"timestamp": 1, "request": {"prompt": "hi"}, "outcome": {"score": 7},
      "response": {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}},
     "field 'outcome.score' is not a number in [0, 1]"),
    ({"timestamp": 1, "request": {"prompt": "hi"}, "outcome": {"thumbs_up": "yes"},
      "response": {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}},
     "field 'outcome.thumbs_up' is not true or false"),
])
def test_bad_lines_are_quarantined_naming_the_field(tmp_path, line, reason):
    good = {"timestamp": "2026-11-20T10:00:00Z", "request": {"model": "m", "prompt": "fine"},
            "response": {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}}
    raw = line if isinstance(line, str) else json.dumps(line)
    (tmp_path / "log.jsonl").write_text(json.dumps(good) + "\n" + raw + "\n" + json.dumps(good) + "\n")
    q = Quarantine("prompts")
    requests = list(read_traffic_logs(str(tmp_path / "log.jsonl"), q))
    assert len(requests) == 2 and not requests[0].timed  # untimed: a prompt, not a latency record
    assert len(q) == 1 and q.rows[0]["row"] == "log.jsonl:2" and reason in q.rows[0]["reason"]


def test_a_missing_location_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="traffic log location .*nowhere does not exist"):
        list(read_traffic_logs(str(tmp_path / "nowhere"), Quarantine("prompts")))


@pytest.mark.parametrize(("outcome", "value"), [(None, None), (0.25, 0.25), ({"score": 1}, 1.0),
                                                ({"thumbs_up": False}, 0.0), ({"thumbs_up": True}, 1.0),
                                                ({"error": "timeout"}, 0.0)])
def test_outcomes_read_as_a_number_in_the_unit_interval(tmp_path, outcome, value):
    line = {"timestamp": 1, "request": {"prompt": "hi"},
            "response": {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}}
    if outcome is not None:
        line["outcome"] = outcome
    (tmp_path / "log.jsonl").write_text(json.dumps(line) + "\n")
    [request] = read_traffic_logs(str(tmp_path / "log.jsonl"), Quarantine("prompts"))
    assert request.outcome == value
