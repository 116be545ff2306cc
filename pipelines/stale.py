"""Which assets of a job a run must materialize: those missing or stale, judged from the code and
data versions Dagster records on each materialization (`pipelines/versions.py`), plus the ones re-read
every run.

`run_pipeline` asks `plan` before each of its steps and runs only what it names, so an unchanged
re-run materializes nothing. The judgment reads only Dagster's public API (the asset specs of
`Definitions`, `DagsterInstance.fetch_materializations`) and the provenance tags every materialization
carries (`dagster/code_version`, `dagster/data_version`, `dagster/input_data_version/<input>`,
`dagster/input_event_pointer/<input>`). It follows the rules of the stale status the UI shows on each
asset, and says its causes in the UI's words ("has a new code version", "has a new dependency data
version (quality)"); the demo's end-to-end test holds the two to the same verdict, and
`benchmarks/stale_equivalence.py` to the UI's over random histories. Dagster's own resolver is internal
(`dagster._core`), which would pin routeforge to one Dagster minor version.
"""

from __future__ import annotations

import graphlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import dagster as dg
from routeforge.core.components import TYPE_TAG
from routeforge.pipelines.definitions import job_selections
from routeforge.pipelines.versions import CONTENT_VERSIONED, always_reread
from routeforge.registry.release import ModelRegistry
from routeforge.registry.store import registry_lock

# the provenance tags Dagster writes on every materialization of a versioned asset (documented in its
# "Asset versioning and caching" guide, read back here)
CODE_VERSION_TAG = "dagster/code_version"
DATA_VERSION_TAG = "dagster/data_version"
INPUT_DATA_VERSION_TAG = "dagster/input_data_version/"
INPUT_EVENT_POINTER_TAG = "dagster/input_event_pointer/"
# what Dagster records for an input that had no data version when the asset was materialized, and what
# it then reads as its version while it still has none (not a change, as in Dagster's resolver)
INITIAL = "INITIAL"


@dataclass
class Plan:
    """What one job run must materialize, and why (asset → reason)."""

    selection: list[dg.AssetKey] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.selection)


class Versions:
    """The asset graph of one `Definitions` (from its public asset specs) and the versions on record in
    one instance, each record fetched once per plan."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance):
        self.defs, self.instance = defs, instance
        self.specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
        self._latest: dict[tuple[dg.AssetKey, str | None], dg.EventLogRecord | None] = {}

    @cached_property
    def order(self) -> list[dg.AssetKey]:
        """Every asset, parents before children."""
        graph = {key: {d.asset_key for d in spec.deps if d.asset_key in self.specs} for key, spec in self.specs.items()}
        return list(graphlib.TopologicalSorter(graph).static_order())

    def parents(self, key: dg.AssetKey) -> list[dg.AssetKey]:
        return [d.asset_key for d in self.specs[key].deps if d.asset_key in self.specs]

    def record(self, key: dg.AssetKey, partition: str | None, *, after: int | None = None,
               before: int | None = None) -> dg.EventLogRecord | None:
        """The newest materialization of the asset (partition), within storage ids (after, before)."""
        cached = after is None and before is None
        if cached and (key, partition) in self._latest:
            return self._latest[(key, partition)]
        found = self.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None,
                                  after_storage_id=after, before_storage_id=before), limit=1).records
        latest = found[0] if found else None
        if cached:
            self._latest[(key, partition)] = latest
        return latest

    def partitions_read(self, key: dg.AssetKey, partition: str | None, parent: dg.AssetKey) -> list[str | None]:
        """The partitions of `parent` that the asset (partition) reads, by Dagster's default mapping:
        an unpartitioned parent as a whole, the same partition of a parent partitioned alike, every
        partition of a partitioned parent read by an unpartitioned asset."""
        mine, theirs = self.specs[key].partitions_def, self.specs[parent].partitions_def
        dep = next(d for d in self.specs[key].deps if d.asset_key == parent)
        if theirs is None:
            return [None]
        if dep.partition_mapping is None and mine is None:
            return list(theirs.get_partition_keys())
        if dep.partition_mapping is None and mine == theirs:
            return [partition]
        raise ValueError(f"{key.to_user_string()} reads {parent.to_user_string()} through a partition mapping "
                         "pipelines/stale.py does not follow (only Dagster's default mapping is planned)")


def _tags(record: dg.EventLogRecord | None) -> dict[str, str]:
    return dict(record.asset_materialization.tags or {}) if record is not None and record.asset_materialization else {}


def _data_version(record: dg.EventLogRecord | None) -> str | None:
    return _tags(record).get(DATA_VERSION_TAG) if record is not None else None


def stale_causes(versions: Versions, key: dg.AssetKey, partition: str | None) -> list[str]:
    """Why an asset (partition) materialized before no longer matches its code and inputs; empty when it
    does. The rules of Dagster's stale status: a code version unlike the recorded one; an input the
    record does not name, or names no more; an unpartitioned input whose current data version differs
    from the recorded one; a partition of an input materialized again, after the one recorded, with
    another data version."""
    tags = _tags(versions.record(key, partition))
    causes: list[str] = []
    code_version = versions.specs[key].code_version
    if code_version and CODE_VERSION_TAG in tags and tags[CODE_VERSION_TAG] != code_version:
        causes.append("has a new code version")
    parents = versions.parents(key)
    recorded = {k.removeprefix(INPUT_DATA_VERSION_TAG) for k in tags if k.startswith(INPUT_DATA_VERSION_TAG)}
    if recorded:
        causes += [f"removed dependency on {name}" for name in sorted(recorded - {p.to_user_string() for p in parents})]
    for parent in parents:
        name = parent.to_user_string()
        if recorded and name not in recorded:
            causes.append(f"has a new dependency on {name}")
            continue
        if not recorded:  # a record without provenance: nothing to compare (Dagster falls back to timestamps)
            continue
        for part in versions.partitions_read(key, partition, parent):
            if _input_changed(versions, tags, parent, part):
                causes.append(f"has a new dependency data version ({name})")
                break
    return causes


def _input_changed(versions: Versions, tags: dict[str, str], parent: dg.AssetKey, partition: str | None) -> bool:
    name = parent.to_user_string()
    if partition is None:
        current = _data_version(versions.record(parent, None))
        before = tags.get(INPUT_DATA_VERSION_TAG + name)
        return not (before == INITIAL and current is None) and before != current
    pointer = tags.get(INPUT_EVENT_POINTER_TAG + name, "")
    cursor = int(pointer) if pointer.isdigit() else None
    updated = versions.record(parent, partition, after=cursor)
    if updated is None:
        return False
    previous = versions.record(parent, partition, before=cursor + 1 if cursor else None)
    return _data_version(previous) != _data_version(updated)


EXTENSIONS = {"parquet_io": ".parquet", "json_io": ".json"}  # pipelines/io_managers.py


def lost(defs: dg.Definitions, key: dg.AssetKey, partition: str | None, config) -> str | None:
    """What of an asset's stored value is gone from the storage root although Dagster's records say
    it was materialized (a storage folder moved away, files deleted, a bucket emptied): its output
    file, or the component folder a trained result points at. Losing a file means rebuilding it, so
    `why` reports such an asset as due instead of up to date (it used to crash the next reader)."""
    extension = EXTENSIONS.get(defs.resolve_assets_def(key).get_io_manager_key_for_asset_key(key))
    if extension is None:
        return None
    path = config.storage.path("assets").joinpath(*key.path, *([partition] if partition else []))
    path = path.with_suffix(path.suffix + extension)  # as UPathIOManager names it
    if not path.exists():
        return f"its stored value {path} is gone"
    if extension == ".json":
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            return f"its stored value {path} is unreadable"
        if isinstance(value, dict) and value.get("__type__") == TYPE_TAG:
            for component in value.get("components", []):
                if not config.storage.holds(Path(component["folder"])):
                    return f"its component folder {component['folder']} is gone"
    return None


def why(versions: Versions, key: dg.AssetKey, partition: str | None, config) -> str | None:
    """Why the asset (partition) must be materialized, or None when it is up to date: re-read every
    run, missing, stale (`stale_causes`), or up to date on record with its stored value gone (`lost`)."""
    partition = partition if versions.specs[key].partitions_def is not None else None
    if always_reread(key.to_user_string(), partition, config):
        return "re-reads its sources every run"
    if versions.record(key, partition) is None:
        return "missing"
    if causes := stale_causes(versions, key, partition):
        return "; ".join(sorted(set(causes)))
    return lost(versions.defs, key, partition, config)


def ungated(defs: dg.Definitions, instance: dg.DagsterInstance) -> str | None:
    """The registry is outside Dagster's view: a run stopped between registering a version and
    gating it leaves the gate up to date on record, so the gate is due while that version has no
    decision."""
    try:
        bundle = defs.load_asset_value("router_bundle", instance=instance)
    except Exception:  # never materialized (or unreadable): the bundle, and so the gate, run anyway
        return None
    registry = ModelRegistry(bundle["tracking_uri"], bundle["model_name"])
    with registry_lock(bundle["tracking_uri"]):
        gated = registry.gated(bundle["registry_version"])
    return None if gated else f"registry version {bundle['registry_version']} was never gated"


def plan(defs: dg.Definitions, instance: dg.DagsterInstance, job: str, partition: str | None, config,
         done: frozenset[str] = frozenset()) -> Plan:
    """The next run of `job` for `partition`: every asset that is missing or stale, and what reads
    one within the job; except that what reads a content-versioned asset (the prompt set, routing
    table, tier profiles) rebuilt in this run, and is not stale on its own, waits for the next run,
    to be judged by the data version that asset then carries (and so does what reads it). `done`:
    assets this step already materialized (not planned again)."""
    versions = Versions(defs, instance)
    selected = set(job_selections(config)[job])
    keys = [k for k in versions.order if k.to_user_string() in selected and k.to_user_string() not in done]
    reasons = {k.to_user_string(): r for k in keys if (r := why(versions, k, partition, config))}
    if "release_gate" in {k.to_user_string() for k in keys} and "release_gate" not in reasons:
        if pending := ungated(defs, instance):
            reasons["release_gate"] = pending
    chosen: list[dg.AssetKey] = []
    waiting: set[dg.AssetKey] = set()
    for key in keys:  # dependency order: a parent is decided before its children
        name = key.to_user_string()
        parents = set(versions.parents(key))
        if parents & waiting:
            waiting.add(key)
        elif name in reasons:
            chosen.append(key)
        elif rebuilt := [p for p in parents if p in chosen and p.to_user_string() not in CONTENT_VERSIONED]:
            chosen.append(key)
            reasons[name] = f"reads {', '.join(p.to_user_string() for p in rebuilt)}, rebuilt in this run"
        elif any(p in chosen for p in parents):
            waiting.add(key)
    return Plan(chosen, {k.to_user_string(): reasons[k.to_user_string()] for k in chosen})
