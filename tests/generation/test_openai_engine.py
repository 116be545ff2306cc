"""The HTTP engine against a real `transformers serve --continuous-batching`, with injected faults."""

from collections import Counter

import pytest
from routeforge.core.config import load_fleet
from routeforge.core.schemas import RESPONSES
from routeforge.core.storage import Quarantine, to_table
from routeforge.generation.engines import make_engine, prompt_rows
from routeforge.generation.partition import generate_partition
from routeforge.prompts.sources import build_prompts

from tests.conftest import free_port
from tests.faults import FaultProxy


def served_fleet(config_copy, shared_data, base_url, model, n_prompts=12, **source):
    models = [{"name": "served", "engine": "openai", "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
               "source": {"kind": "openai", "base_url": base_url, "model": model, "max_concurrency": 4,
                          "timeout_s": 20, "max_retries": 8, "backoff_s": 0.05, **source}}]
    datasets = [{"kind": "builtin", "name": "gsm8k", "reader": "gsm8k", "limit": n_prompts,
                 "path": str(shared_data / "prompts" / "gsm8k_test.jsonl")}]
    return load_fleet(config_copy("demo", models=models, tiers=[], datasets=datasets,
                                  generation={"sampling": {"max_tokens": 8}, "shard_size": 16}))


def test_streams_rows_with_client_side_timings(transformers_server, config_copy, shared_data):
    url, model = transformers_server
    config = served_fleet(config_copy, shared_data, url, model)
    prompts, _ = build_prompts(config)
    quarantine = Quarantine("responses", "served")
    engine = make_engine(config.model("served"), config, config.storage_root)
    rows = engine.generate(prompt_rows(prompts), quarantine)
    table = to_table(rows, RESPONSES)
    assert table.num_rows == 12 and len(quarantine) == 0
    # A real server on a busy 2-core machine may time out a request now and then; the row then says so:
    # every extra attempt is one failure the engine counted, and a healthy server needs few of them.
    retries = sum(r["attempts"] - 1 for r in rows)
    assert retries == sum(engine.failed_attempts.values()) <= 3, dict(engine.failed_attempts)
    for r in rows:
        assert r["engine"] == "openai" and r["attempts"] >= 1
        assert 0 < r["output_tokens"] <= 8 and r["prompt_tokens"] > 0
        assert r["finish_reason"] in {"stop", "length"}
        assert 0 < r["ttft_s"] <= r["e2e_s"]
        assert r["cost_usd"] == pytest.approx((r["prompt_tokens"] * 1.0 + r["output_tokens"] * 2.0) / 1e6)
    # the chat endpoint goes through the server's chat template and gives the same row shape
    chat = served_fleet(config_copy, shared_data, url, model, n_prompts=2, api="chat")
    chat_rows = make_engine(chat.model("served"), chat, chat.storage_root).generate(
        prompt_rows(build_prompts(chat)[0]), Quarantine("responses"))
    assert len(chat_rows) == 2 and all(r["e2e_s"] > 0 for r in chat_rows)


def test_every_pair_exactly_once_under_injected_faults(transformers_server, config_copy, shared_data):
    url, model = transformers_server
    proxy = FaultProxy(url.removesuffix("/v1"), rate=0.10, seed=3, slow_s=4.0).start()
    try:
        config = served_fleet(config_copy, shared_data, proxy.url + "/v1", model, n_prompts=60, timeout_s=2.0)
        prompts, _ = build_prompts(config)
        result = generate_partition(config, "served", prompts, log=lambda m: None)
    finally:
        proxy.stop()
    ids = result.table.column("prompt_id").to_pylist()
    assert len(ids) == len(set(ids)) == prompts.num_rows == 60
    assert len(result.quarantine) == 0
    assert sum(proxy.injected.values()) >= 1
    retries = sum(a - 1 for a in result.table.column("attempts").to_pylist())
    assert retries >= sum(proxy.injected.values()) - proxy.injected["slow"]  # every fault but a survivable delay
    print(f"injected {dict(proxy.injected)}; retries {retries}")


def test_client_errors_are_quarantined_without_retry_and_dead_servers_after_retries(
    transformers_server, config_copy, shared_data
):
    url, model = transformers_server
    config = served_fleet(config_copy, shared_data, url + "/no-such-route", model, n_prompts=3)
    quarantine = Quarantine("responses", "served")
    engine = make_engine(config.model("served"), config, config.storage_root)
    assert engine.generate(prompt_rows(build_prompts(config)[0]), quarantine) == []
    assert all("FatalRequestError: HTTP 404" in r for r in quarantine.reasons())
    assert sum(engine.failed_attempts.values()) == 0  # a 404 is not retried

    dead = served_fleet(config_copy, shared_data, f"http://127.0.0.1:{free_port()}/v1", model, n_prompts=2,
                        max_retries=2)
    quarantine = Quarantine("responses", "served")
    engine = make_engine(dead.model("served"), dead, dead.storage_root)
    assert engine.generate(prompt_rows(build_prompts(dead)[0]), quarantine) == []
    assert len(quarantine) == 2 and Counter(engine.failed_attempts) == {"ConnectError": 6}
