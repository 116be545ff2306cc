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

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import dagster as dg
from routeforge.core.config import FleetConfig

DEFINITIONS_MODULE = "routeforge.pipelines.definitions"
# the code location's name in workspace.yaml (the UI, the daemon, deploy/): runs launched here carry
# it, as runs the UI launches do, so they appear on their job's page, the Jobs list and the timeline
CODE_LOCATION = "routeforge"
REPOSITORY = "__repository__"  # what Dagster names the one repository of a `Definitions` object


def code_location_tags() -> dict[str, str]:
    """The run tag the UI filters a job's runs by (`<repository>@<location>`): Dagster writes it for
    runs launched through a code location, never for `execute_in_process` / `execute_job`."""
    from dagster._core.storage.tags import REPOSITORY_LABEL_TAG

    return {REPOSITORY_LABEL_TAG: f"{REPOSITORY}@{CODE_LOCATION}"}


def attach_to_code_location(instance: dg.DagsterInstance, run_id: str) -> None:
    """Record the code location as the origin of a run launched here, as `dagster run
    migrate-repository` does (`replace_job_origin`): the UI's Overview timeline places a run by its
    origin, which `execute_in_process` / `execute_job` leave empty. The origin is the workspace's
    (workspace.yaml: module `routeforge.pipelines.definitions`, location `routeforge`)."""
    from dagster._core.remote_origin import (
        ManagedGrpcPythonEnvCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.storage.runs.sql_run_storage import SqlRunStorage
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    run = instance.get_run_by_id(run_id)
    storage = getattr(instance.run_storage, "_storage", instance.run_storage)
    storage = getattr(storage, "run_storage", storage)
    if run is None or not isinstance(storage, SqlRunStorage):
        return  # an in-memory instance has no UI to show it in
    location = ManagedGrpcPythonEnvCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name=DEFINITIONS_MODULE,
                             working_directory=os.getcwd()), location_name=CODE_LOCATION)
    storage.replace_job_origin(run, RemoteJobOrigin(RemoteRepositoryOrigin(location, REPOSITORY), run.job_name))


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
        result = defs.resolve_job_def(job).execute_in_process(partition_key=partition, instance=instance, tags=tags,
                                                              run_config=run_config, asset_selection=asset_selection)
        attach_to_code_location(instance, result.run_id)
        return result
    if instance.is_ephemeral:
        raise RuntimeError(f"execution.executor: {config.execution.executor} runs each step in its own process, "
                           "which needs a persistent Dagster instance: set $DAGSTER_HOME")
    reconstructable = dg.build_reconstructable_job(DEFINITIONS_MODULE, "job_from_environment", (job,),
                                                   reconstructor_working_directory=os.getcwd())
    run_tags = {**tags, **({"dagster/partition": partition} if partition else {})}
    # step processes rebuild the definitions from the same fleet file; set for this run only, so a
    # caller's later runs (or tests) never see another run's fleet
    with _environment(ROUTEFORGE_CONFIG=str(Path(config_path).resolve())), \
            dg.execute_job(reconstructable, instance=instance, tags=run_tags,
                           run_config=run_config, asset_selection=asset_selection) as result:
        attach_to_code_location(instance, result.run_id)
        if not result.success:
            failures = [e.message for e in result.all_events if e.is_failure]
            raise RuntimeError(f"{job}: run {result.run_id} failed: {failures[-1] if failures else 'see Dagster'}")
        return _Detached(result)


@contextlib.contextmanager
def _environment(**values: str):
    """Set environment variables for the block, restoring what was there before."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Detached:
    """What `routeforge.pipelines.run` reads of a result (its check evaluations), kept after
    `execute_job`'s context closes; outputs are read back through the IO managers, as a later run would."""

    def __init__(self, result):
        self._checks = result.get_asset_check_evaluations()

    def get_asset_check_evaluations(self):
        return self._checks
