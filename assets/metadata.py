"""Helpers that turn library results into Dagster metadata (no logic of the stages themselves)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
from routeforge.core.storage import Quarantine


def clean(values: dict[str, Any]) -> dict[str, Any]:
    """Drop None/NaN values, which Dagster metadata cannot hold, and round floats for the UI."""
    out = {}
    for key, value in values.items():
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        out[key] = round(value, 6) if isinstance(value, float) else value
    return out


def quarantine_metadata(quarantine: Quarantine, path) -> dict[str, Any]:
    return {
        "quarantined_rows": len(quarantine),
        "quarantine_reasons": dg.MetadataValue.json(quarantine.reasons()),
        "quarantine_path": dg.MetadataValue.path(str(path)),
    }


def markdown_table(rows: list[dict[str, Any]]) -> dg.MetadataValue:
    if not rows:
        return dg.MetadataValue.md("(empty)")
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")
    return dg.MetadataValue.md("\n".join(lines))


# Dagster's asset page renders markdown images, data URIs included, so a plot is visible where the
# materialization is read; a plot larger than this is linked by path instead (the event log keeps
# every materialization's metadata, and a few MB per event would bloat it).
INLINE_PLOT_BYTES = 400_000


def inline_plot(path) -> dg.MetadataValue:
    """A PNG as an inline markdown image (its file path under it), or the path alone when large."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size > INLINE_PLOT_BYTES:
        return dg.MetadataValue.path(str(path))
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return dg.MetadataValue.md(f"![{path.stem}](data:image/png;base64,{data})\n\n`{path}`")


def plot_entries(paths, prefix: str = "plot_") -> dict[str, dg.MetadataValue]:
    """One metadata entry per plot, keyed by its file stem (unique within one materialization)."""
    return {f"{prefix}{Path(p).stem}": inline_plot(p) for p in paths}


def content_version(value: pa.Table | dict) -> dg.DataVersion:
    """A data version from the output's content (a table's rows and schema, or a JSON summary): an
    asset re-materialized with the same content leaves what reads it up to date
    (`pipelines/versions.py`)."""
    digest = hashlib.sha256()
    if isinstance(value, pa.Table):
        # the IPC stream is written straight into the hash: no second copy of the table in memory
        table = value.replace_schema_metadata(None).combine_chunks()
        with pa.PythonFile(_HashSink(digest), mode="w") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        digest.update(json.dumps(value, sort_keys=True, default=str).encode())
    return dg.DataVersion(digest.hexdigest()[:32])


class _HashSink:
    """A write-only file object that feeds what it is given to a hash."""

    def __init__(self, digest):
        self.digest, self.closed = digest, False

    def write(self, data) -> int:
        self.digest.update(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
