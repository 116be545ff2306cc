"""Continuous retraining: sensors that launch the fleet's named jobs when their inputs change.

- `watch_<name>` per `automation.watch` entry: lists the files under a local folder or fsspec URI
  (`universal-pathlib`) and launches its jobs when one appears or changes (size or modification
  time); the cursor remembers what was seen, so a file launches a run once. The first evaluation
  only records what is already there: a sensor switched on does not retrain on old files.
- `fleet_file_changed`: the fleet file's sha256 against the cursor; launches `on_fleet_change`.

Each launch carries a run key (a hash of what changed), so a re-evaluated tick never launches the
same work twice, and tags naming the trigger. `retrain_fleet`, the default job, runs every stage
through the same instance (`routeforge.pipelines.run.run_pipeline`), so its stages appear under their own job
names beside it.
"""


import hashlib
import json
import warnings
from pathlib import Path

import dagster as dg
from routeforge.assets.resources import FleetResource
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
        return [dg.RunRequest(run_key=f"{watch.name}:{key}:{job}", job_name=job, tags=tags) for job in watch.jobs]

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
        return [dg.RunRequest(run_key=f"fleet:{digest[:16]}:{job}", job_name=job, tags=tags) for job in names]

    return _sensor


def build_sensors(config: FleetConfig, config_path: str, jobs: dict) -> list[dg.SensorDefinition]:
    """The fleet's sensors over the code location's `jobs` (name → definition); a job name the
    location does not define is a config error naming the field."""
    automation = config.automation

    def resolve(names: list[str], field: str) -> list:
        unknown = [n for n in names if n not in jobs]
        if unknown:
            raise ValueError(f"{field}: unknown job(s) {unknown} (the code location defines {sorted(jobs)})")
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


@dg.op(description="Every stage of the fleet, in order, through this run's instance: prompts, generation "
                   "and scoring per model, routing table, tier profiles, training, registration, release gate.")
def retrain_all_stages(context: dg.OpExecutionContext, fleet: FleetResource) -> dict:
    from routeforge.pipelines.run import run_pipeline

    # a scheduled retrain waits for a run already on this storage root (up to an hour) rather than failing
    out = run_pipeline(fleet.config_path, instance=context.instance, wait_s=3600)
    context.log.info(f"{'nothing new' if out.get('unchanged') else 'registered'}: {out['uri']} "
                     f"version {out['registry_version']}")
    return {k: out[k] for k in ("uri", "registry_version", "bundle_version", "unchanged") if k in out}


@dg.job(name="retrain_fleet", description="Retrain the whole fleet: every named job in order (what the sensors "
                                          "and `make demo` run).")
def retrain_fleet():
    retrain_all_stages()
