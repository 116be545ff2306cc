"""Runs that died hold nothing: concurrency slots, Dagster runs left STARTED, MLflow runs left
RUNNING and a registered version left without its alias are found and released.

Why: a `python -m routeforge.pipelines.run` killed with SIGKILL (or by the OOM killer, or with its
machine) during generation left its run STARTED and the `generation` pool's one slot claimed; every
later run then waited for that slot forever, printing only "running for N s". Marking the run failed
did not free the slot. Every run this package launches is tagged with the process that runs it
(`process_tags`: host, pid and the pid's start time, so a reused pid is not mistaken for it);
`recover` judges a run dead when that process is gone on this host, reports it failed and frees its
slots, and frees any slot still claimed by a run that has ended. Runs launched elsewhere (the UI's
run launcher, another host) are left to Dagster's run monitoring (dagster.yaml), which this cannot
judge from here.

`recover` runs at the start of every `pipelines.run`, in the `retrain_what_is_stale` sensor's
evaluation, and as `routeforge doctor`; each thing it frees is said in one line.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg
from routeforge.registry.lease import ProcessIdentity
from routeforge.registry.store import latest_version, registry_lock, sqlite_file

HOST_TAG, PID_TAG, PID_START_TAG = "routeforge/host", "routeforge/pid", "routeforge/pid_start"
IN_PROGRESS = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING,
               dg.DagsterRunStatus.NOT_STARTED]
ENDED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def process_tags() -> dict[str, str]:
    """Tags naming this process, put on every Dagster run it launches."""
    me = ProcessIdentity.current()
    return {HOST_TAG: me.host, PID_TAG: str(me.pid), PID_START_TAG: f"{me.started:.2f}"}


def process_alive(tags: dict[str, str]) -> bool | None:
    """True / False for a run launched by a process of this host; None when it cannot be told
    (another host, or a run without the tags)."""
    if PID_TAG not in tags:
        return None
    try:
        pid, started = int(tags[PID_TAG]), float(tags.get(PID_START_TAG) or 0)
    except (TypeError, ValueError):
        return None  # tags this package did not write: not ours to judge
    if not 0 < pid < 2**31 or not math.isfinite(started):
        return None
    return ProcessIdentity(tags.get(HOST_TAG, ""), pid, started).running()


@dataclass
class Recovered:
    """What `recover` released, each with its one-line reason."""

    failed_runs: list[str] = field(default_factory=list)
    freed_slots: list[str] = field(default_factory=list)
    killed_mlflow_runs: list[str] = field(default_factory=list)
    aliases_set: list[str] = field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        return [*self.failed_runs, *self.freed_slots, *self.killed_mlflow_runs, *self.aliases_set]


def recover_dagster(instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> Recovered:
    """Report the runs whose process died as failed, and free every slot held by an ended run."""
    out = Recovered()
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS)):
        if process_alive(run.tags) is False:
            message = (f"run {run.run_id[:8]} ({run.job_name}) died: its process (pid {run.tags[PID_TAG]} on "
                       f"{run.tags[HOST_TAG]}) is gone; marked failed and its concurrency slots freed")
            instance.report_run_failed(run, message)
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            out.failed_runs.append(message)
    storage = instance.event_log_storage
    for pool in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(pool)
        for run_id in sorted({slot.run_id for slot in info.claimed_slots}):
            run = instance.get_run_by_id(run_id)
            if run is None or run.status in ENDED:
                storage.free_concurrency_slots_for_run(run_id)
                out.freed_slots.append(f"pool {pool!r}: freed the slot of run {run_id[:8]}, which "
                                       f"{'no longer exists' if run is None else 'ended ' + run.status.value}")
    for line in out.lines:
        log(f"recovered: {line}")
    return out


def recover_registry(config, instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> Recovered:
    """MLflow runs of the fleet's experiment left RUNNING by a Dagster run that is no longer in
    progress are ended KILLED; a newest version registered without any alias (killed between
    registration and setting it) gets the `@challenger` it was registered for."""
    out = Recovered()
    registry = config.registry
    if not registry.tracking_uri:
        return out
    sqlite = sqlite_file(registry.tracking_uri)
    if sqlite is not None and not sqlite.exists():
        return out  # a store not created yet holds nothing (and creating it here would race a first run's)
    with registry_lock(registry.tracking_uri):  # MLflow's first use of a SQLite store creates its tables
        _recover_registry(config, instance, out)
    for line in out.lines:
        log(f"recovered: {line}")
    return out


def _recover_registry(config, instance: dg.DagsterInstance, out: Recovered) -> None:
    import mlflow
    from mlflow.exceptions import MlflowException

    registry = config.registry
    mlflow.set_tracking_uri(registry.tracking_uri)
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name(registry.experiment)
    if experiment is not None:
        for run in client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'", max_results=500):
            dagster_run = run.data.tags.get("dagster.run_id")
            owner = instance.get_run_by_id(dagster_run) if dagster_run else None
            if owner is not None and owner.status in IN_PROGRESS:
                continue
            if owner is None and dagster_run is None:
                continue  # not the pipeline's (a notebook's, say): not ours to end
            client.set_terminated(run.info.run_id, "KILLED")
            out.killed_mlflow_runs.append(f"MLflow run {run.info.run_id[:8]} ({run.info.run_name}) was left RUNNING "
                                          f"by Dagster run {dagster_run[:8]}, which is no longer running; ended KILLED")
    try:
        newest = latest_version(registry.model_name, client)
    except MlflowException:
        newest = None
    if newest is not None:
        version = newest[0]
        model = client.get_registered_model(registry.model_name)
        if version not in {str(v) for v in (model.aliases or {}).values()}:
            client.set_registered_model_alias(registry.model_name, "challenger", version)
            out.aliases_set.append(f"version {version} of {registry.model_name} had no alias (its run was stopped "
                                   "after registering it): set @challenger, for the release gate to judge")


def recover(instance: dg.DagsterInstance, config=None, log: Callable[[str], None] = print) -> Recovered:
    """Everything a dead run held: Dagster runs and slots, then (with the fleet) MLflow runs and aliases."""
    out = recover_dagster(instance, log)
    if config is not None:
        registry = recover_registry(config, instance, log)
        out.killed_mlflow_runs, out.aliases_set = registry.killed_mlflow_runs, registry.aliases_set
    return out


def blocked_on(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """One line per pool in which `run_id` has a step waiting for a slot, naming who holds the slots."""
    storage = instance.event_log_storage
    lines = []
    for pool in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(pool)
        waiting = [s.step_key for s in info.pending_steps if s.run_id == run_id and s.assigned_timestamp is None]
        if not waiting:
            continue
        holders = []
        for holder in sorted({s.run_id for s in info.claimed_slots if s.run_id != run_id}):
            run = instance.get_run_by_id(holder)
            who = "unknown run" if run is None else f"{run.job_name}, {run.status.value}"
            alive = None if run is None else process_alive(run.tags)
            where = "" if run is None or PID_TAG not in run.tags else (
                f", pid {run.tags[PID_TAG]} on {run.tags[HOST_TAG]}"
                + {True: " (alive)", False: " (gone: `routeforge doctor` frees it)", None: ""}[alive])
            holders.append(f"run {holder[:8]} ({who}{where})")
        lines.append(f"waiting for a slot of pool {pool!r} (limit {info.slot_count}) for {', '.join(waiting)}: "
                     f"held by {', '.join(holders) or 'no run (a slot being released)'}")
    return lines


class BlockedWatch:
    """While a run of this process is in flight, say once a minute what it waits for, if anything.

    `execute_in_process` blocks in Dagster's slot claim loop without a word; this thread reads the
    instance's pool tables beside it (after `after_s`, then every `every_s`)."""

    def __init__(self, instance: dg.DagsterInstance, log: Callable[[str], None], after_s: float = 60.0,
                 every_s: float = 60.0):
        self.instance, self.log, self.after_s, self.every_s = instance, log, after_s, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.said: list[str] = []

    def _runs(self) -> list[str]:
        mine = process_tags()
        runs = self.instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS, tags={PID_TAG: mine[PID_TAG],
                                                                                        HOST_TAG: mine[HOST_TAG]}))
        return [r.run_id for r in runs]

    def _watch(self) -> None:
        if self._stop.wait(self.after_s):
            return
        while True:
            try:
                for run_id in self._runs():
                    for line in blocked_on(self.instance, run_id):
                        self.said.append(line)
                        self.log(f"run {run_id[:8]} is {line}")
            except Exception as error:  # the watch must never take the run down
                self.log(f"(could not read the pool tables: {type(error).__name__}: {error})")
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> BlockedWatch:
        self._thread = threading.Thread(target=self._watch, name="routeforge-blocked-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

