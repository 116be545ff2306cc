"""A heuristic's parameters chosen on training windows (`routing_evaluation.tune`): the evaluation
runs the chosen ones, the report says what was tried, and the bundle's spec carries them."""

import json

import numpy as np
import pytest
from pydantic import ValidationError
from routeforge.artifacts.heuristics import HeuristicPolicy
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
