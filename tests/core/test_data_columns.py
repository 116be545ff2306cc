"""`config validate` reads the columns a fleet maps and the tasks its files name (issue 50, item 3):
CSV headers and Parquet schemas as well as JSON-lines rows; a `per_task` key no file confirms is an
error where every dataset's tasks are known, a warning where one is known only at run time."""

import codecs
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from routeforge.core.config import ConfigError
from routeforge.core.config.files import load_checked
from routeforge.core.config.fleet import load_fleet
from routeforge.prompts.readers import RowError, csv_records, decoded_lines

from tests.conftest import REPO


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
    assert ("warning: datasets.0 (j): mixed.jsonl: 1 line(s) the run would quarantine (first: line 3: invalid "
            "UTF-8 at byte 0 (0xff, 'ÿ' in Latin-1/Windows-1252: save the file as UTF-8))") in warnings


def test_validate_names_a_files_encoding_and_warns_of_no_task_from_a_quarantined_line(tmp_path, config_copy):
    """Issue 73, item 2: a UTF-16 prompts file was "not UTF-8 (byte 0)" and "holds no rows"; one
    Latin-1 line made validate lose every task of the file ("no dataset has task 'math' (tasks in the
    files: none)"). Now the encoding is named with the command that converts it, the bad line's
    byte is shown as Latin-1 would read it, and the file's other rows still give their tasks. A UTF-8
    byte-order mark is accepted, by validate and by the run's reader."""
    rows = [{"q": f"What is 2+{i}?", "t": "math"} for i in range(16)]
    text = "".join(json.dumps(r) + "\n" for r in rows)

    def fleet(path):
        return config_copy("demo", datasets=[{"kind": "jsonl", "name": "j", "path": str(path), "text_field": "q",
                                              "task_field": "t"}],
                           scoring={"metric": "exact_match", "per_task": {"math": "exact_match"}})

    for encoding, named in (("utf-16", "UTF-16 (little-endian, with a byte-order mark)"),
                            ("utf-16-be", "UTF-16 (big-endian, without a byte-order mark)"),
                            ("utf-32", "UTF-32 (little-endian, with a byte-order mark)")):
        path = tmp_path / f"{encoding}.jsonl"
        path.write_bytes(text.encode(encoding))
        with pytest.raises(ConfigError) as raised:
            load_checked(fleet(path))
        message = str(raised.value)
        assert f"datasets.0 (j): {encoding}.jsonl is {named}, not UTF-8: convert it, e.g. `iconv -f" in message
        assert "holds no rows" not in message and "prompts in the files split" not in message, message
        reader = list(decoded_lines(path))
        assert reader and all(isinstance(r, RowError) and named in str(r) for _, r in reader)

    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(text.encode() + '{"q": "Où est la gare ?", "t": "math"}\n'.encode("latin-1"))
    warnings = load_checked(fleet(latin)).warnings()
    assert warnings == ["warning: datasets.0 (j): latin.jsonl: 1 line(s) the run would quarantine (first: line 17: "
                        "invalid UTF-8 at byte 8 (0xf9, 'ù' in Latin-1/Windows-1252: save the file as UTF-8))"]

    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(codecs.BOM_UTF8 + text.encode())
    assert load_checked(fleet(marked)).warnings() == []
    assert [line for _, line in decoded_lines(marked)][0] == json.dumps(rows[0])
    marked_csv = tmp_path / "marked.csv"
    marked_csv.write_bytes(codecs.BOM_UTF8 + b"q,t\n" + "".join(f"{r['q']},math\n" for r in rows).encode())
    csv_fleet = config_copy("demo", datasets=[{"kind": "csv", "name": "c", "path": str(marked_csv), "text_field": "q",
                                               "task_field": "t"}])
    assert load_checked(csv_fleet).datasets[0].text_field == "q"
    assert next(csv_records(marked_csv))[1] == {"q": "What is 2+0?", "t": "math"}


def test_a_published_profiles_key_is_checked_against_its_file(shared_data, tmp_path):
    """Issue 73, item 2: a tier's `key` missing from its LLM-Inference-Bench CSV passed validate, and
    the run failed in the profiling stage after the prompts, responses and scores."""
    shipped = (REPO / "configs" / "gpu_fleet.yaml").read_text()
    assert "Meta-Llama-3-8B@Nvidia H100 GPUx1@vLLM" in shipped
    bad = tmp_path / "gpu_fleet.yaml"
    bad.write_text(shipped.replace("Meta-Llama-3-8B@Nvidia H100 GPUx1@vLLM", "Meta-Llama-3-8B@Nvidia H200 GPUx1@vLLM"))
    with pytest.raises(ConfigError) as raised:
        load_checked(bad)
    assert ("tiers.1 (gemma-2-9b-it@h100).profile.key: 'meta-llama/Meta-Llama-3-8B@Nvidia H200 GPUx1@vLLM' not in "
            in str(raised.value))
    assert "did you mean" in str(raised.value) and "'meta-llama/Meta-Llama-3-8B@Nvidia H100 GPUx1@vLLM'" in str(
        raised.value)


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


def test_a_traces_columns_are_checked_at_validate(shared_data, config_copy):
    """Issue 73, item 2: a trace column the file lacks passed validate and failed the training stage."""
    mooncake = shared_data / "traces" / "mooncake_synthetic_trace.jsonl"
    settings = {"path": str(mooncake), "timestamp": "timestamp", "timestamp_unit": "ms", "prompt_tokens": "input_length",
                "output_tokens": "output_length", "hash_ids": "hash_id", "block_tokens": 512}
    path = config_copy("demo", training={"routing_evaluation": {"trace": settings}})
    with pytest.raises(ConfigError, match=r"training.routing_evaluation.trace.hash_ids: 'hash_id' is not a column of "
                                          r"mooncake_synthetic_trace.jsonl \(did you mean 'hash_ids'\?\)"):
        load_checked(path)
    assert load_checked(config_copy("demo", training={"routing_evaluation": {"trace": {
        **settings, "hash_ids": "hash_ids"}}})).training.routing_evaluation.trace.hash_ids == "hash_ids"
    bare = config_copy("demo", training={"routing_evaluation": {"trace": str(mooncake)}})  # Azure's column names
    with pytest.raises(ConfigError, match=r"training.routing_evaluation.trace \(timestamp\): 'TIMESTAMP' is not a "
                                          r"column of mooncake_synthetic_trace.jsonl"):
        load_checked(bare)
