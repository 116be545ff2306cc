"""The bundle manifest: what a runtime needs to trust and use a bundle without this code base.

`manifest.schema.json` beside this file is the contract (JSON Schema 2020-12), so runtimes in other
languages validate manifests with any JSON Schema library; the loader validates with `jsonschema`
before it builds these classes. The classes are plain dataclasses (no pydantic: a router service
installs only the runtime's few dependencies), and tests/artifacts/test_bundle.py keeps their fields
and the schema's properties the same.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

# 1.1 added `provenance`. A loader reads its own major version up to its own minor: a newer minor
# may carry signed claims it cannot honour, so it refuses it naming the version (`verification.parse_manifest`);
# a 1.0-only loader refuses a 1.1 manifest at the schema, naming the field it does not know
MANIFEST_SCHEMA_VERSION = "1.1"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class FileEntry:
    path: str  # POSIX path relative to the bundle root
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Component:
    name: str
    kind: str  # e.g. knn_estimator, latency_heads, routing_policy (artifacts.deciding.components)
    format: str  # e.g. faiss+safetensors+json, xgboost-json+json, onnx+json
    files: list[FileEntry]
    metrics: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Component:
        return cls(raw["name"], raw["kind"], raw["format"], [FileEntry(**f) for f in raw["files"]],
                   {k: float(v) for k, v in raw.get("metrics", {}).items()}, dict(raw.get("config", {})))


@dataclass(frozen=True)
class ModelEntry:
    name: str
    engine: str
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None


@dataclass(frozen=True)
class TierEntry:
    name: str
    model: str
    hardware: str


@dataclass(frozen=True)
class Fleet:
    name: str
    models: list[ModelEntry]
    tiers: list[TierEntry] = field(default_factory=list)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Fleet:
        return cls(raw["name"], [ModelEntry(**m) for m in raw["models"]],
                   [TierEntry(**t) for t in raw.get("tiers", [])])


@dataclass(frozen=True)
class Lineage:
    input_hashes: dict[str, str] = field(default_factory=dict)  # sha256 of stage inputs
    dagster_run_id: str | None = None
    mlflow_run_id: str | None = None


@dataclass(frozen=True)
class Provenance:
    """Signed claims about how the bundle's training data was made, which a reader may require."""

    # scoring.code.isolation when the labels were made: "required" (every pass@1 label came from
    # code run in the sandbox, or the cell was quarantined), "allow_fallback" (some generated code may
    # have run unconfined on the training machine); None: not said (a bundle from before 1.1)
    code_isolation: str | None = None


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str  # content-derived bundle version; the registry version is separate
    created_at: str
    code_version: str
    fleet: Fleet
    components: list[Component]
    lineage: Lineage = field(default_factory=Lineage)
    provenance: Provenance = field(default_factory=Provenance)
    schema_version: str = MANIFEST_SCHEMA_VERSION

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Manifest:
        """From a dict that validated against the schema (`routeforge.artifacts.bundle.verification.read_manifest`)."""
        return cls(raw["name"], raw["version"], raw["created_at"], raw["code_version"], Fleet.from_dict(raw["fleet"]),
                   [Component.from_dict(c) for c in raw["components"]], Lineage(**raw.get("lineage", {})),
                   Provenance(**raw.get("provenance", {})), raw.get("schema_version", MANIFEST_SCHEMA_VERSION))

    def to_dict(self) -> dict[str, Any]:
        raw = dataclasses.asdict(self)
        return {"schema_version": raw.pop("schema_version"), **raw}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def replace(self, **changes: Any) -> Manifest:
        return dataclasses.replace(self, **changes)

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"bundle {self.name} has no component {name!r}")
