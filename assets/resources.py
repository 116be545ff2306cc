"""Dagster resources: the fleet configuration every asset reads."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from core.config import FleetConfig, load_fleet


class FleetResource(dg.ConfigurableResource):
    """The fleet file for this code location; assets call `.config` (parsed once per process)."""

    config_path: str
    _config: FleetConfig | None = PrivateAttr(default=None)

    @property
    def config(self) -> FleetConfig:
        if self._config is None:
            self._config = load_fleet(self.config_path)
        return self._config

    @property
    def root(self) -> Path:
        return self.config.storage_root

    @property
    def embedding_cache(self) -> Path:
        """Sentence embeddings shared by the training stages (`training.embeddings`)."""
        return self.config.storage_root / "cache" / "embeddings"

