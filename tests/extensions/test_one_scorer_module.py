"""Issue 70, item 4: a heuristic with searchable weights is one registration. Added in one module
(tests/extensions/toy_scorer/heuristic.py, named by $ROUTEFORGE_EXTENSIONS) and its TypeScript twin
(heuristic.js), it is accepted by the fleet file's `weight_search` and listed by the schema, its weights
are searched by CMA-ES and it is evaluated beside the other baselines, its bundle spec carries the kept
weights, and both runtimes decide alike, with nothing else changed."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from routeforge.artifacts.deciding.heuristics import HEURISTICS, HeuristicPolicy
from routeforge.core.config import RoutingEvaluationSettings
from routeforge.training.policies.evaluation import evaluate_routing
from routeforge.training.policies.packaging import export_heuristics

from tests.training.policies.test_evaluation import FITS, _pool

HERE = Path(__file__).resolve().parent
RUNTIME = HERE.parents[1] / "runtimes" / "typescript" / "dist" / "index.js"


@pytest.fixture
def scorer(monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_EXTENSIONS", "tests.extensions.toy_scorer.heuristic")
    assert "toy_slack_scorer" in HEURISTICS.names()
    return "toy_slack_scorer"


def test_a_scorer_module_is_searched_evaluated_exported_and_run_by_both_runtimes(scorer, tmp_path):
    from routeforge.fleet.cli import fleet_json_schema

    schema = json.dumps(fleet_json_schema())
    assert scorer in schema
    settings = RoutingEvaluationSettings(enabled=True, loads=[0.9], workloads=["poisson"], requests=60, seeds=1,
                                         queue_capacity=4, objective="goodput",
                                         policies=["join_shortest_queue", scorer],
                                         weight_search={scorer: {"evaluations": 12, "episodes": 1, "restarts": 1,
                                                                 "validation_episodes": 1}})
    evaluation = evaluate_routing(_pool(), FITS, [0, 1], np.array([[0.1, 0.2], [1.0, 2.0]]), settings, tmp_path,
                                  log=lambda _: None)
    report = evaluation.report()
    learned = report["tuned_heuristics"][scorer]
    assert learned["method"] == "cma-es" and set(learned["start"]) == {"free_slots", "queued_prefill", "kv_free"}
    assert {row["policy"] for row in report["rows"]} >= {scorer, "join_shortest_queue"}
    folders = export_heuristics([scorer], 2, tmp_path / "policies",
                                parameters={n: t["parameters"] for n, t in evaluation.tuned.items()})
    spec = json.loads((folders[scorer] / "policy.json").read_text())
    assert spec["parameters"] == learned["parameters"]

    node = shutil.which("node")
    if node is None or not RUNTIME.is_file():
        pytest.skip("the TypeScript runtime is not built (Node.js and `make ts-runtime`): its half is not run")
    from routeforge.artifacts.deciding.golden import _heuristic_cases

    spec = {**spec, "parameters": {"weights": {"free_slots": 0.7, "queued_prefill": 0.4, "kv_free": 1.3}}}
    cases = _heuristic_cases(2, 200, np.random.default_rng(5))
    python = HeuristicPolicy.from_spec(spec)
    expected = [python.route(c["request"], c["instances"]) for c in cases]
    assert len(set(expected)) > 1
    script = ("require(process.argv[1]); const {HeuristicPolicy} = require(process.env.ROUTEFORGE_TS_RUNTIME);"
              "const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "const policy = new HeuristicPolicy(input.spec);"
              "console.log(JSON.stringify(input.cases.map((c) => policy.route(c.request, c.instances))));")
    run = subprocess.run([node, "-e", script, str(HERE / "toy_scorer" / "heuristic.js")],
                         input=json.dumps({"spec": spec, "cases": cases}), capture_output=True, text=True,
                         timeout=60, env={**os.environ, "ROUTEFORGE_TS_RUNTIME": str(RUNTIME)})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == expected


def test_a_heuristic_without_searchable_weights_is_refused_by_weight_search(scorer):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="cannot be used here.*linear_scorer.*toy_slack_scorer"):
        RoutingEvaluationSettings(policies=["llm_d"], weight_search={"llm_d": {}})
