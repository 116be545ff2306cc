"""The routing table's columnar joins: every cell from its own (prompt, model) row, null where none."""

import math

import pyarrow as pa
from routeforge.core.schemas import ROUTING_KEYS, routing_column
from routeforge.training.routing_table import build_routing_table


def _prompts(ids):
    return pa.table({k: [f"{k}-{i}" if k != "prompt_id" else i for i in ids] for k in ROUTING_KEYS})


def test_cells_land_on_their_prompt_and_missing_ones_stay_null():
    prompts = pa.concat_tables([_prompts(["p0", "p1"]), _prompts(["p2"])])  # chunked input
    responses = {
        "a": pa.table({"prompt_id": ["p2", "p0", "stray"], "output_tokens": [30, 10, 99], "cost_usd": [0.3, None, 9.0]}),
        "b": pa.table({"prompt_id": ["p1"], "output_tokens": [7], "cost_usd": [0.07]}),
    }
    quality = {
        "a": pa.table({"prompt_id": ["p0", "p1", "p1"], "score": [1.0, 0.0, 0.5]}),  # p1 twice: the last row
        "b": pa.table({"prompt_id": ["p1", "p2"], "score": [None, float("nan")]}),
    }
    table = build_routing_table(prompts, responses, quality, ["a", "b"]).to_pydict()
    assert table["prompt_id"] == ["p0", "p1", "p2"] and table["task"] == ["task-p0", "task-p1", "task-p2"]
    assert table[routing_column("output_tokens", "a")] == [10.0, None, 30.0]
    assert table[routing_column("cost", "a")] == [None, None, 0.3]  # a null cost stays null
    assert table[routing_column("quality", "a")] == [1.0, 0.5, None]
    assert table[routing_column("output_tokens", "b")] == [None, 7.0, None]
    q_b = table[routing_column("quality", "b")]
    assert q_b[0] is None and q_b[1] is None and math.isnan(q_b[2])  # a NaN score is kept as NaN, not made null


def test_splits_smaller_than_training_needs_are_refused_in_one_line():
    import pytest
    from routeforge.training.routing_table import check_split_sizes

    table = pa.table({"split": ["train"] * 11 + ["test"]})
    with pytest.raises(ValueError, match=r"split into test 1 \(needs 2\); training needs at least 10 train"):
        check_split_sizes(table, {"train": 10, "test": 2})
    with pytest.raises(ValueError, match=r"train 0 \(needs 10\), test 0 \(needs 2\)"):
        check_split_sizes(pa.table({"split": pa.array([], pa.string())}), {"train": 10, "test": 2})
    check_split_sizes(pa.table({"split": ["train"] * 10 + ["test"] * 2}), {"train": 10, "test": 2})
