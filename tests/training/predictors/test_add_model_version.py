"""`routeforge bundle add-model` refuses what it must before it touches the registry (issue 53, item 5):
an unsigned version, a model name that is a path, booleans as scores, too few labels, text that is not
Unicode, files and rows beyond the bounds; and the split of labels the release gate scores with.

Each of these passed on HEAD 18e5899: the version registered unsigned, `../../../../tmp/x/evil` became
a model name, `true` counted as 1.0, two labels were enough, a lone surrogate failed inside the
tokenizer naming no row, and 25 MB texts or 200,000 rows were read without bound."""

import json

import numpy as np
import pytest
from routeforge.artifacts.deciding.router import text_key
from routeforge.training.predictors.add_model import holdout_record
from routeforge.training.predictors.add_model_version import (
    LabelFileError,
    add_model_version,
    read_labels,
    split_holdout,
)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _add(tmp_path, labels, **kw):
    key = tmp_path / "bundle.key"
    key.write_text("not used: the checks come first")
    args = {"name": "r", "model": "new-model", "labels": labels, "tracking_uri": "sqlite:///nowhere.db",
            "experiment": "x", "signing_key": key} | kw
    return add_model_version(**args)


def test_unsigned_and_path_like_names_are_refused_before_anything_else(tmp_path):
    labels = _jsonl(tmp_path / "l.jsonl", [{"text": f"p{i}", "score": 0.5} for i in range(30)])
    with pytest.raises(ValueError, match="--signing-key .* is required"):
        _add(tmp_path, labels, signing_key=None)
    for name in ("../../../../tmp/x/evil", "evil\nname", "/abs", "a b"):
        with pytest.raises(ValueError, match="--model: .* is not a plain name"):
            _add(tmp_path, labels, model=name)
    with pytest.raises(LabelFileError, match="30 labelled prompts; --min-labels asks for at least 40"):
        _add(tmp_path, labels, min_labels=40)


@pytest.mark.parametrize("row, message", [
    ({"text": "a", "score": True}, "l.jsonl:2: field 'score' is a boolean, not a number: True"),
    ({"text": "a", "score": "false"}, "l.jsonl:2: field 'score' is a boolean"),
    ({"text": "\ud800 lone", "score": 0.5}, "l.jsonl:2: field 'text' is not valid Unicode"),
    ({"text": "x" * 20_001, "score": 0.5}, "l.jsonl:2: field 'text' is 20001 characters; at most 20000"),
    ({"text": "a", "score": 0.5, "output_tokens": 1e12}, "l.jsonl:2: field 'output_tokens' out of range"),
    ({"text": "a", "score": float("nan")}, "l.jsonl:2: field 'score' out of range"),
])
def test_a_bad_row_is_named_with_its_field(tmp_path, row, message):
    with pytest.raises(LabelFileError, match=message.replace("(", r"\(")):
        read_labels(_jsonl(tmp_path / "l.jsonl", [{"text": "fine", "score": 0.1}, row]))


def test_sizes_are_bounded_before_the_file_is_held(tmp_path):
    many = _jsonl(tmp_path / "l.jsonl", [{"text": f"p{i}", "score": 0.5} for i in range(101)])
    with pytest.raises(LabelFileError, match="101 rows; add-model reads at most 100 "):
        read_labels(many, max_rows=100)
    with pytest.raises(LabelFileError, match="label files are limited to 0 MiB"):
        read_labels(many, max_bytes=1000)
    csv = tmp_path / "l.csv"
    csv.write_text("text,score\nfine,0.5\nyes,true\n")
    with pytest.raises(LabelFileError, match="l.csv:3: field 'score' is a boolean"):
        read_labels(csv)


def test_labels_on_evaluation_prompts_are_held_out_and_scored_by_the_gate():
    rows = [{"text": f"prompt {i}", "score": float(i % 2)} for i in range(200)]
    evaluation = {text_key("prompt 3"), text_key("prompt 8")}
    fit, held = split_holdout(rows, evaluation)
    held_texts = {r["text"] for r in held}
    assert {"prompt 3", "prompt 8"} <= held_texts and not held_texts & {r["text"] for r in fit}
    assert 0.1 < len(held) / len(rows) < 0.35  # a fifth of the rest, by hash: the same file splits the same way
    assert split_holdout(rows, evaluation) == (fit, held)
    record = holdout_record([r["text"] for r in held], [r["score"] for r in held])
    assert record["labels"] == len(held) and record["by_prompt"][text_key("prompt 3").hex()] == 1.0
    assert 0 <= record["lower"] < record["mean"]
    assert holdout_record([], [])["lower"] == 0.0  # no held-out labels: nothing to credit
    assert np.isclose(holdout_record(["a", "b"], [1.0, 1.0])["lower"], 1.0)


def _evaluation(n=12, references=True):
    import pyarrow as pa

    columns = {"text": [f"What is {i} + {i}?" for i in range(n)], "task": ["math"] * (n - 2) + ["chat"] * 2,
               "quality/a": [0.5] * n}
    if references:
        columns |= {"reference": [f"{i} + {i} = {2 * i}. The answer is {2 * i}." for i in range(n)],
                    "reference_meta": [json.dumps({"final_answer": 2 * i}) for i in range(n)], "metric": ["exact_match"] * (n - 2) + ["bertscore"] * 2}
    return pa.table(columns)


def test_labels_that_lie_consistently_are_caught_by_scoring_the_models_own_responses():
    """Issue 61 (left from the round before): labels that claim more than the model's responses earn
    everywhere, the held-out ones too, moved the router and passed the gate, which judged the model on
    those labels. Now a label row may give the model's response; on evaluation prompts whose
    reference the frozen set keeps, routeforge scores it with the prompt's metric, and a file whose
    labels claim more than their responses earn is refused; honest labels pass."""
    from routeforge.training.predictors.label_audit import audit_labels

    evaluation = _evaluation()
    wrong = [{"text": f"What is {i} + {i}?", "score": 1.0, "response": f"The answer is {2 * i + 1}."}
             for i in range(10)]
    audit = audit_labels(wrong, evaluation, "liar")
    assert len(audit.scored) == 10 and set(audit.scored.values()) == {0.0}
    refusal = audit.refusal("liar")
    assert refusal and "claim a mean of 1.000 where the responses score 0.000" in refusal
    honest = [{"text": f"What is {i} + {i}?", "score": float(i % 2 == 0),
               "response": f"The answer is {2 * i if i % 2 == 0 else 0}."} for i in range(12)]
    audit = audit_labels(honest, evaluation, "honest")
    assert audit.refusal("honest") is None and audit.overclaim()[0] == 0.0
    assert audit.unverified == {"its metric (bertscore) needs the pipeline's scorer": 2}
    # a lie on fewer prompts than MIN_AUDITED refuses nothing, but earns no credit at the gate either
    assert audit_labels(wrong[:4], evaluation, "liar").refusal("liar") is None
    unchecked = audit_labels([{k: v for k, v in r.items() if k != "response"} for r in wrong], evaluation, "x")
    assert unchecked.unverified == {"no response given": 10} and not unchecked.scored
    frozen_before = audit_labels(wrong, _evaluation(references=False), "x")
    assert frozen_before.unverified == {"the evaluation set was frozen without references": 10}


def test_the_gate_credits_an_added_models_verified_scores_and_not_its_labels_unless_told():
    from routeforge.registry.release import _unlabelled_scores

    class Bundle:
        def has_kind(self, kind):
            return kind == "router"

        def router(self):
            holdout = {"by_prompt": {text_key("a").hex(): 1.0, text_key("b").hex(): 1.0}, "lower": 0.9,
                       "verified": {text_key("a").hex(): 0.25}}
            return type("R", (), {"meta": {"added_models": [{"name": "new", "holdout": holdout}]}})()

    texts, chosen = ["a", "b", "c", "d"], ["new", "new", "new", "old"]
    assert _unlabelled_scores(Bundle(), texts, chosen, {"old": 0}) == {0: 0.25, 1: 0.0, 2: 0.0}
    assert _unlabelled_scores(Bundle(), texts, chosen, {"old": 0}, trust_labels=True) == {0: 0.25, 1: 1.0, 2: 0.9}


def test_a_response_that_is_not_text_is_named(tmp_path):
    labels = _jsonl(tmp_path / "l.jsonl", [{"text": "a", "score": 0.5, "response": 7}, {"text": "b", "score": 1}])
    with pytest.raises(LabelFileError, match="l.jsonl:1: field 'response' is not text: int"):
        read_labels(labels)
