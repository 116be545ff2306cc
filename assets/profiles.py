"""`tier_profiles` and `latency_heads`, partitioned by tier (model × hardware × parallelism).

Measuring and training are separate assets so that heads can be retrained (new hyperparameters,
new routing table) without re-running an hour of GPU sweeps.
"""

from pathlib import Path

import dagster as dg
import pyarrow as pa
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.artifacts.deciding.latency import LatencyModel
from routeforge.assets.metadata import content_version, inline_plot, markdown_table, plot_entries
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.assets.trainers import PROFILE_JOB, profiled_tiers, tier_partitions, trainer
from routeforge.core.components import TrainedComponent
from routeforge.profiling.fit_quality import fit_warnings
from routeforge.profiling.profile_results import (
    FittedPrior,
    MeasuredBatches,
    ProfileResult,
    SweepRecords,
    TrafficRecords,
)
from routeforge.profiling.tier_profile import build_latency_component, kept_profile, measure_tier, safe_name


def _tier(fleet: FleetResource, key: str):
    return next(t for t in fleet.config.tiers if t.name == key)


class TierProfileConfig(dg.Config):
    remeasure: bool = False  # measure again even when the kept profile's settings still match


def build_tier_profiles_asset(partitions: dg.PartitionsDefinition, op_tags: dict | None = None
                              ) -> dg.AssetsDefinition:
    """`op_tags`: what the step asks of a Ray or Kubernetes executor (an accelerator)."""

    @dg.asset(
        partitions_def=partitions,
        op_tags=op_tags or None,
        io_manager_key="json_io",
        group_name="latency",
        kinds={"parquet"},
        pool="generation",  # timings need the accelerator to themselves: never beside generation
        description="Latency measurements of one tier: static batches with fitted gradients, a QPS sweep with "
                    "the state at dispatch of every request, or imported published measurements. Kept across "
                    "runs while the tier, its model and the profiling settings are unchanged (run config "
                    "`remeasure: true` measures again).",
    )
    def tier_profiles(context: dg.AssetExecutionContext, config: TierProfileConfig, fleet: FleetResource,
                      store: ComponentStore, routing_table: pa.Table):
        tier = _tier(fleet, context.partition_key)
        folder = store.pull(store.profile_dir(safe_name(tier.name)), missing_ok=True)
        kept = None if config.remeasure else kept_profile(fleet.config, tier, folder)
        if kept is not None:
            context.log.info(f"{tier.name}: kept the profile measured earlier (settings unchanged; "
                             "remeasure: true to measure again)")
        profile = kept or measure_tier(fleet.config, tier, routing_table, folder, log=context.log.info)
        metadata: dict = {"kind": profile.kind, "folder": dg.MetadataValue.path(str(folder)),
                          "kept_from_earlier_run": kept is not None, **_measured_metadata(profile.result)}
        fitted = profile.result.fit if isinstance(profile.result, MeasuredBatches) else (
            profile.result.prior if isinstance(profile.result, FittedPrior) else {})
        warnings = fit_warnings(tier.name, fitted)
        for line in warnings:
            context.log.warning(line)
        metadata["fit_warnings"] = dg.MetadataValue.json(warnings)
        store.push(folder)
        summary = profile.to_json() | {"folder": str(folder)}
        return dg.Output(summary, metadata=metadata, data_version=content_version(summary))

    return tier_profiles


def _measured_metadata(measured: ProfileResult) -> dict:
    """What the Dagster UI shows of a profile, by what it measured."""
    if isinstance(measured, MeasuredBatches):
        fit = measured.fit
        return {"measurements": measured.measurements, "batch_fit_plot": inline_plot(measured.plot),
                **{k: round(fit[k], 9) for k in ("prefill_grad_s_per_token", "prefill_r2", "decode_w_s",
                                                 "decode_h_s_per_token", "decode_r2", "ttft_p_s", "decode_d_s",
                                                 "epsilon", "theta_tokens_per_s")}}
    if isinstance(measured, TrafficRecords):
        return {"requests": measured.requests, "logged_requests": measured.logged_requests,
                "quarantined_lines": measured.quarantined,
                "quarantine_reasons": dg.MetadataValue.json(measured.quarantine_reasons)}
    if isinstance(measured, SweepRecords):
        return {"requests": measured.requests, "saturation_rps": round(measured.saturation_rps, 3),
                "server_metrics_endpoint": measured.server_metrics_endpoint,
                # the client's dead-reckoned state against the server's own counters (vLLM)
                **{f"state_agreement/{k}": v for k, v in (measured.state_agreement or {}).items()
                   if isinstance(v, (int, float))},
                "phases": markdown_table([{k: (round(v, 2) if isinstance(v, float) else v) for k, v in p.items()}
                                          for p in measured.phases])}
    return {k: round(v, 6) for k, v in measured.prior.items() if isinstance(v, float)}


def build_latency_heads_asset(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=partitions,
        io_manager_key="json_io",
        group_name="latency",
        kinds={"xgboost", "mlflow"},
        check_specs=[dg.AssetCheckSpec("loader_reproduces_heads", asset="latency_heads", blocking=True,
                                       description="The runtime loader (artifacts.deciding.latency) reads the "
                                                   "saved heads back and predicts exactly what the trainer "
                                                   "predicted.")],
        description="Per-tier TPOT/TTFT (and E2E) heads: the analytic line, line + monotone residual trees, or "
                    "trees, whichever cross-validates best per target; the static prior, SLO intervals and "
                    "QLM's RWT parameters: the tier's bundle component.",
    )
    def latency_heads(context: dg.AssetExecutionContext, fleet: FleetResource, store: ComponentStore,
                      mlflow: MlflowRegistry, tier_profiles: dict, routing_table: pa.Table):

        tier = _tier(fleet, context.partition_key)
        folder = store.component_dir(f"latency--{safe_name(tier.name)}")
        params = {"tier": tier.model_dump(mode="json"),
                  "held_out_fraction": fleet.config.profiling.held_out_fraction,
                  "residual_quantiles": fleet.config.profiling.residual_quantiles}
        with mlflow.step_run(context, f"{fleet.config.name}-latency-{safe_name(tier.name)}", params) as run_id:
            profile = store.pull(tier_profiles["folder"])
            result = build_latency_component(fleet.config, tier, profile, routing_table, folder)
            store.push(folder, profile)  # the held-out plots are written beside the profile
            numbers = {k: float(v) for k, v in result["evaluation"].items() if isinstance(v, (int, float))}
            mlflow.log_report(context, run_id, metrics=numbers, files=[Path(p) for p in result["plots"]],
                              tags={"routeforge.tier": tier.name},
                              params={"chosen.profile_kind": result["kind"], "chosen.features": result["features"],
                                      "chosen.heads": {t: v["kind"] for t, v in result["served"].items()}})
        evaluation = {k: round(v, 6) for k, v in result["evaluation"].items() if isinstance(v, float)}
        context.log.info(f"{tier.name}: " + ", ".join(f"{k} {v:g}" for k, v in evaluation.items()))
        component = ComponentSource(name=folder.name, kind="latency_heads", format="xgboost-json+json", folder=folder,
                                    metrics=numbers, config={"tier": tier.name, "profile_kind": result["kind"],
                                                             "features": result["features"],
                                                             "served": {t: v["kind"]
                                                                        for t, v in result["served"].items()}})
        # MLflow metric names allow no '@': latency/<model>:<hardware>/<metric>
        trained = TrainedComponent([component], {f"latency/{tier.name.replace('@', ':')}/{k}": v
                                                 for k, v in numbers.items()},
                                   [Path(p) for p in result["plots"]],
                                   {k: v for k, v in result.items() if k not in ("plots", "folder")})
        yield dg.Output(trained, metadata={
            "kind": result["kind"], **evaluation, "mlflow_run": mlflow.run_link(run_id),
            "rwt": dg.MetadataValue.json(result["rwt"]),
            "served_heads": dg.MetadataValue.json(result["served"]),
            **plot_entries(result["plots"]),
        })
        diff = LatencyModel.load(folder).golden_max_abs_diff()
        yield dg.AssetCheckResult(check_name="loader_reproduces_heads", passed=diff == 0.0,
                                  metadata={"max_abs_diff_s": diff})

    return latency_heads


@trainer("latency_heads", inputs=("tier_profiles", "routing_table"), rank=20, job=PROFILE_JOB,
         enabled=lambda config: bool(profiled_tiers(config)))
def _latency_trainer(config) -> dg.AssetsDefinition:
    return build_latency_heads_asset(tier_partitions(config))
