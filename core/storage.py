"""Parquet in and out with the stage schemas enforced, plus the quarantine for rejected rows."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from routeforge.core.schemas import QUARANTINE, STAGE_SCHEMA_VERSION
from routeforge.core.storage_root import is_remote

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
    """Write a stage file so that a crash never leaves half of one: locally a temporary file renamed
    into place; on an object store one PUT, which becomes visible whole or not at all."""
    metadata = dict(table.schema.metadata or {})
    metadata[_VERSION_KEY] = STAGE_SCHEMA_VERSION.encode()
    table = table.replace_schema_metadata(metadata)
    if is_remote(path):
        with path.open("wb") as handle:
            pq.write_table(table, handle)
        return path
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_parquet(path: Path, schema: pa.Schema | None = None) -> pa.Table:
    if is_remote(path):
        with path.open("rb") as handle:
            table = pq.read_table(handle)
    else:
        table = pq.read_table(path)
    version = (table.schema.metadata or {}).get(_VERSION_KEY, b"?").decode()
    if version != STAGE_SCHEMA_VERSION:
        raise ValueError(
            f"{path}: stage schema version {version}, this code reads {STAGE_SCHEMA_VERSION}; re-materialize it"
        )
    return to_table(table, schema) if schema is not None else table



def _text(value: str) -> str:
    """Text that encodes as UTF-8 (a lone surrogate from a bad input line becomes U+FFFD), so writing
    the quarantine never fails on what it quarantines."""
    return value.encode("utf-8", "replace").decode("utf-8")


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
                "row": _text(str(row_id)),
                "reason": _text(reason),
                "payload": _text(json.dumps(payload, default=str, ensure_ascii=False)[:20_000])
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

    def summary(self) -> str:
        """'N quarantined (k reason, ...)', the most frequent reasons first: what a stage's one-line
        summary and its errors say, so that the reason is read where the count is."""
        if not self.rows:
            return "0 quarantined"
        reasons = sorted(self.reasons().items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{n} {reason}" for reason, n in reasons[:5])
        more = f", {len(reasons) - 5} more reasons" if len(reasons) > 5 else ""
        return f"{len(self.rows)} quarantined ({shown}{more})"

    def write(self, root: Path) -> Path:
        """Write to `<root>/quarantine/<stage>[/<partition>].parquet` (also when empty, to clear old rows)."""
        name = self.stage if self.partition is None else f"{self.stage}/{_safe(self.partition)}"
        root = root if is_remote(root) else Path(root)
        return write_parquet(to_table(self.rows, QUARANTINE), root / "quarantine" / f"{name}.parquet")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def quarantine_lines(root: Path, width: int = 120) -> list[str]:
    """One line per stage (partitions together) whose quarantine file under a storage root holds
    rows: the count and the most frequent reasons, cut to `width` characters. What a run's console
    summary shows, so a count is not only in the log file."""
    folder = (root if is_remote(root) else Path(root)) / "quarantine"  # an object store's root too
    if not folder.is_dir():
        return []
    counts: dict[str, dict[str, int]] = {}
    for path in sorted(folder.rglob("*.parquet"), key=str):
        stage = str(path)[len(str(folder)):].strip("/").split("/")[0].removesuffix(".parquet")
        for reason in read_parquet(path).column("reason").to_pylist():
            counts.setdefault(stage, {})[reason] = counts.setdefault(stage, {}).get(reason, 0) + 1
    lines = []
    for stage, reasons in counts.items():
        ordered = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        line = f"quarantined in {stage}: {sum(reasons.values())} ({', '.join(f'{n} {r}' for r, n in ordered)})"
        lines.append(line if len(line) <= width else line[:width - 1] + "…")
    return lines


safe_name = _safe


class ShardCache:
    """Append-only Parquet shards of rows keyed by one column: a durable, resumable cache.

    Each `append` writes one whole shard under a unique name, so a process killed at any point
    leaves only whole shards. Locally the shard is written to a temporary name and renamed. An
    object store has no rename: the shard is one PUT and is *committed* by an empty marker object
    (`<shard>.committed`) written after it; `load` ignores and deletes shards without a marker.
    `load` also sets aside a shard it cannot read (renamed `*.unreadable-<error>`) and keeps the
    first row seen per key. One writer per folder at a time (Dagster runs one partition once).
    """

    MARKER = ".committed"

    def __init__(self, folder: Path, schema: pa.Schema, key: str = "cache_key", compact_above: int = 64,
                 compact_rows: int = 16_384):
        self.remote = is_remote(folder)
        self.folder = folder if self.remote else Path(folder)
        self.schema = schema
        self.key = key
        self.compact_above = compact_above
        self.compact_rows = compact_rows

    def _names(self) -> set[str]:
        if self.remote:  # another process may have written or deleted shards since the last listing
            self.folder.fs.invalidate_cache(self.folder.path)
        if not self.folder.exists():
            return set()
        return {p.name for p in self.folder.iterdir()}

    def shards(self, names: set[str] | None = None) -> list[Path]:
        """Committed shards, oldest first (`names`: a listing of the folder already taken)."""
        names = self._names() if names is None else names
        shards = sorted(n for n in names if n.startswith("shard-") and n.endswith(".parquet"))
        if self.remote:
            shards = [n for n in shards if n + self.MARKER in names]
        return [self.folder / n for n in shards]

    def _clear_uncommitted(self, names: set[str]) -> None:
        """Delete what killed writers left: temporary files locally, unmarked shards remotely."""
        if self.remote:
            stale = [n for n in names if n.startswith("shard-") and n.endswith(".parquet")
                     and n + self.MARKER not in names]
        else:
            stale = [n for n in names if n.startswith("shard-") and ".parquet.tmp" in n]
        for name in stale:
            (self.folder / name).unlink(missing_ok=True)

    def _set_aside(self, shard: Path, error: Exception) -> None:
        aside = shard.with_suffix(f".unreadable-{type(error).__name__}")
        if self.remote:
            shard.fs.mv(shard.path, aside.path)
            (self.folder / (shard.name + self.MARKER)).unlink(missing_ok=True)
        else:
            shard.rename(aside)

    def _tables(self, shards: list[Path] | None = None) -> Iterator[pa.Table]:
        """The rows of `shards` (default: every committed shard, after clearing what killed writers
        left), oldest first; a shard that cannot be read is set aside."""
        if shards is None:
            names = self._names()  # one listing serves both: uncommitted names are never in `shards`
            self._clear_uncommitted(names)
            shards = self.shards(names)
        for shard in shards:
            try:
                yield read_parquet(shard, self.schema)
            except FileNotFoundError:
                continue  # removed since the listing (a compaction elsewhere): its rows are in the merged shard
            except Exception as exc:  # noqa: BLE001 - a shard we cannot read is set aside, not fatal
                self._set_aside(shard, exc)

    def tables(self, shards: list[Path] | None = None) -> Iterator[pa.Table]:
        """Each shard's rows (default: every committed shard), oldest first, in the cache's schema:
        one shard in memory at a time (a key may recur in a later shard; the first wins, as in `load`)."""
        for table in self._tables(shards):
            yield table.select(self.schema.names).cast(self.schema)

    def load(self) -> dict[str, dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {}
        for table in self._tables():
            for row in table.to_pylist():
                rows.setdefault(row[self.key], row)
        return rows

    def load_table(self) -> pa.Table:
        """Every cached row as one Arrow table, the first row per key: columnar, so a million cached
        embeddings stay one buffer instead of a million Python lists."""
        return self._first_per_key(list(self.tables()))

    def _first_per_key(self, tables: list[pa.Table]) -> pa.Table:
        if not tables:
            return self.schema.empty_table()
        table = pa.concat_tables(tables)
        keys = table.column(self.key)
        first = pc.index_in(pc.unique(keys), value_set=keys)  # first position of each distinct key
        return table if len(first) == table.num_rows else table.take(first)

    def append(self, rows: list[dict[str, Any]] | pa.Table) -> Path | None:
        if len(rows) == 0:
            return None
        name = f"shard-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        path = write_parquet(to_table(rows, self.schema), self.folder / name)
        if self.remote:
            (self.folder / (name + self.MARKER)).write_bytes(b"")
        return path

    def remove(self, shard: Path) -> None:
        """Uncommit (remote: marker first), then delete."""
        if self.remote:
            (self.folder / (shard.name + self.MARKER)).unlink(missing_ok=True)
        shard.unlink(missing_ok=True)

    def compact(self) -> None:
        """Merge the small shards (fewer than `compact_rows` rows each: a day's few new rows) into
        one when there are more than `compact_above` of them; whole-sized shards stay as they are,
        so the cache never becomes one file that must be read whole. A crash in between leaves
        duplicates, which `load` tolerates (first wins, and the rows are identical)."""
        shards = self.shards()
        if len(shards) <= self.compact_above:  # too few to hold that many small ones: no metadata read
            return
        small = [shard for shard in shards if self._rows_in(shard) < self.compact_rows]
        if len(small) <= self.compact_above:
            return
        merged = self.append(self._first_per_key(list(self.tables(small))))
        for shard in small:
            if str(shard) != str(merged):
                self.remove(shard)

    def _rows_in(self, shard: Path) -> int:
        with shard.open("rb") as handle:
            return pq.ParquetFile(handle).metadata.num_rows
