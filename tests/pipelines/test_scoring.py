import pyarrow as pa
import pytest

from pipelines.config import ScoringSettings
from pipelines.scoring import BertScoreMetric, score_bertscore, score_table_labels
from pipelines.storage import Quarantine


@pytest.fixture(scope="module")
def metric():
    return BertScoreMetric(ScoringSettings(metric="bertscore"))


def test_bertscore_orders_candidates_and_handles_empty(metric):
    ref = "Canberra is the capital city of Australia."
    scores = metric.score([ref, "The capital of Australia is Canberra.", "footballer footballer", ""], [ref] * 4)
    assert scores[0] == pytest.approx(1.0, abs=1e-4)
    assert scores[0] > scores[1] > scores[2] > scores[3] == 0.0
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_bertscore_quarantines_prompts_without_reference(metric):
    prompts = pa.table({"prompt_id": ["a", "b"], "reference": ["yes", None]})
    responses = pa.table({"prompt_id": ["a", "b"], "model": ["m", "m"], "text": ["yes", "no"]})
    quarantine = Quarantine("quality", "m")
    rows = score_bertscore(responses, prompts, metric, quarantine)
    assert [r["prompt_id"] for r in rows] == ["a"]
    assert quarantine.reasons() == {"prompt has no reference for BERTScore": 1}


def test_table_labels_never_turn_missing_into_zero():
    responses = pa.table({"prompt_id": ["a", "b", "c", "d"], "model": ["m"] * 4, "label": [1.0, 0.0, None, 2.0]})
    quarantine = Quarantine("quality", "m")
    rows = score_table_labels(responses, quarantine)
    assert [(r["prompt_id"], r["score"]) for r in rows] == [("a", 1.0), ("b", 0.0)]
    assert quarantine.reasons() == {"no correctness label in the response table": 1, "label 2.0 outside [0, 1]": 1}
