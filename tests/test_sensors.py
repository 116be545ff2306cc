"""Continuous retraining: a traffic-log file dropped in the watched folder launches `build_prompts`
and `profile_tiers`; declarative automation then rebuilds what they made stale, in dependency order,
and registers a new challenger trained on those prompts and latency records; a changed fleet file
launches its jobs; a sensor never launches the same change twice (issues 20 and 39)."""

import json
from collections import Counter

import dagster as dg
import pyarrow.parquet as pq
import pytest
from mlflow import MlflowClient
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.core.config import load_fleet
from routeforge.pipelines.definitions import build_assets, build_definitions
from routeforge.pipelines.run import run_pipeline

from tests.conftest import CONFIGS
from tests.traffic import synthetic_log


def _automate(path, defs: dg.Definitions, instance, cursor, ticks: int = 20) -> Counter:
    """What `retrain_what_is_stale` does, tick by tick: evaluate every asset's automation condition
    and materialize what it requests (one run per partition), until a tick requests nothing."""
    assets, resources = build_assets(path)
    done: Counter = Counter()  # (asset, partition) -> times materialized
    for _ in range(ticks):
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
        cursor = result.cursor
        by_partition: dict[str | None, list[dg.AssetKey]] = {}
        for node in defs.resolve_asset_graph().asset_nodes:
            for partition in result.get_requested_partitions(node.key):
                by_partition.setdefault(partition, []).append(node.key)
        if not by_partition:
            return done
        for partition, keys in by_partition.items():
            assert dg.materialize(assets, resources=resources, instance=instance, selection=keys,
                                  partition_key=partition).success
            done.update((k.to_user_string(), partition) for k in keys)
    raise AssertionError(f"automation still requesting after {ticks} ticks: {sorted(done, key=str)}")


def _fleet(config_copy, traffic):
    return config_copy(
        "demo", datasets=[
            {"kind": "jsonl", "name": "demo", "path": str(CONFIGS / "data" / "demo_prompts.jsonl"), "text_field": "prompt",
             "reference_field": "reference", "task_field": "task", "id_field": "id"},
            {"kind": "traffic_log", "name": "production", "path": str(traffic), "reference": "logged_response"}],
        tiers=[{"model": "tiny-llama", "hardware": "cpu", "profile": {"kind": "traffic_log", "logs": str(traffic)}}],
        training={"knn": {"k": 5}},
        automation={"watch": [{"name": "traffic", "uri": str(traffic), "jobs": ["build_prompts", "profile_tiers"]}]},
    )


@pytest.mark.e2e
def test_a_dropped_traffic_log_retrains_and_registers_a_challenger(config_copy, state_dir, tmp_path):
    traffic = tmp_path / "traffic"
    synthetic_log(traffic / "day1.jsonl", n=40, rate=5.0, prefix="[day 1] ")
    path = _fleet(config_copy, traffic)
    config = load_fleet(path)
    defs = build_definitions(path)
    sensor = defs.resolve_sensor_def("watch_traffic")
    with dg.instance_for_test() as instance:
        first = run_pipeline(path, instance)
        assert first["registry_version"] == "1"
        context = dg.build_sensor_context(instance=instance, cursor=None)
        assert isinstance(sensor(context), dg.SkipReason)  # switched on: existing files are not new
        cursor = context.cursor
        assert isinstance(sensor(dg.build_sensor_context(instance=instance, cursor=cursor)), dg.SkipReason)

        synthetic_log(traffic / "day2.jsonl.gz", n=40, rate=5.0, seed=1, start=1_790_086_400.0, prefix="[day 2] ")
        context = dg.build_sensor_context(instance=instance, cursor=cursor)
        requests = sensor(context)
        # one run per job, and per partition of a partitioned one (the one traffic-profiled tier)
        assert [(r.job_name, r.partition_key) for r in requests] == [("build_prompts", None),
                                                                     ("profile_tiers", "tiny-llama@cpu")]
        assert requests[0].tags["routeforge/files"] == "day2.jsonl.gz"
        # the same tick evaluated again finds nothing new: a file launches one run
        assert isinstance(sensor(dg.build_sensor_context(instance=instance, cursor=context.cursor)), dg.SkipReason)

        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert automation.total_requested == 0  # after a full run, nothing is stale
        for request in requests:
            assert defs.resolve_job_def(request.job_name).execute_in_process(
                instance=instance, partition_key=request.partition_key, tags=request.tags).success
        requested = _automate(path, defs, instance, automation.cursor)
        assert max(requested.values()) == 1, requested  # a change travels down once: nothing rebuilt twice
        # the new prompts reach every model's labels, the table, the tier's heads and every trainer
        assert {("responses", m) for m in config.model_names} <= set(requested)
        assert {("routing_table", None), ("router_bundle", None), ("release_gate", None)} <= set(requested)
        assert ("tier_profiles", "tiny-llama@cpu") in requested  # the new table reaches the tier's profile
        # the KNN embedded the new prompts only (its training and test prompts): the rest came from the cache
        table = pq.read_table(config.storage_root / "assets" / "routing_table.parquet").to_pylist()
        new = sum(1 for r in table if "[day 2] " in r["text"])
        knn = instance.fetch_materializations(dg.AssetKey("knn_estimator"), limit=1).records[0].asset_materialization
        assert knn.metadata["texts_embedded"].value == new > 0
        assert knn.metadata["texts_from_embedding_cache"].value > 0
        # and the fleet is up to date for the pipeline's own planner too: a run now trains nothing
        again = run_pipeline(path, instance)
        assert again["registry_version"] == "2" and not again["materialized"]["train_and_register"]

    prompts = pq.read_table(config.storage_root / "assets" / "prompts.parquet").column("text").to_pylist()
    assert sum("[day 2] " in t for t in prompts) == 40 and sum("[day 1] " in t for t in prompts) == 40
    profile = json.loads((config.storage_root / "profiles" / "tiny-llama@cpu" / "profile.json").read_text())
    assert profile["kind"] == "traffic_log" and profile["requests"] == 80  # both days' timed requests
    bundle = load_bundle("models:/routeforge-demo-router/2", tmp_path / "v2", config.registry.tracking_uri)
    heads = bundle.latency("tiny-llama@cpu").spec
    assert heads["kind"] == "sweep" and sum(heads["split"].values()) == 80
    version = MlflowClient(config.registry.tracking_uri).get_model_version("routeforge-demo-router", "2")
    assert version.tags["checks_passed"] == "true" and version.tags["gate.decision"] in ("promoted", "held")


def test_a_changed_fleet_file_launches_its_jobs_once(config_copy, tmp_path):
    path = config_copy("demo", automation={"on_fleet_change": ["train_and_register"]})
    sensor = build_definitions(path).resolve_sensor_def("fleet_file_changed")
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, cursor=None)
        assert isinstance(sensor(context), dg.SkipReason)
        path.write_text(path.read_text() + "# edited by hand\n")
        changed = dg.build_sensor_context(instance=instance, cursor=context.cursor)
        requests = sensor(changed)
        assert [r.job_name for r in requests] == ["train_and_register"]
        assert isinstance(sensor(dg.build_sensor_context(instance=instance, cursor=changed.cursor)), dg.SkipReason)


def test_a_watched_location_naming_an_unknown_job_is_refused(config_copy, tmp_path):
    path = config_copy("demo", automation={"watch": [{"name": "w", "uri": str(tmp_path), "jobs": ["no_such_job"]}]})
    with pytest.raises(ValueError, match=r"automation.watch\[w\].jobs: unknown job\(s\) \['no_such_job'\]"):
        build_definitions(path)
    # `config validate` refuses it too (it used to pass, and the run stopped at once), with a hint
    typo = config_copy("demo", automation={"watch": [{"name": "w", "uri": str(tmp_path), "jobs": ["build_promts"]}]})
    with pytest.raises(ValueError, match=r"\['build_promts'\].*did you mean 'build_prompts'"):
        load_fleet(typo)


def test_the_fleets_job_names_are_the_code_locations():
    """`FleetConfig.job_names` (what validate checks sensors against) is what the definitions define,
    with and without profiled tiers; the production example validates."""
    for name in ("demo", "gpu_fleet", "fleet.example"):
        config = load_fleet(CONFIGS / f"{name}.yaml")
        jobs = {j.name for j in build_definitions(CONFIGS / f"{name}.yaml").resolve_all_job_defs()} - {"__ASSET_JOB"}
        assert jobs == set(config.job_names()), name
    assert "profile_tiers" not in load_fleet(CONFIGS / "fleet.example.yaml").job_names()


@pytest.mark.e2e
def test_the_routing_evaluation_replays_the_fleets_traffic_logs(config_copy, state_dir, tmp_path):
    """A fleet with production logs: `routing_evaluation` replays them as the `traffic` workload
    (their arrivals and token counts) and recommends a policy for that traffic, carried by the bundle."""
    traffic = tmp_path / "traffic"
    synthetic_log(traffic / "day1.jsonl", n=60, rate=5.0)
    base = load_fleet(_fleet(config_copy, traffic))
    path = config_copy(  # the demo's batch-profiled tiers: the simulator needs their prefill/decode fits
        "demo", datasets=[d.model_dump(mode="json") for d in base.datasets],
        training={"knn": {"k": 5}, "routing_evaluation": {
            "enabled": True, "loads": [0.5], "workloads": ["poisson"], "requests": 20, "seeds": 2,
            "policies": ["round_robin", "join_shortest_queue", "least_work_left"]}})
    config = load_fleet(path)
    assert config.routing_traffic_logs() == str(traffic)
    with dg.instance_for_test() as instance:
        out = run_pipeline(path, instance)
    report = json.loads((config.storage_root / "reports" / "routing" / "routing_evaluation.json").read_text())
    assert {r["workload"] for r in report["rows"]} == {"poisson", "traffic"} and report["traffic_requests"] == 60
    assert set(report["gate_by_workload"]) == {"poisson", "traffic"}
    bundle = load_bundle(out["uri"], tmp_path / "bundle", config.registry.tracking_uri)
    simulator = bundle.manifest.component("routing_simulator").config
    assert simulator["recommended_by_workload"]["traffic"] == f"policy--{report['gate_by_workload']['traffic']['recommended']}"
