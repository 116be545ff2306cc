"""`predictor_report`: the learned predictors' evaluation as one JSON + plots, logged to MLflow."""

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
from routeforge.assets.metadata import clean, markdown_table, plot_entries
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.core.components import TrainedComponent
from routeforge.training.predictors.predictor_report import build_report


def flat_metrics(report: dict[str, Any], predictors: dict[str, TrainedComponent]) -> dict[str, float]:
    """MLflow metrics: routers' AIQ and lead, batch-64 speed, and each predictor's held-out metrics."""
    out = {}
    for name, r in report["routers"].items():
        out |= {f"routing/{name}/{k}": v for k, v in r.items() if isinstance(v, float)}
    for name, t in report["batch64_cpu"].items():
        out[f"batch64/{name}/prompts_per_s"] = t["prompts_per_s"]
    for task, r in report["leave_one_task_out"].items():
        if isinstance(r, dict):
            out[f"loto/{task}/router_minus_best_single"] = r["router_quality"] - r["best_single_quality"]
    for result in predictors.values():
        out |= {k: v for k, v in result.metrics.items() if k.count("/") == 1}
    return out


def build_report_asset(predictors: tuple[str, ...] = ()) -> dg.AssetsDefinition:
    """`predictor_report` over the KNN estimator and the enabled text predictors."""

    @dg.asset(
        io_manager_key="json_io",
        group_name="evaluation",
        kinds={"mlflow"},
        ins={name: dg.AssetIn(name) for name in predictors},
        description="Routing value (AIQ against the single-model hull), leave-one-task-out KNN, batch-of-64 "
                    "CPU inference and the held-out accuracy of every predictor; logged to MLflow.",
    )
    def predictor_report(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                         mlflow: MlflowRegistry, routing_table: pa.Table,
                         knn_estimator: TrainedComponent, **upstream: TrainedComponent):

        config = fleet.config
        out_dir = store.report_dir("predictors")
        store.pull_trained(knn_estimator, *upstream.values())
        params = {"knn": config.training.knn.model_dump(mode="json"), "predictors": sorted(upstream),
                  "lambda_sweep": config.training.lambda_sweep}
        with mlflow.step_run(context, f"{config.name}-predictor-report", params) as run_id:
            report = build_report(routing_table, knn_estimator.folder, knn_estimator.details["evaluation"],
                                  config.encoder, config.training.knn,
                                  {name: r.folder for name, r in upstream.items()},
                                  config.training.lambda_sweep, out_dir, config.name, log=context.log.info,
                                  cache_dir=store.cache_dir("embeddings"))
            report["predictors"] = {name: r.components[0].metrics for name, r in upstream.items()}
            plots = [Path(p) for p in report["plots"]] + [p for r in upstream.values() for p in r.plots]
            path = out_dir / "predictor_report.json"
            path.write_text(json.dumps(report, indent=2, default=float))
            store.push(out_dir)
            mlflow.log_report(context, run_id, metrics=flat_metrics(report, upstream), files=[path, *plots],
                              dataset=routing_table)
        context.log.info(f"logged the report to MLflow run {run_id}")
        routers = [{"router": name, **clean(r)} for name, r in report["routers"].items()]
        timing = [{"predictor": name, "prompts_per_s": round(t["prompts_per_s"], 1)}
                  for name, t in report["batch64_cpu"].items()]
        loto = [{"held_out_task": t, **clean({k: v for k, v in r.items() if isinstance(v, float)})}
                for t, r in report["leave_one_task_out"].items() if isinstance(r, dict)]
        yield dg.Output(
            {"path": str(path), "mlflow_run_id": run_id, "routers": report["routers"],
             "batch64_cpu": report["batch64_cpu"], "leave_one_task_out": report["leave_one_task_out"]},
            metadata={"mlflow_run": mlflow.run_link(run_id), "report": dg.MetadataValue.path(str(path)),
                      "routers": markdown_table(routers), "batch64_cpu": markdown_table(timing),
                      "leave_one_task_out": markdown_table(loto),
                      **clean({k: v for k, v in flat_metrics(report, upstream).items()
                               if k.startswith(("routing/", "loto/"))}),
                      **plot_entries(report["plots"])},
        )

    return predictor_report
