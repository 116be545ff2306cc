"""Built-in readers over the real public prompt files, templates, and the quarantine of bad rows."""

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from routeforge.core.config import load_fleet
from routeforge.prompts.builtin_readers import bio_entities, parse_choices
from routeforge.prompts.sources import build_prompts


def builtin(config_copy, shared_data, reader, file, **extra):
    ds = [{"kind": "builtin", "name": reader, "reader": reader, "path": str(shared_data / "prompts" / file), **extra}]
    return load_fleet(config_copy("demo", datasets=ds))


@pytest.mark.parametrize(
    ("reader", "file", "rows", "tasks"),
    [
        ("llmrouter", "llmrouter_query_test.jsonl", 706, 14),
        ("gsm8k", "gsm8k_test.jsonl", 1319, 1),
        ("humaneval", "humaneval.jsonl.gz", 164, 1),
        ("tweeteval_sentiment", "tweeteval_sentiment_val_text.txt", 2000, 1),
        ("wnut17", "wnut17_dev.conll", 1009, 1),
    ],
)
def test_every_builtin_reader_reads_its_whole_file(config_copy, shared_data, reader, file, rows, tasks):
    table, quarantine = build_prompts(builtin(config_copy, shared_data, reader, file))
    assert table.num_rows + len(quarantine) == rows, quarantine.reasons()
    assert len(quarantine) <= rows * 0.01  # only duplicates, counted by reason
    assert set(quarantine.reasons()) <= {"duplicate prompt"}
    assert len(set(table.column("task").to_pylist())) == tasks
    assert all(h.startswith("This is a ") for h in table.column("task_hint").to_pylist())


def test_arena_hard_has_no_references_and_keys_rows_by_uid(config_copy, shared_data):
    config = builtin(config_copy, shared_data, "arena_hard", "arena_hard_v0.1_questions.jsonl",
                     reference_required=False)
    table, quarantine = build_prompts(config)
    assert table.num_rows == 500 and len(quarantine) == 0
    assert len(table.column("source_row")[0].as_py()) == 32  # the uid answer files join on
    # with a reference-based metric and no override, every row is quarantined with its reason
    strict = builtin(config_copy, shared_data, "arena_hard", "arena_hard_v0.1_questions.jsonl", limit=5)
    with pytest.raises(ValueError, match="no usable prompts"):
        build_prompts(strict)


def test_reference_metadata_per_task(config_copy, shared_data):
    table, _ = build_prompts(builtin(config_copy, shared_data, "llmrouter", "llmrouter_query_test.jsonl"))
    rows = {r["task"]: r for r in table.to_pylist()}
    mc = json.loads(rows["commonsense_qa"]["reference_meta"])
    assert mc["choices"]["labels"] == ["A", "B", "C", "D", "E"] and mc["metric"] == "em_mc"
    assert "Options:\nA) " in rows["commonsense_qa"]["text"]  # 001's in-context QnA template
    assert isinstance(json.loads(rows["mbpp"]["reference_meta"])["tests"], list)
    assert "def check(candidate)" in json.loads(rows["human_eval"]["reference_meta"])["tests"]
    gsm, _ = build_prompts(builtin(config_copy, shared_data, "gsm8k", "gsm8k_test.jsonl", limit=1))
    assert json.loads(gsm.column("reference_meta")[0].as_py())["final_answer"] == "18"


def test_templates_are_seeded_and_reproducible(config_copy, shared_data):
    def texts(seed):
        config = builtin(config_copy, shared_data, "tweeteval_sentiment", "tweeteval_sentiment_val_text.txt",
                         limit=200, seed=seed)
        return build_prompts(config)[0].column("text").to_pylist()

    first, again, other = texts(0), texts(0), texts(1)
    assert first == again and first != other
    starts = Counter(t.split("\n")[0].startswith(("Based on this tweet", "Please identify")) for t in first)
    assert starts[True] > 40 and starts[False] > 40  # the instruction goes first or last at random
    ner, _ = build_prompts(builtin(config_copy, shared_data, "wnut17", "wnut17_dev.conll", limit=60))
    asked = Counter(json.loads(m)["asked"] for m in ner.column("reference_meta").to_pylist())
    assert set(asked) == {"person", "place", "object"}


def test_bio_entities_and_choice_formats():
    tokens = [("Redondo", "B-location"), ("Beach", "I-location"), ("in", "O"), ("Gardena", "B-location"),
              ("Bob", "I-person")]
    assert bio_entities(tokens) == {"location": ["Redondo Beach", "Gardena"], "person": ["Bob"]}
    assert parse_choices("['x', 'y']") == (["A", "B"], ["x", "y"])
    assert parse_choices("{'text': ['1', '2'], 'labels': ['A', 'B']}") == (["A", "B"], ["1", "2"])
    assert parse_choices("None") is None and parse_choices("{broken") is None


VALID = [{"id": f"ok{i}", "prompt": f"Valid question number {i}?", "reference": f"Answer {i}.", "task": "qa"}
         for i in range(10)]

BAD_JSONL = [  # (line, reason it must be quarantined with)
    ('{"prompt": "truncated', "invalid JSON"),
    (b'{"prompt": "bad \xff\xfe bytes", "reference": "r", "task": "qa"}', "invalid UTF-8 at byte"),
    ("[1, 2, 3]", "row is list, not an object"),
    ('"just a string"', "row is str, not an object"),
    ("42", "row is int, not an object"),
    ("null", "row is null, not an object"),
    ({"reference": "r", "task": "qa"}, "field 'prompt' missing or empty"),
    ({"prompt": None, "reference": "r", "task": "qa"}, "field 'prompt' missing or empty"),
    ({"prompt": "", "reference": "r", "task": "qa"}, "field 'prompt' missing or empty"),
    ({"prompt": "  \n\t ", "reference": "r", "task": "qa"}, "field 'prompt' missing or empty"),
    ({"prompt": "\u0000\u0001\u0007", "reference": "r", "task": "qa"}, "text empty after normalization"),
    ({"prompt": 7, "reference": "r", "task": "qa"}, "field 'prompt' is int, not a string"),
    ({"prompt": ["a"], "reference": "r", "task": "qa"}, "field 'prompt' is list, not a string"),
    ({"prompt": {"a": 1}, "reference": "r", "task": "qa"}, "field 'prompt' is dict, not a string"),
    ({"prompt": True, "reference": "r", "task": "qa"}, "field 'prompt' is bool, not a string"),
    ({"prompt": "No reference?", "task": "qa"}, "missing reference (scoring metric bertscore needs one)"),
    ({"prompt": "Null reference?", "reference": None, "task": "qa"}, "missing reference"),
    ({"prompt": "Empty reference?", "reference": "", "task": "qa"}, "missing reference"),
    ({"prompt": "Blank reference?", "reference": "   ", "task": "qa"}, "missing reference"),
    ({"prompt": "List reference?", "reference": ["a"], "task": "qa"}, "field 'reference' is list, not a string"),
    ({"prompt": "Dict reference?", "reference": {"a": 1}, "task": "qa"}, "field 'reference' is dict, not a string"),
    ({"prompt": "No task?", "reference": "r"}, "field 'task' missing and no fixed task"),
    ({"prompt": "Null task?", "reference": "r", "task": None}, "field 'task' missing and no fixed task"),
    ({"prompt": "Empty task?", "reference": "r", "task": ""}, "field 'task' missing and no fixed task"),
    ({"prompt": "List task?", "reference": "r", "task": ["qa"]}, "field 'task' is list, not a string"),
    ({"prompt": "List id?", "reference": "r", "task": "qa", "id": [1]}, "field 'id' is list, not a string or integer"),
    ({"prompt": "Dict id?", "reference": "r", "task": "qa", "id": {}}, "field 'id' is dict, not a string or integer"),
    ({"prompt": "Float id?", "reference": "r", "task": "qa", "id": 1.5}, "field 'id' is float, not a string or integer"),
    ({"prompt": "Bool id?", "reference": "r", "task": "qa", "id": False}, "field 'id' is bool, not a string or integer"),
    (dict(VALID[0], id="dup-exact"), "duplicate prompt"),
    (dict(VALID[1], id="dup-normalized", prompt="  Valid question number 1?\r\n"), "duplicate prompt"),
    (dict(VALID[2], id="dup-nfc", prompt="Valid question number 2?".replace("?", "?\u0000")), "duplicate prompt"),
    ({"prompt": "word " * 300, "reference": "r", "task": "qa", "id": "long"}, "over max_prompt_tokens (256)"),
]

BAD_CSV = [  # rows of a CSV with header id,prompt,reference,task
    (b'c1,"Too, many",cells,qa,extra\n', "CSV row has 5 cells, header has 4"),
    (b'c2,"Bad \xc3\x28 byte",r,qa\n', "invalid UTF-8 in a cell"),
    (b'c3,,r,qa\n', "field 'prompt' missing or empty"),
    (b'c4,"No task in csv",r,\n', "field 'task' missing and no fixed task"),
]


def test_at_least_30_kinds_of_malformed_rows_are_quarantined_and_nothing_valid_is_lost(config_copy, tmp_path):
    jsonl = tmp_path / "prompts.jsonl"
    lines = []
    for item in VALID[:5] + [b for b, _ in BAD_JSONL] + VALID[5:]:
        if isinstance(item, bytes):
            lines.append(item)
        elif isinstance(item, str):
            lines.append(item.encode())
        else:
            lines.append(json.dumps(item).encode())
    jsonl.write_bytes(b"\n".join(lines) + b"\n")
    csv_file = tmp_path / "prompts.csv"
    csv_file.write_bytes(b"id,prompt,reference,task\nc0,A valid csv question?,yes,qa\n" + b"".join(r for r, _ in BAD_CSV))
    parquet = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"id": ["p0", "p1"], "prompt": ["A valid parquet sentence.", "No language given."],
                             "reference": ["Une phrase.", "r"], "task": ["translation"] * 2,
                             "language": ["French", None]}), parquet)
    datasets = [
        {"kind": "jsonl", "name": "j", "path": str(jsonl), "id_field": "id"},
        {"kind": "csv", "name": "c", "path": str(csv_file), "id_field": "id"},
        {"kind": "parquet", "name": "p", "path": str(parquet), "id_field": "id",
         "task_template": "translation", "meta_fields": ["language"]},
    ]
    config = load_fleet(config_copy("demo", datasets=datasets, prompts={"max_prompt_tokens": 256}))
    table, quarantine = build_prompts(config)

    expected = [reason for _, reason in BAD_JSONL] + [reason for _, reason in BAD_CSV]
    expected.append("task_template 'translation' needs a string meta field 'language'")
    kinds = len(BAD_JSONL) + len(BAD_CSV) + 1
    assert kinds >= 30
    assert len(quarantine) == kinds
    got = [r["reason"] for r in quarantine.rows]
    for reason in expected:
        assert any(g.startswith(reason) for g in got), reason
    # every valid row survives
    assert sorted(table.column("source_row").to_pylist()) == sorted([v["id"] for v in VALID] + ["c0", "p0"])
    path = quarantine.write(config.storage_root)
    assert pq.read_table(path).num_rows == kinds


def test_a_mistyped_prompt_column_fails_with_the_reasons_and_writes_the_quarantine(config_copy, shared_data,
                                                                                     tmp_path):
    """Every row refused: the stage's error counts the rows by reason and names the quarantine file,
    which it writes first (it used to say "no usable prompts (20 quarantined)" and write nothing)."""
    import dagster as dg
    import pyarrow.parquet as pq
    from routeforge.core.config import load_fleet
    from routeforge.pipelines.definitions import build_assets

    path = config_copy("demo", datasets=[{"kind": "jsonl", "name": "mine", "text_field": "questoin", "limit": 20,
                                          "path": str(shared_data / "prompts" / "gsm8k_test.jsonl")}])
    assets, resources = build_assets(path)
    prompts = next(a for a in assets if a.key == dg.AssetKey("prompts"))
    with pytest.raises(ValueError) as err:
        dg.materialize([prompts], resources=resources)
    stored = load_fleet(path).storage_root / "quarantine" / "prompts.parquet"
    assert "no usable prompts (20 quarantined (20 " in str(err.value) and f"every row with its reason: {stored}" in str(
        err.value)
    rows = pq.read_table(stored).to_pylist()
    assert len(rows) == 20 and "questoin" in rows[0]["reason"]
