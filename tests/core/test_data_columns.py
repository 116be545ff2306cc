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
    (tmp_path / "p.csv").write_text("question,category\nWhat is 2+2?,math\n")
    pq.write_table(pa.table({"query": ["hi"], "task_name": ["chat"]}), tmp_path / "p.parquet")
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
