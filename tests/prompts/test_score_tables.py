"""Score tables (LLMRouter dcrouter / RouterDC format): import, quarantine, and the routing table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from routeforge.core.config import load_fleet
from routeforge.core.schemas import routing_models
from routeforge.prompts.score_tables import read_score_table, score_cell
from routeforge.training.routing_table import matrix

from benchmarks.routerbench_knn import routing_table_of

MODELS = ["alpha", "beta"]


def _fleet(tmp_path: Path, train: Path, test: Path, extra: str = "") -> Path:
    models = "\n".join(f"  - {{name: {m}, engine: table_import, source: {{kind: table, dataset: scores}}}}"
                       for m in MODELS)
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""
name: scores
storage_root: {tmp_path / "state"}
datasets:
  - kind: score_table
    name: scores
    files: {{train: [{train}], test: [{test}]}}
    models: [alpha, beta]
{extra}
templates: {{default: "{{text}}", add_hint: false}}
split: {{mode: source}}
scoring: {{metric: table_correctness}}
registry: {{tracking_uri: "sqlite:///{tmp_path / 'mlflow.db'}", experiment: e, model_name: m}}
models:
{models}
""")
    return path


def test_malformed_rows_and_scores_are_quarantined_with_reasons_and_nothing_valid_is_lost(tmp_path):
    train = [
        {"question": "What is 2 + 2?", "scores": {"alpha": 1.0, "beta": 0.0}},
        {"question": "", "scores": {"alpha": 1.0, "beta": 1.0}},                      # empty text
        {"scores": {"alpha": 1.0, "beta": 1.0}},                                      # no text
        {"question": "Name a prime.", "scores": [1, 0]},                              # not a mapping
        {"question": "Capital of France?", "scores": {"alpha": 1.0, "gamma": 0.5}},   # unknown model
        {"question": "Spell cat.", "scores": {"alpha": "high", "beta": 0.25}},        # non-numeric alpha
        {"question": "Sort 3 1 2.", "scores": {"alpha": 1.5, "beta": 0.5}},           # alpha out of range
        {"question": "What is 2 + 2?", "scores": {"alpha": 0.0, "beta": 1.0}},        # duplicate prompt
        {"question": "Largest ocean?", "scores": {"alpha": 0.5}},                     # beta missing
    ]
    test = [{"question": "What is 3 + 3?", "scores": {"alpha": 0.0, "beta": 1.0}},
            {"question": "What is 2 + 2?", "scores": {"alpha": 1.0, "beta": 1.0}}]  # in train: leak, dropped
    (tmp_path / "train.json").write_text(json.dumps(train))
    lines = "\n".join(json.dumps(r) for r in test)
    (tmp_path / "test.jsonl").write_text(lines + "\n{not json\n")
    config = load_fleet(_fleet(tmp_path, tmp_path / "train.json", tmp_path / "test.jsonl"))

    routing, quarantined = routing_table_of(config, {})
    texts = routing.column("text").to_pylist()
    assert sorted(texts) == sorted(["What is 2 + 2?", "Spell cat.", "Sort 3 1 2.", "Largest ocean?", "What is 3 + 3?"])
    assert routing_models(routing.schema) == MODELS
    q = dict(zip(texts, matrix(routing, "quality", MODELS).tolist()))
    assert q["What is 2 + 2?"] == [1.0, 0.0]  # the first copy is kept, the duplicate quarantined
    assert np.isnan(q["Spell cat."][0]) and q["Spell cat."][1] == 0.25
    assert np.isnan(q["Sort 3 1 2."][0]) and q["Sort 3 1 2."][1] == 0.5
    assert q["Largest ocean?"][0] == 0.5 and np.isnan(q["Largest ocean?"][1])
    assert dict(zip(texts, routing.column("split").to_pylist()))["What is 3 + 3?"] == "test"
    # pairs quarantined by the engine: alpha's two bad scores, beta's missing one
    assert quarantined == {"alpha": 2, "beta": 1}

    from routeforge.prompts.sources import build_prompts

    _, quarantine = build_prompts(config)
    reasons = quarantine.reasons()
    assert reasons["duplicate prompt"] == 2  # within train, and the test copy of a training prompt
    assert any(r.startswith("line 3: invalid JSON") for r in reasons)
    assert any("outside the dataset's models: ['gamma']" in r for r in reasons)


def test_prompt_quarantine_reasons_name_the_problem(tmp_path):
    from routeforge.core.storage import Quarantine
    from routeforge.prompts.readers import read_dataset

    rows = [{"question": "", "scores": {"alpha": 1}}, {"scores": {"alpha": 1}},
            {"question": "q", "scores": "not json"}, {"question": "q2", "scores": {"delta": 1}}, "a string row"]
    (tmp_path / "t.json").write_text(json.dumps(rows))
    (tmp_path / "e.json").write_text("[]")
    config = load_fleet(_fleet(tmp_path, tmp_path / "t.json", tmp_path / "e.json"))
    quarantine = Quarantine("prompts", None)
    assert list(read_dataset(config.datasets[0], quarantine)) == []
    reasons = [r["reason"] for r in quarantine.rows]
    assert sum("prompt text missing" in r for r in reasons) == 2
    assert "a JSON object is expected, got str" in reasons
    assert any("not a {model: score} mapping" in r for r in reasons)
    assert any("outside the dataset's models: ['delta']" in r for r in reasons)


def test_parquet_score_tables_with_map_or_json_scores(tmp_path):
    table = pa.table({"prompt": ["a", "b"], "s": [json.dumps({"alpha": 0.5}), json.dumps({"alpha": 1.0})],
                      "cluster": [3, 4]})
    pq.write_table(table, tmp_path / "t.parquet")
    rows = read_score_table({"train": [tmp_path / "t.parquet"]}, text_field="prompt", scores_field="s",
                            task_field="cluster")
    assert [(r.text, r.scores, r.task, r.row_id) for r in rows] == [
        ("a", {"alpha": 0.5}, 3, "t.parquet:0"), ("b", {"alpha": 1.0}, 4, "t.parquet:1")]
    assert score_cell({"alpha": True}, "alpha").problem.endswith("is not a finite number")
    assert score_cell({"alpha": float("nan")}, "alpha").problem.endswith("is not a finite number")
    assert score_cell({"alpha": 0.3}, "alpha").label == 0.3


def test_tasks_join_from_a_lookup_file_by_prompt_text(tmp_path):
    from routeforge.core.storage import Quarantine
    from routeforge.prompts.readers import read_dataset

    train = [{"question": "What is 2 + 2?", "scores": {"alpha": 1.0, "beta": 0.0}},
             {"question": "Write a sort.", "scores": {"alpha": 0.0, "beta": 1.0}},
             {"question": "Twice listed.", "scores": {"alpha": 0.5, "beta": 0.5}},
             {"question": "Not in the lookup.", "scores": {"alpha": 0.5, "beta": 0.5}},
             {"question": "Own task.", "scores": {"alpha": 0.5, "beta": 0.5}, "kind": "own"}]
    train.append({"question": "Back in \x85 and \u2028 too", "scores": {"alpha": 1.0, "beta": 0.0}})
    lookup = [{"query": "What is 2 + 2?", "task_name": "gsm8k"}, {"query": "Write a sort.", "task_name": "mbpp"},
              {"query": "Back in \x85 and \u2028 too", "task_name": "trivia_qa"},  # JSON leaves both unescaped
              {"query": "Twice listed.", "task_name": "mmlu"}, {"query": "Twice listed.", "task_name": "arc"},
              {"query": "Twice listed.", "task_name": "arc"}, {"query": "Own task.", "task_name": "ignored"},
              {"query": "No task field."}, "not an object"]
    (tmp_path / "train.json").write_text(json.dumps(train))
    (tmp_path / "test.json").write_text("[]")
    (tmp_path / "tasks.jsonl").write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in lookup))
    extra = (f"    task_field: kind\n    task: other\n"
             f"    task_lookup: {{files: [{tmp_path / 'tasks.jsonl'}], text_field: query, task_field: task_name}}")
    config = load_fleet(_fleet(tmp_path, tmp_path / "train.json", tmp_path / "test.json", extra))
    raw = {r.text: r for r in read_dataset(config.datasets[0], Quarantine("prompts", None))}
    assert {t: r.task for t, r in raw.items()} == {"What is 2 + 2?": "gsm8k", "Write a sort.": "mbpp",
                                                   "Twice listed.": "arc", "Not in the lookup.": "other",
                                                   "Own task.": "own", "Back in \x85 and \u2028 too": "trivia_qa"}
    # where the task came from, and every task a lookup gives a text (most frequent first)
    assert raw["Twice listed."].reference_meta == {"task_from": "lookup", "lookup_tasks": ["arc", "mmlu"]}
    assert [raw[t].reference_meta["task_from"] for t in ("What is 2 + 2?", "Not in the lookup.", "Own task.")] == [
        "lookup", "default", "row"]
    # the routing table carries the joined tasks
    routing, _ = routing_table_of(config, {})
    assert dict(zip(routing.column("text").to_pylist(), routing.column("task").to_pylist()))["Write a sort."] == "mbpp"


def test_a_task_lookup_that_matches_nothing_is_one_clear_error(tmp_path):
    import pytest
    from routeforge.core.storage import Quarantine
    from routeforge.prompts.readers import read_dataset

    (tmp_path / "train.json").write_text(json.dumps([{"question": "q", "scores": {"alpha": 1.0}}]))
    (tmp_path / "test.json").write_text("[]")
    (tmp_path / "tasks.json").write_text(json.dumps([{"prompt": "q", "task_name": "t"}]))
    wrong_field = f"    task_lookup: {{files: [{tmp_path / 'tasks.json'}]}}"  # text_field defaults to query
    config = load_fleet(_fleet(tmp_path, tmp_path / "train.json", tmp_path / "test.json", wrong_field))
    with pytest.raises(ValueError, match="no row of .* has both a text field 'query' and a task field 'task_name'"):
        list(read_dataset(config.datasets[0], Quarantine("prompts", None)))
    (tmp_path / "tasks.json").write_text(json.dumps([{"query": "another prompt", "task_name": "t"}]))
    with pytest.raises(ValueError, match="task_lookup matched no prompt of the table"):
        list(read_dataset(config.datasets[0], Quarantine("prompts", None)))


def test_one_file_per_task_names_the_rows_tasks_and_a_wrong_file_name_is_one_clear_error(tmp_path):
    """RouterDC's layout: a file per task and no task column; `file_tasks` names each file's task, a
    row's own task field still wins, and a file left out keeps the dataset's `task`."""
    import pytest
    from routeforge.core.storage import Quarantine
    from routeforge.prompts.readers import read_dataset

    (tmp_path / "maths").mkdir()
    files = {"maths/gsm8k-train.json": [{"question": "What is 2 + 2?", "scores": {"alpha": 1.0, "beta": 0.0}},
                                        {"question": "Own.", "scores": {"alpha": 1.0}, "cluster_id": 3}],
             "humaneval_train.json": [{"question": "def f():", "scores": {"alpha": 0.0, "beta": 0.4}}],
             "misc.json": [{"question": "Anything.", "scores": {"alpha": 0.5, "beta": 0.5}}]}
    for name, rows in files.items():
        (tmp_path / name).write_text(json.dumps(rows))
    train = f"{tmp_path / 'maths/gsm8k-train.json'}, {tmp_path / 'humaneval_train.json'}, {tmp_path / 'misc.json'}"
    extra = "    task_field: cluster_id\n    file_tasks: {gsm8k-train.json: gsm8k, humaneval_train.json: humaneval}"
    config = load_fleet(_fleet(tmp_path, Path(f"{train}"), tmp_path / "misc.json", extra))
    raw = [(r.text, r.task, r.reference_meta["task_from"], r.split)
           for r in read_dataset(config.datasets[0], Quarantine("prompts", None))]
    assert raw[:4] == [("What is 2 + 2?", "gsm8k", "file", "train"), ("Own.", "3", "row", "train"),
                       ("def f():", "humaneval", "file", "train"), ("Anything.", "scores", "default", "train")]
    with pytest.raises(ValueError, match=r"file_tasks names \['mmlu_train.json'\], not among the file names"):
        load_fleet(_fleet(tmp_path, Path(f"{train}"), tmp_path / "misc.json",
                          "    file_tasks: {mmlu_train.json: mmlu}"))
