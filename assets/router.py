"""`router_selection`: the router chosen among the estimator family by cross-validation inside the
training split, evaluated once on the test split; component folder, report and plots, own MLflow run."""


import dagster as dg
import numpy as np
import pyarrow as pa
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.artifacts.deciding.router import Router
from routeforge.assets.metadata import clean, markdown_table, plot_entries, quarantine_metadata
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.assets.trainers import trainer
from routeforge.core.components import TrainedComponent
from routeforge.core.storage import Quarantine
from routeforge.training.embeddings import TrainingEncoder, embedding_counts
from routeforge.training.parallel import parallel_tasks, pool_for
from routeforge.training.predictors.outcomes import replay_outcomes
from routeforge.training.predictors.router_training import train_router


@dg.asset(
    io_manager_key="json_io",
    group_name="training",
    kinds={"safetensors", "mlflow"},
    check_specs=[dg.AssetCheckSpec("router_not_below_best_single_cv", asset="router_selection",
                                   description="The chosen router's cross-validated score is at least the "
                                               "best single model's on the training split.")],
    description="Router estimator chosen by k-fold cross-validation on the training split (KNN, logistic / MLP "
                "heads, matrix factorisation, ensembles) with a per-cluster guard; test evaluated once.",
)
def router_selection(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                     mlflow: MlflowRegistry, routing_table: pa.Table):

    config = fleet.config
    params = {"router": config.training.router.model_dump(mode="json"),
              "encoder": str(config.encoder),
              "truncation_side": config.training.knn.truncation_side, "seed": config.training.seed}
    with mlflow.step_run(context, f"{config.name}-router-selection", params) as run_id, \
            embedding_counts() as embedded, parallel_tasks(pool_for(config.execution)):
        result = train_router(routing_table, config.encoder, config.training.router,
                              store.component_dir("router"), store.report_dir("router"),
                              truncation_side=config.training.knn.truncation_side, seed=config.training.seed,
                              title=config.name, cache_dir=store.cache_dir("embeddings"), log=context.log.info)
        logs = [str(d.path) for d in config.datasets if getattr(d, "kind", None) == "traffic_log"]
        quarantine = Quarantine("router_selection")  # outcome lines that cannot be read
        if logs:  # production outcomes: the new router starts from what the last one learned
            router = Router.load(result.folder)
            online = replay_outcomes(router, logs, TrainingEncoder(config.encoder, store.cache_dir("embeddings")),
                                     quarantine, log=context.log.info, settings=config.training.outcomes)
            router.save(result.folder)
            result.report["online"] = online
            result.metrics["online/outcomes"] = float(online["counted"])
            result.metrics["online/contradicting_cells"] = float(len(online["contradicting"]))
        qpath = store.write_quarantine(quarantine)
        store.push(result.folder, result.report_path.parent)
        mlflow.log_report(context, run_id, metrics=result.metrics, files=[result.report_path, *result.plots],
                          dataset=routing_table, params={"chosen": result.report["chosen"]})
    report = result.report
    candidates = [clean({"estimator": r["estimator"], "cv_score": r["cv_score"], "cv_brier": r["cv_brier"]})
                  for r in report["candidates"]]
    guard = [{"cluster": row["name"], "prompts": row["prompts"],
              "cv_gain": round(row["cv_gain"], 4) if row["cv_gain"] is not None else "—",
              "p_gain_positive": round(row["p_positive"], 3) if row["p_positive"] is not None else "—",
              "routed_by": row["model"] or "estimator"} for row in report["guard"]]
    component = ComponentSource(name="router", kind="router", format="safetensors+json", folder=result.folder,
                                metrics=result.metrics, config={"chosen": report["chosen"],
                                                                "selection_mlflow_run_id": run_id})
    yield dg.Output(
        TrainedComponent([component], metrics={f"router/{k}": v for k, v in result.metrics.items()},
                         plots=result.plots, details={"chosen": report["chosen"], "mlflow_run_id": run_id,
                                                      "report": str(result.report_path)}),
        metadata={"chosen": ", ".join(report["chosen"]), "mlflow_run": mlflow.run_link(run_id),
                  **{k: round(v, 6) for k, v in result.metrics.items() if np.isfinite(v)},
                  "candidates": markdown_table(candidates), "guard": markdown_table(guard),
                  "texts_embedded": embedded["embedded"], "texts_from_embedding_cache": embedded["from_cache"],
                  **quarantine_metadata(quarantine, qpath),
                  **({"outcomes_contradicting_training": markdown_table(report["online"]["contradicting"])}
                     if report.get("online", {}).get("contradicting") else {}),
                  **plot_entries(result.plots)},
    )
    cv = report["cv"]
    yield dg.AssetCheckResult(check_name="router_not_below_best_single_cv", passed=cv["router"] >= cv["best_single"],
                              metadata={"cv_router": cv["router"], "cv_best_single": cv["best_single"]})


@trainer("router_selection", inputs=("routing_table",), rank=10, summary_key="router",
         enabled=lambda config: config.training.router.enabled,
         summary=lambda result: result.components[0].metrics)
def _router_trainer(config) -> dg.AssetsDefinition:
    return router_selection
