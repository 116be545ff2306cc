"""The code location's executor, chosen by the fleet's `execution` settings, and how `routeforge.pipelines.run`
starts a job under it.

`in_process` runs with `execute_in_process` (no step processes: the laptop default). The others run
through `dg.execute_job` on a reconstructable job (`routeforge.pipelines.definitions:job_from_environment`,
rebuilt in each step process from $ROUTEFORGE_CONFIG), so each step is its own process
(`multiprocess`) or its own Ray job on a Ray cluster (`ray`, dagster-ray's executor). Steps then
share nothing but the Dagster instance and the fleet's `storage_root`: IO-manager outputs and pushed
component folders (core.storage_root).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import dagster as dg
from routeforge.core.config import FleetConfig

DEFINITIONS_MODULE = "routeforge.pipelines.definitions"
# the code location's name in workspace.yaml (the UI, the daemon, deploy/): runs launched here carry
# it, as runs the UI launches do, so they appear on their job's page and in the Jobs list
CODE_LOCATION = "routeforge"
REPOSITORY = "__repository__"  # what Dagster names the one repository of a `Definitions` object
# the run tag a job's page and the Jobs list filter runs by (`<repository>@<location>`; the leading dot
# hides it from the run's tag list). Dagster writes it for runs it launches through a code location (UI,
# schedules, sensors), never for `execute_in_process` / `execute_job`, and exports no name for it: a tag
# the UI reads, written as data, as the provenance tags of pipelines/stale.py are read
REPOSITORY_TAG = ".dagster/repository"


def code_location_tags() -> dict[str, str]:
    """The tag that lists a run launched here on its job's page, as the UI's own launches are.

    What it does not give: a code-location *origin*, which only Dagster's internals set for a run not
    launched through a code location. The Overview timeline places runs by origin, so it shows the
    runs the UI, schedules and the automation sensor launch, not the driver's (docs/capabilities.md)."""
    return {REPOSITORY_TAG: f"{REPOSITORY}@{CODE_LOCATION}"}


def executor_for(config: FleetConfig) -> dg.ExecutorDefinition:
    settings = config.execution
    if settings.executor == "in_process":
        return dg.in_process_executor
    if settings.executor == "multiprocess":
        return dg.multiprocess_executor.configured(
            {"max_concurrent": settings.max_concurrent} if settings.max_concurrent else {})
    try:
        from dagster_ray import ray_executor
    except ImportError as exc:
        raise RuntimeError("execution.executor: ray needs the `deploy` extra (dagster-ray, ray[default]): "
                           "pip install 'routeforge[deploy]'") from exc
    address = settings.ray_address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise RuntimeError("execution.ray_address: unset, and so is $RAY_ADDRESS (the Ray job server, "
                           "http://<head>:8265)")
    ray: dict[str, Any] = {"address": address, "num_cpus": settings.step_cpus, "env_vars": _step_env(settings.step_env),
                           "inherit_job_submission_client_from_ray_run_launcher": False}
    # Ray bounds concurrency itself: a step waits for `step_cpus` (and GPUs) to be free
    return ray_executor.configured({"ray": ray})


def _step_env(names: list[str]) -> list[str]:
    """The step environment; PATH leads with this interpreter's folder, where the step's entry point
    (`dagster api execute_step`) is installed, also when the launcher runs an unactivated venv."""
    env = [name for name in names if name != "PATH"]
    if "PATH" in names:
        env.append(f"PATH={Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return env


def accelerator_tags(config: FleetConfig) -> dict[str, Any]:
    """Op tags of the `generation`-pool steps: the GPUs they ask of Ray and of Kubernetes
    (`dagster-k8s/config`, read by the k8s executor and run launcher of deploy/helm)."""
    gpus = config.execution.accelerator_gpus
    if not gpus:
        return {}
    tags: dict[str, Any] = {"dagster-ray/config": {"num_gpus": gpus, "num_cpus": config.execution.step_cpus}}
    if float(gpus).is_integer():
        limits = {"nvidia.com/gpu": str(int(gpus))}
        tags["dagster-k8s/config"] = {"container_config": {"resources": {"limits": limits}}}
    return tags


def execute(defs: dg.Definitions, config: FleetConfig, config_path: str | Path, job: str,
            instance: dg.DagsterInstance, partition: str | None, tags: dict[str, str], run_config: dict,
            asset_selection: list[dg.AssetKey] | None = None):
    """Run one job of the code location (only `asset_selection` of its assets, when given) under the
    fleet's executor; returns Dagster's result."""
    if config.execution.executor == "in_process":
        return defs.resolve_job_def(job).execute_in_process(partition_key=partition, instance=instance, tags=tags,
                                                            run_config=run_config, asset_selection=asset_selection)
    if instance.is_ephemeral:
        raise RuntimeError(f"execution.executor: {config.execution.executor} runs each step in its own process, "
                           "which needs a persistent Dagster instance: set $DAGSTER_HOME")
    reconstructable = dg.build_reconstructable_job(DEFINITIONS_MODULE, "job_from_environment", (job,),
                                                   reconstructor_working_directory=os.getcwd())
    run_tags = {**tags, **({"dagster/partition": partition} if partition else {})}
    # step processes rebuild the definitions from the same fleet file; set for this run only, so a
    # caller's later runs (or tests) never see another run's fleet
    with mock.patch.dict(os.environ, ROUTEFORGE_CONFIG=str(Path(config_path).resolve())), \
            dg.execute_job(reconstructable, instance=instance, tags=run_tags,
                           run_config=run_config, asset_selection=asset_selection) as result:
        if not result.success:
            failures = [e.message for e in result.all_events if e.is_failure]
            raise RuntimeError(f"{job}: run {result.run_id} failed: {failures[-1] if failures else 'see Dagster'}")
        return _Detached(result)


class _Detached:
    """What `routeforge.pipelines.run` reads of a result (its check evaluations), kept after
    `execute_job`'s context closes; outputs are read back through the IO managers, as a later run would."""

    def __init__(self, result):
        self._checks = result.get_asset_check_evaluations()

    def get_asset_check_evaluations(self):
        return self._checks
