import json
from collections import Counter

from routeforge.core.config import load_fleet
from routeforge.prompts.sources import assign_splits, build_prompts


def test_demo_prompts_templated_hinted_and_split(config_copy):
    table, quarantine = build_prompts(load_fleet(config_copy("demo")))
    rows = table.to_pylist()
    assert len(rows) == 36 and len(quarantine) == 0
    assert len({r["prompt_id"] for r in rows}) == 36
    assert set(Counter(r["task"] for r in rows).values()) == {6}
    math = next(r for r in rows if r["task"] == "math")
    assert math["text"].startswith("Solve the problem") and math["text"].endswith("This is a math task.")
    qa = next(r for r in rows if r["task"] == "factual_qa")
    assert qa["task_hint"] == "This is a factual qa task."
    # stratified: a quarter of each task is held out
    assert Counter(r["task"] for r in rows if r["split"] == "test") == {t: 2 for t in Counter(r["task"] for r in rows)}


def test_split_is_stable_when_prompts_are_added():
    base = [{"prompt_id": f"p{i}", "task": "t"} for i in range(40)]
    assign_splits(base, 0.25, seed=0)
    before = {r["prompt_id"]: r["split"] for r in base}
    grown = [{"prompt_id": f"p{i}", "task": "t"} for i in range(41)]
    assign_splits(grown, 0.25, seed=0)
    moved = sum(before[r["prompt_id"]] != r["split"] for r in grown if r["prompt_id"] in before)
    assert moved <= 1


def test_bad_rows_are_quarantined_with_reasons(config_copy, tmp_path):
    data = tmp_path / "prompts.jsonl"
    lines = [
        json.dumps({"prompt": "What is 2+2?", "reference": "4", "task": "math"}),
        "{not json",
        json.dumps({"prompt": "   ", "reference": "x", "task": "math"}),
        json.dumps({"prompt": "No task here", "reference": "x"}),
        json.dumps({"prompt": "What is 2+2?", "reference": "4", "task": "math"}),
    ]
    data.write_text("\n".join(lines) + "\n")
    ds = [{"kind": "jsonl", "name": "local", "path": str(data)}]
    table, quarantine = build_prompts(load_fleet(config_copy("demo", datasets=ds)))
    assert table.num_rows == 1
    reasons = quarantine.reasons()
    assert len(quarantine) == 4
    assert any(r.startswith("invalid JSON") for r in reasons)
    assert "field 'prompt' missing or empty" in reasons
    assert "field 'task' missing and no fixed task" in reasons
    assert "duplicate prompt" in reasons
    assert {r["row"] for r in quarantine.rows} >= {"prompts.jsonl:2", "prompts.jsonl:3"}


def test_hf_datasets_reader_on_local_files(config_copy, shared_data):
    ds = [{"kind": "hf", "name": "gsm8k", "path": "json", "split": "train",
           "data_files": str(shared_data / "prompts" / "gsm8k_test.jsonl"),
           "text_field": "question", "reference_field": "answer", "task": "math", "limit": 20}]
    table, _ = build_prompts(load_fleet(config_copy("demo", datasets=ds)))
    assert table.num_rows == 20
    meta = json.loads(table.column("reference_meta")[0].as_py())
    assert meta["final_answer"] == "18"  # Janet's ducks


def test_routerbench_prompts_keep_source_split(config_copy):
    config = load_fleet(config_copy("routerbench"))
    table, quarantine = build_prompts(config)
    assert len(quarantine) == 0
    splits = Counter(table.column("split").to_pylist())
    assert splits == {"train": 1039 + 887, "test": 445 + 380}
    assert set(table.column("task").to_pylist()) == {"arc-challenge", "winogrande"}
    rows = table.column("source_row").to_pylist()
    assert len(set(rows)) == len(rows)
    # RouterBench repeats some sample ids (within and across files): each row is its own prompt
    sample_ids = [json.loads(m)["sample_id"] for m in table.column("reference_meta").to_pylist()]
    assert len(set(sample_ids)) < len(sample_ids)
