import json

import pytest

from pipelines.config import load_fleet
from pipelines.engines import make_engine, prompt_rows
from pipelines.prompt_sources import build_prompts
from pipelines.schemas import RESPONSES
from pipelines.storage import Quarantine, to_table


@pytest.fixture(scope="module")
def demo(tmp_path_factory, shared_data):
    from tests.conftest import write_config

    folder = tmp_path_factory.mktemp("cfg")
    config = load_fleet(write_config(folder, "demo", storage_root=str(folder / "state")))
    prompts, _ = build_prompts(config)
    return config, prompts


def test_transformers_engine_greedy_rows_with_timings(demo):
    config, prompts = demo
    spec = config.model("tiny-llama")
    engine = make_engine(spec, config, config.storage_root / "models")
    subset = prompt_rows(prompts)[:7]
    quarantine = Quarantine("responses", spec.name)
    calls = []
    rows = engine.generate(subset, quarantine, lambda done, total: calls.append((done, total)))
    table = to_table(rows, RESPONSES)  # matches the stage schema exactly
    assert table.num_rows == 7 and len(quarantine) == 0
    assert calls[-1] == (7, 7)
    for r in rows:
        assert 1 <= r["output_tokens"] <= config.sampling(spec.name).max_tokens
        assert r["finish_reason"] in {"stop", "length"}
        assert r["finish_reason"] == "stop" or r["output_tokens"] == config.sampling(spec.name).max_tokens
        assert 0 < r["ttft_s"] <= r["e2e_s"]
        assert r["tpot_s"] is None or r["tpot_s"] > 0
        assert r["prompt_tokens"] > 0 and r["cost_usd"] > 0
        assert json.loads(r["sampling"])["temperature"] == 0.0
    again = engine.generate(subset, Quarantine("responses"))
    assert [r["text"] for r in again] == [r["text"] for r in rows]  # greedy is deterministic
    assert [r["cache_key"] for r in again] == [r["cache_key"] for r in rows]
    # batching must not change greedy output
    single = engine.generate(subset[:1], Quarantine("responses"))
    assert single[0]["text"] == next(r["text"] for r in rows if r["prompt_id"] == subset[0].prompt_id)


def test_random_init_models_are_reproducible(demo):
    from pipelines.model_sources import build_random_init

    config, _ = demo
    source = config.model("tiny-gpt2").source
    first = build_random_init(source, config.storage_root / "models")
    assert build_random_init(source, config.storage_root / "models") == first
    assert (first / "ROUTEFORGE_RANDOM_WEIGHTS.txt").exists()


def _blank_cells(files, column):
    import csv
    import sys

    csv.field_size_limit(sys.maxsize)
    return sum(1 for f in files for row in csv.DictReader(open(f, newline="")) if row[column].strip() == "")


def test_table_import_rows_and_missing_labels(config_copy):
    config = load_fleet(config_copy("routerbench"))
    prompts, _ = build_prompts(config)
    spec = config.model("claude-v1")
    quarantine = Quarantine("responses", spec.name)
    rows = make_engine(spec, config, config.storage_root).generate(prompt_rows(prompts), quarantine)
    assert len(rows) == prompts.num_rows and len(quarantine) == 0
    assert all(r["ttft_s"] is None and r["finish_reason"] == "imported" for r in rows)
    assert all(r["cost_usd"] > 0 and r["output_tokens"] >= 0 for r in rows)
    labels = [r["label"] for r in rows]
    assert set(labels) == {0.0, 1.0, None}
    files = [p for paths in config.datasets[0].files.values() for p in paths]
    assert sum(label is None for label in labels) == _blank_cells(files, "claude-v1") > 0
