"""Helpers that turn library results into Dagster metadata (no logic of the stages themselves)."""

from __future__ import annotations

import math
from typing import Any

import dagster as dg

from core.storage import Quarantine


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
