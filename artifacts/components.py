"""Component kinds, each registered by the class that loads it: the bundle finds a loader by kind.

A bundle's manifest lists components with a `kind` (`knn_estimator`, `router`, `latency_heads`,
`routing_policy`, `length_predictor`, ...). Each runtime class declares the kind (or kinds) it
serves with `@register_component`, next to its own `load(folder)` (and, where the runtime writes
the format, `save`): `RouterBundle.component(name)` looks the kind up here, so adding a kind is one
module with one decorator, plus its name in `RUNTIME_MODULES` so it is imported before a lookup.

Two classes may serve one kind where the component's config tells them apart: `accepts` is a
predicate on that config (a heuristic routing policy is a JSON spec, a learned one an ONNX graph);
the first class whose predicate holds, in registration order, wins, and a class without one is the
kind's default.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The modules whose classes register kinds; imported on the first lookup (they stay lazy otherwise).
RUNTIME_MODULES = ("knn", "router", "latency", "policy", "heuristics", "text_predictor", "sentence_encoder", "golden")


@dataclass(frozen=True)
class ComponentKind:
    kind: str
    cls: type
    accepts: Callable[[Mapping[str, Any]], bool] | None = None

    def load(self, folder: Path) -> Any:
        return self.cls.load(Path(folder))


_REGISTRY: dict[str, list[ComponentKind]] = {}


def register_component(*kinds: str, accepts: Callable[[Mapping[str, Any]], bool] | None = None):
    """Class decorator: instances of `kinds` load with `cls.load(folder)`."""
    if not kinds:
        raise ValueError("register_component needs at least one kind")

    def register(cls: type) -> type:
        if not callable(getattr(cls, "load", None)):
            raise TypeError(f"{cls.__name__} registers {kinds} but has no load(folder)")
        for kind in kinds:
            entries = _REGISTRY.setdefault(kind, [])
            entries[:] = [e for e in entries if e.cls.__qualname__ != cls.__qualname__]  # a reload replaces
            entries.append(ComponentKind(kind, cls, accepts))
            entries.sort(key=lambda e: e.accepts is None)  # predicates first, the default last
        cls.component_kinds = tuple(kinds)
        return cls

    return register


def _import_runtime() -> None:
    for name in RUNTIME_MODULES:
        importlib.import_module(f"routeforge.artifacts.{name}")


def registered_kinds() -> list[str]:
    _import_runtime()
    return sorted(_REGISTRY)


def component_kind(kind: str, config: Mapping[str, Any] | None = None) -> ComponentKind:
    """The registered class for a component of `kind` with `config`; KeyError naming the known kinds."""
    _import_runtime()
    for entry in _REGISTRY.get(kind, []):
        if entry.accepts is None or entry.accepts(config or {}):
            return entry
    raise KeyError(f"component kind {kind!r} has no runtime loader (known: {', '.join(sorted(_REGISTRY))})")
