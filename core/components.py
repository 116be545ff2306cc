"""The contract between a training stage and the bundle: one typed result per trainer.

A `TrainedComponent` names the component folder(s) it wrote (as `artifacts.bundle.writer.ComponentSource`,
what the bundle writer copies and checksums), the plots, the flat MLflow-ready metrics (already
namespaced, e.g. `latency/<tier>/tpot_mae`) and whatever else downstream stages read (`details`).
The bundle assembles a list of them without knowing which trainer made which.

It crosses process boundaries as JSON with an explicit type tag (`to_json` / `from_json`), which is
how Dagster's JSON IO manager stores it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routeforge.artifacts.bundle.writer import ComponentSource

TYPE_TAG = "routeforge.TrainedComponent"
# components a trainer lists after its own because it uses them (one copy in the bundle)
SHARED_KINDS = ("text_embeddings", "sentence_encoder")


@dataclass
class TrainedComponent:
    components: list[ComponentSource]
    metrics: dict[str, float] = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """The folder of the trainer's own component: the first (a text predictor lists the shared
        embedding table it uses after its own)."""
        if not self.components:
            raise ValueError("no components")
        return self.components[0].folder

    @property
    def plot_folder(self) -> str:
        """The MLflow folder for this result's plots: its component's name, or `policies` etc. for
        several (the common prefix of their names), so plots of two trainers never collide."""
        names = [c.name for c in self.components if c.kind not in SHARED_KINDS]
        if len(names) == 1:
            return names[0]
        common = os.path.commonprefix(names).rstrip("-_") if names else ""
        return common or "components"

    def to_json(self) -> dict[str, Any]:
        return {"__type__": TYPE_TAG,
                "components": [{"name": c.name, "kind": c.kind, "format": c.format, "folder": str(c.folder),
                                "metrics": c.metrics, "config": c.config} for c in self.components],
                "metrics": self.metrics, "plots": [str(p) for p in self.plots], "details": self.details}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainedComponent:
        if data.get("__type__") != TYPE_TAG:
            raise ValueError(f"not a serialized TrainedComponent (type tag {data.get('__type__')!r})")
        return cls([ComponentSource(c["name"], c["kind"], c["format"], Path(c["folder"]), c["metrics"], c["config"])
                    for c in data["components"]],
                   data["metrics"], [Path(p) for p in data["plots"]], data["details"])


def flatten(values) -> list[TrainedComponent]:
    """TrainedComponents from asset inputs, where a partitioned upstream arrives as {partition: value}."""
    out: list[TrainedComponent] = []
    for value in values:
        if isinstance(value, TrainedComponent):
            out.append(value)
        elif isinstance(value, dict):
            out.extend(flatten(value[k] for k in sorted(value)))
        elif value is not None:
            raise TypeError(f"expected TrainedComponent results, got {type(value).__name__}")
    return out
