"""Dagster resources: the fleet configuration, the component store and the MLflow registry.

Assets never compose paths under the state folder nor repeat the registry settings: folders come
from `ComponentStore` (rooted at the fleet's `storage_root`, a local folder or an object store, with
a local mirror for the libraries that need files), and every MLflow run and registration goes
through `MlflowRegistry`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import PrivateAttr
from routeforge.artifacts.bundle.signing import generate_key_pair, public_key_path
from routeforge.core.components import TrainedComponent
from routeforge.core.storage import Quarantine
from routeforge.core.storage_root import StorageRoot
from routeforge.fleet import FleetConfig, load_fleet
from routeforge.registry.publish import RunContext, child_run, log_report, publish_bundle


class FleetResource(dg.ConfigurableResource):
    """The fleet file for this code location; assets call `.config` (parsed once per process)."""

    config_path: str
    _config: FleetConfig | None = PrivateAttr(default=None)

    @property
    def config(self) -> FleetConfig:
        if self._config is None:
            self._config = load_fleet(self.config_path)
        return self._config


class ComponentStore(dg.ConfigurableResource):
    """Where stage files live: `<root>/components/<name>`, `reports/<name>`, `profiles/<tier>`,
    `exports/<name>`, `cache/<name>`, `quarantine/…` and the bundle staging folder.

    Folders are handed out in the local mirror of the root (`core.storage_root`): with a local root
    that is the root itself; with an object store, an asset `push`es each folder it wrote when it is
    done, and an asset that reads another's folder `pull`s it first (a no-op when the mirror already
    holds the committed version). The root is checked once per run before any asset runs, so a
    missing bucket or wrong credentials fail with one error naming `storage_root`."""

    root: str
    storage_options: dict[str, Any] = {}

    @property
    def location(self) -> StorageRoot:
        return StorageRoot(self.root, dict(self.storage_options))

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.location.check()

    def _dir(self, kind: str, name: str | None = None) -> Path:
        if name is not None and (not name or "/" in name or name in (".", "..")):
            raise ValueError(f"{kind} name {name!r} must be one path segment")
        base = self.location.mirror / kind
        folder = base / name if name is not None else base
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def component_dir(self, name: str) -> Path:
        return self._dir("components", name)

    def report_dir(self, name: str) -> Path:
        return self._dir("reports", name)

    def profile_dir(self, name: str) -> Path:
        return self._dir("profiles", name)

    def export_dir(self, name: str) -> Path:
        return self._dir("exports", name)

    def cache_dir(self, name: str) -> Path:
        """A machine-local cache (embeddings): kept in the mirror, never pushed."""
        return self._dir("cache", name)

    def staging_dir(self) -> Path:
        return self._dir("bundle")

    def push(self, *folders: Path) -> None:
        """Commit folders this asset wrote to the root (no-op for a local root)."""
        for folder in folders:
            self.location.push(Path(folder))

    def pull_trained(self, *trained: TrainedComponent) -> None:
        """Every component folder and plot of upstream trainers, in this machine's mirror (a plot
        inside a folder already fetched costs nothing more)."""
        fetched = [self.pull(c.folder) for t in trained for c in t.components]
        for plot in (Path(p) for t in trained for p in t.plots):
            if not any(plot.is_relative_to(folder) for folder in fetched):
                self.pull(plot)  # fetches the committed folder holding it
                fetched.append(plot.parent)

    def pull(self, folder: str | Path, missing_ok: bool = False) -> Path:
        """The committed content of a folder another asset (or an earlier run) wrote, in this
        machine's mirror; `missing_ok`: nothing committed yet is not an error."""
        return self.location.pull(Path(folder), missing_ok=missing_ok)

    def write_quarantine(self, quarantine: Quarantine) -> Path:
        return quarantine.write(self.location.path())


# Dagster run tag shared by the job runs of one `routeforge.pipelines.run` invocation: their MLflow runs nest
# under one parent run keyed by it (a run launched alone, from the UI, is its own pipeline run).
PIPELINE_RUN_TAG = "routeforge/pipeline_run"
# where `make mlflow-ui` serves the local store; links in Dagster metadata point there
LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"


class MlflowRegistry(dg.ConfigurableResource):
    """The fleet's MLflow tracking server and registered model: report runs and bundle publication."""

    tracking_uri: str
    experiment: str
    model_name: str
    alias: str = "challenger"
    artifact_location: str | None = None
    signing_key: str  # Ed25519 private key (PEM) that signs each bundle's manifest
    create_signing_key: bool = False  # create the key pair on first use (the default location only)

    def signing_key_path(self) -> Path:
        """The private key, created (0600, `.pub` beside it) when this is the default location and
        it does not exist yet; a configured key that is missing is an error naming it."""
        path = Path(self.signing_key)
        if not path.is_file():
            if not self.create_signing_key:
                raise FileNotFoundError(f"registry.signing_key / $ROUTEFORGE_SIGNING_KEY: no key at {path}")
            generate_key_pair(path)
        return path

    def public_key_path(self) -> Path:
        return public_key_path(self.signing_key_path())

    ui_url: str | None = None  # the MLflow UI for run links (default: the server, or `make mlflow-ui`'s)

    def run_context(self, context: dg.AssetExecutionContext):
        """This step's place in the MLflow run tree (`registry.publish.RunContext`)."""
        tags = context.run.tags
        return RunContext(key=tags.get(PIPELINE_RUN_TAG, context.run_id),
                          fleet=tags.get("routeforge/fleet", self.experiment),
                          dagster_run_id=context.run_id, dagster_job=context.job_name)

    @contextmanager
    def step_run(self, context: dg.AssetExecutionContext, run_name: str,
                 params: dict[str, Any] | None = None) -> Iterator[str]:
        """This asset's MLflow run, a child of the pipeline run, open while the work runs
        (`registry.publish.child_run`): wrap the work in it, with the settings as `params`."""
        with child_run(tracking_uri=self.tracking_uri, experiment=self.experiment,
                       artifact_location=self.artifact_location, run_name=run_name,
                       context=self.run_context(context), step=context.asset_key.to_user_string(),
                       params=params) as run_id:
            yield run_id

    def log_report(self, context: dg.AssetExecutionContext, run_id: str, metrics: dict[str, float],
                   files: list[Path], tags: dict[str, str] | None = None, params: dict[str, Any] | None = None,
                   curves: dict[str, list[tuple[int, float]]] | None = None, dataset=None) -> str:
        """What the step found, into its open run (`registry.publish.log_report`)."""
        return log_report(run_id=run_id, metrics=metrics, files=files, step=context.asset_key.to_user_string(),
                          tags=tags, params=params, curves=curves, dataset=dataset)

    def run_link(self, run_id: str) -> dg.MetadataValue:
        """The run's page in the MLflow UI, as a link in Dagster's metadata."""
        import mlflow

        base = self.ui_url or (self.tracking_uri if self.tracking_uri.startswith(("http://", "https://"))
                               else LOCAL_MLFLOW_UI)
        mlflow.set_tracking_uri(self.tracking_uri)
        experiment_id = mlflow.get_run(run_id).info.experiment_id
        return dg.MetadataValue.url(f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}")

    def publish(self, **kwargs: Any):
        """`registry.publish.publish_bundle` under this registry's name, experiment and alias."""
        return publish_bundle(name=self.model_name, tracking_uri=self.tracking_uri, experiment=self.experiment,
                              artifact_location=self.artifact_location, alias=self.alias,
                              signing_key=self.signing_key_path(), **kwargs)
