"""The bundle manifest: what a runtime needs to trust and use a bundle without this code base.

`manifest.schema.json` beside this file is generated from these models (`python -m
routeforge.artifacts.manifest > artifacts/manifest.schema.json`) and a test keeps it in sync, so runtimes in
other languages can validate manifests with any JSON Schema library.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_SCHEMA_VERSION = "1.0"
MANIFEST_FILE = "manifest.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileEntry(_Strict):
    path: str = Field(description="POSIX path relative to the bundle root")
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)


class Component(_Strict):
    name: str
    kind: str = Field(description="e.g. knn_estimator, latency_head, policy")
    format: str = Field(description="e.g. faiss+parquet+json, xgboost-json, onnx")
    files: list[FileEntry]
    metrics: dict[str, float] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)


class ModelEntry(_Strict):
    name: str
    engine: str
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None


class TierEntry(_Strict):
    name: str
    model: str
    hardware: str


class Fleet(_Strict):
    name: str
    models: list[ModelEntry]
    tiers: list[TierEntry] = Field(default_factory=list)


class Lineage(_Strict):
    input_hashes: dict[str, str] = Field(default_factory=dict, description="sha256 of stage inputs")
    dagster_run_id: str | None = None
    mlflow_run_id: str | None = None


class Manifest(_Strict):
    schema_version: str = MANIFEST_SCHEMA_VERSION
    name: str
    version: str = Field(description="content-derived bundle version; the registry version is separate")
    created_at: str
    code_version: str
    fleet: Fleet
    components: list[Component]
    lineage: Lineage = Lineage()

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"bundle {self.name} has no component {name!r}")


def json_schema() -> dict[str, Any]:
    schema = Manifest.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://routeforge.dev/schemas/manifest-{MANIFEST_SCHEMA_VERSION}.json"
    return schema


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
