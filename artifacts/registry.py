"""MLflow side of bundles: log a bundle folder to a run, register it as a model version, download it.

The bundle is logged as plain artifacts under ``bundle/`` and registered with
`create_model_version(source=<run artifacts>/bundle)`: no MLflow flavour and no pickle, so any
runtime that can download artifacts can load it. Importing mlflow is deferred to the calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BUNDLE_ARTIFACT_PATH = "bundle"


@dataclass(frozen=True)
class RegisteredBundle:
    name: str
    version: str
    alias: str
    run_id: str

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{self.alias}"


def is_remote_uri(ref: str) -> bool:
    return ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/"))


def ensure_experiment(tracking_uri: str, name: str, artifact_location: str | None) -> str:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    existing = mlflow.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    location = Path(artifact_location).resolve().as_uri() if artifact_location else None
    return mlflow.create_experiment(name, artifact_location=location)


def register_bundle(
    bundle_dir: Path, run_id: str, model_name: str, alias: str, tags: dict[str, str] | None = None
) -> RegisteredBundle:
    """Log `bundle_dir` into the (active or given) run and register it as a new version under `alias`."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    client.log_artifacts(run_id, str(bundle_dir), BUNDLE_ARTIFACT_PATH)
    try:
        client.create_registered_model(model_name, description="routeforge router bundle")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"{mlflow.get_run(run_id).info.artifact_uri}/{BUNDLE_ARTIFACT_PATH}"
    mv = client.create_model_version(model_name, source=source, run_id=run_id, tags=tags or {})
    client.set_registered_model_alias(model_name, alias, mv.version)
    return RegisteredBundle(model_name, str(mv.version), alias, run_id)


def download_bundle(uri: str, dst: Path | None = None, tracking_uri: str | None = None) -> Path:
    """Download `models:/name@alias` (or runs:/…) into `dst` (a fresh temp folder by default)."""
    import tempfile

    import mlflow

    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    elif not os.environ.get("MLFLOW_TRACKING_URI"):
        raise ValueError(f"cannot resolve {uri}: pass a tracking URI or set MLFLOW_TRACKING_URI")
    dst = Path(dst) if dst else Path(tempfile.mkdtemp(prefix="routeforge-bundle-"))
    dst.mkdir(parents=True, exist_ok=True)
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst)))
