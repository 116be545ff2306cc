import json

import pytest
from routeforge.core.config import load_fleet
from routeforge.core.schemas import RESPONSES
from routeforge.core.storage import Quarantine, to_table
from routeforge.generation.engines import make_engine, prompt_rows
from routeforge.prompts.sources import build_prompts


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
        assert 0 < r["output_tokens"] <= config.sampling(spec.name).max_tokens
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
    from routeforge.core.model_sources import build_random_init

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


def test_routellm_table_import_with_true_false_labels(config_copy, shared_data):
    models = [{"name": m, "engine": "table_import", "source": {"kind": "table", "dataset": "routellm", "column": m}}
              for m in ("mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview")]
    ds = [{"kind": "routellm", "name": "routellm", "path": str(shared_data / "responses" / "routellm_gsm8k_responses.csv")}]
    config = load_fleet(config_copy("demo", models=models, tiers=[], datasets=ds,
                                    scoring={"metric": "table_correctness"}))
    prompts, quarantine = build_prompts(config)
    assert prompts.num_rows + len(quarantine) == 1319
    for spec in config.models:
        q = Quarantine("responses", spec.name)
        rows = make_engine(spec, config, config.storage_root).generate(prompt_rows(prompts), q)
        assert len(rows) == prompts.num_rows and len(q) == 0
        labels = [r["label"] for r in rows]
        assert set(labels) <= {0.0, 1.0} and 0.5 < sum(labels) / len(labels) < 1.0
        assert all(r["output_tokens"] > 0 and r["cost_usd"] is None for r in rows)


def test_long_jsonl_import_joins_arena_hard_answers_by_uid(config_copy, shared_data, tmp_path):
    answers = shared_data / "responses" / "arena_hard_v0.1_answers_gpt-4-0314.jsonl"
    models = [{"name": "gpt-4-0314", "engine": "table_import", "price": {"input_per_mtok": 30, "output_per_mtok": 60},
               "source": {"kind": "table", "dataset": "arena", "file": str(answers), "key_field": "uid",
                          "response_field": "messages.1.content.answer", "model_field": "model",
                          "label_field": None, "cost_field": None}}]
    ds = [{"kind": "builtin", "name": "arena", "reader": "arena_hard", "reference_required": False,
           "path": str(shared_data / "prompts" / "arena_hard_v0.1_questions.jsonl")}]
    config = load_fleet(config_copy("demo", models=models, tiers=[], datasets=ds))
    prompts, _ = build_prompts(config)
    q = Quarantine("responses", "gpt-4-0314")
    engine = make_engine(config.model("gpt-4-0314"), config, config.storage_root)
    rows = engine.generate(prompt_rows(prompts), q)
    assert len(rows) == 500 and len(q) == 0 and engine.table_problems == {}
    assert sum(r["output_tokens"] for r in rows) / 500 > 200  # long-form answers
    assert all(r["cost_usd"] > 0 and r["label"] is None for r in rows)
    # a line whose response path is missing becomes a quarantine row naming the field
    broken = tmp_path / "answers.jsonl"
    uid = prompts.column("source_row")[0].as_py()
    broken.write_text(f'{{"uid": "{uid}", "model": "gpt-4-0314", "messages": []}}\n{{not json\n')
    models[0]["source"]["file"] = str(broken)
    config = load_fleet(config_copy("demo", models=models, tiers=[], datasets=ds))
    engine = make_engine(config.model("gpt-4-0314"), config, config.storage_root)
    q = Quarantine("responses", "gpt-4-0314")
    assert engine.generate(prompt_rows(prompts)[:2], q) == []
    assert engine.table_problems == {"invalid JSON: Expecting property name enclosed in double quotes": 1}
    assert sorted(q.reasons()) == ["prompt not in response table",
                                   "unusable table cell: field 'messages.1.content.answer': no '1'"]


def test_response_filters_are_flags_not_drops():
    from routeforge.core.config import ResponseFilters
    from routeforge.generation.engines.base import response_flags

    f = ResponseFilters()
    assert response_flags("ok", 2, "stop", f) == ["too_short"]
    assert response_flags("a fine answer", 10, "length", f) == ["truncated"]
    assert response_flags("la " * 200, 200, "stop", f) == ["degenerate"]
    assert response_flags("The answer is 42 because six times seven is forty-two.", 14, "stop", f) == []
