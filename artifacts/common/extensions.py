"""One way to extend routeforge: a `Registry` per open set of kinds (generation engines, quality metrics,
routing heuristics, …), filled by the modules that define them.

A registry knows the package where its kind's modules live and imports every module in it the first
time it is asked for a name (`discover`), so a new engine, metric or heuristic is one new module in
that folder, with one decorator: no list to edit, no if-chain on its name, no schema to regenerate by
hand (the fleet file's allowed values and `fleet.schema.json`'s enums are the registries' names).

Modules outside routeforge register the same way: `$ROUTEFORGE_EXTENSIONS` names them (comma-separated
module or package names, importable from `sys.path`), and each registry imports them with its own
modules. A plugin may add to any kind; a name already taken by another object is an error naming
both modules, never a silent override.

The class lives in the runtime layer (`artifacts/`, importable alone) because the runtime's own open
sets (heuristics, bundle components) are registries too; everything above reuses it.
"""

from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
EXTENSIONS_VARIABLE = "ROUTEFORGE_EXTENSIONS"


class UnknownName(KeyError):
    """A name no module of the kind registered; the message names the kind, the close name and every
    known one."""

    def __str__(self) -> str:  # KeyError quotes its argument; this one is a sentence
        return str(self.args[0])


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered kind: its name, the object (a class or function), what the registering module
    said of it, and where it came from."""

    name: str
    value: T
    module: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


def extension_modules() -> list[str]:
    """The modules and packages `$ROUTEFORGE_EXTENSIONS` names, in order."""
    return [m.strip() for m in os.environ.get(EXTENSIONS_VARIABLE, "").split(",") if m.strip()]


def _modules_in(package: str) -> Iterator[str]:
    """`package` and, when it is a package, every module below it (sorted, so discovery is reproducible)."""
    yield package
    module = importlib.import_module(package)
    if hasattr(module, "__path__"):
        for info in sorted(pkgutil.walk_packages(module.__path__, prefix=f"{package}."), key=lambda i: i.name):
            yield info.name


class KindsNotLoaded(RuntimeError):
    """A registry whose kinds live in the layers above its own was asked before those layers loaded
    them (`loaded_by`): the message names the module to import first."""


_LOADED: set[str] = set()  # the loaders (`loaded_by` names) that have loaded their layers' kinds


def mark_loaded(loader: str) -> None:
    """Called by `loader` once it has imported every kind package it loads (`routeforge.fleet`)."""
    _LOADED.add(loader)


def import_modules(package: str, only: str | None = None) -> None:
    """Import `package` and every module below it (sorted), or with `only` just those of that name:
    how a loader imports a kind's folder, so a new kind is one new module and no list."""
    for name in _modules_in(package):
        if only is None or name == package or name.rsplit(".", 1)[-1] == only:
            importlib.import_module(name)


class Registry(Generic[T]):
    """Names → objects of one kind. `packages`: where the kind's modules live in the registry's own
    layer or below (each imported once, on the first lookup); `$ROUTEFORGE_EXTENSIONS` adds modules from
    outside. `loaded_by`: where the kind's modules live in the layers *above* the registry's, the
    module of the top layer that imports them (a registry never imports upward; a lookup before that
    module has loaded them raises `KindsNotLoaded` naming it, as Django's app registry does before
    `django.setup()`)."""

    def __init__(self, kind: str, packages: tuple[str, ...] = (), loaded_by: str | None = None):
        self.kind = kind
        self.packages = packages
        self.loaded_by = loaded_by
        # the module that declared it: discovery may import its own layer and those below, never above
        # (tests/test_extension_points.py holds every registry to that)
        self.owner = sys._getframe(1).f_globals.get("__name__", "?")
        self._entries: dict[str, Entry[T]] = {}
        self._discovered: tuple[str, ...] | None = None  # the extension modules discovery last saw

    def register(self, name: str, **metadata: Any) -> Callable[[T], T]:
        """Decorator: register the class or function under `name`, with `metadata` (what callers may
        ask of the kind without importing it again: a description, the fields it needs, …)."""

        def add(value: T) -> T:
            self.add(name, value, getattr(value, "__module__", "?"), getattr(value, "__qualname__", name), **metadata)
            return value

        return add

    def add(self, name: str, value: T, module: str, qualname: str, **metadata: Any) -> None:
        """Register `value` as `name`, defined by `qualname` in `module`: the same definition registered
        again (a module re-imported) replaces itself; another one under a taken name is an error."""
        held = self._entries.get(name)
        if held is not None and (held.module, held.metadata.get("__qualname__")) != (module, qualname):
            raise ValueError(f"{self.kind} {name!r} is registered twice: by {held.module} and by {module}")
        self._entries[name] = Entry(name, value, module, {**metadata, "__qualname__": qualname})

    def state(self) -> tuple[dict[str, Entry[T]], tuple[str, ...] | None]:
        """What the registry holds (for `restore`: a test that registers kinds of its own puts it back)."""
        return dict(self._entries), self._discovered

    def restore(self, state: tuple[dict[str, Entry[T]], tuple[str, ...] | None]) -> None:
        self._entries, self._discovered = dict(state[0]), state[1]

    def registered(self) -> list[Entry[T]]:
        """What is registered so far, in registration order, without discovering (for a module's own
        checks while it registers)."""
        return list(self._entries.values())

    def discover(self) -> None:
        """Import every module of the kind's packages and of `$ROUTEFORGE_EXTENSIONS` (once; again when
        that variable changes). A module that fails to import is an error naming it."""
        if self.loaded_by is not None and self.loaded_by not in _LOADED:
            raise KindsNotLoaded(f"the {self.kind} kinds live in the layers above the registry's and are not loaded "
                                 f"yet: import {self.loaded_by} first (the CLI, the pipelines, the benchmarks and "
                                 "the tests do)")
        extensions = tuple(extension_modules())
        if self._discovered == extensions:
            return
        for package in (*self.packages, *extensions):
            try:
                import_modules(package)
            except ImportError as exc:
                where = f"${EXTENSIONS_VARIABLE}" if package in extensions else "routeforge"
                raise ImportError(f"{self.kind} modules: {package} (from {where}) does not import: {exc}") from exc
        self._discovered = extensions

    def entry(self, name: str) -> Entry[T]:
        self.discover()
        if name not in self._entries:
            raise UnknownName(self.unknown(name))
        return self._entries[name]

    def get(self, name: str) -> T:
        """The object registered as `name`; an unknown name raises `UnknownName` with the close one."""
        return self.entry(name).value

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        """Every entry, in registration order (discovery imports modules in sorted order)."""
        self.discover()
        return list(self._entries.values())

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._entries

    def unknown(self, name: str) -> str:
        return unknown_name(self.kind, name, self.names())


def unknown_name(kind: str, name: str, known: list[str]) -> str:
    """"unknown <kind> 'x' (did you mean 'y'?); known: a, b, c"."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; known: {', '.join(known)}"


class Choices:
    """Names drawn from several registries, as one set of choices for a config field (`OneOf`): the
    routing policies a fleet may name are the simulator's baselines and the learned policies, each
    kind registered in its own layer. `names`: a function returning them (imports lazily, on the
    first lookup, like a registry's discovery)."""

    def __init__(self, kind: str, names: Callable[[], list[str]]):
        self.kind, self._names = kind, names

    def names(self) -> list[str]:
        return sorted(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def unknown(self, name: str) -> str:
        return unknown_name(self.kind, name, self.names())

