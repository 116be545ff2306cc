"""Parquet in and out with the stage schemas enforced, plus the quarantine for rejected rows."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core.schemas import QUARANTINE, STAGE_SCHEMA_VERSION

_VERSION_KEY = b"routeforge.stage_schema_version"


def to_table(rows: list[dict[str, Any]] | pa.Table, schema: pa.Schema) -> pa.Table:
    """Build a table that matches `schema` exactly; a missing or mistyped column raises, naming it."""
    if isinstance(rows, pa.Table):
        missing = [n for n in schema.names if n not in rows.column_names]
        if missing:
            raise ValueError(f"table lacks columns {missing}")
        return rows.select(schema.names).cast(schema)
    columns = {}
    for f in schema:
        values = [r.get(f.name) for r in rows]
        try:
            columns[f.name] = pa.array(values, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"column {f.name!r}: {exc}") from exc
    return pa.Table.from_pydict(columns, schema=schema)


def write_parquet(table: pa.Table, path: Path) -> Path:
    """Atomic write (temp file + rename) so a crash never leaves a half-written stage file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = dict(table.schema.metadata or {})
    metadata[_VERSION_KEY] = STAGE_SCHEMA_VERSION.encode()
    table = table.replace_schema_metadata(metadata)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_parquet(path: Path, schema: pa.Schema | None = None) -> pa.Table:
    table = pq.read_table(path)
    version = (table.schema.metadata or {}).get(_VERSION_KEY, b"?").decode()
    if version != STAGE_SCHEMA_VERSION:
        raise ValueError(
            f"{path}: stage schema version {version}, this code reads {STAGE_SCHEMA_VERSION}; re-materialize it"
        )
    return to_table(table, schema) if schema is not None else table


@dataclass
class Quarantine:
    """Collects rows a stage refuses, each with a reason, instead of failing or dropping them silently."""

    stage: str
    partition: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, row_id: str, reason: str, payload: Any = None) -> None:
        self.rows.append(
            {
                "stage": self.stage,
                "partition": self.partition,
                "row": str(row_id),
                "reason": reason,
                "payload": json.dumps(payload, default=str, ensure_ascii=False)[:20_000]
                if payload is not None
                else None,
            }
        )

    def __len__(self) -> int:
        return len(self.rows)

    def reasons(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.rows:
            counts[r["reason"]] = counts.get(r["reason"], 0) + 1
        return counts

    def write(self, root: Path) -> Path:
        """Write to `<root>/quarantine/<stage>[/<partition>].parquet` (also when empty, to clear old rows)."""
        name = self.stage if self.partition is None else f"{self.stage}/{_safe(self.partition)}"
        return write_parquet(to_table(self.rows, QUARANTINE), Path(root) / "quarantine" / f"{name}.parquet")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


safe_name = _safe


class ShardCache:
    """Append-only Parquet shards of rows keyed by one column: a durable, resumable cache.

    Each `append` writes one shard to a temporary name and renames it, so a process killed at any
    point leaves only whole shards. `load` removes leftover temporary files, sets aside a shard it
    cannot read (renamed `*.unreadable-<error>`) and keeps the first row seen per key.
    """

    def __init__(self, folder: Path, schema: pa.Schema, key: str = "cache_key", compact_above: int = 64):
        self.folder = Path(folder)
        self.schema = schema
        self.key = key
        self.compact_above = compact_above

    def shards(self) -> list[Path]:
        return sorted(self.folder.glob("shard-*.parquet"))

    def load(self) -> dict[str, dict[str, Any]]:
        for stale in self.folder.glob("shard-*.parquet.tmp*"):
            stale.unlink(missing_ok=True)
        rows: dict[str, dict[str, Any]] = {}
        for shard in self.shards():
            try:
                table = read_parquet(shard, self.schema)
            except Exception as exc:  # noqa: BLE001 - a shard we cannot read is set aside, not fatal
                shard.rename(shard.with_suffix(f".unreadable-{type(exc).__name__}"))
                continue
            for row in table.to_pylist():
                rows.setdefault(row[self.key], row)
        return rows

    def append(self, rows: list[dict[str, Any]]) -> Path | None:
        if not rows:
            return None
        name = f"shard-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        return write_parquet(to_table(rows, self.schema), self.folder / name)

    def compact(self) -> None:
        """Merge shards into one when there are many; a crash in between leaves duplicates, which
        `load` tolerates (first wins, and the rows are identical)."""
        shards = self.shards()
        if len(shards) <= self.compact_above:
            return
        merged = self.append(list(self.load().values()))
        for shard in shards:
            if shard != merged:
                shard.unlink(missing_ok=True)
