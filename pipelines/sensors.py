"""Continuous retraining: sensors that launch the fleet's named jobs when their inputs change.

- `watch_<name>` per `automation.watch` entry: lists the files under a local folder or fsspec URI
  (`universal-pathlib`) and launches its jobs when one appears or changes (size or modification
  time); the cursor remembers what was seen, so a file launches a run once. The first evaluation
  only records what is already there: a sensor switched on does not retrain on old files.
- `fleet_file_changed`: the fleet file's sha256 against the cursor; launches `on_fleet_change`.

- `retrain_what_is_stale`: Dagster's declarative automation over every asset (`pipelines/versions.py`):
  what is missing or stale is re-materialized, the rest is left alone.

Each launch carries a run key (a hash of what changed), so a re-evaluated tick never launches the
same work twice, and tags naming the trigger. `build_prompts`, the default job, re-reads the prompt
sources; a prompt set that came out different makes generation, scoring and training stale, and
`retrain_what_is_stale` rebuilds them, partition by partition, in dependency order.
"""


import hashlib
import json
import warnings
from pathlib import Path

import dagster as dg
from routeforge.core.config import FleetConfig
from upath import UPath


def _listing(uri: str, suffixes: list[str]) -> dict[str, list[float]]:
    root = UPath(uri)
    if not root.exists():
        return {}
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and path.name.endswith(tuple(suffixes)):
            info = path.stat()
            out[str(path)] = [float(info.st_size), float(getattr(info, "st_mtime", 0.0))]
    return out


def _requests(change: str, jobs: list, tags: dict[str, str]) -> list[dg.RunRequest]:
    """A run of each job for `change` (its run key), one per partition of a partitioned job
    (`profile_tiers` re-reads every tier's traffic logs)."""
    out = []
    for job in jobs:
        for partition in job.partitions_def.get_partition_keys() if job.partitions_def is not None else [None]:
            out.append(dg.RunRequest(run_key=f"{change}:{job.name}:{partition or ''}", job_name=job.name,
                                     partition_key=partition, tags=tags))
    return out


def watch_sensor(watch, interval_s: int, jobs: list) -> dg.SensorDefinition:
    @dg.sensor(name=f"watch_{watch.name}", jobs=jobs, minimum_interval_seconds=interval_s,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"New or changed files under {watch.uri} launch {', '.join(watch.jobs)}.")
    def _sensor(context: dg.SensorEvaluationContext):
        now = _listing(watch.uri, watch.suffixes)
        if context.cursor is None:
            context.update_cursor(json.dumps(now))
            return dg.SkipReason(f"recorded {len(now)} existing files under {watch.uri}; new ones launch runs")
        seen = json.loads(context.cursor)
        changed = sorted(p for p, stat in now.items() if seen.get(p) != stat)
        context.update_cursor(json.dumps(now))
        if not changed:
            return dg.SkipReason(f"no new files under {watch.uri}")
        key = hashlib.sha256(json.dumps({p: now[p] for p in changed}).encode()).hexdigest()[:16]
        tags = {"routeforge/trigger": f"watch_{watch.name}",
                "routeforge/files": ",".join(Path(p).name for p in changed)[:900]}
        return _requests(f"{watch.name}:{key}", jobs, tags)

    return _sensor


def fleet_file_sensor(config_path: str, interval_s: int, jobs: list) -> dg.SensorDefinition:
    names = [j.name for j in jobs]

    @dg.sensor(name="fleet_file_changed", jobs=jobs, minimum_interval_seconds=interval_s,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"A change of {Path(config_path).name}'s content launches {', '.join(names)}.")
    def _sensor(context: dg.SensorEvaluationContext):
        digest = hashlib.sha256(Path(config_path).read_bytes()).hexdigest()
        if context.cursor is None or context.cursor == digest:
            context.update_cursor(digest)
            return dg.SkipReason("fleet file unchanged")
        context.update_cursor(digest)
        tags = {"routeforge/trigger": "fleet_file_changed", "routeforge/fleet_sha256": digest}
        return _requests(f"fleet:{digest[:16]}", jobs, tags)

    return _sensor


def build_sensors(config: FleetConfig, config_path: str, jobs: dict) -> list[dg.SensorDefinition]:
    """The fleet's sensors over the code location's `jobs` (name → definition); a job name the
    location does not define is a config error naming the field."""
    automation = config.automation

    def resolve(names: list[str], field: str) -> list:
        unknown = [n for n in names if n not in jobs]
        if unknown:
            hint = ("; retrain_fleet is gone: launch build_prompts and the assets that go stale are rebuilt by "
                    "the retrain_what_is_stale sensor" if "retrain_fleet" in unknown else "")
            raise ValueError(f"{field}: unknown job(s) {unknown} (the code location defines {sorted(jobs)}){hint}")
        return [jobs[n] for n in names]

    # Dagster's @sensor passes its own beta `owners` parameter on and warns about it at every import
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Parameter `owners`")
        sensors = [watch_sensor(w, automation.minimum_interval_s,
                                resolve(w.jobs, f"automation.watch[{w.name}].jobs")) for w in automation.watch]
        if automation.on_fleet_change:
            sensors.append(fleet_file_sensor(config_path, automation.minimum_interval_s,
                                             resolve(automation.on_fleet_change, "automation.on_fleet_change")))
    return sensors


def stale_assets_sensor(config: FleetConfig) -> dg.AutomationConditionSensorDefinition:
    """Declarative automation for every asset: each tick evaluates the assets' `stale()` conditions
    (`pipelines/versions.py`) and launches runs for what is missing, has a new code version or a
    new input data version; the prompt set also re-reads its sources on `automation.cron`."""
    return dg.AutomationConditionSensorDefinition(
        "retrain_what_is_stale", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=max(30, config.automation.minimum_interval_s),
        run_tags={"routeforge/trigger": "retrain_what_is_stale", "routeforge/fleet": config.name},
        description="Re-materializes every asset partition that is missing or stale (new code version, or an "
                    "input with a new data version): retraining costs what changed.",
    )
