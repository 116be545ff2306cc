"""The runtime a router service installs: verify, load and decide with a routeforge bundle.

Its rooms (each a subpackage; import-linter holds them in this order, each importing only those below):
`cli` (the `routeforge` command), `operating` (replay and off-policy estimates on logged traffic),
`bundle` (manifest, signing, keyring, verification, download and cache, `load_bundle`), `deciding` (the
component kinds and the `Dispatcher`), `common` (extension registries, JSON, local folders).

The names a router service uses are importable from here, each loaded on first use (so that
`import routeforge.artifacts` costs nothing until one is asked for).
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "load_bundle": "routeforge.artifacts.bundle.loader",
    "RouterBundle": "routeforge.artifacts.bundle.loader",
    "Routing": "routeforge.artifacts.bundle.loader",
    "verify_bundle": "routeforge.artifacts.bundle.verification",
    "BundleVerificationError": "routeforge.artifacts.bundle.verification",
    "Dispatcher": "routeforge.artifacts.deciding.dispatch",
    "Decision": "routeforge.artifacts.deciding.dispatch",
    "LiveState": "routeforge.artifacts.deciding.dispatch",
    "HEURISTICS": "routeforge.artifacts.deciding.heuristics",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'routeforge.artifacts' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
