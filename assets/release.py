"""`release_gate`: after registration, promote the new version to `champion` only if it earns it.

The rules and the evaluation are `registry.release`'s (the CLI's `bundle promote` applies the same);
this asset supplies what only the pipeline knows: whether every asset check of this run passed, the
fleet file's rules, and, for the first registration, the evaluation set to freeze (the routing
table's test split, every model's true quality per prompt).
"""

import json
import math
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from routeforge.artifacts.common import temporary
from routeforge.assets.metadata import markdown_table
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.core.schemas import routing_column, routing_models
from routeforge.registry.lease import release_lock
from routeforge.registry.release import CHECKS_TAG, RULES_TAG, ModelRegistry, ReleaseRules, decision_summary, gate
from routeforge.registry.store import registry_lock


def evaluation_table(routing_table: pa.Table, prompts: pa.Table | None = None,
                     metric_for: Callable[[str], str] | None = None) -> pa.Table:
    """The test split as an evaluation set: `text`, `task`, `quality/<model>` per model; with the
    prompt set and the fleet's metric per task also each prompt's `reference`, `reference_meta` and
    `metric`, which let `bundle add-model` score a new model's responses itself."""
    test = routing_table.filter(pc.equal(routing_table.column("split"), "test"))
    columns = {"text": test.column("text"), "task": test.column("task")}
    for model in routing_models(routing_table.schema):
        columns[f"quality/{model}"] = test.column(routing_column("quality", model))
    if prompts is not None and metric_for is not None:
        refs = {r["prompt_id"]: r for r in prompts.select(["prompt_id", "reference", "reference_meta"]).to_pylist()}
        ids = test.column("prompt_id").to_pylist()
        columns["reference"] = pa.array([refs.get(i, {}).get("reference") for i in ids], pa.string())
        columns["reference_meta"] = pa.array([refs.get(i, {}).get("reference_meta") for i in ids], pa.string())
        columns["metric"] = pa.array([metric_for(t) for t in test.column("task").to_pylist()], pa.string())
    return pa.table(columns)


def write_evaluation_candidate(store: ComponentStore, routing_table: pa.Table, prompts: pa.Table | None = None,
                               metric_for: Callable[[str], str] | None = None) -> Path:
    """This run's evaluation set, which the first registration freezes (later ones use the pinned one)."""
    path = store.report_dir("release") / "evaluation_set.parquet"
    pq.write_table(evaluation_table(routing_table, prompts, metric_for), path)
    store.push(path.parent)
    return path


def failed_checks(context: dg.AssetExecutionContext) -> list[str]:
    """The asset checks of this run that did not pass (blocking ones stop the run before this)."""
    records = context.instance.get_records_for_run(
        context.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
    failed = []
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        if not evaluation.passed:
            failed.append(f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}")
    return failed


@dg.asset(
    io_manager_key="json_io",
    group_name="registry",
    kinds={"mlflow"},
    description="Release gate: the new version becomes `champion` only when every asset check passed and no "
                "metric regresses beyond the fleet's tolerance against the champion on the frozen evaluation "
                "set (first version: when it clears the floors). Decision and reasons on the model version.",
)
def release_gate(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                 mlflow: MlflowRegistry, router_bundle: dict, routing_table: pa.Table, prompts: pa.Table):
    registry = ModelRegistry(mlflow.tracking_uri, router_bundle["model_name"])
    version = router_bundle["registry_version"]
    if router_bundle.get("unchanged"):
        with registry_lock(mlflow.tracking_uri):
            decided = registry.gated(version)
        if decided:
            context.log.info(f"nothing new: version {version} already holds this content")
            yield dg.Output({"promoted": False, "unchanged": True, "version": version,
                             "reasons": ["nothing new was registered"]},
                            metadata={"decision": "nothing new registered", "version": version})
            return
        # a run stopped between registering this version and gating it: gate it now
        context.log.warning(f"version {version} holds this content but was never gated: gating it now")
    config = fleet.config.release
    rules = ReleaseRules(tolerance=config.tolerance, floors=config.floors, default_tolerance=config.default_tolerance,
                         optional=tuple(config.optional),
                         replay=config.replay.model_dump() if config.replay is not None else None,
                         trust_added_labels=config.trust_added_labels)
    failed = failed_checks(context)
    candidate = write_evaluation_candidate(store, routing_table, prompts, fleet.config.scoring.metric_for)
    # one gate at a time per registered model, on a SQLite store or a server shared by several machines
    with release_lock(mlflow.tracking_uri, registry.name, log=context.log.info), \
            temporary.scoped("gate") as tmp:
        registry.client.set_model_version_tag(registry.name, version, CHECKS_TAG, "false" if failed else "true")
        registry.client.set_model_version_tag(registry.name, version, RULES_TAG, rules.to_json())
        evaluation = registry.evaluation_set(candidate, run_id=router_bundle["mlflow_run_id"])
        decision = gate(registry, version, mlflow.public_key_path(), Path(tmp), rules, evaluation=evaluation,
                        log=context.log.info)
        sha = evaluation[1]
    if failed:
        decision.reasons.append(f"failed checks: {', '.join(failed)}")
    verdict = "promoted to champion" if decision.promote else "kept as challenger"
    context.log.info(f"version {version}: {verdict}; {'; '.join(decision.reasons)}")
    summary = decision_summary(decision) | {"version": version, "evaluation_set_sha256": sha}
    yield dg.Output(summary, metadata={
        "decision": verdict, "version": version, "champion_before": str(decision.champion_version),
        "reasons": dg.MetadataValue.md("\n".join(f"- {r}" for r in decision.reasons)),
        "comparison": markdown_table([{"metric": k, "challenger": round(v, 6),
                                       "champion": round((decision.champion or {}).get(k, math.nan), 6)}
                                      for k, v in sorted(decision.challenger.items())]),
        "evaluation_set_sha256": sha,
        # numbers, one entry each, so the UI charts them across materializations
        **{f"{side}/{k}": v for side, k, v in decision.scores()},
        "rules": dg.MetadataValue.json(json.loads(rules.to_json())),
    })
