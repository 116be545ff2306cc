"""Publish a bundle: one MLflow run holding params, metrics, plots and the bundle, then register it.

The manifest is written inside the run so that it records the MLflow run id in its lineage.
"""

from __future__ import annotations

import math
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from artifacts.manifest import Fleet, Lineage, Manifest
from artifacts.registry import RegisteredBundle, ensure_experiment, latest_version, register_bundle, registry_lock
from artifacts.signing import sign_bundle
from artifacts.writer import ComponentSource, write_bundle, write_manifest


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
    plots: list[Path] = (),
    signing_key: Path | None = None,
    skip_unchanged: bool = True,
) -> tuple[RegisteredBundle, Manifest]:
    """Write the bundle inside a new MLflow run, sign its manifest with `signing_key` (Ed25519 PEM;
    `artifacts.signing`) and register it under `alias`; with a SQLite store, holding the store's
    lock (`artifacts.registry.registry_lock`) so concurrent pipelines take turns. With
    `skip_unchanged`, a bundle whose content version equals the newest registered version's creates
    no run and no version: the existing one is returned with `unchanged=True`."""
    import mlflow

    with registry_lock(tracking_uri):
        experiment_id = ensure_experiment(tracking_uri, experiment, artifact_location)
        # the content version hashes the component files only (no timestamps, run ids or lineage):
        # equal to the newest version's, there is nothing new to register
        draft = write_bundle(staging_dir, name, fleet, components, Lineage(input_hashes=input_hashes), code_version())
        latest = latest_version(name)
        if skip_unchanged and latest is not None and latest[1].get("bundle_version") == draft.version:
            return RegisteredBundle(name, latest[0], alias, latest[2], unchanged=True), draft
        with mlflow.start_run(experiment_id=experiment_id, run_name=f"{name}-bundle") as run:
            if params:
                mlflow.log_params(params)
            if metrics:
                mlflow.log_metrics(metrics)
            for plot in plots:
                mlflow.log_artifact(str(plot), "plots")
            # the files are in place: only the manifest learns the run (the content version is the same)
            manifest = draft.model_copy(update={"lineage": Lineage(
                input_hashes=input_hashes, dagster_run_id=dagster_run_id, mlflow_run_id=run.info.run_id)})
            write_manifest(staging_dir, manifest)
            tags = {"bundle_version": manifest.version, "code_version": manifest.code_version}
            run_tags = {"routeforge.bundle_version": manifest.version, "routeforge.fleet": fleet.name}
            if signing_key is not None:
                tags["signing_key_id"] = run_tags["routeforge.signing_key_id"] = sign_bundle(staging_dir, signing_key)
            mlflow.set_tags(run_tags)
            registered = register_bundle(staging_dir, run.info.run_id, name, alias, tags=tags)
    return registered, manifest


def log_report(*, tracking_uri: str, experiment: str, artifact_location: str | None, run_name: str,
               metrics: dict[str, float], files: list[Path], tags: dict[str, str] | None = None) -> str:
    """An evaluation report as its own MLflow run (metrics, JSON and plots); returns the run id."""
    import mlflow

    with registry_lock(tracking_uri):
        experiment_id = ensure_experiment(tracking_uri, experiment, artifact_location)
        with mlflow.start_run(experiment_id=experiment_id, run_name=run_name) as run:
            mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)})
            for f in files:
                mlflow.log_artifact(str(f), "report")
            if tags:
                mlflow.set_tags(tags)
    return run.info.run_id
