"""The gateway's pieces that need no server: what it reads of a request body, how backends become the
bundle's instances, the dispatcher's `among` and scrape times, the decision log's feedback."""

import json
import re

import click
import pytest
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState, prompt_blocks, token_blocks
from routeforge.artifacts.operating.traffic_prompts import outcome_of, prompt_text, propensity_of, served_model
from routeforge.gateway.cli import backends_for
from routeforge.gateway.decision_log import DecisionLog
from routeforge.gateway.openai_request import BadRequest, prepare

from tests.training.policies.test_gate_and_replay import _bundle


def test_a_body_is_read_for_its_prompt_tokens_and_blocks_and_refused_naming_the_field():
    ids = list(range(100, 150))
    got = prepare(json.dumps({"prompt": ids, "max_tokens": 7, "stream": True}).encode(), "completions", 16)
    assert (got.prompt_tokens, got.max_tokens, got.stream, got.text) == (50, 7, True, None)
    assert got.blocks == token_blocks(ids, 16) and len(got.blocks) == 3 and got.block_tokens == 16
    # a prompt that shares the first 32 ids shares exactly the first two blocks
    other = token_blocks(ids[:32] + [7] * 18, 16)
    assert other[:2] == got.blocks[:2] and other[2] != got.blocks[2]
    chat = prepare(json.dumps({"messages": [{"role": "user", "content": "x" * 200}]}).encode(), "chat/completions", 16,
                   count_tokens=lambda text: 40)
    assert chat.text == "x" * 200 and chat.prompt_tokens == 40 and chat.max_tokens == 128
    assert chat.blocks == prompt_blocks("x" * 200) and chat.block_tokens == round(40 * 64 / 200)
    for body, kind, says in (({"prompt": "a", "max_tokens": -1}, "completions", "max_tokens"),
                             ({"prompt": "a", "stream": "yes"}, "completions", "'stream'"),
                             ({"prompt": ["a", "b"]}, "completions", "a batch of prompts"),
                             ({"prompt": "a"}, "chat/completions", "'messages' missing"),
                             ({"messages": [{"role": "user", "content": 3}]}, "chat/completions", "messages[0].content"),
                             ({"prompt": "a", "model": 5}, "completions", "'model'"),
                             ([1, 2], "completions", "not a JSON object")):
        with pytest.raises(BadRequest, match=re.escape(says)):
            prepare(json.dumps(body).encode(), kind, 16)
    with pytest.raises(BadRequest, match="not JSON"):
        prepare(b"\xff{", "completions", 16)


def test_backends_are_the_bundles_instances_by_tier_and_a_mismatch_names_them():
    instances = [{"tier": "a@x", "model_index": 0, "max_running": 4}, {"tier": "a@x", "model_index": 0, "max_running": 4},
                 {"tier": "b@y", "model_index": 1, "max_running": 4}]
    got = backends_for(instances, ["a", "b"], ("b@y=http://h:3/v1", "a@x=http://h:1", "a@x=http://h:2/"))
    assert [(b.instance, b.name, b.url, b.model) for b in got] == [
        (0, "a@x", "http://h:1", "a"), (1, "a@x", "http://h:2", "a"), (2, "b@y", "http://h:3", "b")]
    for specs, says in ((("a@x=http://h:1",), "no backend for instance(s) 1: a@x, 2: b@y"),
                        (("c@z=http://h:1",), "'c@z' is not a tier of the bundle's fleet (instances 0: a@x"),
                        (("a@x=http://1", "a@x=http://2", "a@x=http://3"), "more backends for 'a@x'"),
                        (("a@x:http://h:1",), "TIER=URL")):
        with pytest.raises(click.BadParameter, match=re.escape(says)):
            backends_for(instances, ["a", "b"], specs)


def test_the_dispatcher_keeps_to_among_and_counts_sends_after_a_scrape_as_unseen_by_it(tmp_path):
    dispatcher = Dispatcher(load_bundle(_bundle(tmp_path, ["join_shortest_queue"]), allow_unsigned=True))
    idle = [LiveState(0, 0, 0.0, at=10.0), LiveState(0, 0, 0.0, at=10.0)]
    first = dispatcher.decide(idle, 100, [0.5, 0.5], [20, 20], now=10.5)
    # the same scrape again: the first send (made after it) is still counted, so JSQ takes the other
    second = dispatcher.decide(idle, 100, [0.5, 0.5], [20, 20], now=10.6)
    assert {first.instance, second.instance} == {0, 1}
    # a scrape stamped at the decision (no `at`) that counts nothing forgets the sends before it
    fresh = dispatcher.decide([LiveState(0, 0), LiveState(3, 0)], 100, [0.5, 0.5], [20, 20], now=11.0)
    assert fresh.instance == 0
    kept = dispatcher.decide([LiveState(0, 0, 0.0, 11.0), LiveState(0, 0, 0.0, 11.0)], 100, [0.5, 0.5], [20, 20],
                             now=11.1, among=[1])
    assert kept.instance == 1 and "not among [1]: took 1" in kept.notes[-1]
    with pytest.raises(ValueError, match="among: instance indices"):
        dispatcher.decide(idle, 100, [0.5, 0.5], [20, 20], among=[5])


def test_feedback_writes_the_line_again_with_its_outcome_as_replay_reads_it(tmp_path):
    log = DecisionLog(tmp_path / "d.jsonl", keep=2)
    for k in range(3):
        log.write({"id": f"gw-{k}", "timestamp": 1.0 + k, "status": "served", "request": {"prompt": f"p{k}"},
                   "response": {"model": "m0"}, "routing": {"propensity": 1.0}})
    log.write({"id": "gw-x", "timestamp": 9.0, "status": "failed", "request": {"prompt": "q"}})
    log.feedback("gw-2", {"thumbs_up": True})
    with pytest.raises(KeyError):
        log.feedback("gw-0", 1.0)  # beyond the last `keep` served
    with pytest.raises(KeyError):
        log.feedback("gw-x", 1.0)  # not served
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    last = lines[-1]
    assert last["status"] == "feedback" and outcome_of(last) == 1.0 and propensity_of(last) == 1.0
    assert served_model(last) == "m0" and prompt_text(last["request"]) == "p2"
