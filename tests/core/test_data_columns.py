"""`config validate` reads the columns a fleet maps and the tasks its files name (issue 50, item 3):
CSV headers and Parquet schemas as well as JSON-lines rows; a `per_task` key no file confirms is an
error where every dataset's tasks are known, a warning where one is known only at run time."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from routeforge.core.config import ConfigError
from routeforge.core.config.files import load_checked
from routeforge.core.config.fleet import load_fleet


def test_csv_and_parquet_columns_are_checked(tmp_path, config_copy):
    # enough prompts for training's splits (`config validate` counts them too)
    (tmp_path / "p.csv").write_text("question,category\n" + "".join(f"What is 2+{i}?,math\n" for i in range(8)))
    pq.write_table(pa.table({"query": [f"hi {i}" for i in range(8)], "task_name": ["chat"] * 8}), tmp_path / "p.parquet")
    ok = config_copy("demo", datasets=[
        {"kind": "csv", "name": "c", "path": str(tmp_path / "p.csv"), "text_field": "question", "task_field": "category"},
        {"kind": "parquet", "name": "q", "path": str(tmp_path / "p.parquet"), "text_field": "query",
         "task_field": "task_name"}], scoring={"metric": "exact_match", "per_task": {"chat": "exact_match"}})
    assert load_checked(ok).datasets[1].task_field == "task_name"
    bad = config_copy("demo", datasets=[
        {"kind": "parquet", "name": "q", "path": str(tmp_path / "p.parquet"), "text_field": "querry",
         "task_field": "task_name"}])
    with pytest.raises(ConfigError, match=r"datasets.0 \(q\).text_field: 'querry' is not a column of p.parquet "
                                          r"\(did you mean 'query'\?\)"):
        load_checked(bad)


def test_a_per_task_key_is_a_warning_where_some_tasks_are_known_only_at_run_time(tmp_path, config_copy):
    (tmp_path / "p.jsonl").write_text('{"q": "What is 2+2?", "t": "math"}\n')
    path = config_copy("demo", datasets=[
        {"kind": "jsonl", "name": "j", "path": str(tmp_path / "p.jsonl"), "text_field": "q", "task_field": "t"},
        {"kind": "hf", "name": "h", "path": "openai/gsm8k", "subset": "main"}],  # its tasks: only at run time
        scoring={"metric": "exact_match", "per_task": {"maths": "exact_match"}})
    warnings = load_checked(path).warnings()
    assert any("scoring.per_task.maths: no dataset has task 'maths' (did you mean 'math'?)" in w
               and "known only when the prompt set is built" in w for w in warnings)
    assert load_fleet(path).datasets[0].task_field == "t"


def _jsonl_fleet(config_copy, path):
    return config_copy("demo", datasets=[{"kind": "jsonl", "name": "j", "path": str(path), "text_field": "q",
                                          "task": "math"}])


def test_an_empty_file_and_lines_the_run_would_quarantine_are_said_at_validate(tmp_path, config_copy):
    """Issue 62, item 2: an empty JSON-lines file passed `config validate` and then failed the run,
    and a file with undecodable lines drew only "tasks in the files: none". Now the empty file is an
    error naming it, and bad lines are counted with the first named, in a warning (the run quarantines
    them and goes on)."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match=r"datasets.0 \(j\): empty.jsonl holds no rows"):
        load_checked(_jsonl_fleet(config_copy, empty))
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_bytes(b'{"q": \n[1, 2]\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl holds no rows; 2 line\(s\) the run would quarantine "
                                          r"\(first: line 1: not JSON"):
        load_checked(_jsonl_fleet(config_copy, only_bad))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b'{"q": "What is 2+2?"}\n{"q": "Name a colour."}\n\xff\xfe{"q"\n'
                      + b"".join(b'{"q": "What is 3+%d?"}\n' % i for i in range(14)))
    warnings = load_checked(_jsonl_fleet(config_copy, mixed)).warnings()
    assert ("warning: datasets.0 (j): mixed.jsonl: 1 line(s) the run would quarantine (first: line 3: not UTF-8 "
            "(byte 0))") in warnings


def test_a_score_tables_model_names_are_checked_against_the_fleets(tmp_path, config_copy):
    """Issue 62, item 2: a score table whose models the fleet names otherwise passed validate, then
    every row was quarantined ("scores name models outside the dataset's models")."""
    table = tmp_path / "scores.jsonl"
    table.write_text('{"question": "What is 2+2?", "scores": {"codegemma-7b": 1.0, "gemma-2-9b-it": 0.0}}\n'
                     '{"question": "Name a colour.", "scores": {"codegemma-7b": 0.0, "gemma-2-9b-it": 1.0}}\n')
    dataset = {"kind": "score_table", "name": "t", "files": {"train": [str(table)]}, "models": ["codegemma-7b"]}
    models = [{"name": "codegemma-7b", "engine": "table_import", "source": {"kind": "table", "dataset": "t"}},
              {"name": "gemma-2-9b", "engine": "table_import", "source": {"kind": "table", "dataset": "t"}}]
    path = config_copy("dcrouter", datasets=[dataset], models=models)
    with pytest.raises(ConfigError) as raised:
        load_checked(path)
    message = str(raised.value)
    assert "datasets.0 (t).models: the table also scores ['gemma-2-9b-it']" in message
    assert "models.1 (gemma-2-9b): the score table t has no model 'gemma-2-9b' (did you mean 'gemma-2-9b-it'?)" \
        in message
    fixed = config_copy("dcrouter", datasets=[{**dataset, "models": ["codegemma-7b", "gemma-2-9b-it"]}],
                        models=[models[0], {**models[1], "source": {"kind": "table", "dataset": "t",
                                                                    "column": "gemma-2-9b-it"}}])
    assert load_checked(fixed).datasets[0].models == ["codegemma-7b", "gemma-2-9b-it"]
