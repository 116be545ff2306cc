"""`router_bundle`: assemble, log and register the bundle in MLflow, then verify it as a client would."""


import hashlib
import tempfile
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from artifacts.loader import BundleVerificationError, load_bundle
from artifacts.manifest import Fleet, ModelEntry, TierEntry
from artifacts.publish import publish_bundle
from artifacts.writer import ComponentSource
from assets.resources import FleetResource
from core.config import FleetConfig


def table_hash(table: pa.Table) -> str:
    """sha256 of the table's Arrow IPC stream: identical content, identical hash."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def fleet_entry(config: FleetConfig) -> Fleet:
    return Fleet(
        name=config.name,
        models=[
            ModelEntry(name=m.name, engine=m.engine,
                       input_per_mtok=m.price.input_per_mtok if m.price else None,
                       output_per_mtok=m.price.output_per_mtok if m.price else None)
            for m in config.models
        ],
        tiers=[TierEntry(name=t.name, model=t.model, hardware=t.hardware) for t in config.tiers],
    )


def build_bundle_asset(with_latency: bool, predictors: tuple[str, ...] = (),
                       with_policies: bool = False, with_router: bool = False) -> dg.AssetsDefinition:
    """`router_bundle`; with `with_latency`, every tier's `latency_heads` partition joins it, each
    text predictor named in `predictors` (`length_predictor`, `score_predictor`, `task_classifier`),
    and with `with_policies` the routing policies `routing_evaluation` trained and exported."""
    ins = {"latency_heads": dg.AssetIn("latency_heads")} if with_latency else {}
    ins |= {name: dg.AssetIn(name) for name in predictors}
    ins |= {"routing_evaluation": dg.AssetIn("routing_evaluation")} if with_policies else {}
    ins |= {"router_selection": dg.AssetIn("router_selection")} if with_router else {}

    @dg.asset(
        io_manager_key="json_io",
        group_name="registry",
        ins=ins,
        check_specs=[dg.AssetCheckSpec("registered_bundle_verifies", asset="router_bundle")],
        description="Versioned router bundle, logged to MLflow and registered under the configured alias.",
    )
    def router_bundle(
        context: dg.AssetExecutionContext,
        fleet: FleetResource,
        knn_estimator: dict[str, Any],
        routing_table: pa.Table,
        prompts: pa.Table,
        **extra: dict[str, Any],
    ):
        yield from _bundle(context, fleet, knn_estimator, routing_table, prompts, extra.get("latency_heads", {}),
                           {name: extra[name] for name in predictors}, extra.get("routing_evaluation"),
                           extra.get("router_selection"))

    return router_bundle


def predictor_components(predictors: dict[str, dict[str, Any]]):
    """Bundle components, MLflow metrics and plots of the text predictors' asset outputs."""
    components, metrics, plots = [], {}, []
    for name, result in predictors.items():
        config = result["config"] | ({"scheme": result["spec"]["scheme"]} if result["spec"].get("scheme") else {})
        components.append(ComponentSource(name=name, kind=name, format="onnx+tokenizer+json",
                                          folder=Path(result["path"]), metrics=result["metrics"], config=config))
        metrics |= {f"{name}/{k}": v for k, v in result["metrics"].items()}
        plots += [Path(p) for p in result["plots"]]
    return components, metrics, plots


def latency_components(heads: dict[str, dict[str, Any]]) -> tuple[list[ComponentSource], dict[str, float], list[Path]]:
    components, metrics, plots = [], {}, []
    for tier, result in sorted(heads.items()):
        evaluation = {k: float(v) for k, v in result["evaluation"].items() if isinstance(v, (int, float))}
        components.append(ComponentSource(
            name=Path(result["folder"]).name, kind="latency_heads", format="xgboost-json+json",
            folder=Path(result["folder"]), metrics=evaluation,
            config={"tier": tier, "profile_kind": result["kind"], "features": result["features"]},
        ))
        # MLflow metric names allow no '@': latency/<model>:<hardware>/<metric>
        metrics |= {f"latency/{tier.replace('@', ':')}/{k}": v for k, v in evaluation.items()}
        plots += [Path(p) for p in result["plots"]]
    return components, metrics, plots


def policy_components(evaluation: dict[str, Any] | None) -> list[ComponentSource]:
    """One component per exported routing policy, with its ONNX parity and evaluation rows' QoS."""
    if not evaluation:
        return []
    return [ComponentSource(name=f"policy--{name}", kind="routing_policy", format="onnx+json",
                            folder=Path(p["path"]), metrics={k: float(p[k]) for k in ("onnx_max_abs_diff",
                                                                                      "onnx_action_agreement")},
                            config={"policy": name, "evaluation_mlflow_run_id": evaluation["mlflow_run_id"]})
            for name, p in evaluation["policies"].items()]


def router_components(selection: dict[str, Any] | None) -> tuple[list[ComponentSource], dict[str, float], list[Path]]:
    """The router chosen by `router_selection` (component `router`, `bundle.router()`)."""
    if not selection:
        return [], {}, []
    metrics = {k: float(v) for k, v in selection["metrics"].items()}
    component = ComponentSource(name="router", kind="router", format="safetensors+json", folder=Path(selection["path"]),
                                metrics=metrics, config={"chosen": selection["chosen"],
                                                         "selection_mlflow_run_id": selection["mlflow_run_id"]})
    return [component], {f"router/{k}": v for k, v in metrics.items()}, [Path(p) for p in selection["plots"]]


def _bundle(context, fleet, knn_estimator, routing_table, prompts, latency_heads, text_predictors, evaluation=None,
            selection=None):
    config = fleet.config
    reg = config.registry
    knn = ComponentSource(
        name="knn_estimator", kind="knn_estimator", format="faiss+parquet+json",
        folder=Path(knn_estimator["path"]), metrics=knn_estimator["metrics"], config=knn_estimator["config"],
    )
    latency, latency_metrics, latency_plots = latency_components(latency_heads)
    predictors, predictor_metrics, predictor_plots = predictor_components(text_predictors)
    router, router_metrics, router_plots = router_components(selection)
    registered, manifest = publish_bundle(
        name=reg.model_name,
        fleet=fleet_entry(config),
        components=[knn, *router, *latency, *predictors, *policy_components(evaluation)],
        staging_dir=fleet.root / "bundle",
        tracking_uri=reg.tracking_uri,
        experiment=reg.experiment,
        artifact_location=reg.artifact_location,
        alias=reg.alias,
        input_hashes={"prompts": table_hash(prompts), "routing_table": table_hash(routing_table)},
        dagster_run_id=context.run_id,
        params={"fleet": config.name, "models": ",".join(config.model_names), "encoder": config.encoder,
                "knn_k": str(config.training.knn.k), "scoring_metric": config.scoring.metric},
        metrics=knn_estimator["metrics"] | latency_metrics | predictor_metrics | router_metrics,
        plots=[Path(knn_estimator["plot"]), *latency_plots, *predictor_plots, *router_plots],
    )
    context.log.info(f"registered {registered.uri} (version {registered.version}, bundle {manifest.version})")
    yield dg.Output(
        {"uri": registered.uri, "model_name": registered.name, "registry_version": registered.version,
         "bundle_version": manifest.version, "mlflow_run_id": registered.run_id,
         "tracking_uri": reg.tracking_uri},
        metadata={
            "uri": registered.uri,
            "registry_version": registered.version,
            "bundle_version": manifest.version,
            "mlflow_run_id": registered.run_id,
            "tracking_uri": reg.tracking_uri,
            "files": sum(len(c.files) for c in manifest.components),
            "latency_tiers": len(latency),
            "text_predictors": ", ".join(text_predictors) or "none",
        },
    )
    with tempfile.TemporaryDirectory(prefix="routeforge-verify-") as tmp:
        try:
            loaded = load_bundle(f"models:/{registered.name}/{registered.version}", Path(tmp), reg.tracking_uri)
            passed, detail = loaded.manifest.version == manifest.version, "downloaded and verified"
            if passed and latency:
                worst = max(loaded.latency(t).golden_max_abs_diff() for t in loaded.tiers_with_latency)
                passed, detail = worst == 0.0, f"downloaded and verified; latency heads max |diff| {worst:g}"
        except BundleVerificationError as exc:
            passed, detail = False, str(exc)
    yield dg.AssetCheckResult(check_name="registered_bundle_verifies", passed=passed,
                              metadata={"detail": detail})
