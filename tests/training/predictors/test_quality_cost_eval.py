import numpy as np
import pyarrow as pa
import pytest
from routeforge.artifacts.deciding.knn import KnnPrediction
from routeforge.core.schemas import routing_table_schema
from routeforge.training.predictors.quality_cost_eval import auto_lambdas, evaluate_router, plot_quality_cost


def _table(quality, cost):
    models = ["a", "b"]
    n = len(quality)
    data = {"prompt_id": [str(i) for i in range(n)], "task": ["t"] * n, "text": ["x"] * n, "split": ["test"] * n}
    for j, m in enumerate(models):
        data[f"quality/{m}"] = [q[j] for q in quality]
        data[f"output_tokens/{m}"] = [1.0] * n
        data[f"cost/{m}"] = [c[j] for c in cost]
    return pa.Table.from_pydict(data, schema=routing_table_schema(models))


def test_anchors_and_sweep(tmp_path):
    quality = [[1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [None, 1.0]]
    cost = [[10.0, 1.0], [10.0, 1.0], [10.0, 1.0], [10.0, 1.0]]
    table = _table(quality, cost)
    # a perfect predictor
    pred = KnnPrediction(["a", "b"], np.nan_to_num(np.array(quality, dtype=float)), np.ones((4, 2)),
                         np.array(cost))
    result = evaluate_router(table, pred, np.array([0.5, 0.5]), [0.0, 1.0])
    assert result["n_scored"] == 3 and result["n_left_out_incomplete_labels"] == 1
    assert result["single_models"]["a"] == {"quality": pytest.approx(2 / 3), "cost": 10.0}
    assert result["random"] == {"quality": pytest.approx(4 / 6), "cost": 5.5}
    assert result["oracle"] == {"quality": 1.0, "cost": pytest.approx((1 + 10 + 1) / 3)}
    assert result["router_max_quality"] == result["oracle"]
    cheap = result["lambda_sweep"][1]
    assert cheap["share"] == {"b": 1.0} and cheap["cost"] == 1.0
    png = plot_quality_cost(result, tmp_path / "plot.png", "test")
    assert png.stat().st_size > 10_000


def test_hf_export_by_split_with_a_dataset_card(tmp_path):
    from datasets import load_from_disk
    from routeforge.training.routing_table import dataset_card, export_hf_dataset

    table = _table([[1.0, 0.0], [0.5, None], [0.0, 1.0]], [[1.0, 2.0]] * 3)
    table = table.set_column(3, "split", pa.array(["train", "train", "test"]))
    card = dataset_card(table, "unit", {"*": "exact_match"})
    path = export_hf_dataset(table, tmp_path / "hf", card)
    data = load_from_disk(str(path))
    assert {k: len(v) for k, v in data.items()} == {"test": 1, "train": 2}
    assert data["train"][0]["quality/a"] == 1.0 and data["train"][1]["quality/b"] is None
    text = (path / "README.md").read_text()
    assert "| a | 3 | 0.5000 |" in text and "| b | 2 | 0.5000 |" in text
    assert "| t | 3 | exact_match |" in text and "| train | 2 |" in text


def test_upper_hull_aiq_and_gap_to_the_hull():
    from routeforge.training.predictors.quality_cost_eval import aiq, hull_comparison, hull_quality, upper_hull

    singles = [(1.0, 0.5), (2.0, 0.6), (3.0, 0.9), (4.0, 0.85), (2.5, 0.55)]
    hull = upper_hull(singles)
    assert hull == [(1.0, 0.5), (3.0, 0.9)]  # (2, 0.6) lies under the 1→3 chord; (4, 0.85) is dearer and worse
    assert hull_quality(hull, 2.0) == pytest.approx(0.7) and hull_quality(hull, 4.0) == 0.9
    assert np.isnan(hull_quality(hull, 0.5))
    # over [1, 4]: a ramp 0.5→0.9 on [1, 3] (area 1.4), then flat 0.9 on [3, 4] (area 0.9)
    assert aiq(singles, 1.0, 4.0) == pytest.approx((1.4 + 0.9) / 3, abs=1e-4)
    cmp = hull_comparison([(2.0, 0.8), (3.5, 0.88)], singles)
    assert cmp["max_gap_above_hull"] == pytest.approx(0.1) and cmp["max_gap_at_cost"] == 2.0


def test_auto_lambdas_span_the_fleets_quality_per_cost_rate():
    pred = KnnPrediction(["a", "b"], np.array([[0.9, 0.5], [0.7, 0.5]]), np.ones((2, 2)),
                         np.array([[0.004, 0.0004], [0.004, 0.0004]]))
    lambdas = auto_lambdas(pred, n=8)
    rate = 0.3 / 0.0036  # spread of mean quality over spread of mean cost
    assert lambdas[0] == 0.0 and len(lambdas) == 8
    assert lambdas[1] == pytest.approx(rate * 1e-3) and lambdas[-1] == pytest.approx(rate * 1e3)
    assert lambdas[4] == pytest.approx(rate)
    table = _table([[1.0, 0.0], [0.0, 1.0]], [[0.004, 0.0004]] * 2)
    result = evaluate_router(table, pred, np.array([0.5, 0.5]))
    assert [s["lambda"] for s in result["lambda_sweep"]] == pytest.approx(auto_lambdas(pred))
    assert {m for s in result["lambda_sweep"] for m in s["share"]} == {"a", "b"}
