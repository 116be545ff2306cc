"""`knn_estimator`: MiniLM + FAISS quality/length/cost estimator, evaluated on the test split."""


import json

import dagster as dg
import numpy as np
import pyarrow as pa

from assets.metadata import markdown_table
from pipelines.resources import FleetResource
from training.knn import build_knn
from training.routing_eval import evaluate_router, plot_quality_cost


@dg.asset(
    io_manager_key="json_io",
    group_name="training",
    check_specs=[
        dg.AssetCheckSpec("predictions_well_formed", asset="knn_estimator", blocking=True),
        dg.AssetCheckSpec("router_not_below_random", asset="knn_estimator"),
    ],
    description="KNN estimator component folder and its held-out quality–cost evaluation.",
)
def knn_estimator(context: dg.AssetExecutionContext, fleet: FleetResource, routing_table: pa.Table):
    config = fleet.config
    folder = fleet.root / "components" / "knn_estimator"
    knn = build_knn(routing_table, config.encoder, config.training.knn, folder)
    context.log.info(f"indexed {knn.index.ntotal} training prompts")
    test = routing_table.filter(pa.compute.equal(routing_table.column("split"), "test"))
    prediction = knn.predict(test.column("text").to_pylist(), config.encoder)
    evaluation = evaluate_router(test, prediction, knn.prior, config.training.lambda_sweep)
    plot = plot_quality_cost(evaluation, fleet.root / "reports" / "knn_quality_cost.png",
                             f"{config.name}: KNN router, k={knn.k}")
    (fleet.root / "reports" / "knn_evaluation.json").write_text(json.dumps(evaluation, indent=2))
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
    yield dg.Output(
        {"path": str(folder), "metrics": metrics, "plot": str(plot), "evaluation": evaluation,
         "config": config.training.knn.model_dump()},
        metadata={
            **{k: round(v, 6) for k, v in metrics.items()},
            "best_single_model": evaluation["best_single_model"],
            "lambda_sweep": markdown_table(sweep_rows),
            "quality_cost_plot": dg.MetadataValue.path(str(plot)),
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


def build_length_predictor_asset(with_latency: bool) -> dg.AssetsDefinition:
    """`length_predictor`; with `with_latency`, completion-time buckets use the profiled decode speed."""
    ins = {"latency_heads": dg.AssetIn("latency_heads")} if with_latency else {}

    @dg.asset(
        io_manager_key="json_io",
        group_name="training",
        ins=ins,
        check_specs=[dg.AssetCheckSpec("onnx_matches_pytorch", asset="length_predictor", blocking=True)],
        description="Output-length bucket predictor shared by every model (001 buckets, 000 model tokens): "
                    "safetensors + ONNX component, evaluated on the test split.",
    )
    def length_predictor(context: dg.AssetExecutionContext, fleet: FleetResource, routing_table: pa.Table,
                         **latency: dict):
        from training.length_predictor import train_length_predictor

        config = fleet.config
        settings = config.training.length_predictor
        speeds = [1.0 / h["rwt"]["decode_s"] for h in latency.get("latency_heads", {}).values()
                  if h.get("rwt", {}).get("decode_s")]
        decode_tok_s = float(np.median(speeds)) if speeds else settings.decode_tok_s
        context.log.info(f"completion-time buckets at {decode_tok_s:.1f} decode tokens/s "
                         f"({'profiled tiers' if speeds else 'configured'})")
        folder = fleet.root / "components" / "length_predictor"
        result = train_length_predictor(routing_table, settings, decode_tok_s, folder, seed=config.training.seed,
                                        log=context.log.info)
        metrics = result["metrics"]
        yield dg.Output(
            {"path": str(folder), "metrics": metrics, "plot": result["plot"], "config": settings.model_dump(),
             "scheme": result["spec"]["scheme"]},
            metadata={**{k: round(v, 6) for k, v in metrics.items()}, "decode_tok_s": decode_tok_s,
                      "bucket_edges_tokens": dg.MetadataValue.json(result["spec"]["scheme"]["edges"]),
                      **({"confusion": dg.MetadataValue.path(result["plot"])} if result["plot"] else {})},
        )
        diff = metrics["onnx_max_abs_diff"]
        yield dg.AssetCheckResult(check_name="onnx_matches_pytorch", passed=diff < 1e-3,
                                  metadata={"max_abs_logit_diff": diff})

    return length_predictor
