"""Dagster resources: the fleet configuration, the component store and the MLflow registry.

Assets never compose paths under the state folder nor repeat the registry settings: folders come
from `ComponentStore` (rooted at the fleet's `storage_root` as a UPath: a local root gives plain
`pathlib.Path` subclasses the libraries use as is, and the same resource can point at object
storage), and every MLflow run and registration goes through `MlflowRegistry`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import PrivateAttr
from upath import UPath

from core.config import FleetConfig, load_fleet
from core.storage import Quarantine


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
    `exports/<name>`, `cache/<name>`, `quarantine/…` and the bundle staging folder."""

    root: str

    def _dir(self, kind: str, name: str | None = None) -> Path:
        if name is not None and (not name or "/" in name or name in (".", "..")):
            raise ValueError(f"{kind} name {name!r} must be one path segment")
        base = UPath(self.root) / kind
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
        return self._dir("cache", name)

    def staging_dir(self) -> Path:
        return self._dir("bundle")

    def write_quarantine(self, quarantine: Quarantine) -> Path:
        return quarantine.write(UPath(self.root))


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
        from artifacts.signing import generate_key_pair

        path = Path(self.signing_key)
        if not path.is_file():
            if not self.create_signing_key:
                raise FileNotFoundError(f"registry.signing_key / $ROUTEFORGE_SIGNING_KEY: no key at {path}")
            generate_key_pair(path)
        return path

    def public_key_path(self) -> Path:
        from artifacts.signing import public_key_path

        return public_key_path(self.signing_key_path())

    def log_report(self, run_name: str, metrics: dict[str, float], files: list[Path],
                   tags: dict[str, str] | None = None) -> str:
        from artifacts.publish import log_report

        return log_report(tracking_uri=self.tracking_uri, experiment=self.experiment,
                          artifact_location=self.artifact_location, run_name=run_name, metrics=metrics,
                          files=files, tags=tags)

    def publish(self, **kwargs: Any):
        """`artifacts.publish.publish_bundle` under this registry's name, experiment and alias."""
        from artifacts.publish import publish_bundle

        return publish_bundle(name=self.model_name, tracking_uri=self.tracking_uri, experiment=self.experiment,
                              artifact_location=self.artifact_location, alias=self.alias,
                              signing_key=self.signing_key_path(), **kwargs)
