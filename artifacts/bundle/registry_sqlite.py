"""The few registry reads a router service makes on every start (`registry_rest`'s), on a local SQLite
store, with the standard library's sqlite3 opened read-only. Why not MLflow's client: importing it and
setting up its SQLAlchemy store took ~2.5 s of a warm `bundle predict models:/…@champion` (3.8 s in
all, against 1.3 s through a server), for two lookups.

It reads MLflow's own tables (`registered_models`, `registered_model_aliases`,
`registered_model_tags`, `model_versions`). A store it cannot read so (another schema version, a
model in several workspaces, a locked or damaged file) raises `Unreadable`, and the caller asks
MLflow's client, which says what the store holds; nothing here ever writes."""

from __future__ import annotations

import sqlite3
from typing import Any

from routeforge.artifacts.bundle.registry_rest import NotFound, resolve_version
from routeforge.artifacts.common.state_folder import sqlite_file


class Unreadable(ValueError):
    """The store is not one this module reads (the caller falls back to MLflow's client)."""


def is_sqlite(tracking_uri: str | None) -> bool:
    return bool(tracking_uri) and sqlite_file(tracking_uri) is not None


def _rows(tracking_uri: str, *queries: tuple[str, tuple]) -> list[list[tuple]]:
    """Each (query, parameters)'s rows, read in one read-only connection."""
    database = sqlite_file(tracking_uri)
    if database is None or not database.is_file():
        raise Unreadable(f"{tracking_uri}: no SQLite file")
    try:
        with sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0) as connection:
            return [connection.execute(query, params).fetchall() for query, params in queries]
    except sqlite3.Error as exc:  # no such table or column, locked, not a database
        raise Unreadable(f"{tracking_uri}: {exc}") from None


def schema_revision(tracking_uri: str) -> str | None:
    """The Alembic revision MLflow recorded in the store (None: no schema recorded, or not readable)."""
    try:
        rows = _rows(tracking_uri, ("SELECT version_num FROM alembic_version", ()))[0]
    except Unreadable:
        return None
    return rows[0][0] if rows else None


def registered_model(tracking_uri: str, name: str) -> dict[str, Any]:
    """{name, tags: {key: value}, aliases: {alias: version}} of a registered model, as `registry_rest`."""
    found, tags, aliases = _rows(tracking_uri,
                                 ("SELECT workspace FROM registered_models WHERE name = ?", (name,)),
                                 ("SELECT key, value FROM registered_model_tags WHERE name = ?", (name,)),
                                 ("SELECT alias, version FROM registered_model_aliases WHERE name = ?", (name,)))
    if not found:
        raise NotFound(name)
    if len(found) > 1:  # one name in several workspaces: MLflow's client knows which is meant
        raise Unreadable(f"{name}: registered in {len(found)} workspaces")
    return {"name": name, "tags": {key: value or "" for key, value in tags},
            "aliases": {alias: str(version) for alias, version in aliases}}


def version_of(tracking_uri: str, uri: str) -> tuple[str, str]:
    """`registry_rest.resolve_version` over the SQLite file."""

    def check_version(name: str, version: str) -> None:
        if not version.isdigit() or not _rows(
                tracking_uri, ("SELECT 1 FROM model_versions WHERE name = ? AND version = ?", (name, int(version))))[0]:
            raise NotFound(f"{name}/{version}")

    return resolve_version(uri, lambda name: registered_model(tracking_uri, name)["aliases"], check_version)
