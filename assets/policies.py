"""`routing_evaluation`: learned routing policies and every baseline in the simulator calibrated by
the profiled tiers; one table, plots and the exported policies, logged to MLflow."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import numpy as np
import pyarrow as pa
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.artifacts.common import strict_json
from routeforge.assets.metadata import clean, markdown_table, plot_entries, quarantine_metadata
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.assets.trainers import profiled_tiers, trainer
from routeforge.core.components import TrainedComponent
from routeforge.core.storage import Quarantine
from routeforge.training.embeddings import TrainingEncoder

if TYPE_CHECKING:
    from routeforge.training.policies.evaluation import RoutingEvaluation

TABLE_COLUMNS = ("policy", "workload", "load", "qos_mean", "e2e_mean_s", "e2e_p95_s", "slo_attainment",
                 "quality_mean", "cost_usd_per_request", "dropped", "rejected")


def simulated_fleet(config, tier_profiles: dict[str, dict[str, Any]], models: list[str]):
    """(fits, model index per instance, tier names, limits): `tier.instances` instances of each tier
    whose profile has a prefill/decode fit (measured batches, or published rows fitted to the step
    model); each instance's limits are its KV capacity from its hardware and model
    (`profiling.kv_capacity`, where the fleet file gives both) and its tier's `max_num_seqs`."""
    from routeforge.profiling.kv_capacity import KvCapacityError, tier_batched_tokens, tier_kv_capacity

    fits, index, names, limits = [], [], [], []
    for tier in config.tiers:
        summary = tier_profiles.get(tier.name) or {}
        fit = summary.get("fit") or summary.get("simulator_fit")
        if fit is not None:
            try:
                capacity = tier_kv_capacity(config, tier)
            except KvCapacityError as exc:
                raise dg.Failure(str(exc)) from None
            limit = {k: v for k, v in (("kv_capacity_tokens", capacity.tokens if capacity else None),
                                       ("max_running", tier.max_num_seqs),
                                       ("max_num_batched_tokens", tier_batched_tokens(config, tier))) if v is not None}
            fits += [fit] * tier.instances
            index += [models.index(tier.model)] * tier.instances
            names += [tier.name] * tier.instances
            limits += [limit] * tier.instances
    if not fits:
        raise dg.Failure("routing_evaluation needs at least one tier profile with a prefill/decode fit "
                         "(profile kind batch, splitwise or llm_inference_bench)")
    return fits, index, names, limits


def training_curves(evaluation: "RoutingEvaluation") -> dict[str, list[tuple[int, float]]]:
    """Each learned policy's episode return and loss, stepped by environment steps (MLflow histories)."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for name, trained in evaluation.trained.items():
        curve = trained.run.curve
        for key in ("return", "loss"):
            points = [(c["steps"], c[key]) for c in curve if c.get(key) is not None]
            if points:
                curves[f"{name}/train/{key}"] = points
    return curves


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
    from routeforge.artifacts.deciding.knn import KnnEstimator
    from routeforge.core.schemas import routing_models
    from routeforge.training.policies.evaluation import evaluate_routing, read_traffic
    from routeforge.training.policies.learned.base import LEARNED_POLICIES
    from routeforge.training.policies.packaging import export_heuristics, write_simulator
    from routeforge.training.policies.simulator.workloads import RequestPool, prompt_token_counts

    config = fleet.config
    settings = config.training.routing_evaluation
    models = routing_models(routing_table.schema)
    fits, instance_models, tiers, limits = simulated_fleet(config, tier_profiles, models)
    test = routing_table.filter(pa.compute.equal(routing_table.column("split"), "test"))
    texts = test.column("text").to_pylist()
    knn = KnnEstimator.load(store.pull(knn_estimator.folder))
    prediction = knn.predict(texts, TrainingEncoder(config.encoder, log=context.log.info))
    cols = [knn.models.index(m) for m in models]
    pool = RequestPool.from_routing_table(test, prompt_token_counts(texts, config.encoder), models,
                                          predicted_quality=prediction.quality[:, cols],
                                          predicted_tokens=prediction.output_tokens[:, cols])
    prices = np.array([[m.price.input_per_mtok, m.price.output_per_mtok] if m.price else [0.0, 0.0]
                       for m in (config.model(name) for name in models)])
    out_dir = store.report_dir("routing")
    context.log.info(f"{len(fits)} simulated instances, {len(pool)} test prompts")
    params = {"routing_evaluation": settings.model_dump(mode="json"), "instances": len(fits),
              "test_prompts": len(pool)}
    with mlflow.step_run(context, f"{config.name}-routing-evaluation", params) as run_id:
        quarantine = Quarantine("routing_evaluation")  # trace rows and log lines that cannot be replayed
        logs = config.routing_traffic_logs()
        traffic = read_traffic(logs, quarantine) if logs else None
        if traffic is not None:
            context.log.info(f"replaying {len(traffic)} requests of the fleet's traffic logs ({logs})")
        evaluation = evaluate_routing(pool, fits, instance_models, prices, settings, out_dir, log=context.log.info,
                                      quarantine=quarantine, traffic=traffic, limits=limits)
        qpath = store.write_quarantine(quarantine)
        exports = {}
        for name, result in evaluation.trained.items():
            spec = LEARNED_POLICIES.get(name).export(result, out_dir / "policies" / name, settings, settings.seed + 7)
            exports[name] = {"path": str(out_dir / "policies" / name), "onnx_max_abs_diff": spec["onnx_max_abs_diff"],
                             "onnx_action_agreement": spec["onnx_action_agreement"]}
        report, gate = evaluation.report() | {"policies": exports}, evaluation.gate
        heuristics = export_heuristics([r["policy"] for r in evaluation.rows], len(fits), out_dir / "policies",
                                       parameters=evaluation.heuristic_parameters())
        simulator = write_simulator(out_dir / "simulator", tiers=tiers, models=models, instance_models=instance_models,
                                    fits=fits, settings=settings, report=report, limits=limits)
        path = out_dir / "routing_evaluation.json"
        path.write_text(strict_json.dumps(report, indent=2, default=float))  # an unbounded percentile: null
        store.push(out_dir)
        metrics = {f"{r['policy']}/{r['workload']}/load_{r['load']:g}/{k}": r[k] for r in evaluation.rows
                   for k in ("goodput", "served_share", "e2e_mean_offered_s", "qos_mean", "e2e_mean_s", "e2e_p95_s",
                             "quality_mean", "slo_attainment")
                   if np.isfinite(r[k])}
        mlflow.log_report(context, run_id, metrics=metrics, files=[path, simulator, *map(Path, evaluation.plots)],
                          curves=training_curves(evaluation), dataset=routing_table,
                          params={"chosen.recommended": gate["recommended"], "chosen.policies": sorted(exports),
                                  **{f"chosen.recommended.{w}": g["recommended"]
                                     for w, g in evaluation.gate_by_workload.items()}})
    context.log.info(f"logged the routing evaluation to MLflow run {run_id}")
    table = [{k: (round(r[k], 4) if isinstance(r[k], float) else r[k]) for k in TABLE_COLUMNS} for r in evaluation.rows]

    def simulated(name: str) -> dict[str, float]:
        """The policy's mean over every workload × load × seed of the evaluation (the release gate's)."""
        rows = [r for r in evaluation.rows if r["policy"] == name]
        out = {}
        for key, label in (("qos_mean", "simulator_qos"), ("e2e_mean_s", "simulator_e2e_mean_s")):
            values = [r[key] for r in rows if np.isfinite(r[key])]
            if values:
                out[label] = float(np.mean(values))
        return out

    def policy_config(name: str, kind: str) -> dict:
        return {"policy": name, "policy_kind": kind, "recommended": name == gate["recommended"],
                "evaluation_mlflow_run_id": run_id}

    components = [ComponentSource(name=f"policy--{name}", kind="routing_policy", format="onnx+json",
                                  folder=Path(p["path"]),
                                  metrics={**{k: float(p[k]) for k in ("onnx_max_abs_diff", "onnx_action_agreement")},
                                           **simulated(name)},
                                  config=policy_config(name, "learned"))
                  for name, p in exports.items()]
    components += [ComponentSource(name=f"policy--{name}", kind="routing_policy", format="json", folder=folder,
                                   metrics=simulated(name), config=policy_config(name, "heuristic"))
                   for name, folder in heuristics.items()]
    components.append(ComponentSource(
        name="routing_simulator", kind="routing_simulator", format="json", folder=simulator.parent,
        config={"recommended_policy": f"policy--{gate['recommended']}", "recommendation": gate["reason"],
                "objective": gate["objective"], "evaluation_mlflow_run_id": run_id,
                # where traffic looks like one workload (the fleet's own, "traffic", when its logs were replayed)
                "recommended_by_workload": {w: f"policy--{g['recommended']}"
                                            for w, g in evaluation.gate_by_workload.items()}}))
    return dg.Output(
        TrainedComponent(components, details={"path": str(path), "mlflow_run_id": run_id, "rows": evaluation.rows,
                                              "policies": exports, "gate": gate}),
        metadata={"mlflow_run": mlflow.run_link(run_id), "report": dg.MetadataValue.path(str(path)),
                  "table": markdown_table(table),
                  "clipped_fits": dg.MetadataValue.json(evaluation.clipped_fits),
                  "teachers": dg.MetadataValue.json(report["pretrain"]),
                  "policies": dg.MetadataValue.json(exports),
                  "recommended_policy": gate["recommended"],
                  "recommendation": gate["reason"],
                  "recommended_by_workload": markdown_table(
                      [{"workload": w, "recommended": g["recommended"], "kind": g["kind"]}
                       for w, g in evaluation.gate_by_workload.items()]),
                  **quarantine_metadata(quarantine, qpath),
                  # headline numbers per policy and baseline, for the Plots tab's trends across runs
                  **clean({f"{name}/{label}": value for name in sorted({r["policy"] for r in evaluation.rows})
                           for label, value in simulated(name).items()}),
                  **plot_entries(evaluation.plots)},
    )


def routing_evaluation_enabled(config) -> bool:
    """The simulator needs profiled tiers; without any, `routing_evaluation` is not defined."""
    return config.training.routing_evaluation.enabled and bool(profiled_tiers(config))


@trainer("routing_evaluation", inputs=("routing_table", "knn_estimator", "tier_profiles"), rank=40,
         enabled=routing_evaluation_enabled, summary=lambda result: result.details)
def _policies_trainer(config) -> dg.AssetsDefinition:
    return routing_evaluation
