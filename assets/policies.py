"""`routing_evaluation`: learned routing policies and every baseline in the simulator calibrated by
the profiled tiers; one table, plots and the exported policies, logged to MLflow."""

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
from routeforge.artifacts.deciding.knn import KnnEstimator
from routeforge.assets.metadata import clean, markdown_table, plot_entries, quarantine_metadata
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.assets.trainers import profiled_tiers, trainer
from routeforge.core.components import TrainedComponent
from routeforge.training.embeddings import TrainingEncoder


@dg.asset(
    io_manager_key="json_io",
    group_name="evaluation",
    kinds={"pytorch", "onnx", "mlflow"},
    ins={"tier_profiles": dg.AssetIn("tier_profiles")},
    description="Learned routing policies (001's DDQN, 000's SAC over a HAN and its baseline RL, each started "
                "from the best heuristic) and every baseline in the simulated fleet over loads × workloads × "
                "seeds; the gate's recommended policy; exported ONNX policies and heuristic specs; table and "
                "plots logged to MLflow.",
)
def routing_evaluation(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                       mlflow: MlflowRegistry, routing_table: pa.Table,
                       knn_estimator: TrainedComponent, tier_profiles: dict[str, dict[str, Any]]):
    from routeforge.training.policies.routing_run import (  # lazy: gymnasium
        NoSimulatedFleet,
        routing_inputs,
        run_routing_evaluation,
    )

    config = fleet.config
    settings = config.training.routing_evaluation
    knn = KnnEstimator.load(store.pull(knn_estimator.folder))
    try:
        inputs = routing_inputs(config, tier_profiles, routing_table, knn, TrainingEncoder(config.encoder,
                                                                                         log=context.log.info))
    except NoSimulatedFleet as exc:
        raise dg.Failure(str(exc)) from None
    out_dir = store.report_dir("routing")
    context.log.info(f"{len(inputs.fits)} simulated instances, {len(inputs.pool)} test prompts")
    with mlflow.step_run(context, f"{config.name}-routing-evaluation", inputs.params(settings)) as run_id:
        run = run_routing_evaluation(inputs, settings, out_dir, config.routing_traffic_logs(), context.log.info)
        qpath = store.write_quarantine(run.quarantine)
        store.push(out_dir)
        mlflow.log_report(context, run_id, metrics=run.metrics(),
                          files=[run.path, run.simulator, *map(Path, run.evaluation.plots)],
                          curves=run.training_curves(), dataset=routing_table, params=run.chosen())
    context.log.info(f"logged the routing evaluation to MLflow run {run_id}")
    evaluation, gate = run.evaluation, run.gate
    return dg.Output(
        TrainedComponent(run.components(run_id), details={"path": str(run.path), "mlflow_run_id": run_id,
                                                          "rows": evaluation.rows, "policies": run.exports,
                                                          "gate": gate}),
        metadata={"mlflow_run": mlflow.run_link(run_id), "report": dg.MetadataValue.path(str(run.path)),
                  "table": markdown_table(run.table()),
                  "clipped_fits": dg.MetadataValue.json(evaluation.clipped_fits),
                  "teachers": dg.MetadataValue.json(run.report["pretrain"]),
                  "policies": dg.MetadataValue.json(run.exports),
                  "recommended_policy": gate["recommended"],
                  "recommendation": gate["reason"],
                  "recommended_by_workload": markdown_table(
                      [{"workload": w, "recommended": g["recommended"], "kind": g["kind"]}
                       for w, g in evaluation.gate_by_workload.items()]),
                  **quarantine_metadata(run.quarantine, qpath),
                  # headline numbers per policy and baseline, for the Plots tab's trends across runs
                  **clean({f"{name}/{label}": value for name in sorted({r["policy"] for r in evaluation.rows})
                           for label, value in run.simulated(name).items()}),
                  **plot_entries(evaluation.plots)},
    )


def routing_evaluation_enabled(config) -> bool:
    """The simulator needs profiled tiers; without any, `routing_evaluation` is not defined."""
    return config.training.routing_evaluation.enabled and bool(profiled_tiers(config))


@trainer("routing_evaluation", inputs=("routing_table", "knn_estimator", "tier_profiles"), rank=40,
         enabled=routing_evaluation_enabled, summary=lambda result: result.details)
def _policies_trainer(config) -> dg.AssetsDefinition:
    return routing_evaluation
