"""A hostile round on what issue 49 and 53's first items added (issue 53, item 7): run tags, the live
state a dispatcher reads, outcome sources, fleet names. Each probe below is one that got through
before this round (said in its test), or one that held and is kept so it keeps holding."""

import json

import pytest
from routeforge.artifacts.dispatch import LiveState
from routeforge.core.config.base import plain_name
from routeforge.core.storage import Quarantine
from routeforge.pipelines.recovery import HOST_TAG, PID_START_TAG, PID_TAG, process_alive, process_tags
from routeforge.prompts.traffic_logs import parse_line, read_traffic_logs


@pytest.mark.parametrize("pid, start", [("abc", "1.0"), ("12", "nan"), ("-1", "1.0"), (str(2**70), "1.0"),
                                        ("12", "inf"), ("12", "x")])
def test_run_tags_that_are_not_ours_are_not_judged(pid, start):
    """Got through: a run tagged `routeforge/pid: abc` (by hand, or by another tool) made `recover`
    raise ValueError at the start of every later `pipelines.run`, so no run could start."""
    assert process_alive({**process_tags(), PID_TAG: pid, PID_START_TAG: start}) is None


def test_this_process_is_alive_and_another_hosts_is_not_judged():
    assert process_alive(process_tags()) is True
    assert process_alive({**process_tags(), HOST_TAG: "elsewhere"}) is None


@pytest.mark.parametrize("metrics, message", [
    ("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc NaN\n", "kv_usage"),
    ("vllm:num_requests_running -3\nvllm:num_requests_waiting 0\n", "LiveState.running"),
    ("vllm:num_requests_running +Inf\nvllm:num_requests_waiting 0\n", "LiveState.running"),
    ("vllm:num_requests_running 1\n", "no vllm:num_requests_waiting"),
    ("<html>502 Bad Gateway</html>", "not a vLLM server's metrics"),
])
def test_a_dispatcher_refuses_live_state_it_cannot_trust(metrics, message):
    """Got through: a NaN KV-cache gauge (a server mid-restart) read as a full cache, 1.0, silently."""
    with pytest.raises(ValueError, match=message):
        LiveState.from_vllm_metrics(metrics)


def test_a_full_cache_over_one_is_clamped_not_refused():
    assert LiveState.from_vllm_metrics("vllm:num_requests_running 2\nvllm:num_requests_waiting 1\n"
                                       "vllm:gpu_cache_usage_perc 1.00001\n").kv_usage == 1.0


def _line(**extra):
    return {"timestamp": 1, "request": {"prompt": "hi"}, "outcome": 1,
            "response": {"model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}, **extra}


@pytest.mark.parametrize("extra, source", [
    ({"client": "x" * 10_000_000}, "x" * 200),  # a 10 MB client id is cut, not kept per line
    ({"client": ["a", "b"]}, None),  # not an id: the log is the source
    ({"client": True}, None),
    ({"metadata": {"api_key_id": 42}}, "42"),
    ({"request": {"prompt": "hi", "user": "end-user-7"}}, "end-user-7"),
])
def test_an_outcome_source_is_a_short_id_or_none(extra, source):
    assert parse_line(_line(**extra), "l:1").source == source


def test_one_client_repeating_a_line_cannot_fill_the_quarantine_or_the_reader(tmp_path):
    """5,000 identical lines read as 5,000 requests (the replay counts them once, tested with the
    router); a hostile `outcome` on each is quarantined with its field named, and reading goes on."""
    path = tmp_path / "t.jsonl"
    lines = [_line(client="c")] * 5000 + [_line(outcome={"score": "1e999"})]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    quarantine = Quarantine("t")
    assert sum(1 for _ in read_traffic_logs(str(path), quarantine)) == 5000
    assert len(quarantine) == 1 and "outcome.score" in quarantine.rows[0]["reason"]


@pytest.mark.parametrize("name", ["../evil", "a/../b", "model\nname", "x" * 129, "/abs", "", "a b", "-flag"])
def test_names_that_become_paths_or_flags_are_refused(name):
    with pytest.raises(ValueError, match="is not a plain name"):
        plain_name(name)


def test_a_registered_model_name_is_a_plain_name(config_copy):
    from routeforge.core.config import ConfigError, load_fleet

    path = config_copy("demo", registry={"tracking_uri": "sqlite:///x.db", "experiment": "e",
                                         "model_name": "../../other-team/router"})
    with pytest.raises(ConfigError, match="registry.model_name"):
        load_fleet(path)
