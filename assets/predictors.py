"""`knn_estimator`: MiniLM + FAISS quality/length/cost estimator, evaluated on the test split."""


import json
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.assets.metadata import inline_plot, markdown_table, plot_entries
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.assets.trainers import profiled_tiers, trainer
from routeforge.core.components import TrainedComponent
from routeforge.training.embeddings import embedding_counts
from routeforge.training.encoder_export import export_sentence_encoder
from routeforge.training.parallel import parallel_tasks, pool_for
from routeforge.training.predictors.bucket_predictors import train_length_predictor, train_score_predictor
from routeforge.training.predictors.knn import build_knn
from routeforge.training.predictors.knn_eval import evaluate_knn
from routeforge.training.predictors.packaging import parity_metrics, parity_passes
from routeforge.training.predictors.quality_cost_eval import plot_quality_cost
from routeforge.training.predictors.task_classifier import train_task_classifier


@dg.asset(
    io_manager_key="json_io",
    group_name="training",
    kinds={"faiss", "onnx", "mlflow"},
    check_specs=[
        dg.AssetCheckSpec("predictions_well_formed", asset="knn_estimator", blocking=True,
                          description="Predicted quality is finite and inside [0, 1] for every test prompt and model."),
        dg.AssetCheckSpec("router_not_below_random", asset="knn_estimator",
                          description="Warns when routing test prompts by the KNN's predictions scores below "
                                      "choosing a model at random."),
    ],
    description="KNN estimator component folder and its held-out quality–cost evaluation.",
)
def knn_estimator(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                  mlflow: MlflowRegistry, routing_table: pa.Table):
    config = fleet.config
    folder = store.component_dir("knn_estimator")
    params = {"knn": config.training.knn.model_dump(mode="json"), "encoder": str(config.encoder)}
    with mlflow.step_run(context, f"{config.name}-knn-estimator", params) as run_id, embedding_counts() as embedded, \
            parallel_tasks(pool_for(config.execution)):
        knn = build_knn(routing_table, config.encoder, config.training.knn, folder,
                        cache_dir=store.cache_dir("embeddings"), log=context.log.info)
        context.log.info(f"indexed {knn.index.ntotal} training prompts")
        evaluation, prediction = evaluate_knn(knn, routing_table, config.encoder, config.training.lambda_sweep,
                                              cache_dir=store.cache_dir("embeddings"), log=context.log.info)
        reports = store.report_dir("knn")
        plot = plot_quality_cost(evaluation, reports / "knn_quality_cost.png",
                                 f"{config.name}: KNN router, k={knn.k}")
        (reports / "knn_evaluation.json").write_text(json.dumps(evaluation, indent=2))
        store.push(folder, reports)
        metrics = {
            "test_router_quality": evaluation["router_max_quality"]["quality"],
            "test_router_cost": evaluation["router_max_quality"]["cost"],
            "test_best_single_quality": evaluation["single_models"][evaluation["best_single_model"]]["quality"],
            "test_oracle_quality": evaluation["oracle"]["quality"],
            "test_random_quality": evaluation["random"]["quality"],
            "test_gap_to_best_single": evaluation["router_gap_to_best_single"],
            "n_indexed": float(knn.index.ntotal),
        }
        sweep_rows = [{"lambda": s["lambda"], "quality": s["quality"], "cost": s["cost"]}
                      for s in evaluation["lambda_sweep"]]
        # the encoder the router and KNN embed prompts with, as ONNX for the runtime (the KNN is in every bundle)
        encoder = export_sentence_encoder(config.encoder, store.component_dir("sentence_encoder"))
        store.push(encoder.folder)
        mlflow.log_report(context, run_id, metrics=metrics | encoder.metrics, params={"chosen.k": knn.k},
                          files=[reports / "knn_evaluation.json", Path(plot)], dataset=routing_table)
    component = ComponentSource(name="knn_estimator", kind="knn_estimator", format="faiss+safetensors+json",
                                folder=folder, metrics=metrics, config=config.training.knn.model_dump())
    context.log.info(f"sentence encoder: ONNX vs PyTorch min cosine {encoder.metrics['parity/min_cosine']:.7f}")
    yield dg.Output(
        TrainedComponent([component, encoder], metrics=metrics, plots=[Path(plot)], details={"evaluation": evaluation}),
        metadata={
            **{k: round(v, 6) for k, v in metrics.items()},
            "best_single_model": evaluation["best_single_model"],
            "lambda_sweep": markdown_table(sweep_rows),
            "quality_cost_plot": inline_plot(plot),
            "mlflow_run": mlflow.run_link(run_id),
            # a re-run embeds only the prompts the cache lacks
            "texts_embedded": embedded["embedded"], "texts_from_embedding_cache": embedded["from_cache"],
        },
    )
    finite = all(np.isfinite(getattr(prediction, m)).all() for m in ("quality", "output_tokens", "cost"))
    tolerance = 1e-9  # weighted means of labels in [0, 1] can overshoot by rounding only
    in_range = bool(((prediction.quality >= -tolerance) & (prediction.quality <= 1 + tolerance)).all())
    yield dg.AssetCheckResult(check_name="predictions_well_formed", passed=finite and in_range,
                              metadata={"finite": finite, "quality_in_unit_interval": in_range})
    yield dg.AssetCheckResult(
        check_name="router_not_below_random",
        passed=metrics["test_router_quality"] >= metrics["test_random_quality"],
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"router": metrics["test_router_quality"], "random": metrics["test_random_quality"]},
    )


def _decode_speed(context, settings, latency_heads: dict[str, TrainedComponent]) -> float:
    """Completion-time buckets' decode speed: the profiled tiers' median 1 / nominal TPOT."""
    speeds = [1.0 / h.details["rwt"]["decode_s"] for h in latency_heads.values()
              if h.details.get("rwt", {}).get("decode_s")]
    speed = float(np.median(speeds)) if speeds else settings.decode_tok_s
    context.log.info(f"completion-time buckets at {speed:.1f} decode tokens/s "
                     f"({'profiled tiers' if speeds else 'configured'})")
    return speed


def _train(name: str, context, config, routing_table: pa.Table, folder,
           latency_heads: dict[str, TrainedComponent] | None) -> dict:

    settings = getattr(config.training, name)
    seed, log = config.training.seed, context.log.info
    if name == "length_predictor":
        speed = _decode_speed(context, settings, latency_heads or {})
        return train_length_predictor(routing_table, settings, speed, folder, seed=seed, log=log)
    if name == "score_predictor":
        return train_score_predictor(routing_table, settings, folder, seed=seed, log=log)
    return train_task_classifier(routing_table, settings, folder, seed=seed, log=log)


TEXT_PREDICTORS = {
    "length_predictor": "Output-length bucket predictor shared by every model (001 buckets, 000 model tokens)",
    "score_predictor": "Quality-score bucket predictor shared by every model (000: 10 equal-width buckets)",
    "task_classifier": "Task classifier (001 appendix A.6) that supplies the task hint when it is unknown",
}


# in every bundle; it also ships the ONNX sentence encoder the router and KNN embed prompts with
@trainer("knn_estimator", inputs=("routing_table",), rank=0, summary_key="knn")
def _knn_trainer(config) -> dg.AssetsDefinition:
    return knn_estimator


def build_text_predictor_asset(name: str, with_latency: bool = False) -> dg.AssetsDefinition:
    """`length_predictor`, `score_predictor` or `task_classifier`: a fine-tuned encoder exported as
    safetensors + ONNX, evaluated on the test split; with `with_latency` the length predictor's
    completion-time buckets use the profiled decode speed."""
    ins = {"latency_heads": dg.AssetIn("latency_heads")} if with_latency and name == "length_predictor" else {}

    @dg.asset(
        name=name,
        io_manager_key="json_io",
        group_name="training",
        kinds={"pytorch", "onnx", "mlflow"},
        ins=ins,
        check_specs=[dg.AssetCheckSpec("onnx_matches_pytorch", asset=name, blocking=True,
                                       description="The packaged predictor matches the PyTorch model on up to 256 "
                                                   "training prompts: float32 logits within 1e-3; int8 the same "
                                                   "top-1 on ≥ 99.5% of prompts that are not near ties.")],
        description=f"{TEXT_PREDICTORS[name]}: safetensors + ONNX component, evaluated on the test split.",
    )
    def text_predictor(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                       mlflow: MlflowRegistry, routing_table: pa.Table,
                       **latency_heads: dict[str, TrainedComponent]):
        config = fleet.config
        folder = store.component_dir(name)
        settings = getattr(config.training, name).model_dump(mode="json")
        params = {name: settings, "seed": config.training.seed}
        with mlflow.step_run(context, f"{config.name}-{name}", params) as run_id:
            result = _train(name, context, config, routing_table, folder, latency_heads.get("latency_heads"))
            metrics, spec = result["metrics"], result["spec"]
            curve = [(point["step"], point["loss"]) for point in result["learning_curve"]]
            mlflow.log_report(context, run_id, metrics=metrics, files=[Path(p) for p in result["plots"]],
                              curves={"train/loss": curve}, dataset=routing_table,
                              params={"chosen.precision": spec["precision"],
                                      **({"chosen.scheme": spec["scheme"]} if spec.get("scheme") else {})})
        component = ComponentSource(name=name, kind=name, format="onnx+tokenizer+json", folder=folder, metrics=metrics,
                                    config=settings | ({"scheme": spec["scheme"]} if spec.get("scheme") else {}))
        shared = spec["embeddings"].get("shared")
        # the frozen word-embedding table this predictor shares with the others of its backbone
        # (the bundle writer keeps one copy of a component several trainers name)
        components = [component] + ([ComponentSource(
            name=shared, kind="text_embeddings", format="safetensors", folder=folder.parent / shared,
            config={"backbone": spec.get("backbone"), "precision": spec["embeddings"]["precision"]})] if shared else [])
        store.push(*(c.folder for c in components), *{Path(p).parent for p in result["plots"]})
        yield dg.Output(
            TrainedComponent(components, metrics={f"{name}/{k}": v for k, v in metrics.items()},
                             plots=[Path(p) for p in result["plots"]],
                             details={"spec": spec, "learning_curve": result["learning_curve"]}),
            metadata={**{k: round(v, 6) for k, v in metrics.items()}, "labels": dg.MetadataValue.json(spec["labels"]),
                      **({"bucket_scheme": dg.MetadataValue.json(spec["scheme"])} if spec.get("scheme") else {}),
                      "mlflow_run": mlflow.run_link(run_id), **plot_entries(result["plots"], prefix="")},
        )
        yield dg.AssetCheckResult(check_name="onnx_matches_pytorch", passed=parity_passes(spec),
                                  metadata={"precision": spec["precision"], **parity_metrics(spec)})

    return text_predictor


def _register_text_predictors() -> None:
    """One trainer per text predictor, in TEXT_PREDICTORS' order (ranks 30, 31, 32)."""
    for rank, name in enumerate(TEXT_PREDICTORS, start=30):
        trainer(name, inputs=("routing_table", "latency_heads"), rank=rank, family="text_predictor",
                enabled=lambda config, n=name: getattr(config.training, n).enabled)(
            lambda config, n=name: build_text_predictor_asset(n, with_latency=bool(profiled_tiers(config))))


_register_text_predictors()
