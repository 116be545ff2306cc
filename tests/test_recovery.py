"""What a dead run held is released, and a run waiting on a slot says who holds it (issue 53, item 3),
on a real Dagster instance: runs recorded as the pipeline records them, slots claimed in its pool
tables. The end-to-end kills are in tests/test_killed_runs.py."""

import os
import subprocess
import sys
import time

import dagster as dg
from routeforge.pipelines.recovery import (
    HOST_TAG,
    PID_START_TAG,
    PID_TAG,
    BlockedWatch,
    blocked_on,
    process_tags,
    recover_dagster,
)


def _run(instance, job: str, tags: dict) -> dg.DagsterRun:
    run = instance.create_run_for_job(dg.GraphDefinition(name=job).to_job(), tags=tags)
    instance.handle_run_event(run.run_id, dg.DagsterEvent(
        event_type_value="PIPELINE_START", job_name=job, message="started"))
    return instance.get_run_by_id(run.run_id)


def _dead_process_tags() -> dict[str, str]:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    tags = {**process_tags(), PID_TAG: str(child.pid)}
    child.wait()
    return tags


def test_a_dead_runs_slot_is_freed_and_a_waiting_run_names_the_holder(tmp_path):
    with dg.instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 1}}},
                              temp_dir=str(tmp_path)) as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots("generation", 1)  # what a run's first claim does with default_limit 1
        dead = _run(instance, "generate_and_score", _dead_process_tags())
        alive = _run(instance, "profile_tiers", process_tags())
        assert storage.claim_concurrency_slot("generation", dead.run_id, "responses").is_claimed
        assert not storage.claim_concurrency_slot("generation", alive.run_id, "tier_profiles").is_claimed
        waiting = blocked_on(instance, alive.run_id)
        assert len(waiting) == 1 and "pool 'generation' (limit 1) for tier_profiles" in waiting[0]
        assert f"held by run {dead.run_id[:8]} (generate_and_score, STARTED, pid {dead.tags[PID_TAG]}" in waiting[0]
        assert "(gone: `routeforge doctor` frees it)" in waiting[0]
        lines = []
        found = recover_dagster(instance, log=lines.append)
        assert len(found.failed_runs) == 1 and dead.run_id[:8] in found.failed_runs[0] and "died" in lines[0]
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED  # alive: left alone
        assert dead.run_id not in storage.get_concurrency_run_ids()
        assert storage.claim_concurrency_slot("generation", alive.run_id, "tier_profiles").is_claimed
        assert recover_dagster(instance, log=lines.append).lines == []  # nothing left to release


def test_a_run_of_another_host_or_a_reused_pid_is_not_judged_dead(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        elsewhere = _run(instance, "build_prompts", {**_dead_process_tags(), HOST_TAG: "another-host"})
        reused = _run(instance, "build_prompts", {**process_tags(), PID_START_TAG: "1.00"})  # pid now someone else's
        found = recover_dagster(instance, log=lambda _: None)
        assert [line for line in found.failed_runs if elsewhere.run_id[:8] in line] == []
        assert any(reused.run_id[:8] in line for line in found.failed_runs)


def test_the_blocked_watch_speaks_after_its_delay(tmp_path):
    with dg.instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 1}}},
                              temp_dir=str(tmp_path)) as instance:
        instance.event_log_storage.set_concurrency_slots("generation", 1)
        holder = _run(instance, "generate_and_score", _dead_process_tags())
        mine = _run(instance, "profile_tiers", {**process_tags(), PID_TAG: str(os.getpid())})
        instance.event_log_storage.claim_concurrency_slot("generation", holder.run_id, "responses")
        instance.event_log_storage.claim_concurrency_slot("generation", mine.run_id, "tier_profiles")
        said = []
        with BlockedWatch(instance, log=said.append, after_s=0.2, every_s=0.2):
            deadline = time.monotonic() + 10
            while not said and time.monotonic() < deadline:
                time.sleep(0.05)
        assert said and f"run {mine.run_id[:8]} is waiting for a slot of pool 'generation'" in said[0]
