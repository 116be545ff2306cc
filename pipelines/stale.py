"""Which assets of a job a run must materialize: those missing or stale, as Dagster judges them from
the code and data versions on record (`pipelines/versions.py`), plus the ones re-read every run.

`run_pipeline` asks `plan` before each of its steps and runs only what it names, so an unchanged
re-run materializes nothing; the reasons it returns are Dagster's own stale causes, the same the
UI shows on each asset. The resolver is Dagster's internal one (what its UI and
`RunRequest(stale_assets_only=True)` use), hence the minor-version upper bound on dagster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.definitions.temporal_context import TemporalContext
from dagster._time import get_current_datetime
from routeforge.pipelines.versions import CONTENT_VERSIONED, always_reread


@dataclass
class Plan:
    """What one job run must materialize, and why (asset → reason)."""

    selection: list[dg.AssetKey] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.selection)


def job_assets(defs: dg.Definitions, job: str) -> list[dg.AssetKey]:
    """The job's assets in dependency order."""
    graph = defs.resolve_asset_graph()
    selected = set(defs.resolve_job_def(job).asset_layer.selected_asset_keys)
    return [key for key in graph.toposorted_asset_keys if key in selected]


def _resolver(defs: dg.Definitions, instance: dg.DagsterInstance) -> CachingStaleStatusResolver:
    graph = defs.resolve_asset_graph()
    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=graph)
    return CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)


EXTENSIONS = {"parquet_io": ".parquet", "json_io": ".json"}  # pipelines/io_managers.py


def lost(defs: dg.Definitions, key: dg.AssetKey, partition: str | None, config) -> str | None:
    """What of an asset's stored value is gone from the storage root although Dagster's records say
    it was materialized (a storage folder moved away, files deleted, a bucket emptied): its output
    file, or the component folder a trained result points at. Losing a file means rebuilding it, so
    `why` reports such an asset as due instead of up to date (it used to crash the next reader)."""
    from routeforge.core.components import TYPE_TAG

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


def why(resolver: CachingStaleStatusResolver, key: dg.AssetKey, partition: str | None, config,
        defs: dg.Definitions | None = None) -> str | None:
    """Why the asset (partition) must be materialized, or None when it is up to date. With `defs`,
    an asset up to date on record whose stored value is gone is due too (`lost`)."""
    graph = resolver.asset_graph
    partition = partition if graph.get(key).is_partitioned else None
    name = key.to_user_string()
    if always_reread(name, partition, config):
        return "re-reads its sources every run"
    status = resolver.get_status(key, partition)
    if status == StaleStatus.MISSING:
        return "missing"
    if status == StaleStatus.STALE:
        causes = resolver.get_stale_causes(key, partition)
        return "; ".join(sorted({_cause(c) for c in causes})) or "stale"
    if defs is not None and (gone := lost(defs, key, partition, config)):
        return gone
    return None


def ungated(defs: dg.Definitions, instance: dg.DagsterInstance) -> str | None:
    """The registry is outside Dagster's view: a run stopped between registering a version and
    gating it leaves the gate up to date on record, so the gate is due while that version has no
    decision."""
    from routeforge.registry.release import Registry
    from routeforge.registry.store import registry_lock

    try:
        bundle = defs.load_asset_value("router_bundle", instance=instance)
    except Exception:  # never materialized (or unreadable): the bundle, and so the gate, run anyway
        return None
    registry = Registry(bundle["tracking_uri"], bundle["model_name"])
    with registry_lock(bundle["tracking_uri"]):
        gated = registry.gated(bundle["registry_version"])
    return None if gated else f"registry version {bundle['registry_version']} was never gated"


def _cause(cause) -> str:
    dep = f" ({cause.dependency.asset_key.to_user_string()})" if cause.dependency else ""
    return f"{cause.reason}{dep}"


def plan(defs: dg.Definitions, instance: dg.DagsterInstance, job: str, partition: str | None, config,
         done: frozenset[str] = frozenset()) -> Plan:
    """The next run of `job` for `partition`: every asset that is missing or stale, and what reads
    one within the job; except that what reads a content-versioned asset (the prompt set, routing
    table, tier profiles) rebuilt in this run, and is not stale on its own, waits for the next run,
    to be judged by the data version that asset then carries (and so does what reads it). `done`:
    assets this step already materialized (not planned again)."""
    keys = [k for k in job_assets(defs, job) if k.to_user_string() not in done]
    resolver = _resolver(defs, instance)
    reasons = {k.to_user_string(): r for k in keys if (r := why(resolver, k, partition, config, defs))}
    if "release_gate" in {k.to_user_string() for k in keys} and "release_gate" not in reasons:
        if pending := ungated(defs, instance):
            reasons["release_gate"] = pending
    graph = defs.resolve_asset_graph()
    chosen: list[dg.AssetKey] = []
    waiting: set[dg.AssetKey] = set()
    for key in keys:  # dependency order: a parent is decided before its children
        name = key.to_user_string()
        parents = graph.get(key).parent_keys
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
