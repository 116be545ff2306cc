"""Publish a bundle: one MLflow run holding params, metrics, plots and the bundle, then register it.

The manifest is written inside the run so that it records the MLflow run id in its lineage.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from routeforge.artifacts.bundle.keyring import pin
from routeforge.artifacts.bundle.manifest import Fleet, Lineage, Manifest, Provenance
from routeforge.artifacts.bundle.registry import PUBLIC_KEY_TAG
from routeforge.artifacts.bundle.signing import public_key_path, public_key_pem, sign_bundle
from routeforge.artifacts.bundle.writer import ComponentSource, write_bundle, write_manifest
from routeforge.registry.release import CHAMPION
from routeforge.registry.store import (
    RegisteredBundle,
    ensure_experiment,
    latest_version,
    register_bundle,
    registry_lock,
    retrying_lost_insert,
)


def code_version() -> str:
    """routeforge's version plus the git commit (and `+dirty`) when run from a checkout."""
    try:
        base = version("routeforge")
    except PackageNotFoundError:
        base = "unknown"
    try:
        here = Path(__file__).resolve().parent
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return f"{base}+g{sha}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return base


def publish_bundle(
    *,
    name: str,
    fleet: Fleet,
    components: list[ComponentSource],
    staging_dir: Path,
    tracking_uri: str,
    experiment: str,
    artifact_location: str | None,
    alias: str,
    input_hashes: dict[str, str],
    dagster_run_id: str | None = None,
    params: dict[str, str] | None = None,
    metrics: dict[str, float] | None = None,
    plots: list[tuple[str, Path]] = (),
    signing_key: Path | None = None,
    skip_unchanged: bool = True,
    context: RunContext | None = None,
    version_tags: dict[str, str] | None = None,
    provenance: Provenance | None = None,
) -> tuple[RegisteredBundle, Manifest]:
    """Write the bundle inside a new MLflow run, sign its manifest with `signing_key` (Ed25519 PEM;
    `artifacts.bundle.signing`) and register it under `alias`; with a SQLite store, holding the store's
    lock (`artifacts.bundle.registry.registry_lock`) so concurrent pipelines take turns. With
    `skip_unchanged`, a bundle whose content version equals the newest registered version's creates
    no run and no version: the existing one is returned with `unchanged=True`."""
    import mlflow

    with registry_lock(tracking_uri):
        experiment_id = ensure_experiment(tracking_uri, experiment, artifact_location)
        # the content version hashes the component files only (no timestamps, run ids or lineage):
        # equal to the newest version's, there is nothing new to register
        draft = write_bundle(staging_dir, name, fleet, components, Lineage(input_hashes=input_hashes), code_version(),
                             provenance)
        latest = latest_version(name)
        if skip_unchanged and latest is not None and latest[1].get("bundle_version") == draft.version:
            return RegisteredBundle(name, latest[0], alias, latest[2], unchanged=True), draft
        with start_child_run(experiment_id, f"{name}-bundle", context, "router_bundle") as run:
            if params:
                mlflow.log_params(params)
            if metrics:
                mlflow.log_metrics(metrics)
            for component, plot in plots:
                mlflow.log_artifact(str(plot), f"plots/{component}")
            # the files are in place: only the manifest learns the run (the content version is the same)
            manifest = draft.replace(lineage=Lineage(
                input_hashes=input_hashes, dagster_run_id=dagster_run_id, mlflow_run_id=run.info.run_id))
            write_manifest(staging_dir, manifest)
            tags = {**(version_tags or {}), "bundle_version": manifest.version, "code_version": manifest.code_version}
            run_tags = {"routeforge.bundle_version": manifest.version, "routeforge.fleet": fleet.name}
            if signing_key is not None:
                tags["signing_key_id"] = run_tags["routeforge.signing_key_id"] = sign_bundle(staging_dir, signing_key)
            mlflow.set_tags(run_tags)
            registered = register_bundle(staging_dir, run.info.run_id, name, alias, tags=tags, signing_key=signing_key)
            if signing_key is not None:
                pin_signer(signing_key)
                if alias == CHAMPION:  # promoted as it is registered: the registry's hint names its key now
                    mlflow.MlflowClient().set_registered_model_tag(name, PUBLIC_KEY_TAG, public_key_pem(signing_key))
        if context is not None:
            close_parent(parent_run(experiment_id, context), "FINISHED")
    return registered, manifest


@dataclass(frozen=True)
class RunContext:
    """Where a training run belongs: the pipeline run (an MLflow parent run found or created by its
    `key`, one per `routeforge.pipelines.run` invocation or Dagster run) and the Dagster run and step behind it."""

    key: str
    fleet: str
    dagster_run_id: str | None = None
    dagster_job: str | None = None

    def tags(self, step: str | None = None) -> dict[str, str]:
        tags = {"routeforge.pipeline_run": self.key, "routeforge.fleet": self.fleet}
        if self.dagster_run_id:
            tags["dagster.run_id"] = self.dagster_run_id
        if self.dagster_job:
            tags["dagster.job"] = self.dagster_job
        if step:
            tags["routeforge.step"] = step
        return tags


def parent_run(experiment_id: str, context: RunContext) -> str:
    """The pipeline run's parent run id: the run tagged with its key, created (and closed) when
    the first child is logged; each child that ends moves its end (`close_parent`), so it lasts
    from its first child's start to its last one's end. Callers hold `registry_lock`, so two steps
    do not create two."""
    import mlflow

    found = mlflow.search_runs([experiment_id], filter_string=f"tags.`routeforge.pipeline_run` = '{context.key}' "
                               "and tags.`routeforge.role` = 'pipeline'", output_format="list", max_results=1)
    if found:
        return found[0].info.run_id
    client = mlflow.MlflowClient()
    run = client.create_run(experiment_id, run_name=f"{context.fleet}-pipeline-{context.key[:8]}",
                            tags={**context.tags(), "routeforge.role": "pipeline"})
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def close_parent(parent_id: str, status: str) -> None:
    """A child of `parent_id` ended now with `status`: the parent ends no earlier, and is FAILED
    once any child failed (a later success does not hide it)."""
    import mlflow

    client = mlflow.MlflowClient()
    info = client.get_run(parent_id).info
    now = int(time.time() * 1000)
    failed = "FAILED" if "FAILED" in (info.status, status) else "FINISHED"
    client.set_terminated(parent_id, failed, end_time=max(now, info.end_time or 0))


def start_child_run(experiment_id: str, run_name: str, context: RunContext | None, step: str | None = None):
    """Start an MLflow run nested under the pipeline run (a top-level run without a context); the
    caller holds `registry_lock` (the parent is found or created here) and uses the result as a
    context manager."""
    import mlflow

    if context is None:
        return mlflow.start_run(experiment_id=experiment_id, run_name=run_name)
    return mlflow.start_run(experiment_id=experiment_id, run_name=run_name,
                            parent_run_id=parent_run(experiment_id, context), tags=context.tags(step))


def _log_metric_batches(run_id: str, metrics: list) -> None:
    """MLflow `Metric`s onto a run, in batches of `log_batch`'s 1,000."""
    import mlflow

    client = mlflow.MlflowClient()
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i:i + 1000])


def log_curves(run_id: str, curves: dict[str, list[tuple[int, float]]]) -> None:
    """Learning curves as metric histories (one metric, many steps), drawn as lines by MLflow;
    a plain metric is a curve of one point at step 0. Non-finite points are left out."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    _log_metric_batches(run_id, [Metric(key, float(v), now, int(step)) for key, points in curves.items()
                                 for step, v in points if v is not None and math.isfinite(v)])


def log_dataset(run_id: str, table, name: str) -> None:
    """A table (Arrow or pandas) as the run's training input (schema, digest and size in MLflow's Datasets).

    Two pipelines that log the same table into one experiment at the same moment race on the
    server's insert of the dataset row (unique per experiment, name and digest); the loser's
    retry finds the row the winner wrote and only links it to its run."""
    import mlflow
    from mlflow.entities import Dataset, DatasetInput, InputTag

    frame = table.to_pandas() if hasattr(table, "to_pandas") else table
    dataset = mlflow.data.from_pandas(frame, name=name)
    entity = DatasetInput(Dataset(**dataset.to_dict()), [InputTag("mlflow.data.context", "training")])
    retrying_lost_insert("datasets", mlflow.MlflowClient().log_inputs)(run_id, datasets=[entity])


def flat_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested settings as MLflow params (`knn.k`, `router.candidates`): lists as JSON, values cut at
    MLflow's 6,000 characters, so runs can be filtered and compared by any setting."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flat_params(value, name + ".")
        else:
            text = json.dumps(value, default=str) if isinstance(value, (list, tuple)) else str(value)
            out[name] = text[:6000]
    return out


def log_params(run_id: str, params: Mapping[str, Any]) -> None:
    """`flat_params(params)` onto an open run, in batches of MLflow's 100."""
    import mlflow
    from mlflow.entities import Param

    items = [Param(k, v) for k, v in flat_params(params).items()]
    client = mlflow.MlflowClient()
    for i in range(0, len(items), 100):
        client.log_batch(run_id, params=items[i:i + 100])


@contextmanager
def child_run(*, tracking_uri: str, experiment: str, artifact_location: str | None, run_name: str,
              context: RunContext | None = None, step: str | None = None,
              params: Mapping[str, Any] | None = None) -> Iterator[str]:
    """A training or evaluation step's MLflow run, nested under the pipeline run, open for as long
    as the step works: created (status RUNNING, its settings as params) on entry, FINISHED on exit,
    FAILED when the step raises. Opened at the start, not written after the work, so the UI shows a
    step in progress and its duration is the step's."""
    import mlflow

    with registry_lock(tracking_uri):
        experiment_id = ensure_experiment(tracking_uri, experiment, artifact_location)
        parent = parent_run(experiment_id, context) if context is not None else None
    tags = context.tags(step) if context is not None else {}
    if parent:
        tags["mlflow.parentRunId"] = parent
    client = mlflow.MlflowClient()
    run_id = client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id
    status = "FAILED"
    try:
        if params:
            log_params(run_id, params)
        yield run_id
        status = "FINISHED"
    finally:
        client.set_terminated(run_id, status)
        if parent:
            with registry_lock(tracking_uri):
                close_parent(parent, status)


def log_report(*, run_id: str, metrics: dict[str, float], files: list[Path], step: str,
               tags: dict[str, str] | None = None, params: Mapping[str, Any] | None = None,
               curves: dict[str, list[tuple[int, float]]] | None = None, dataset=None) -> str:
    """What a step found, into its open run (`child_run`): metrics, the choices it made as params,
    curves as histories, the routing table as its input, files under `report/` (plots under
    `plots/<step>/`, so same-named plots of two steps do not overwrite each other); returns the run id."""
    import mlflow

    client = mlflow.MlflowClient()
    log_curves(run_id, {k: [(0, v)] for k, v in metrics.items()})
    if params:
        log_params(run_id, params)
    if curves:
        log_curves(run_id, curves)
    if dataset is not None:
        log_dataset(run_id, dataset, "routing_table")
    for f in files:
        folder = f"plots/{step}" if Path(f).suffix == ".png" else "report"
        client.log_artifact(run_id, str(f), folder)
    if tags:
        for key, value in tags.items():
            client.set_tag(run_id, key, value)
    return run_id


def pin_signer(signing_key: Path) -> None:
    """Pin the public half of the key this machine signs with (it holds the private key: that trust
    comes from here, not from the store), so its own CLI and loads verify what it registers; said
    the first time. A router service elsewhere pins the key itself (`routeforge keys pin`)."""
    import sys


    kid, path, new = pin(public_key_pem(signing_key).encode())
    if new:
        print(f"routeforge: pinned this pipeline's signing key {kid} in {path} (router services elsewhere: "
              f"`routeforge keys pin {public_key_path(signing_key)}`)", file=sys.stderr)
