"""Writing bundles into the MLflow registry: experiments, the local store's lock, new versions.

Importing mlflow is deferred to the calls.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from routeforge.artifacts.bundle.model_record import sign_registered
from routeforge.artifacts.bundle.signing import public_key_pem
from routeforge.artifacts.bundle.verification import read_manifest
from routeforge.artifacts.common.state_folder import sqlite_file


@dataclass(frozen=True)
class RegisteredBundle:
    name: str
    version: str
    alias: str
    run_id: str
    unchanged: bool = False  # the content equalled this existing version's: nothing was registered

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{self.alias}"


@contextmanager
def registry_lock(tracking_uri: str, timeout_s: float = 600.0) -> Iterator[None]:
    """Serialize this process's registry writes with every other process's, for a SQLite store.

    MLflow creates a SQLite store's tables on first use; two processes doing so at once race on
    alembic's version row and one dies ("Online migration expected to match one row"), and later
    concurrent writers can meet "database is locked". A file lock beside the database (`filelock`)
    makes two pipelines registering into one local store take turns. An `mlflow server` serializes
    writes itself, and is what pipelines on several machines should share: no lock there."""
    path = sqlite_file(tracking_uri)
    if path is None:
        yield
        return
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    holder_file = Path(f"{path}.lock.holder")
    lock = FileLock(f"{path}.lock")
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout:
        raise TimeoutError(f"{path}.lock: still held after {timeout_s:.0f} s by {_lock_holder(holder_file)}") from None
    try:
        # who holds it, for the message of a process that waits too long (the OS frees the lock itself when
        # its holder dies, so this file never makes a lock stale)
        holder_file.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}))
        yield
    finally:
        lock.release()


def _lock_holder(holder_file: Path) -> str:
    """Who holds a SQLite store's lock, as its holder wrote it, or why that cannot be told."""
    try:
        spec = json.loads(holder_file.read_text())
        return f"pid {int(spec['pid'])} on {spec['host']} (since {time.ctime(float(spec['since']))})"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not say who it is (a routeforge older than this one, or another tool)"


# MLflow 3's UI opens an experiment in its GenAI (traces) view unless the experiment says otherwise:
# routeforge's are model training (runs, metrics, registered models)
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"


LOCAL_ARTIFACTS_FOLDER = "mlartifacts"  # beside a local store's database, as the shipped fleets name it


def default_artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment's artifacts go when the fleet names no `registry.artifact_location`: for
    a local SQLite store, `mlartifacts/` beside its database (MLflow's own default is `./mlruns` of
    whatever folder the process runs in: a fleet run from a working folder filled it, one copy of
    the encoder per experiment); a tracking server decides for itself (None)."""
    database = sqlite_file(tracking_uri)
    if database is None or database.name == ":memory:":
        return None
    return str(database.resolve().parent / LOCAL_ARTIFACTS_FOLDER)


def _as_location(artifact_location: str) -> str:
    """A local folder as a file:// URI (resolved); a URI (s3://, gs://, mlflow-artifacts:/) as given."""
    return artifact_location if "://" in artifact_location or artifact_location.startswith(
        "mlflow-artifacts:") else Path(artifact_location).resolve().as_uri()


def ensure_experiment(tracking_uri: str, name: str, artifact_location: str | None) -> str:
    """The experiment's id, created when missing (its artifacts where `artifact_location` says, else
    `default_artifact_location`); a concurrent creator winning the race is fine."""
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(tracking_uri)
    existing = mlflow.get_experiment_by_name(name)
    if existing is not None:
        if existing.tags.get(EXPERIMENT_KIND_TAG) is None:
            mlflow.MlflowClient().set_experiment_tag(existing.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        return existing.experiment_id
    artifact_location = artifact_location or default_artifact_location(tracking_uri)
    location = _as_location(artifact_location) if artifact_location else None
    try:
        return mlflow.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING})
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return mlflow.get_experiment_by_name(name).experiment_id


def lost_insert_race(exc: BaseException, table: str) -> bool:
    """The tracking server's insert into `table` lost a race with another writer's (SQLite's or
    PostgreSQL's unique-key error): MLflow's stores look a row up and then insert it, so two writers
    of the same key at once both see none and the second insert fails."""
    from mlflow.exceptions import MlflowException

    text = str(exc)
    return isinstance(exc, MlflowException) and table in text and (
        "UNIQUE constraint failed" in text or "duplicate key value" in text)


def retrying_lost_insert(table: str, call):
    """`call`, tried again (three tries in all, a random wait apart) when its insert into `table` lost
    a race: the retry finds the winner's row and updates or links it instead of inserting."""
    from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random

    return retry(retry=retry_if_exception(lambda exc: lost_insert_race(exc, table)), stop=stop_after_attempt(3),
                 wait=wait_random(0.05, 0.5), reraise=True)(call)


def register_bundle(
    bundle_dir: Path, run_id: str, model_name: str, alias: str, tags: dict[str, str] | None = None,
    signing_key: Path | None = None,
) -> RegisteredBundle:
    """Log `bundle_dir` into run `run_id` (the active run) as a pyfunc MLflow model
    (`routeforge.registry.mlflow_model`) and register it as a new version under `alias`. With
    `signing_key`, the version's files outside the bundle (MLmodel, the environment files) are signed
    as a record bound to its name and number (`artifacts.bundle.model_record`) before the alias moves."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from routeforge.registry.mlflow_model import log_bundle_model  # lazy: mlflow, pandas on first use

    active = mlflow.active_run()
    if active is None or active.info.run_id != run_id:
        raise ValueError(f"register_bundle logs into the active run, which is not {run_id}")
    client = MlflowClient()
    info = log_bundle_model(Path(bundle_dir), public_key_pem(signing_key) if signing_key is not None else None)
    try:
        client.create_registered_model(model_name, description="routeforge router bundle (pyfunc: a `prompt` "
                                       "column in, the chosen model and per-model estimates out)")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    mv = client.create_model_version(model_name, source=info.model_uri, run_id=run_id, tags=tags or {},
                                     model_id=info.model_id)
    if signing_key is not None:
        sign_registered(model_name, str(mv.version), read_manifest(Path(bundle_dir)), signing_key)
    # two pipelines moving one alias at once race on its row (seen in CI); the later move wins
    retrying_lost_insert("registered_model_aliases", client.set_registered_model_alias)(model_name, alias, mv.version)
    return RegisteredBundle(model_name, str(mv.version), alias, run_id)


def all_versions(model_name: str, client=None) -> list[str]:
    """Every registered version of `model_name`, oldest first."""
    from mlflow import MlflowClient

    versions = (client or MlflowClient()).search_model_versions(f"name='{model_name}'")
    return [str(v) for v in sorted(int(v.version) for v in versions)]


def latest_version(model_name: str, client=None) -> tuple[str, dict[str, str], str] | None:
    """(version, tags, run id) of the newest registered version of `model_name`, None when there is
    none; `client` is an `MlflowClient` (default: one on the current tracking URI)."""
    from mlflow import MlflowClient

    versions = (client or MlflowClient()).search_model_versions(f"name='{model_name}'")
    if not versions:
        return None
    newest = max(versions, key=lambda v: int(v.version))
    return str(newest.version), dict(newest.tags), newest.run_id


