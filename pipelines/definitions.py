"""The routeforge Dagster code location: one `Definitions` for the fleet in $ROUTEFORGE_CONFIG.

Loading is cheap on purpose (the fleet YAML only: no model, encoder or MLflow import), so the UI,
`dagster definitions validate` and every run start fast. Model and tier partitions come from the fleet file.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from routeforge.assets.bundle import build_bundle_asset
from routeforge.assets.profiles import build_tier_profiles_asset
from routeforge.assets.prompts import prompts
from routeforge.assets.quality import build_quality_asset
from routeforge.assets.release import release_gate
from routeforge.assets.reports import build_report_asset
from routeforge.assets.resources import ComponentStore, FleetResource, MlflowRegistry
from routeforge.assets.responses import build_responses_asset
from routeforge.assets.routing import routing_table
from routeforge.assets.trainers import TRAIN_JOB, enabled_trainers, profiled_tiers, tier_partitions
from routeforge.fleet import load_fleet
from routeforge.pipelines.console import progress_logger
from routeforge.pipelines.executors import accelerator_tags, executor_for
from routeforge.pipelines.io_managers import JsonIOManager, ParquetIOManager
from routeforge.pipelines.sensors import build_sensors, stale_assets_sensor
from routeforge.pipelines.versions import with_versions

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"


def build_assets(config_path: str | os.PathLike[str]) -> tuple[list[dg.AssetsDefinition], dict[str, object]]:
    """Assets and resources for one fleet file (tests build several side by side)."""
    config = load_fleet(config_path)
    models = dg.StaticPartitionsDefinition(config.model_names)
    trainers = enabled_trainers(config)
    assets = [
        prompts,
        build_responses_asset(models, accelerator_tags(config)),
        build_quality_asset(models),
        routing_table,
        *(t.build(config) for t in trainers),
        build_bundle_asset(tuple(t.name for t in trainers)),
        build_report_asset(predictors=text_predictors(config)),
    ]
    if config.release.enabled:
        assets.append(release_gate)
    if profiled_tiers(config):
        assets.append(build_tier_profiles_asset(tier_partitions(config), accelerator_tags(config)))
    if config.owners:
        assets = [a.map_asset_specs(lambda spec: spec.replace_attributes(owners=config.owners_of(spec.group_name)))
                  for a in assets]
    # code versions (what makes an output stale) and the declarative automation that rebuilds what is
    assets = with_versions(assets, config, config.automation.cron)
    base = config.storage.path("assets")
    signing_key, create_key = config.signing_key_path()
    resources = {
        "fleet": FleetResource(config_path=str(Path(config_path).resolve())),
        "store": ComponentStore(root=str(config.storage_root), storage_options=dict(config.storage_options)),
        "mlflow": MlflowRegistry(tracking_uri=config.registry.tracking_uri, experiment=config.registry.experiment,
                                 model_name=config.registry.model_name, alias=config.registry.alias,
                                 artifact_location=config.registry.artifact_location,
                                 signing_key=str(signing_key), create_signing_key=create_key,
                                 ui_url=config.registry.ui_url),
        "parquet_io": ParquetIOManager(base_path=base),
        "json_io": JsonIOManager(base_path=base),
    }
    return assets, resources


def text_predictors(config) -> tuple[str, ...]:
    """The enabled fine-tuned text predictors, in the order they are trained."""
    return tuple(t.name for t in enabled_trainers(config, family="text_predictor"))


def training_assets(config) -> list[str]:
    """What `train_and_register` rebuilds: the routing table, the trainers of that job, the report,
    the bundle and the gate (Dagster orders them by their dependencies)."""
    gate = ["release_gate"] if config.release.enabled else []
    return ["routing_table", *(t.name for t in enabled_trainers(config, job=TRAIN_JOB)), "predictor_report",
            "router_bundle", *gate]


JOB_DESCRIPTIONS = {
    "build_prompts": "Read every configured prompt source into the prompt set.",
    "generate_and_score": "Generate and score one model partition (backfill it to cover the fleet).",
    "build_routing_table": "Join every model partition's responses and scores into the routing table.",
    "train_and_register": "Rebuild the routing table, retrain predictors and register a new bundle version.",
    "profile_tiers": "Measure one tier partition and retrain its latency heads (backfill to cover the fleet).",
}


def job_selections(config) -> dict[str, tuple[str, ...]]:
    """Each job of the fleet's code location and the assets it materializes: what the jobs are built
    from and what `pipelines.stale.plan` plans over (one list, `FleetConfig.job_names` held to it by a test)."""
    jobs = {"build_prompts": ("prompts",), "generate_and_score": ("responses", "quality"),
            "build_routing_table": ("routing_table",), "train_and_register": tuple(training_assets(config))}
    if profiled_tiers(config):
        jobs["profile_tiers"] = ("tier_profiles", "latency_heads")
    return jobs


def build_definitions(config_path: str | os.PathLike[str]) -> dg.Definitions:
    config = load_fleet(config_path)
    assets, resources = build_assets(config_path)
    partitions = {"generate_and_score": dg.StaticPartitionsDefinition(config.model_names),
                  "profile_tiers": tier_partitions(config) if profiled_tiers(config) else None}
    jobs = [dg.define_asset_job(name, selection=dg.AssetSelection.assets(*names), partitions_def=partitions.get(name),
                                description=JOB_DESCRIPTIONS[name])
            for name, names in job_selections(config).items()]
    # `console` is Dagster's default; `progress` feeds `routeforge.pipelines.run`'s stage lines (used only
    # when a run's config names it, so runs from the UI log exactly as before)
    return dg.Definitions(assets=assets, resources=resources, jobs=jobs, executor=executor_for(config),
                          loggers={"console": dg.colored_console_logger,
                                                       "progress": progress_logger},
                          sensors=[*build_sensors(config, str(Path(config_path).resolve()), {j.name: j for j in jobs}),
                                   stale_assets_sensor(config)])


@dg.definitions
def defs() -> dg.Definitions:
    """The code location's definitions, for the fleet $ROUTEFORGE_CONFIG names: built when Dagster loads
    the location (the UI, the daemon, `dagster definitions validate`), never on import, so a process that
    imports this module for one fleet does not build the demo's first."""
    return build_definitions(os.environ.get("ROUTEFORGE_CONFIG", str(DEFAULT_CONFIG)))


def job_from_environment(name: str) -> dg.JobDefinition:
    """One job of the fleet $ROUTEFORGE_CONFIG names now: what `dg.build_reconstructable_job` rebuilds in
    each step process of a multiprocess or Ray run (pipelines/executors.py)."""
    return defs().resolve_job_def(name)

