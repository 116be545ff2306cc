"""Run the whole pipeline for a fleet file and print the registered bundle's URI.

    python -m routeforge.pipelines.run configs/demo.yaml

The code location's own named jobs run in order: `build_prompts`, `generate_and_score` per model
partition, `build_routing_table`, `profile_tiers` per profiled tier, then `train_and_register`;
each runs only the assets that are missing or stale (`pipelines/stale.py`), so an unchanged re-run
materializes nothing but the re-read prompt set. Runs are recorded in the Dagster instance at
$DAGSTER_HOME, else `$ROUTEFORGE_STATE/dagster` (`pipelines/instance.py`: the instance `make ui`
reads), so they show up in `dagster dev` under those job names, with full lineage. Steps run in this process, or
under the fleet's `execution.executor` (one process or one Ray job per step; pipelines/executors.py).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time
import traceback
import uuid
from datetime import datetime
from pathlib import Path

import dagster as dg
import routeforge.fleet  # noqa: F401  (every kind loaded before a fleet file is read)
from routeforge.artifacts.common import temporary
from routeforge.artifacts.common.state_folder import record_registry, state_root
from routeforge.assets.resources import PIPELINE_RUN_TAG
from routeforge.assets.trainers import TRAIN_JOB, all_trainers, enabled_trainers
from routeforge.core.config import ConfigError
from routeforge.core.config.files import load_checked
from routeforge.core.run_lock import RunLocked, storage_root_lock
from routeforge.core.storage import quarantine_lines
from routeforge.pipelines.console import ProgressConsole, output_to_file, silence_progress_bars
from routeforge.pipelines.definitions import build_definitions
from routeforge.pipelines.executors import code_location_tags, execute
from routeforge.pipelines.instance import instance_note, shared_instance
from routeforge.pipelines.recovery import BlockedWatch, process_tags, recover
from routeforge.pipelines.stale import plan
from routeforge.registry.signing_check import SigningKeyMismatch, check_signing_key

# a step runs at most this many times: what is stale, then what waited on a rebuilt content-versioned asset
MAX_PHASES = 3
# a failed run has this long to exit once its error is said; then every thread's stack goes to the
# log file and the process ends (a thread a library left running, or an exit handler that waits on
# a lock, once kept a failed run alive for 15 minutes)
EXIT_GRACE_S = 10.0


def stage_count(config) -> int:
    """How many job runs `run_pipeline` makes for this fleet (the console's [i/n])."""
    profiled = [t for t in config.tiers if t.profile is not None]
    return 2 + len(config.model_names) + (1 + len(profiled) if profiled else 0)


def run_pipeline(
    config_path: str | Path, instance: dg.DagsterInstance | None = None, log_level: str = "INFO",
    console: ProgressConsole | None = None, wait_s: float = 0.0,
) -> dict:
    """Every stage of the fleet in order, holding its storage root's run lock (`core.run_lock`: a
    second run of the same root waits up to `wait_s` seconds, then refuses in one line)."""
    config = load_checked(config_path)
    with storage_root_lock(config.storage.mirror, config.name, wait_s):
        return _run_stages(config, config_path, instance, log_level, console)


def _run_stages(config, config_path, instance, log_level, console) -> dict:
    config.storage.check()  # a missing bucket or wrong credentials stop here, before any work
    defs = build_definitions(config_path)
    if instance is None:
        instance = shared_instance()
    say = console.print if console is not None else print
    # a run that died (SIGKILL, OOM) left its slots and runs held: released before anything waits on them
    recover(instance, config, log=lambda line: say(f"routeforge: {line}"))
    # a key that is not the one the registry's versions carry is said now, not after training
    check_signing_key(config.registry.tracking_uri, config.registry.model_name, config.signing_key_path()[0])
    temporary.sweep()  # the verification folders of runs killed before they could remove them
    for warning in config.warnings():
        say(f"routeforge: {warning}")
    timings: dict[str, float] = {}
    # one MLflow parent run groups every training run this pipeline run logs
    pipeline_run = uuid.uuid4().hex
    loggers = {"console": {"config": {"log_level": log_level}}}
    if console is not None:
        loggers["progress"] = {}

    ran: dict[str, dict[str, str]] = {}

    def step(label: str, job: str, partition: str | None = None) -> None:
        """Run what the job must rebuild for `partition` (`pipelines/stale.py`): nothing when all is
        up to date; a second run for what waited on a content-versioned asset's new data version."""
        start = time.perf_counter()
        if console is not None:
            console.begin(label)
        done: dict[str, str] = {}
        for _ in range(MAX_PHASES):
            todo = plan(defs, instance, job, partition, config, frozenset(done))
            if not todo:
                break
            with BlockedWatch(instance, log=lambda line: say(f"routeforge: {label}: {line}")):
                result = execute(defs, config, config_path, job, instance, partition,
                                 tags={"routeforge/fleet": config.name, PIPELINE_RUN_TAG: pipeline_run,
                                       **code_location_tags(), **process_tags()},
                                 run_config={"loggers": loggers}, asset_selection=todo.selection)
            done |= {k.to_user_string(): todo.reasons[k.to_user_string()] for k in todo.selection}
            failed = [e for e in result.get_asset_check_evaluations() if not e.passed
                      and e.severity == dg.AssetCheckSeverity.ERROR]
            if failed:
                names = ", ".join(f"{e.asset_key.to_user_string()}:{e.check_name}" for e in failed)
                raise RuntimeError(f"{label}: asset checks failed: {names}")
        timings[label] = time.perf_counter() - start
        ran[label] = done
        if console is not None:
            console.end(label, timings[label], "" if done else "up to date: nothing to run")

    step("prompts", "build_prompts")
    for model in config.model_names:
        step(f"generate_and_score[{model}]", "generate_and_score", partition=model)
    profiled = [t.name for t in config.tiers if t.profile is not None]
    if profiled:
        step("routing_table", "build_routing_table")
        for tier in profiled:
            step(f"profile[{tier}]", "profile_tiers", partition=tier)
    step("train_and_register", "train_and_register")
    trained = ran["train_and_register"]

    def value(name: str):
        return defs.load_asset_value(name, instance=instance)

    bundle = value("router_bundle")
    if "router_bundle" not in trained:  # nothing changed: the bundle on record is the one registered
        bundle = {**bundle, "unchanged": True}
    # each trainer's own summary of its result, under its key (None for a trainer the fleet does not run)
    trainers = {t.key: None for t in all_trainers() if t.job == TRAIN_JOB}
    trainers |= {t.key: t.summary(value(t.name)) for t in enabled_trainers(config, job=TRAIN_JOB)}
    release = value("release_gate") if config.release.enabled else None
    if release is not None and "release_gate" not in trained:
        release = {**release, "unchanged": True}
    return {**bundle, "timings_s": timings, **trainers, "report": value("predictor_report"), "release": release,
            "materialized": ran}


def default_log_file(fleet: str, stamp: str) -> Path:
    """`$ROUTEFORGE_STATE/logs/<fleet>-<stamp>.log`, else under `./.state` (the Makefile's state)."""
    return state_root() / "logs" / f"{fleet}-{stamp}.log"


def exit_within(seconds: float, log_file: Path) -> None:
    """Make sure a failed run ends: if the process is still alive `seconds` from now (a non-daemon
    thread, an exit handler blocked on a lock), every thread's stack is appended to `log_file` and
    the process exits with status 1 (`faulthandler`, which needs no lock and no thread of Python's)."""
    dump = open(log_file, "a")  # kept open: faulthandler writes to its descriptor when the time comes
    dump.write(f"\n(routeforge: if this process is still alive {seconds:.0f} s after the failure, the stacks "
               "of its threads follow and it exits)\n")
    dump.flush()
    faulthandler.dump_traceback_later(seconds, exit=True, file=dump)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=os.environ.get("ROUTEFORGE_CONFIG", "configs/demo.yaml"))
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show every Dagster event, library warning and progress bar on the terminal")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long for another run of the same storage root to finish (default: refuse)")
    parser.add_argument("--log-file", type=Path, default=None,
                        help="where the run's full output goes (default: $ROUTEFORGE_STATE/logs/<fleet>-<time>.log, "
                             "else .state/logs/…)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        config = load_checked(args.config)
    except ConfigError as error:  # one line, no traceback: the message names the file and field
        print(f"routeforge: {error}", file=sys.stderr)
        return 2
    if note := instance_note():
        print(note, flush=True)
    if args.verbose:
        try:
            out = run_pipeline(args.config, wait_s=args.wait)
        except BaseException:  # the traceback is shown as Python shows it; the process still ends
            faulthandler.dump_traceback_later(EXIT_GRACE_S, exit=True)
            raise
        for label, seconds in out["timings_s"].items():
            print(f"  {label:<40} {seconds:8.1f}s")
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        log_file = args.log_file or default_log_file(config.name, stamp)
        print(f"routeforge: fleet {config.name} ({args.config}); full log: {log_file}", flush=True)
        try:
            with output_to_file(log_file) as terminal, ProgressConsole(terminal, stage_count(config)) as console:
                silence_progress_bars()
                out = run_pipeline(args.config, console=console, wait_s=args.wait)
        except RunLocked as error:
            print(f"routeforge: {error}", file=sys.stderr)
            return 3
        except SigningKeyMismatch as error:  # before any training: nothing to clean up
            print(f"routeforge: {error}", file=sys.stderr)
            return 2
        except Exception as error:  # one line on the terminal; the traceback is in the log file
            with open(log_file, "a") as log:
                traceback.print_exception(error, file=log)
            print(f"routeforge: failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                  f" (traceback in {log_file})", file=sys.stderr, flush=True)
            exit_within(EXIT_GRACE_S, log_file)
            return 1
    print(f"total {time.perf_counter() - start:.1f}s")
    print(f"tracking URI: {out['tracking_uri']}")
    if out.get("uri") and out.get("tracking_uri"):  # `routeforge bundle …` finds this model's store by itself
        record_registry(config.registry.model_name, out["tracking_uri"])
    if not out["materialized"]["train_and_register"]:
        print(f"up to date: no training step ran (nothing they read changed); registry version "
              f"{out['registry_version']} ({out['uri']}) stays")
    elif out.get("unchanged"):
        print(f"nothing registered: the bundle's content ({out['bundle_version']}) equals registry version "
              f"{out['registry_version']}'s ({out['uri']})")
    else:
        print(f"registered bundle: {out['uri']} (registry version {out['registry_version']}, "
              f"bundle {out['bundle_version']})")
    if out["release"] is not None and not out["release"].get("unchanged"):  # "unchanged" too when the gate did not run
        verdict = "promoted to @champion" if out["release"]["promoted"] else "kept as challenger"
        print(f"release gate: version {out['registry_version']} {verdict}: {'; '.join(out['release']['reasons'])}")
    for line in quarantine_lines(config.storage.path()):  # counts by reason, not only in the log file
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
