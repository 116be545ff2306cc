"""Component kinds, each registered by the class that loads it: the bundle finds a loader by kind.

A bundle's manifest lists components with a `kind` (`knn_estimator`, `router`, `latency_heads`,
`routing_policy`, `length_predictor`, ...). Each runtime class declares the kind (or kinds) it
serves with `@register_component`, next to its own `load(folder)` (and, where the runtime writes
the format, `save`): `RouterBundle.component(name)` looks the kind up here, so adding a kind is one
module of `artifacts/deciding/` with one decorator (`COMPONENTS`, a registry that finds the modules itself).

Two classes may serve one kind where the component's config tells them apart: `accepts` is a
predicate on that config (a heuristic routing policy is a JSON spec, a learned one an ONNX graph);
the first class whose predicate holds, in registration order, wins, and a class without one is the
kind's default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routeforge.artifacts.common.extensions import Registry


@dataclass(frozen=True)
class ComponentKind:
    kind: str
    cls: type
    accepts: Callable[[Mapping[str, Any]], bool] | None = None

    def load(self, folder: Path) -> Any:
        return self.cls.load(Path(folder))


# "<kind>/<class>" → the class; each entry's metadata holds its `kind` and `accepts`
COMPONENTS: Registry[type] = Registry("component kind", ("routeforge.artifacts.deciding",))


def register_component(*kinds: str, accepts: Callable[[Mapping[str, Any]], bool] | None = None):
    """Class decorator: instances of `kinds` load with `cls.load(folder)`."""
    if not kinds:
        raise ValueError("register_component needs at least one kind")

    def register(cls: type) -> type:
        if not callable(getattr(cls, "load", None)):
            raise TypeError(f"{cls.__name__} registers {kinds} but has no load(folder)")
        for kind in kinds:
            COMPONENTS.add(f"{kind}/{cls.__qualname__}", cls, cls.__module__, cls.__qualname__, kind=kind,
                           accepts=accepts)
        cls.component_kinds = tuple(kinds)
        return cls

    return register


def _classes(kind: str | None = None) -> list[ComponentKind]:
    """The registered classes (of one kind), predicates first and the default last, else in
    registration order."""
    found = [ComponentKind(e.metadata["kind"], e.value, e.metadata["accepts"]) for e in COMPONENTS.entries()]
    return sorted((c for c in found if kind is None or c.kind == kind), key=lambda c: c.accepts is None)


def registered_kinds() -> list[str]:
    return sorted({c.kind for c in _classes()})


def component_kind(kind: str, config: Mapping[str, Any] | None = None) -> ComponentKind:
    """The registered class for a component of `kind` with `config`; KeyError naming the known kinds."""
    for entry in _classes(kind):
        if entry.accepts is None or entry.accepts(config or {}):
            return entry
    raise KeyError(f"component kind {kind!r} has no runtime loader (known: {', '.join(registered_kinds())})")
