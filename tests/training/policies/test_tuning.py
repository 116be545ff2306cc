"""A heuristic's parameters chosen on training windows (`routing_evaluation.tune`): the evaluation
runs the chosen ones, the report says what was tried, and the bundle's spec carries them."""

import json

import numpy as np
import pytest
from pydantic import ValidationError
from routeforge.artifacts.deciding.heuristics import HeuristicPolicy
from routeforge.core.config import RoutingEvaluationSettings
from routeforge.training.policies.evaluation import evaluate_routing
from routeforge.training.policies.packaging import export_heuristics

from tests.training.policies.test_evaluation import FITS, _pool


def test_the_tuned_parameters_are_chosen_on_training_windows_run_and_exported(tmp_path):
    settings = RoutingEvaluationSettings(enabled=True, loads=[0.9], workloads=["poisson"], requests=60, seeds=2,
                                         queue_capacity=4, objective="quality_goodput", tune_episodes=2,
                                         policies=["join_shortest_queue", "quality_within_slo"],
                                         tune={"quality_within_slo": {"slo_scale": [5.0, 2.0, 1.0]}})
    evaluation = evaluate_routing(_pool(), FITS, [0, 1], np.array([[0.1, 0.2], [1.0, 2.0]]), settings, tmp_path,
                                  log=lambda _: None)
    tuned = evaluation.report()["tuned_heuristics"]["quality_within_slo"]
    tried = {t["parameters"]["slo_scale"]: t["quality_goodput"] for t in tuned["tried"]}
    assert list(tried) == [5.0, 2.0, 1.0] and tuned["objective"] == "quality_goodput"
    assert tuned["parameters"]["slo_scale"] == max(tried, key=lambda k: (tried[k], -list(tried).index(k)))
    # what is exported is what was evaluated
    folders = export_heuristics(["quality_within_slo", "join_shortest_queue"], 2, tmp_path / "policies",
                                parameters={n: t["parameters"] for n, t in evaluation.tuned.items()})
    spec = json.loads((folders["quality_within_slo"] / "policy.json").read_text())
    assert spec["parameters"] == tuned["parameters"]
    assert HeuristicPolicy.from_spec(spec).parameters == tuned["parameters"]
    assert json.loads((folders["join_shortest_queue"] / "policy.json").read_text())["parameters"] == {}


def test_the_fleet_file_names_a_registered_heuristic_and_numbers():
    with pytest.raises(ValidationError, match=r"unknown heuristic 'quality_within_sl' \(did you mean"):
        RoutingEvaluationSettings(tune={"quality_within_sl": {"slo_scale": [2.0]}})
    with pytest.raises(ValidationError, match="quality_within_slo.slo_scale: list at least one value"):
        RoutingEvaluationSettings(tune={"quality_within_slo": {"slo_scale": []}})
    with pytest.raises(ValidationError, match="'quality_within_slo' is not among `policies`"):
        RoutingEvaluationSettings(policies=["join_shortest_queue"], tune={"quality_within_slo": {"slo_scale": [2.0]}})


def test_linear_scorer_weights_are_learned_by_cma_es_kept_only_if_they_win_on_validation_and_exported(tmp_path):
    """`weight_search`: each of `restarts` CMA-ES searches runs about `evaluations` candidates on
    training episodes of its own; the starting weights (llm_d_ttft's) and each search's best are judged
    on the same validation episodes and the best there is kept; the evaluation runs and the bundle's
    spec carries the kept weights."""
    from routeforge.artifacts.deciding.deployed_routers import SCORER_FEATURES

    settings = RoutingEvaluationSettings(enabled=True, loads=[0.9], workloads=["poisson"], requests=60, seeds=1,
                                         queue_capacity=4, objective="goodput",
                                         policies=["join_shortest_queue", "linear_scorer"],
                                         weight_search={"linear_scorer": {"evaluations": 12, "episodes": 1,
                                                                          "restarts": 2, "validation_episodes": 1}})
    evaluation = evaluate_routing(_pool(), FITS, [0, 1], np.array([[0.1, 0.2], [1.0, 2.0]]), settings, tmp_path,
                                  log=lambda _: None)
    learned = evaluation.report()["tuned_heuristics"]["linear_scorer"]
    assert learned["method"] == "cma-es" and len(learned["searches"]) == 2
    assert all(s["curve"][-1]["evaluations"] >= 12 for s in learned["searches"])
    assert all(set(s["weights"]) == set(SCORER_FEATURES) for s in learned["searches"])
    losses = learned["validation_loss"]
    assert list(losses) == ["start", "search 1", "search 2"]
    assert learned["kept"] == min(losses, key=lambda label: (losses[label], label != "start"))
    kept = learned["start"] if learned["kept"] == "start" else learned["searches"][int(learned["kept"][-1]) - 1]["weights"]
    assert learned["parameters"]["weights"] == kept
    folders = export_heuristics(["linear_scorer"], 2, tmp_path / "policies",
                                parameters={n: t["parameters"] for n, t in evaluation.tuned.items()})
    spec = json.loads((folders["linear_scorer"] / "policy.json").read_text())
    assert spec["parameters"] == learned["parameters"]


def test_weight_search_names_an_evaluated_policy_and_not_one_tune_also_sets():
    with pytest.raises(ValidationError, match="weight_search: 'linear_scorer' is not among `policies`"):
        RoutingEvaluationSettings(policies=["join_shortest_queue"], weight_search={"linear_scorer": {}})
    with pytest.raises(ValidationError, match="linear_scorer both in `tune` and `weight_search`"):
        RoutingEvaluationSettings(tune={"linear_scorer": {"seed": [1]}}, weight_search={"linear_scorer": {}})
    with pytest.raises(ValidationError, match="weight_search.llm_d"):
        RoutingEvaluationSettings(weight_search={"llm_d": {}})


def test_a_heuristic_trained_on_training_windows_leaves_the_evaluation_on_its_own_seeds(tmp_path):
    """llm-d's predicted-latency scorer learns its model on the weight search's training windows; the
    evaluation still judges every policy on its held-out seeds (their count and values), not on those."""
    from routeforge.training.policies.rl.rollout import evaluation_seeds
    from routeforge.training.policies.weight_search import search_seeds

    settings = RoutingEvaluationSettings(enabled=True, loads=[0.8], workloads=["poisson"], requests=40, seeds=2,
                                         queue_capacity=4, tune_episodes=3,
                                         policies=["join_shortest_queue", "llm_d_predicted_latency"])
    evaluation = evaluate_routing(_pool(), FITS, [0, 1], np.array([[0.1, 0.2], [1.0, 2.0]]), settings, tmp_path,
                                  log=lambda _: None)
    assert evaluation.seeds == evaluation_seeds(settings.seed, 2)
    assert not set(evaluation.seeds) & set(search_seeds(settings.seed, 0, 3))
    assert evaluation.tuned["llm_d_predicted_latency"]["training_episodes"] == 3
    assert all(len(r["goodput_by_seed"]) == 2 for r in evaluation.rows)
