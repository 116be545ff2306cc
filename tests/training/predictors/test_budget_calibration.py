"""Budgets an operator can set (issue 52, item 1): the calibration table maps λ to quality, cost per
1,000 requests and shares on out-of-fold prompts, and a target picks the row that meets it."""

import numpy as np
import pytest
from routeforge.artifacts.deciding.budget import TargetUnreachable, choose_setting, refit
from routeforge.artifacts.deciding.router import RouterPrediction
from routeforge.training.predictors.budget_calibration import calibration_table

MODELS = ["small", "medium", "large"]


def synthetic(n: int = 600, seed: int = 0):
    """Three models: large is best and dearest; estimates are the labels plus noise."""
    rng = np.random.default_rng(seed)
    hardness = rng.random(n)
    y = np.column_stack([hardness < 0.3, hardness < 0.6, hardness < 0.9]).astype(float)
    price = np.array([0.001, 0.004, 0.02])
    cost = price * rng.uniform(0.5, 1.5, size=(n, 3))
    estimate = np.clip(y * 0.6 + 0.2 + rng.normal(0, 0.15, size=(n, 3)), 0, 1)
    return estimate, price, y, cost


def test_the_table_runs_from_the_strongest_to_the_cheapest_and_reports_what_the_labels_give():
    estimate, price, y, cost = synthetic()
    table = calibration_table(estimate, price, y, cost, MODELS, seed=0)
    rows = table["rows"]
    assert rows[0]["lam"] == 0 and len(rows) > 10 and table["prompts"] == 600
    # λ = 0: argmax of the estimates; the last λ: everything to the cheapest model
    first = np.argmax(estimate, axis=1)
    assert rows[0]["share"]["large"] == pytest.approx(np.mean(first == 2))
    assert rows[-1]["share"]["small"] == 1.0
    assert rows[0]["quality"] == pytest.approx(np.mean(y[np.arange(600), first]))
    assert rows[-1]["cost_per_1k"] == pytest.approx(1000 * cost[:, 0].mean())
    costs = [r["cost_per_1k"] for r in rows]
    assert all(a >= b - 1e-9 for a, b in zip(costs, costs[1:]))  # a larger λ never costs more here
    for r in rows:
        lo, hi = r["cost_per_1k_interval"]
        assert lo <= r["cost_per_1k"] <= hi and sum(r["share"].values()) == pytest.approx(1.0)


def test_targets_pick_the_best_setting_that_meets_them_mixing_two_rows_between_steps():
    estimate, price, y, cost = synthetic()
    table = calibration_table(estimate, price, y, cost, MODELS, seed=0)
    rows = table["rows"]
    budget = float(np.median([r["cost_per_1k"] for r in rows]))
    setting = choose_setting(table, budget_per_1k=budget)
    within = [r for r in rows if r["cost_per_1k"] <= budget]
    # a mixture spends the budget exactly, and beats every single row within it
    assert setting.cost_per_1k == pytest.approx(budget) and setting.quality >= max(r["quality"] for r in within)
    assert setting.lam_other is not None and 0 < setting.weight < 1
    a = next(r for r in rows if r["lam"] == setting.lam)
    b = next(r for r in rows if r["lam"] == setting.lam_other)
    assert setting.quality == pytest.approx(setting.weight * a["quality"] + (1 - setting.weight) * b["quality"])
    # each prompt gets one of the two λ by its hash, the same every time, in the mixture's proportion
    prompts = [f"prompt {i}" for i in range(4000)]
    lams = setting.lams(prompts)
    assert set(lams.tolist()) == {setting.lam, setting.lam_other} and (lams == setting.lams(prompts)).all()
    assert np.mean(lams == setting.lam) == pytest.approx(setting.weight, abs=0.03)
    capped = choose_setting(table, max_share={"large": 0.3})
    assert capped.share["large"] == pytest.approx(0.3) or capped.share["large"] < 0.3
    assert capped.quality >= max(r["quality"] for r in rows if r["share"]["large"] <= 0.3)
    floor = choose_setting(table, min_quality=0.6)
    assert floor.quality >= 0.6 - 1e-9
    assert floor.cost_per_1k <= min(r["cost_per_1k"] for r in rows if r["quality"] >= 0.6) + 1e-9
    both = choose_setting(table, budget_per_1k=budget, max_share={"large": 0.2})
    assert both.cost_per_1k <= budget + 1e-9 and both.share["large"] <= 0.2 + 1e-9
    assert both.targets["budget_per_1k"] == budget and "cost per 1,000 requests" in both.describe()
    loose = choose_setting(table, budget_per_1k=rows[0]["cost_per_1k"] * 2)  # every row fits: the best one
    assert loose.lam_other is None and loose.quality == max(r["quality"] for r in rows)
    with pytest.raises(TargetUnreachable, match="nearest"):
        choose_setting(table, budget_per_1k=rows[-1]["cost_per_1k"] / 2)
    with pytest.raises(ValueError, match="not models of this router"):
        choose_setting(table, max_share={"gpt-4": 0.3})


def test_a_traffic_mix_refits_the_shares_and_costs():
    estimate, price, y, cost = synthetic()
    table = calibration_table(estimate, price, y, cost, MODELS, seed=0)
    hard = estimate[estimate[:, 2] > estimate[:, 0]]  # a mix of prompts only the large model does well
    n = len(hard)
    prediction = RouterPrediction(MODELS, hard, np.full((n, 3), np.nan), np.broadcast_to(price, (n, 3)),
                                  np.zeros(n, int), np.zeros(n, bool), np.zeros(n, bool))
    mixed = refit(table, prediction, "traffic.jsonl")
    assert [r["lam"] for r in mixed["rows"]] == [r["lam"] for r in table["rows"]]
    assert mixed["rows"][0]["share"]["large"] > table["rows"][0]["share"]["large"]
    assert mixed["source"] == "traffic.jsonl" and mixed["prompts"] == n
