"""Materialize every asset in-process with a temporary Dagster instance and MLflow store."""

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.deciding.golden import check_golden
from routeforge.core.config import load_fleet
from routeforge.generation.local_server import free_port, wait_healthy
from routeforge.pipelines.definitions import build_definitions
from routeforge.pipelines.run import run_pipeline
from routeforge.training.policies.simulator.baselines import EXPORTABLE

from tests.conftest import CONFIGS, REPO
from tests.services import TEST_ROUTER_SELECTION, child
from tools.browser import CHROMIUM, chromium
from tools.readme import readme_console_commands
from tools.runtime_probe import PROMPTS, STATE
from tools.runtime_venv import clean_env, install_extras, installed, make_runtime_venv

pytestmark = pytest.mark.e2e
PROBE_PROMPTS, PROBE_STATE = PROMPTS, STATE  # what tools/runtime_probe.py routes and predicts for


def _routeforge(*args, tracking_uri):
    exe = os.path.join(os.path.dirname(sys.executable), "routeforge")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri})


@dataclass
class DemoRun:
    config: Any
    out: dict
    instance: dg.DagsterInstance

    @property
    def tracking(self) -> str:
        return self.config.registry.tracking_uri


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> DemoRun:
    """`make demo`'s pipeline, once for this module, in a fresh state folder and Dagster instance."""
    state = tmp_path_factory.mktemp("demo") / "state"
    with pytest.MonkeyPatch.context() as env, dg.instance_for_test() as instance:
        env.setenv("ROUTEFORGE_STATE", str(state))
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        config = load_fleet(CONFIGS / "demo.yaml")
        yield DemoRun(config, run_pipeline(CONFIGS / "demo.yaml", instance), instance)


def test_demo_fleet_end_to_end(demo, tmp_path, shared_data):
    config, out, instance = demo.config, demo.out, demo.instance
    # the pipeline ran in the `demo` fixture; the Dagster instance it used is still open
    assert out["uri"] == "models:/routeforge-demo-router@challenger"
    assert out["registry_version"] == "1"
    # the first version clears the (empty) floors and becomes champion
    assert out["release"]["promoted"] and out["release"]["reasons"] == ["clears every floor"]
    # the runs carry the code location's job names (what `make demo` shows in the UI)
    runs = [(r.job_name, r.tags.get("dagster/partition")) for r in instance.get_runs()]
    assert sorted(runs, key=str) == sorted(
        [("build_prompts", None), ("build_routing_table", None), ("train_and_register", None)]
        + [("generate_and_score", m) for m in config.model_names]
        + [("profile_tiers", t.name) for t in config.tiers], key=str)
    # lineage: one materialization per model partition, with metadata
    events = instance.fetch_materializations(dg.AssetKey("responses"), limit=10).records
    partitions = sorted(e.asset_materialization.partition for e in events)
    assert partitions == sorted(config.model_names)
    meta = events[0].asset_materialization.metadata
    assert meta["rows"].value == 36 and meta["output_tokens_per_s"].value > 0
    checks = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey("router_bundle"), "registered_bundle_verifies"), limit=1)
    assert checks[0].status.value == "SUCCEEDED"
    profiles = instance.fetch_materializations(dg.AssetKey("tier_profiles"), limit=10).records
    assert sorted(e.asset_materialization.partition for e in profiles) == sorted(t.name for t in config.tiers)
    meta = profiles[0].asset_materialization.metadata
    # timings of a 2-layer, 64-wide model are noise-sized: check the fit is reported, not its sign
    assert meta["measurements"].value == 12 and np.isfinite(meta["prefill_grad_s_per_token"].value)
    plot = meta["batch_fit_plot"].value  # an inline image, its file path under it
    assert plot.startswith("![batch_fit](data:image/png;base64,")
    assert os.path.getsize(plot.rsplit("`", 2)[1]) > 10_000

    tracking = config.registry.tracking_uri
    bundle = load_bundle(out["uri"], tmp_path / "bundle", tracking)
    assert bundle.manifest.lineage.dagster_run_id is not None
    assert bundle.models == config.model_names
    knn = bundle.knn_estimator()
    unseen = ["Translate to French: The garden is full of flowers.", "What is 15 plus 27?"]
    pred = knn.predict(unseen)
    assert pred.quality.shape == (2, 3) and np.isfinite(pred.quality).all()
    assert ((pred.quality >= 0) & (pred.quality <= 1)).all()
    assert np.allclose(pred.output_tokens, 24.0, atol=24)  # within the generation cap
    assert set(pred.best_model(0.0, knn.prior)) <= set(config.model_names)
    # the router chosen by cross-validation, served from safetensors + JSON
    router = bundle.router()
    routed = router.predict(unseen)
    assert routed.models == config.model_names and routed.quality.shape == (2, 3)
    assert ((routed.quality >= 0) & (routed.quality <= 1)).all() and set(routed.best_model()) <= set(config.model_names)
    assert router.meta["selection"]["chosen"] and {c.kind for c in bundle.manifest.components} >= {"router"}
    public = config.storage_root / "keys" / "bundle-signing.key.pub"
    cli = _routeforge("bundle", "predict", "--json", str(tmp_path / "bundle"), unseen[1], "--public-key", str(public),
                      tracking_uri=tracking)
    assert cli.returncode == 0, cli.stderr
    line = json.loads(cli.stdout.strip().splitlines()[-1])
    assert line["estimator"] == "router" and line["route_to"] in config.model_names
    # each prediction says what it rests on: an unseen task's fallback is not mistaken for an estimate
    assert line["basis"] in {"recalled", "unseen_task", "cluster_guard", "estimate"}

    # the shared length-bucket predictor, served by ONNX Runtime from the bundle
    lengths = bundle.length_predictor().predict(unseen, tasks=["translation", "math"], model="tiny-llama")
    assert lengths["probabilities"].shape == (2, 4) and np.allclose(lengths["probabilities"].sum(axis=1), 1)
    assert (lengths["expected"] > 0).all()
    # unknown tasks: the bundle's task classifier supplies the hint (001 appendix A.6)
    guessed = bundle.predict_buckets("length_predictor", unseen, model="tiny-llama")
    tasks = [t[0] for t in bundle.task_classifier().predict(unseen)["top"]]
    assert set(tasks) <= {"math", "factual_qa", "summarization", "code", "sentiment", "translation"}
    with_guess = bundle.length_predictor().predict(unseen, tasks=tasks, model="tiny-llama")
    assert np.allclose(guessed["probabilities"], with_guess["probabilities"])
    scores = bundle.score_predictor().predict(unseen, model="tiny-gpt2")
    assert scores["probabilities"].shape == (2, 10) and ((scores["expected"] >= 0) & (scores["expected"] <= 1)).all()
    kinds = {c.name: c.kind for c in bundle.manifest.components}
    assert {kinds[n] for n in ("length_predictor", "score_predictor", "task_classifier")} == {
        "length_predictor", "score_predictor", "task_classifier"}
    # one frozen word-embedding table for the three MiniLM predictors, stored once; int8 graphs
    tables = [n for n, k in kinds.items() if k == "text_embeddings"]
    specs = [bundle.text_predictor(n).spec for n in ("length_predictor", "score_predictor", "task_classifier")]
    assert len(tables) == 1 and all(s["embeddings"]["shared"] == tables[0] and s["precision"] == "int8" for s in specs)
    total = sum(f.bytes for c in bundle.manifest.components for f in c.files)
    encoder = sum(f.bytes for f in bundle.manifest.component("sentence_encoder").files)
    assert total - encoder < 60e6, f"demo bundle is {(total - encoder) / 1e6:.1f} MB besides its encoder"
    assert bundle.manifest.component("sentence_encoder").metrics["parity/min_cosine"] >= 0.9999

    # the evaluation report: every router against the hull, leave-one-task-out, batch-of-64 speed, in MLflow
    report = out["report"]
    assert set(report["routers"]) == {"knn_estimator", "score_predictor"}
    assert all(0 < r["aiq_single_hull"] <= 1 for r in report["routers"].values())
    assert len([t for t in report["leave_one_task_out"] if t != "mean_gap_to_best_single"]) == 6
    assert set(report["batch64_cpu"]) == {"knn_estimator", "length_predictor", "score_predictor", "task_classifier"}
    assert all(t["prompts_per_s"] > 0 for t in report["batch64_cpu"].values())
    import mlflow

    mlflow.set_tracking_uri(config.registry.tracking_uri)
    run = mlflow.get_run(report["mlflow_run_id"])
    assert "routing/knn_estimator/aiq_router" in run.data.metrics
    logged = {a.path for a in mlflow.artifacts.list_artifacts(run_id=run.info.run_id, artifact_path="report")}
    assert "report/predictor_report.json" in logged
    plots = {a.path for a in mlflow.artifacts.list_artifacts(run_id=run.info.run_id,
                                                             artifact_path="plots/predictor_report")}
    assert "plots/predictor_report/routers_quality_cost.png" in plots

    # one MLflow parent run for the pipeline run; every training step a child tagged with its Dagster run
    parent_id = run.data.tags["mlflow.parentRunId"]
    parent = mlflow.get_run(parent_id)
    assert parent.data.tags["routeforge.role"] == "pipeline"
    children = mlflow.search_runs([run.info.experiment_id], output_format="list",
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")
    steps = {c.data.tags["routeforge.step"] for c in children}
    assert {"knn_estimator", "router_selection", "length_predictor", "score_predictor", "task_classifier",
            "latency_heads", "routing_evaluation", "predictor_report", "router_bundle"} <= steps
    assert all(c.data.tags.get("dagster.run_id") for c in children)
    # each step's run is open while the step works: it lies inside its Dagster step and lasts a
    # good share of it (the router's CV, the policies' training…), not an instant at its end
    for step_run in children:
        step = step_run.data.tags["routeforge.step"]
        stats = {s.step_key: s for s in instance.get_run_step_stats(step_run.data.tags["dagster.run_id"])}
        window = stats.get(step)
        assert step_run.info.status == "FINISHED", step
        started, ended = step_run.info.start_time / 1e3, step_run.info.end_time / 1e3
        if window is not None and step != "router_bundle":
            assert window.start_time - 1 <= started and ended <= window.end_time + 1, step
            # (a quarter: on one thread per test worker, a short step's process start and input loading
            # before its run opens, and its loader check after, can take most of it: latency_heads' run
            # had 4.8 s of its 13.7 s step)
            assert ended - started >= 0.25 * (window.end_time - window.start_time) - 2, (
                step, ended - started, window.end_time - window.start_time)
    # the parent lasts from its first child's start to its last one's end (not the instant it was created)
    parent = mlflow.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    last_end = max(c.info.end_time for c in children)
    assert last_end <= parent.info.end_time <= last_end + 2000
    assert parent.info.start_time <= min(c.info.start_time for c in children)
    # settings and the choices each step made are params, so runs can be filtered and compared
    params = {c.data.tags["routeforge.step"]: c.data.params for c in children}
    assert {"knn.k", "knn.index", "encoder", "chosen.k"} <= set(params["knn_estimator"])
    assert {"router.folds", "router.knn_k", "chosen"} <= set(params["router_selection"])
    assert {"length_predictor.epochs", "length_predictor.buckets", "chosen.precision"} <= set(
        params["length_predictor"])
    assert {"tier.model", "chosen.profile_kind", "chosen.features"} <= set(params["latency_heads"])
    assert any(k.startswith("chosen.heads.") for k in params["latency_heads"])  # per target: line, trees…
    assert {"routing_evaluation.loads", "chosen.recommended"} <= set(params["routing_evaluation"])
    assert params["routing_evaluation"]["chosen.recommended"] == out["routing_evaluation"]["gate"]["recommended"]
    # curves as metric histories, the routing table as the training runs' dataset input
    trainer = next(c for c in children if c.data.tags["routeforge.step"] == "length_predictor")
    history = mlflow.MlflowClient().get_metric_history(trainer.info.run_id, "train/loss")
    assert len(history) >= 2 and len({m.step for m in history}) == len(history)
    assert [d.dataset.name for d in trainer.inputs.dataset_inputs] == ["routing_table"]
    # the bundle run keeps each component's plots in its own folder (no two tiers overwrite one file)
    bundle_run = next(c for c in children if c.data.tags["routeforge.step"] == "router_bundle")
    folders = {a.path for a in mlflow.artifacts.list_artifacts(run_id=bundle_run.info.run_id, artifact_path="plots")}
    assert {f"plots/latency--{t.name}" for t in config.tiers} <= folders

    # routing evaluation: every policy × workload × load, 3 seeds, in MLflow; the policies in the bundle
    routing = out["routing_evaluation"]
    policies = {r["policy"] for r in routing["rows"]}
    assert {"round_robin", "join_shortest_queue", "route_balance", "quality_only", "ddqn_workload_guided", "sac_qos_han",
            "sac_qos_mlp"} <= policies
    assert {(r["workload"], r["load"]) for r in routing["rows"]} == {
        (w, load) for w in ("poisson", "gamma", "switched_poisson") for load in (0.5, 0.9)}
    # a smoke-trained SAC may drop every request (no served request, no latency): the baselines serve;
    # counts are means over seeds, so their sum is compared with a float tolerance
    assert all(0 <= r["qos_mean"] <= 1 and abs(r["served"] + r["dropped"] + r["rejected"] - 120) < 1e-9 for r in routing["rows"])
    assert all(r["e2e_mean_s"] > 0 for r in routing["rows"] if r["served"] > 0)
    assert all(r["served"] > 0 for r in routing["rows"] if r["policy"] in ("round_robin", "join_shortest_queue"))
    run = mlflow.get_run(routing["mlflow_run_id"])
    assert "round_robin/poisson/load_0.9/e2e_mean_s" in run.data.metrics
    logged = {a.path for a in mlflow.artifacts.list_artifacts(run_id=run.info.run_id, artifact_path="report")}
    assert "report/routing_evaluation.json" in logged
    plots = {a.path for a in mlflow.artifacts.list_artifacts(run_id=run.info.run_id,
                                                             artifact_path="plots/routing_evaluation")}
    assert {"plots/routing_evaluation/latency_percentiles.png", "plots/routing_evaluation/learning_curves.png"} <= plots
    learned = ["policy--ddqn_workload_guided", "policy--sac_qos_han", "policy--sac_qos_mlp"]
    heuristic = ["policy--earliest_available", "policy--join_shortest_queue", "policy--least_work_left",
                 "policy--quality_only", "policy--round_robin", "policy--route_balance", "policy--route_balance_absolute",
                 "policy--quality_within_slo", "policy--llm_d", "policy--llm_d_affinity", "policy--lmetric",
                 "policy--dynamo_kv", "policy--sglang_cache_aware"]
    assert sorted(bundle.routing_policies) == sorted(learned + heuristic)
    for name in learned:
        policy = bundle.routing_policy(name)
        assert policy.spec["onnx_action_agreement"] == 1.0
        action = policy.act(np.zeros(policy.spec["observation"]["size"], dtype=np.float32))
        assert 0 <= action < policy.spec["action"]["n"]
    # the gate's recommendation: recorded in the manifest with its reason, returned without a name;
    gate = routing["gate"]
    assert bundle.recommended_policy == f"policy--{gate['recommended']}"
    assert bundle.routing_recommendation["recommendation"] == gate["reason"]
    recommended = bundle.routing_policy()
    # a heuristic runs under its exported name (route_balance_absolute is route_balance with absolute quality)
    assert (recommended.name if gate["kind"] == "heuristic" else recommended.spec["output"]) in (
        EXPORTABLE.get(gate["recommended"], gate["recommended"]), "q_values", "logits")
    assert bundle.manifest.component(bundle.recommended_policy).config["recommended"] is True
    # per traffic: the best carried policy for traffic like this; one decision per request from live states
    assert bundle.recommended_policy_for({"arrival_cv": 1.0, "load": 0.5})["policy"] in bundle.routing_policies
    from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState

    dispatcher = Dispatcher(bundle)
    idle = [LiveState(0, 0)] * len(dispatcher.instances)
    decision = dispatcher.decide_prompt("What is 15 plus 27?", idle)
    assert decision.model in config.model_names and decision.predicted_e2e_s >= decision.predicted_ttft_s > 0
    # the bundle's policies and the baselines replayed on the Azure trace's timestamps
    replay = _routeforge("policies", "evaluate", str(tmp_path / "bundle"), "--public-key", str(public), "--trace",
                         str(shared_data / "traces" / "azure_llm_inference_conv_2023.csv"), "--requests", "150",
                         "--seeds", "2", "--objective", "e2e_mean_offered_s", "--json", tracking_uri=tracking)
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads(replay.stdout)
    rows = {r["policy"]: r for r in replayed["rows"]}
    # the best policy for this trace by mean E2E over offered requests (the policies that served the
    # most ranked first), and whether the bundle's recommendation holds on it
    ranking = replayed["ranking"]
    assert ranking["objective"] == "e2e_mean_offered_s" and replayed["load_calibration"]["sustainable_rps"] > 0
    full = [r for r in ranking["ranking"] if not r["serves_less"]]
    assert ranking["best"] == min(full, key=lambda r: r["value"])["policy"]
    assert ranking["recommended"] == gate["recommended"] and isinstance(ranking["recommendation_holds"], bool)
    assert ranking["verdict"].startswith(f"deploy {ranking['best']}")
    assert {n.removeprefix("policy--") for n in learned + heuristic} | {"random"} == set(rows)
    assert [n for n, r in rows.items() if r["recommended"]] == [gate["recommended"]]
    assert all(abs(r["served"] + r["dropped"] + r["rejected"] - 150) < 1e-9 for r in rows.values())
    assert rows["join_shortest_queue"]["served"] > 0 and rows["join_shortest_queue"]["e2e_p99_s"] > 0

    # latency heads per tier, measured on this CPU, loadable and exact from the bundle alone
    assert sorted(bundle.tiers_with_latency) == sorted(t.name for t in config.tiers)
    for tier in bundle.tiers_with_latency:
        latency = bundle.latency(tier)
        assert latency.golden_max_abs_diff() == 0.0
        state = {"batch_size": 1, "prompt_tokens": 40, "output_tokens": 24, "prefill_tokens": 40,
                 "mean_context_tokens": 52}
        got = latency.predict([state])
        assert np.isfinite(got["tpot"]).all() and np.isfinite(got["ttft"]).all()
        rwt = json.loads((bundle.root / f"latency--{tier}" / "rwt.json").read_text())
        assert rwt["params"]["theta_tok_s"] > 0 and rwt["groups"]  # μ_o, σ_o per task for this model
        assert all(g.endswith("|" + tier.split("@")[0]) for g in rwt["groups"])

    # the acceptance commands: verify by URI with the key pair the run created (no key configured),
    # then a changed byte is named
    private = config.storage_root / "keys" / "bundle-signing.key"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    ok = _routeforge("bundle", "verify", out["uri"], "--public-key", f"{private}.pub", tracking_uri=tracking)
    assert ok.returncode == 0 and "signature by" in ok.stdout, ok.stderr
    target = tmp_path / "bundle" / "knn_estimator" / "knn.json"
    target.write_bytes(target.read_bytes().replace(b'"k": 10', b'"k": 11'))
    bad = _routeforge("bundle", "verify", str(tmp_path / "bundle"), "--public-key", f"{private}.pub",
                      tracking_uri=tracking)
    assert bad.returncode == 1 and "knn_estimator/knn.json: sha256 mismatch" in bad.stderr

    # a run killed just after registering leaves this state: the version has no gate decision, no
    # recorded checks or rules, and there is no champion and no frozen evaluation set
    from mlflow import MlflowClient
    from routeforge.registry.release import CHECKS_TAG, EVALUATION_TAG, HISTORY_TAG, RULES_TAG

    client, name = MlflowClient(tracking), out["model_name"]
    for tag in [t for t in client.get_model_version(name, "1").tags if t.startswith("gate.")] + [CHECKS_TAG, RULES_TAG]:
        client.delete_model_version_tag(name, "1", tag)
    client.delete_registered_model_alias(name, "champion")
    for tag in (EVALUATION_TAG, HISTORY_TAG):
        client.delete_registered_model_tag(name, tag)
    # the same fleet again: every stage is seeded, the measured profiles are kept, so the bundle's
    # content is the same and nothing new is registered; the ungated version is gated now
    with dg.instance_for_test() as instance:
        again = run_pipeline(CONFIGS / "demo.yaml", instance)
        # once gated, the gate has nothing to do: materialized again on its own in this instance (the
        # asset page's Materialize button), it says so and leaves the registry as it was
        regate = build_definitions(CONFIGS / "demo.yaml").resolve_job_def("train_and_register").execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey("release_gate")])
    assert again["unchanged"] and again["registry_version"] == "1" and again["bundle_version"] == out["bundle_version"]
    assert again["release"]["promoted"] and again["release"]["reasons"] == ["clears every floor"]
    assert EVALUATION_TAG in client.get_registered_model(name).tags
    decision = regate.output_for_node("release_gate")
    assert decision["unchanged"] and not decision["promoted"] and decision["reasons"] == ["nothing new was registered"]
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    assert client.get_model_version(name, "1").tags["gate.decision"] == "promoted"


def test_the_demo_assets_carry_owners_column_schemas_and_checks_after_their_materializations(demo):
    """What the asset pages show: owners from the fleet file, each table's columns with their types
    (as written), and every check evaluated after, and against, the materialization it checks."""
    instance = demo.instance
    routing = instance.fetch_materializations(dg.AssetKey("routing_table"), limit=1).records[0]
    meta = routing.asset_materialization.metadata
    columns = {c.name: c for c in meta["dagster/column_schema"].schema.columns}
    assert columns["prompt_id"].type == "string" and not columns["prompt_id"].constraints.nullable
    assert meta["dagster/row_count"].value == meta["rows"].value > 0
    prompts = instance.fetch_materializations(dg.AssetKey("prompts"), limit=1).records[0].asset_materialization
    assert [c.name for c in prompts.metadata["dagster/column_schema"].schema.columns][:2] == ["prompt_id", "source"]

    graph = build_definitions(CONFIGS / "demo.yaml").resolve_asset_graph()
    owners = {key.to_user_string(): graph.get(key).owners for key in graph.get_all_asset_keys()}
    assert owners["prompts"] == ["team:data-platform"] and owners["router_bundle"] == ["team:ml-platform"]

    checked = 0
    for run in instance.get_runs():
        events = [e for e in instance.all_logs(run.run_id) if e.dagster_event is not None]
        materialized = {(e.dagster_event.asset_key, e.dagster_event.partition): e.timestamp
                        for e in events if e.dagster_event.event_type_value == "ASSET_MATERIALIZATION"}
        for e in events:
            if e.dagster_event.event_type_value != "ASSET_CHECK_EVALUATION":
                continue
            data = e.dagster_event.event_specific_data
            target = data.target_materialization_data
            assert target is not None and target.run_id == run.run_id, data.check_name
            stamps = [t for (key, _), t in materialized.items() if key == data.asset_key]
            assert stamps and e.timestamp >= max(stamps), f"{data.asset_key.to_user_string()}:{data.check_name}"
            checked += 1
    assert checked >= 8


def test_the_demo_runs_are_listed_under_their_jobs_in_the_ui(demo, tmp_path):
    """What the UI's job page asks (GraphQL `pipelineOrError … runs`, filtered by the code location's
    repository label) lists `make demo`'s runs under their job names, from a real webserver over
    the demo's instance, loading the workspace as `make ui` does; then the job pages themselves,
    rendered by headless Chromium."""
    from tests.test_read_only_webserver import webserver

    by_job: dict[str, set[str]] = {}
    for run in demo.instance.get_runs():
        by_job.setdefault(run.job_name, set()).add(run.run_id)
    assert {"build_prompts", "generate_and_score", "train_and_register"} <= set(by_job)
    with webserver(tmp_path, dagster_home=Path(demo.instance.root_directory), workspace=True,
                   state=Path(os.environ["ROUTEFORGE_STATE"])) as graphql:
        for job, run_ids in by_job.items():
            answer = graphql('{ pipelineOrError(params: {repositoryLocationName: "routeforge", '
                             f'repositoryName: "__repository__", pipelineName: "{job}"}}) '
                             '{ __typename ... on Pipeline { runs { runId } } } }')["pipelineOrError"]
            assert answer["__typename"] == "Pipeline", answer
            assert {r["runId"] for r in answer["runs"]} == run_ids, job
        # every asset carries its code version, and the UI calls each one up to date after the run
        nodes = graphql("{ assetNodes { assetKey { path } opVersion staleStatus staleCauses { reason } } }")
        nodes = {"/".join(n["assetKey"]["path"]): n for n in nodes["assetNodes"]}
        assert {"prompts", "responses", "routing_table", "knn_estimator", "router_bundle"} <= set(nodes)
        assert all(n["opVersion"] for n in nodes.values()), nodes  # the code version, in GraphQL's name
        assert {k: n["staleStatus"] for k, n in nodes.items() if n["staleStatus"] != "FRESH"} == {}
        # and a person's view of it: headless Chromium on each job's page finds every run of the job
        if not Path(CHROMIUM).exists():
            pytest.skip(f"the GraphQL half passed; no Chromium at {CHROMIUM} for the browser half (.ci/run installs it)")
        with chromium(tmp_path) as page:
            for job, run_ids in by_job.items():
                first = sorted(run_ids)[0][:8]  # the UI shows a run by its id's first 8 characters
                page.open(f"{graphql.url}/locations/routeforge/jobs/{job}/runs", first, timeout_s=120)
                shown = page.js("document.body.innerText")
                assert all(run_id[:8] in shown for run_id in run_ids), (job, shown[:2000])
                assert "No runs found" not in shown
            # issue 73, item 5: the lineage `make ui` links to opens every stage, each asset on the graph
            from routeforge.pipelines.ui import lineage_url

            page.open(lineage_url(graphql.url), "release_gate", timeout_s=120)
            shown = page.js("document.body.innerText")
            assert all(key in shown for key in nodes), sorted(k for k in nodes if k not in shown)
            page.screenshot(tmp_path / "lineage.png")
            assert (tmp_path / "lineage.png").stat().st_size > 50_000


def test_an_unchanged_rerun_of_the_demo_runs_no_training_step(demo):
    """Nothing changed since the demo's run: the re-read prompt set comes out identical, so no model
    is generated or scored again, no tier profiled, no training step runs and nothing is registered;
    Dagster says every asset is up to date, for the reasons it shows in the UI."""
    instance = demo.instance
    before = {r.run_id for r in instance.get_runs()}
    again = run_pipeline(CONFIGS / "demo.yaml", instance)
    assert {step: assets for step, assets in again["materialized"].items() if assets} == {
        "prompts": {"prompts": "re-reads its sources every run"}}
    new_runs = [r for r in instance.get_runs() if r.run_id not in before]
    assert [r.job_name for r in new_runs] == ["build_prompts"]  # no other job was even started
    assert again["unchanged"] and again["registry_version"] == demo.out["registry_version"]
    assert again["bundle_version"] == demo.out["bundle_version"]
    from routeforge.pipelines.stale import plan

    defs = build_definitions(CONFIGS / "demo.yaml")
    for job, partitions in (("generate_and_score", demo.config.model_names), ("train_and_register", [None])):
        for partition in partitions:
            assert not plan(defs, instance, job, partition, demo.config)
    # a changed training setting makes the trainers stale, and Dagster names the code version as the cause
    changed = CONFIGS / ".demo-k7.yaml"
    changed.write_text((CONFIGS / "demo.yaml").read_text().replace("knn: {k: 10}", "knn: {k: 7}"))
    try:
        todo = plan(build_definitions(changed), instance, "train_and_register", None, load_fleet(changed))
        assert not plan(build_definitions(changed), instance, "generate_and_score", "tiny-gpt2", load_fleet(changed))
    finally:
        changed.unlink()
    assert todo.reasons["routing_table"] == "has a new code version"  # it reads the training settings too
    assert todo.reasons["knn_estimator"] == "has a new code version"  # stale on its own: in the same run


def test_a_stage_file_lost_from_the_storage_root_is_rebuilt_not_a_crash(demo):
    """Dagster's records say every asset is up to date, but files are gone from the storage root: the
    planner names each as due, with why (it used to say "nothing to run" and the next reader
    crashed with FileNotFoundError), and a run rebuilds the lost table without retraining anything."""
    from routeforge.pipelines.stale import plan

    assets = demo.config.storage_root / "assets"
    table = assets / "routing_table.parquet"
    table.unlink()
    knn = Path(json.loads((assets / "knn_estimator.json").read_text())["components"][0]["folder"])
    knn.rename(knn.with_name(knn.name + ".moved"))
    try:
        todo = plan(build_definitions(CONFIGS / "demo.yaml"), demo.instance, "train_and_register", None, demo.config)
    finally:
        knn.with_name(knn.name + ".moved").rename(knn)
    assert todo.reasons["routing_table"] == f"its stored value {table} is gone"
    assert todo.reasons["knn_estimator"] == f"its component folder {knn} is gone"
    again = run_pipeline(CONFIGS / "demo.yaml", demo.instance)
    rebuilt = {asset: why for assets in again["materialized"].values() for asset, why in assets.items()}
    assert rebuilt["routing_table"] == f"its stored value {table} is gone" and table.exists()
    # the rebuilt table holds the same data: nothing downstream of it ran, nothing was registered
    assert set(rebuilt) == {"prompts", "routing_table"}
    assert again["registry_version"] == demo.out["registry_version"]


def test_the_cli_prints_latency_predictions_and_the_recommended_policy(demo):
    """`bundle latency` (the tiers and the features each takes; a prediction; a misspelt feature named),
    `bundle policy` (the recommendation, and per traffic), and `inspect` showing the recommendation."""
    bundle = load_bundle(demo.out["uri"], tracking_uri=demo.tracking)
    tier = bundle.tiers_with_latency[0]
    listed = _routeforge("bundle", "latency", demo.out["uri"], tracking_uri=demo.tracking)
    assert listed.returncode == 0 and f"{tier}: --state for each of" in listed.stdout, listed.stderr
    state = [arg for k, v in PROBE_STATE.items() for arg in ("--state", f"{k}={v}")]
    got = _routeforge("bundle", "latency", demo.out["uri"], "--tier", tier, *state, "--json", tracking_uri=demo.tracking)
    assert got.returncode == 0, got.stderr
    expected = bundle.latency(tier).predict([PROBE_STATE])
    assert json.loads(got.stdout)["seconds"]["tpot"] == pytest.approx(float(expected["tpot"][0]))
    typo = _routeforge("bundle", "latency", demo.out["uri"], "--tier", tier, *state, "--state", "promt_tokens=3",
                       tracking_uri=demo.tracking)
    assert typo.returncode == 1 and "unknown feature(s) ['promt_tokens']" in typo.stderr + typo.stdout
    policy = _routeforge("bundle", "policy", demo.out["uri"], "--traffic", "arrival_cv=2.5", "--traffic", "load=0.9",
                         "--json", tracking_uri=demo.tracking)
    assert policy.returncode == 0, policy.stderr
    answer = json.loads(policy.stdout)
    assert answer["recommended_policy"] == bundle.recommended_policy
    assert answer["for_traffic"]["policy"] in bundle.routing_policies and answer["for_traffic"]["used"] == [
        "arrival_cv", "load"]
    wrong = _routeforge("bundle", "policy", demo.out["uri"], "--traffic", "arival_cv=2", tracking_uri=demo.tracking)
    assert wrong.returncode == 2 and "unknown statistic(s) ['arival_cv']" in wrong.stderr
    shown = _routeforge("bundle", "inspect", demo.out["uri"], tracking_uri=demo.tracking)
    assert f"  recommended: {bundle.recommended_policy.removeprefix('policy--')} by goodput" in shown.stdout
    # issue 73, item 3: the operator's numbers in at most 40 lines, with units; --all has every metric
    lines = shown.stdout.splitlines()
    assert len(lines) <= 40, shown.stdout
    for unit in ("ms/token", "per 1k requests", "%", " MB"):
        assert unit in shown.stdout, unit
    assert sum(line.startswith(f"  {tier} ") for tier in bundle.tiers_with_latency for line in lines) == len(
        demo.config.tiers)
    every = _routeforge("bundle", "inspect", demo.out["uri"], "--all", tracking_uri=demo.tracking).stdout
    for component in bundle.manifest.components:
        assert f"  {component.name} [{component.kind}, {component.format}]" in every
        assert all(f"    {key} = " in every for key in component.metrics), component.name


def test_a_budget_target_picks_lambda_from_the_routers_calibration_table(demo, tmp_path):
    """Issue 52, item 1: the demo bundle's router carries a calibration table (out of fold on the
    training split); a budget per 1,000 requests, a share cap or a quality floor picks its row, and
    the CLI prints the table, re-fits it on a traffic log's prompts and routes by a target."""
    bundle = load_bundle(demo.out["uri"], tracking_uri=demo.tracking)
    table = bundle.budget_table()
    rows = table["rows"]
    assert rows and rows[0]["lam"] == 0 and table["source"].startswith("out-of-fold")
    assert set(rows[0]["share"]) == set(bundle.models) and all(r["cost_per_1k"] is not None for r in rows)
    budget = max(r["cost_per_1k"] for r in rows if r["lam"] > 0) if len(rows) > 1 else rows[0]["cost_per_1k"]
    routing = bundle.route(["What is 15 plus 27?"], budget_per_1k=budget)
    assert routing.setting.cost_per_1k <= budget and routing.setting.targets == {"budget_per_1k": budget}
    assert routing.choice == bundle.route(["What is 15 plus 27?"], routing.setting.lam).choice
    log = tmp_path / "traffic.jsonl"
    log.write_text("".join(json.dumps({"request": {"model": "m", "messages": [{"role": "user", "content": t}]}}) + "\n"
                           for t in ["What is 2 plus 2?", "Translate to French: thank you", "Name a color."]))
    refit = _routeforge("bundle", "calibrate", demo.out["uri"], "--logs", str(log), tracking_uri=demo.tracking)
    assert refit.returncode == 0 and "3 prompts, predicted" in refit.stdout, refit.stderr
    routed = _routeforge("bundle", "predict", demo.out["uri"], "What is 15 plus 27?", "--budget-per-1k", str(budget),
                         tracking_uri=demo.tracking)
    assert routed.returncode == 0 and "target {'budget_per_1k'" in routed.stdout, routed.stderr
    too_low = _routeforge("bundle", "predict", demo.out["uri"], "hi", "--budget-per-1k", "0", tracking_uri=demo.tracking)
    assert too_low.returncode == 1 and "no setting of the router meets" in too_low.stderr


def test_the_runtime_alone_serves_the_demo_bundle(demo, tmp_path):
    """A router service's install (`pip install routeforge`, no extras) in a fresh virtual environment
    verifies the demo bundle, routes prompts, predicts latency and asks the recommended policy, and
    never imports the training stack; its answers equal the full install's."""
    folder = tmp_path / "bundle"
    bundle = load_bundle(demo.out["uri"], folder, demo.tracking)
    python = make_runtime_venv(tmp_path / "runtime")
    present = set(installed(python))
    assert "routeforge" in present and not present & {"torch", "dagster", "mlflow", "transformers", "pandas",
                                                        "pyarrow", "xgboost", "xgboost-cpu", "pydantic"}
    public = demo.config.storage_root / "keys" / "bundle-signing.key.pub"
    probe = subprocess.run([str(python), str(REPO / "tools" / "runtime_probe.py"), str(folder), str(public)],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path, env=clean_env())
    assert probe.returncode == 0, probe.stderr
    got = json.loads(probe.stdout)
    assert got["heavy_imported"] == []
    assert got["policy"] == bundle.recommended_policy and got["tier"] in bundle.tiers_with_latency
    assert got["tpot_s"] > 0 and got["ttft_s"] > 0
    here = bundle.router().predict(PROBE_PROMPTS)
    assert got["route_to"] == here.best_model(0.0)
    np.testing.assert_allclose(np.asarray(got["quality"]), here.quality, rtol=0, atol=1e-6)
    latency = bundle.latency(got["tier"]).predict([PROBE_STATE])
    assert got["tpot_s"] == float(latency["tpot"][0]) and got["ttft_s"] == float(latency["ttft"][0])

    # issue 73, item 1: the extra the README names for `models:/` (`routeforge[mlflow]`), added to the same
    # environment, and the README's Python block run there as written: no tracking URI and no key given,
    # from a folder outside the checkout (the store and the pinned key found through the state folder)
    # at the pipeline's MLflow: a newer client opening the sqlite store migrates its schema, and the
    # pipeline's own MLflow then refuses the store ("out-of-date database schema"; docs/deploy.md)
    from importlib.metadata import version

    install_extras(tmp_path / "runtime", "[mlflow]", tuple(
        f"{name}=={version(source)}" for name, source in (("mlflow-skinny", "mlflow"), ("sqlalchemy", "sqlalchemy"),
                                                          ("alembic", "alembic"))))
    assert {"mlflow-skinny", "pandas"} <= set(installed(python)) and "torch" not in installed(python)
    env = {k: v for k, v in clean_env().items() if k != "MLFLOW_TRACKING_URI"}
    outside = tmp_path / "service"
    outside.mkdir()
    readme = subprocess.run([str(python), "-c", README_BLOCK_RUNNER, str(REPO / "README.md")], capture_output=True,
                            text=True, timeout=600, cwd=outside, env=env)
    assert readme.returncode == 0, readme.stderr[-3000:]
    for shown, printed in json.loads(readme.stdout.splitlines()[-1]):
        _same_shape(shown, printed)
    assert (outside / "bundle" / "manifest.json").is_file()  # the block's own "./bundle"


# Runs the README's ```python block statement by statement, as a REPL would, and prints, as the last
# line, [README's comment under an expression, the expression's value] for each expression it shows.
README_BLOCK_RUNNER = """
import ast, json, re, sys
text = open(sys.argv[1]).read()
block = re.search(r"```python\\n(.*?)```", text, re.S).group(1)
lines = block.splitlines()
pairs, scope = [], {}
for node in ast.parse(block).body:
    code = ast.get_source_segment(block, node)
    if isinstance(node, ast.Expr):
        value = eval(compile(ast.Expression(node.value), "<README>", "eval"), scope)
        after = lines[node.end_lineno] if node.end_lineno < len(lines) else ""
        if after.startswith("# "):
            pairs.append([after[2:], repr(value)])
    else:
        exec(compile(ast.Module([node], []), "<README>", "exec"), scope)
print(json.dumps(pairs))
"""


def _same_shape(shown: str, printed: str) -> None:
    """A README comment against what the block printed: the same keys for a mapping (the README may cut
    it with `...`), the same length for a list; numbers and names may differ from run to run."""
    import re

    if shown.startswith("{"):
        keys = set(re.findall(r"'(\w+)':", shown))
        assert keys and keys <= set(re.findall(r"'(\w+)':", printed)), (shown, printed)
    elif shown.startswith("["):
        assert shown.count(",") == printed.count(","), (shown, printed)


TS_RUNTIME = REPO / "runtimes" / "typescript"


def test_a_second_runtime_in_typescript_reproduces_the_demo_bundles_golden_vectors(demo, tmp_path):
    """The bundle format (docs/bundle-format.md) read by runtimes/typescript on Node.js: the demo
    bundle verifies there, and its token ids, embeddings, router estimates, every routing decision,
    every latency prediction and every heuristic choice equal the golden vectors this runtime wrote."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (Debian: apt-get install nodejs npm): the TypeScript runtime is not run")
    if not (TS_RUNTIME / "dist" / "check_golden.js").is_file():
        pytest.skip("the TypeScript runtime is not built: `make ts-runtime` (npm ci, tsc)")
    folder = tmp_path / "bundle"
    bundle = load_bundle(demo.out["uri"], folder, demo.tracking)
    assert check_golden(bundle) == []  # this runtime reproduces them too
    public = demo.config.storage_root / "keys" / "bundle-signing.key.pub"
    run = subprocess.run([node, str(TS_RUNTIME / "dist" / "check_golden.js"), str(folder), "--public-key", str(public)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["problems"] == [] and report["prompts"] >= 200 and report["token_id_mismatches"] == 0
    assert report["decisions"] >= 200 * 2 and report["decision_mismatches"] == 0
    assert report["embedding_max_abs_diff"] <= 1e-5 and report["router_quality_max_abs_diff"] <= 1e-5
    assert {p["component"] for p in report["latency"]} == {f"latency--{t}" for t in bundle.tiers_with_latency}
    assert all(p["max_abs_diff"] <= 1e-5 for p in report["latency"])
    assert len(report["heuristics"]) >= 5 and all(p["mismatches"] == 0 for p in report["heuristics"])
    # a file changed after signing is refused there as here
    (folder / "router" / "router.json").write_text((folder / "router" / "router.json").read_text() + " ")
    tampered = subprocess.run([node, str(TS_RUNTIME / "dist" / "check_golden.js"), str(folder), "--public-key",
                               str(public)], capture_output=True, text=True, timeout=300)
    assert tampered.returncode == 1 and "router/router.json: sha256 mismatch" in tampered.stderr


def test_the_registered_version_is_an_mlflow_model_that_mlflow_serves(demo, tmp_path, monkeypatch):
    """`mlflow.pyfunc.load_model("models:/…@champion").predict` and `mlflow models serve` route prompts
    exactly as the runtime's router does."""
    import mlflow
    import pandas as pd
    import requests
    from routeforge.registry.mlflow_model import route

    uri = "models:/routeforge-demo-router@champion"
    prompts = PROBE_PROMPTS + ["Write a haiku about routers.", "Name the capital of Peru."]
    public = demo.config.storage_root / "keys" / "bundle-signing.key.pub"
    monkeypatch.delenv("ROUTEFORGE_PUBLIC_KEY", raising=False)
    ring = os.environ["ROUTEFORGE_KEYRING"]  # where the demo pinned its key
    monkeypatch.setenv("ROUTEFORGE_KEYRING", str(tmp_path / "nothing-pinned"))
    mlflow.set_tracking_uri(demo.tracking)
    with pytest.raises(Exception, match="no pinned public key"):  # signatures are checked as the loader does
        mlflow.pyfunc.load_model(uri)
    monkeypatch.setenv("ROUTEFORGE_KEYRING", ring)
    monkeypatch.setenv("ROUTEFORGE_PUBLIC_KEY", str(public))
    model = mlflow.pyfunc.load_model(uri)
    assert [i.name for i in model.metadata.get_input_schema().inputs] == ["prompt"]
    got = model.predict(pd.DataFrame({"prompt": prompts}))
    expected = route(load_bundle(uri, tmp_path / "bundle", demo.tracking), prompts)
    assert list(got.columns) == list(expected)
    for column, values in expected.items():
        assert got[column].tolist() == values, column  # to the last digit
    assert set(got["route_to"]) <= set(demo.config.model_names) and set(got["estimator"]) == {"router"}
    priced = model.predict(pd.DataFrame({"prompt": prompts}), params={"lam": 1e6})
    assert priced["route_to"].tolist() == route(load_bundle(tmp_path / "bundle", public_key=public), prompts,
                                                1e6)["route_to"]

    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "mlflow")
    env = {**os.environ, "MLFLOW_TRACKING_URI": demo.tracking,  # uvicorn is found beside mlflow
           "PATH": f"{os.path.dirname(exe)}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [exe, "models", "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)]
    with child(command, tmp_path / "serve.log", env=env) as server:
        wait_healthy(server, f"http://127.0.0.1:{port}/ping", tmp_path / "serve.log", timeout_s=180)
        answer = requests.post(f"http://127.0.0.1:{port}/invocations", timeout=120, json={
            "dataframe_split": {"columns": ["prompt"], "data": [[p] for p in prompts]}, "params": {"lam": 0.0}})
    assert answer.status_code == 200, answer.text
    rows = answer.json()["predictions"]
    assert [r["route_to"] for r in rows] == expected["route_to"]
    assert [r[f"quality/{m}"] for r in rows for m in demo.config.model_names] == [
        expected[f"quality/{m}"][i] for i in range(len(prompts)) for m in demo.config.model_names]


# What a README output line may differ in from run to run: numbers, digests and commits, the names of
# models, policies and workloads the run's measurements chose, column padding, and a verdict's words.
_NUMBER = r"(?:[-+]?(?:\d[\d,]*\.?\d*(?:e[-+]?\d+)?|inf|nan))"


def _skeleton(line: str, names: set[str]):
    """A pattern for a README output line: the text before a `…` (the README cuts there), numbers,
    hex digests, names and padding generalised."""
    import re

    text = line.split("…")[0].rstrip()
    # the gate's verdict on the bundle's recommendation ("holds", or "ranks N, … worse (…)" when another
    # policy wins on this traffic): a run may land either way, so the line is matched up to the name
    text = re.sub(r"(the bundle's recommendation \S+) .*", r"\1", text)
    # the same verdict's rest, where the README wraps it onto a line of its own: a run whose
    # recommendation is the best prints "… holds." and no paired-noise clause at all
    if not text.strip() or re.match(r"\s*(?:within|beyond) the paired noise", text):
        return None
    name = "(?:" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + ")"
    # the gate's verdicts, either way (training.policies.gate: a run may land on the other side)
    held = "(?:holds|does not hold on this traffic)"
    words = {"within": "(?:within|beyond)", "beyond": "(?:within|beyond)", "holds": held,
             "does not hold on this traffic": held, "ahead of": "(?:ahead of|behind)", "worse": "(?:worse|better)"}
    # a name may carry the table's ` *` (the bundle's recommendation), which a run may give another row
    token = re.compile("|".join([r"g[0-9a-f]{7,}", r"\b[0-9a-f]{12}\b", name + r"(?: \*)?(?![\w-])", _NUMBER, r" {2,}",
                                 *map(re.escape, words)]))
    pattern, at = [], 0
    for match in token.finditer(text):
        pattern.append(re.escape(text[at:match.start()]))
        found = match.group(0)
        if found.startswith("g") and len(found) > 7 and found not in names:
            pattern.append(r"g[0-9a-f]+")
        elif re.fullmatch(r"[0-9a-f]{12}", found):
            pattern.append(r"[0-9a-f]{12}")
        elif found.removesuffix(" *") in names:
            pattern.append(name + r"(?: \*)?")
        elif found.strip() == "":
            pattern.append(r"\s+")
        elif found in words:
            pattern.append(words[found])
        else:
            pattern.append(_NUMBER)
        at = match.end()
    pattern.append(re.escape(text[at:]))
    return re.compile("".join(pattern))


@pytest.mark.timeout(900)
def test_every_console_command_of_the_readme_prints_what_the_readme_shows(demo, shared_data):
    """README.md's commands, pasted as shown, on the demo's state: each exits 0 without a traceback
    and prints every line the README shows, up to what a run measures (numbers, the policies and
    models its measurements chose)."""
    from routeforge.artifacts.deciding.heuristics import HEURISTICS
    from routeforge.core.kinds import WORKLOADS
    from routeforge.training.policies.learned.base import LEARNED_POLICIES

    names = {*HEURISTICS.names(), *LEARNED_POLICIES.names(), *WORKLOADS.names(), *demo.config.model_names,
             "random", "route_balance", "route_balance_absolute", "quality_only"}
    names |= {f"policy--{n}" for n in names}
    state = Path(demo.config.registry.tracking_uri.removeprefix("sqlite:///")).parent
    # where the CLI finds the demo's store, as `make demo` leaves it; whole lines, so that a line the
    # README shows wrapped or cut matches wherever this run's wording wraps it
    env = {**os.environ, "ROUTEFORGE_STATE": str(state), "ROUTEFORGE_WIDE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    commands = readme_console_commands()
    assert len(commands) >= 5, commands
    for command, shown in commands:
        import shlex

        argv = shlex.split(command.replace("../shared/data", str(shared_data)), comments=True)
        argv[0] = os.path.join(os.path.dirname(sys.executable), os.path.basename(argv[0]))
        run = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
        printed = (run.stdout + run.stderr).splitlines()
        assert run.returncode == 0 and "Traceback" not in run.stderr, f"{command}:\n{run.stderr[-3000:]}"
        for line in shown:
            pattern = _skeleton(line, names)
            assert pattern is None or any(pattern.search(p) for p in printed), (
                f"{command}: the README shows {line!r}; it printed:\n" + "\n".join(printed[-40:]))


def test_routerbench_end_to_end(config_copy, state_dir):
    """The shipped RouterBench fleet on the whole public tables, its router's selection narrowed
    (`TEST_ROUTER_SELECTION`): the shipped grid, both truncation sides, doubled the test's time."""
    shipped = yaml.safe_load((CONFIGS / "routerbench.yaml").read_text())["training"]
    path = config_copy("routerbench", training={**shipped, "router": TEST_ROUTER_SELECTION})
    config = load_fleet(path)
    with dg.instance_for_test() as instance:
        out = run_pipeline(path, instance)
    knn = out["knn"]
    # routing to the highest predicted quality stays within 1 point of the best single model
    assert knn["test_gap_to_best_single"] >= -0.01
    assert knn["test_random_quality"] < knn["test_router_quality"] <= knn["test_oracle_quality"]
    # unlabelled cells are quarantined per model, not scored as 0
    quarantined = sum(
        pq.read_table(p).num_rows for p in (config.storage_root / "quarantine" / "quality").rglob("*.parquet")
    )
    assert quarantined == 154
    evaluation = json.loads((config.storage_root / "reports" / "knn" / "knn_evaluation.json").read_text())
    assert evaluation["n_test"] == 825
    # leave one task out: the index without ARC routes ARC's test prompts, and likewise for Winogrande
    loto = out["report"]["leave_one_task_out"]
    assert {"arc-challenge", "winogrande"} <= set(loto)
    assert all(loto[t]["n_test"] > 0 for t in ("arc-challenge", "winogrande"))
    assert (config.storage_root / "reports" / "knn" / "knn_quality_cost.png").stat().st_size > 10_000
    # the router chosen by cross-validation: never below the best single model on the test split
    router = out["router"]
    assert router["test/router"] >= router["test/best_single"] - 1e-9
    assert router["cv/router"] >= router["cv/best_single"] - 1e-9
    report = json.loads((config.storage_root / "reports" / "router" / "router_selection.json").read_text())
    assert all(row["lead"] >= -1e-9 for row in report["test"]["per_task"].values())


def test_a_new_model_enters_the_registered_router_from_its_labels_alone(demo, tmp_path):
    """`routeforge bundle add-model`: the 36 demo prompts labelled for a new model (1 on math, 0
    elsewhere), no retrain; a new signed version whose router routes to it only where its labels say
    it is best. Last in the module: it
    registers a challenger the tests above do not expect."""
    rows = [json.loads(line) for line in (CONFIGS / "data" / "demo_prompts.jsonl").read_text().splitlines()]
    # and on the frozen evaluation set's math prompts (as the router sees them, templated) the model's
    # response, its reference word for word: add-model scores those itself (issue 61), and the gate
    # credits that score, not the label
    from routeforge.registry.release import ModelRegistry as _Registry

    frozen = pq.read_table(_Registry(demo.tracking, demo.config.registry.model_name).evaluation_set()[0])
    assert {"reference", "reference_meta", "metric"} <= set(frozen.column_names)
    math_eval = [r for r in frozen.select(["text", "task", "reference"]).to_pylist() if r["task"] == "math"]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"text": r["prompt"], "score": 1.0 if r["task"] == "math" else 0.0,
                                          "output_tokens": 30}) + "\n" for r in rows)
                      + "".join(json.dumps({"text": r["text"], "score": 1.0, "output_tokens": 30,
                                            "response": r["reference"]}) + "\n" for r in math_eval))
    key = demo.config.storage_root / "keys" / "bundle-signing.key"
    store = Path(demo.config.registry.artifact_location)
    before = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    done = _routeforge("bundle", "add-model", demo.config.registry.model_name, "--model", "tiny-math",
                       "--labels", str(labels), "--experiment", demo.config.registry.experiment,
                       "--signing-key", str(key), "--public-key", f"{key}.pub", "--json", tracking_uri=demo.tracking)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # fitted on some, the rest (those on evaluation prompts, and a fifth by hash) held out for the gate
    assert out["registry_version"] == "2" and \
        out["added"]["labels"] + out["added"]["holdout"]["labels"] == len(rows) + len(math_eval)
    # issue 50: the new version shares the encoder and every component that did not change (by digest)
    added = sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) - before
    assert added <= 10e6, f"version 2 added {added / 1e6:.1f} MB to the registry"
    bundle = load_bundle(out["uri"], tmp_path / "bundle", demo.tracking, public_key=Path(f"{key}.pub"))
    assert bundle.models == [*demo.config.model_names, "tiny-math"]
    # the new model is routed to on math prompts (some: its estimate is lowered by one standard error
    # of its residuals, and 36 labels leave that wide) and never elsewhere
    texts, math = [r["prompt"] for r in rows], np.array([r["task"] == "math" for r in rows])
    prediction = bundle.router().predict(texts)
    routed = np.array(prediction.best_model())
    assert (routed[math] == "tiny-math").any() and not (routed[~math] == "tiny-math").any()
    assert prediction.quality[math, -1].mean() > prediction.quality[~math, -1].mean() + 0.1
    assert out["added"]["holdout"]["labels"] > 0 and all(out["checks"].values())  # the pipeline's checks, passed
    audit = out["added"]["label_audit"]
    assert audit["scored"] == len(math_eval) > 0 and audit["metrics"] == {"exact_match": len(math_eval)}
    assert audit["scored_mean"] == 1.0 and audit["label_mean"] == 1.0
    bad = tmp_path / "bad.csv"
    bad.write_text("text,score\nfine,0.5\nalso fine,7\n")
    refused = _routeforge("bundle", "add-model", demo.config.registry.model_name, "--model", "m", "--labels", str(bad),
                          "--experiment", "x", "--signing-key", str(key), tracking_uri=demo.tracking)
    assert refused.returncode == 1 and "bad.csv:3: field 'score' out of range" in refused.stderr
    unsigned = _routeforge("bundle", "add-model", demo.config.registry.model_name, "--model", "m", "--labels",
                           str(labels), "--experiment", "x", tracking_uri=demo.tracking)
    assert unsigned.returncode == 1 and "--signing-key (or ROUTEFORGE_SIGNING_KEY) is required" in unsigned.stderr

    # issue 53's attack: labels of 1.0 on the evaluation prompts the champion handles worst (and 0 on
    # the rest, to pass --min-labels). Before, they were fitted (and recalled), the router sent those
    # prompts to the new model, and the gate skipped them as unlabelled: router quality 0.153 vs 0.106
    from routeforge.registry.release import CHECKS_TAG, RULES_TAG, ModelRegistry, evaluate_bundle

    registry = ModelRegistry(demo.tracking, demo.config.registry.model_name)
    evaluation = pq.read_table(registry.evaluation_set()[0])
    champion = load_bundle(f"models:/{registry.name}@champion", tmp_path / "champion", demo.tracking,
                           public_key=Path(f"{key}.pub"))
    eval_texts = evaluation.column("text").to_pylist()
    chosen = champion.route(eval_texts).choice
    truth = [evaluation.column(f"quality/{m}")[i].as_py() for i, m in enumerate(chosen)]
    worst = [eval_texts[i] for i in np.argsort(truth)[:6]]
    others = [t for t in texts if t not in eval_texts][:20]
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text("".join(json.dumps({"text": t, "score": 1.0}) + "\n" for t in worst)
                       + "".join(json.dumps({"text": t, "score": 0.0}) + "\n" for t in others))
    attack = _routeforge("bundle", "add-model", registry.name, "--model", "crafted", "--labels", str(crafted),
                         "--experiment", demo.config.registry.experiment, "--signing-key", str(key),
                         "--public-key", f"{key}.pub", "--json", tracking_uri=demo.tracking)
    assert attack.returncode == 0, attack.stderr
    attacked = json.loads(attack.stdout)
    assert attacked["added"]["holdout"]["labels"] >= 6  # the six labels on evaluation prompts were not fitted
    version = attacked["registry_version"]
    tags = registry.version_tags(version)
    assert tags[CHECKS_TAG] == "true" and RULES_TAG in tags  # tagged as a pipeline version is
    attacked_bundle = load_bundle(attacked["uri"].replace("@challenger", f"/{version}"), tmp_path / "attacked",
                                  demo.tracking, public_key=Path(f"{key}.pub"))
    assert evaluate_bundle(attacked_bundle, evaluation)["router_quality"] <= \
        evaluate_bundle(champion, evaluation)["router_quality"] + 1e-9
    gated = _routeforge("bundle", "gate", registry.name, "--public-key", f"{key}.pub", tracking_uri=demo.tracking)
    assert gated.returncode in (0, 1) and "Traceback" not in gated.stderr, gated.stderr
    assert all(registry.gated(v) for v in ("2", version))  # no version stops the gate of the next
