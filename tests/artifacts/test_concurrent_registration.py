"""Two `python -m routeforge.pipelines.run` registering into one MLflow store at the same time (issue 20, item 6).

Before the store lock, two pipelines creating a fresh SQLite store at once raced on MLflow's table
creation and one died; both must now register, each its own version, and both bundles verify with
the signing key they share. Then once more into the now initialised store, and into a real
`mlflow server`. There the release gates take turns through the registry's release lease
(registry/lease.py), tested on its own at the end: CI of stop 54 found two pipelines gating at
once, both seeing no frozen evaluation set and one dying on the server's unique constraint."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.signing import generate_key_pair
from routeforge.registry.lease import HOLDER_TAG, LeaseTimeout, ProcessIdentity, lease_name, release_lease

from tests.conftest import REPO, write_config


def _fleets(tmp_path, tracking_uri: str, key, artifact_location: str | None, ks: tuple[int, int]) -> list:
    """Two copies of the demo fleet with their own storage (no tiers, KNN only: the point is the
    registration) sharing one registry and one signing key. Their KNN's k differ, so their bundles
    do (a bundle equal to the newest version's would rightly register nothing)."""
    registry = {"tracking_uri": tracking_uri, "artifact_location": artifact_location,
                "experiment": "concurrent", "model_name": "concurrent-router", "signing_key": str(key)}
    paths = []
    for i, k in enumerate(ks, start=1):
        folder = tmp_path / f"fleet{i}"
        folder.mkdir(exist_ok=True)
        paths.append(write_config(folder, "demo", name=f"concurrent{i}", storage_root=str(tmp_path / f"state{i}"),
                                  tiers=[], training={"knn": {"k": k}}, registry=registry))
    return paths


def _run_both(paths, tmp_path, label) -> None:
    procs = []
    for i, path in enumerate(paths):
        log = open(tmp_path / f"{label}-{i}.log", "w")
        run_log = tmp_path / f"{label}-{i}.run.log"
        procs.append((subprocess.Popen([sys.executable, "-m", "routeforge.pipelines.run", str(path), "--log-file", str(run_log)],
                                       cwd=REPO, stdout=log,
                                       stderr=subprocess.STDOUT,
                                       # each its own state folder, so its own Dagster instance: two fleets
                                       # of one machine would share one, and take turns in its pools
                                       env={**os.environ, "DAGSTER_HOME": "",
                                            "ROUTEFORGE_STATE": str(tmp_path / f"{label}-state{i}")}), log))
    for proc, log in procs:
        try:
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    for i, (proc, _) in enumerate(procs):
        text = (tmp_path / f"{label}-{i}.log").read_text()
        assert proc.returncode == 0, text[-1000:] + (tmp_path / f"{label}-{i}.run.log").read_text()[-3000:]
        assert "registered bundle: models:/concurrent-router@challenger" in text
        # the terminal gets a line per stage; Dagster's events and library output go to the log file
        assert len(text.splitlines()) <= 60 and "Traceback" not in text and "dagster - INFO" not in text
        assert "dagster - INFO" in (tmp_path / f"{label}-{i}.run.log").read_text()


def _versions_verify(tracking_uri, key, tmp_path, expected) -> None:
    versions = sorted(int(v.version) for v in MlflowClient(tracking_uri).search_model_versions("name='concurrent-router'"))
    assert versions == expected  # none lost, none doubled
    for v in versions:
        loaded = load_bundle(f"models:/concurrent-router/{v}", tmp_path / f"dl-{v}-{os.getpid()}", tracking_uri,
                             public_key=f"{key}.pub")
        assert loaded.manifest.name == "concurrent-router"


@pytest.mark.e2e
def test_two_pipelines_register_at_once_into_a_fresh_then_an_initialised_sqlite_store(shared_data, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    key = tmp_path / "keys" / "bundle.key"
    generate_key_pair(key)
    tracking = f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}"
    artifacts = str(tmp_path / "shared" / "artifacts")
    _run_both(_fleets(tmp_path, tracking, key, artifacts, (5, 6)), tmp_path, "fresh")
    _versions_verify(tracking, key, tmp_path, [1, 2])
    _run_both(_fleets(tmp_path, tracking, key, artifacts, (7, 8)), tmp_path, "initialised")
    _versions_verify(tracking, key, tmp_path, [1, 2, 3, 4])


@pytest.mark.e2e
def test_two_pipelines_register_at_once_into_an_mlflow_server(mlflow_server, shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    key = tmp_path / "keys" / "bundle.key"
    generate_key_pair(key)
    paths = _fleets(tmp_path, mlflow_server, key, None, (5, 6))  # the server's proxied artifact store
    _run_both(paths, tmp_path, "server")
    _versions_verify(mlflow_server, key, tmp_path, [1, 2])
    from routeforge.registry.release import ModelRegistry

    registry = ModelRegistry(mlflow_server, "concurrent-router")
    assert registry.gated("1") and registry.gated("2")  # both gates ran, one after the other
    assert registry.pinned_evaluation_sha() is not None
    assert _gone(MlflowClient(mlflow_server), "concurrent-router")  # the lease was given back


def test_only_a_lost_insert_race_on_the_named_table_is_retried():
    from mlflow.exceptions import MlflowException, RestException
    from routeforge.registry.store import lost_insert_race

    sqlite = RestException({"error_code": "BAD_REQUEST", "message": "(sqlite3.IntegrityError) UNIQUE constraint "
                            "failed: datasets.experiment_id, datasets.name, datasets.digest"})
    postgres = MlflowException('duplicate key value violates unique constraint "datasets_pk" on datasets')
    assert lost_insert_race(sqlite, "datasets") and lost_insert_race(postgres, "datasets")
    assert not lost_insert_race(MlflowException("UNIQUE constraint failed: runs.run_uuid"), "datasets")
    assert not lost_insert_race(ValueError("UNIQUE constraint failed: datasets.name"), "datasets")
    # what a CI run's second pipeline met moving `challenger` while the first moved it
    alias = RestException({"error_code": "BAD_REQUEST", "message": "(sqlite3.IntegrityError) UNIQUE constraint failed: "
                           "registered_model_aliases.workspace, registered_model_aliases.name, "
                           "registered_model_aliases.alias"})
    assert lost_insert_race(alias, "registered_model_aliases") and not lost_insert_race(alias, "datasets")


def test_a_lost_alias_race_is_retried_and_a_second_loss_is_not_hidden():
    from mlflow.exceptions import RestException
    from routeforge.registry.store import retrying_lost_insert

    lost = RestException({"error_code": "BAD_REQUEST",
                          "message": "UNIQUE constraint failed: registered_model_aliases.alias"})
    calls = []

    def move(name, alias, version):
        calls.append((name, alias, version))
        if len(calls) == 1:
            raise lost
        return version

    assert retrying_lost_insert("registered_model_aliases", move)("m", "challenger", "2") == "2" and len(calls) == 2

    def always(*_):
        calls.append(None)
        raise lost

    with pytest.raises(RestException):
        retrying_lost_insert("registered_model_aliases", always)("m", "challenger", "2")


def test_a_lease_given_back_while_the_server_checked_a_create_is_taken_not_raised():
    """What a CI run's waiting thread died of: its create met the holder's lease, the holder gave it
    back, and the server's own look-up of the existing model answered RESOURCE_DOES_NOT_EXIST."""
    from mlflow.exceptions import RestException
    from routeforge.registry.lease import _already_exists, _given_back_meanwhile

    gone = RestException({"error_code": "RESOURCE_DOES_NOT_EXIST",
                          "message": "Registered Model with name=turns.release-lease not found"})
    taken = RestException({"error_code": "RESOURCE_ALREADY_EXISTS", "message": "Registered Model (name=x) already exists."})
    assert _given_back_meanwhile(gone) and not _given_back_meanwhile(taken) and _already_exists(taken)
    assert not _given_back_meanwhile(RestException({"error_code": "PERMISSION_DENIED", "message": "no"}))


def _plant(client, model: str, holder: ProcessIdentity, since: float) -> None:
    client.create_registered_model(lease_name(model), tags={HOLDER_TAG: json.dumps(
        {"host": holder.host, "pid": holder.pid, "started": holder.started, "since": since})})


def _gone(client, model: str) -> bool:
    try:
        client.get_registered_model(lease_name(model))
    except MlflowException:
        return True
    return False


@pytest.mark.timeout(120)
def test_two_holders_take_turns_and_the_second_says_who_it_waits_for(mlflow_server):
    client = MlflowClient(mlflow_server)
    spans, said, waiting = [], [], threading.Event()

    def heard(line: str) -> None:
        said.append(line)
        if line.startswith("waiting for"):
            waiting.set()

    def hold(name: str) -> None:
        with release_lease(MlflowClient(mlflow_server), "turns", poll_s=0.1, timeout_s=60, log=heard):
            start = time.monotonic()
            # the first holder stays until the other says it waits: a fixed 0.6 s hold let a slow
            # machine's second thread arrive after the first had left, and nothing was said
            waiting.wait(timeout=30)
            time.sleep(0.2)
            spans.append((start, time.monotonic()))

    threads = [threading.Thread(target=hold, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert len(spans) == 2
    (s1, e1), (s2, e2) = sorted(spans)
    assert e1 <= s2  # never both inside
    assert said and said[0].startswith("waiting for the release lease of turns, held by pid ")
    assert _gone(client, "turns")  # given back


@pytest.mark.timeout(120)
def test_a_dead_holder_is_taken_over_and_a_live_one_elsewhere_times_out_naming_it(mlflow_server):
    client = MlflowClient(mlflow_server)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    me = ProcessIdentity.current()
    _plant(client, "dead", ProcessIdentity(me.host, child.pid, me.started), time.time())
    said = []
    with release_lease(client, "dead", poll_s=0.1, timeout_s=5, log=said.append):
        assert not _gone(client, "dead")
    assert said == [f"release lease of dead: its holder (pid {child.pid} on {me.host}) died; taking it over"]
    assert _gone(client, "dead")

    _plant(client, "elsewhere", ProcessIdentity("another-host", 4242, 1.0), time.time())
    with pytest.raises(LeaseTimeout, match="still held by pid 4242 on another-host after 1 s"):
        with release_lease(client, "elsewhere", poll_s=0.2, timeout_s=1, log=said.append):
            pytest.fail("entered a lease another live holder has")
    assert not _gone(client, "elsewhere")  # a timed-out waiter leaves the holder's lease alone
    with release_lease(client, "elsewhere", stale_after_s=0.0, poll_s=0.1, timeout_s=5, log=said.append):
        pass  # older than stale_after_s: taken over
    assert said[-1].startswith("release lease of elsewhere: its holder (pid 4242 on another-host) has not renewed it for")
    assert _gone(client, "elsewhere")
    # a lease whose holder tag is not ours to read (hand-made, or written by something else): stale
    client.create_registered_model(lease_name("garbled"), tags={HOLDER_TAG: "{not json"})
    with release_lease(client, "garbled", poll_s=0.1, timeout_s=5, log=said.append):
        pass
    assert said[-1] == (
        "release lease of garbled: its holder (pid -1 on ?) gave a start time, nan, that is not a time; taking it over")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ahead, why", [(10**6, "in the future"), (float("nan"), "not a time")], ids=["future", "nan"])
def test_a_lease_whose_start_is_in_the_future_or_not_a_time_is_stale(mlflow_server, ahead, why):
    """Issue 61, item 6. Got through: a lease naming another host with a `since` in the future (or
    NaN) never went stale, so every gate and promote blocked 600 s and failed, run after run."""
    since = time.time() + ahead  # at run time: a collected id must be the same in every xdist worker
    client = MlflowClient(mlflow_server)
    model = f"skewed-{abs(hash(str(since))) % 10**6}"
    _plant(client, model, ProcessIdentity("another-host", 4242, 1.0), since)
    said = []
    with release_lease(client, model, poll_s=0.1, timeout_s=5, log=said.append):
        pass
    assert why in said[-1] and "taking it over" in said[-1]


@pytest.mark.timeout(120)
def test_a_holder_renews_its_lease_while_it_works(mlflow_server):
    client = MlflowClient(mlflow_server)
    with release_lease(client, "renewed", poll_s=0.1, timeout_s=5, renew_every_s=0.2):
        first = json.loads(client.get_registered_model(lease_name("renewed")).tags[HOLDER_TAG])["since"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = json.loads(client.get_registered_model(lease_name("renewed")).tags[HOLDER_TAG])["since"]
            if now > first:
                break
        assert now > first
    assert _gone(client, "renewed")


def test_the_sqlite_lock_says_who_holds_it(tmp_path):
    """Issue 61, item 6: a process holding the SQLite store's lock blocked others 600 s, and the error
    did not say who held it."""
    import os
    import socket

    from routeforge.registry.store import registry_lock

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    held, done = threading.Event(), threading.Event()

    def hold():
        with registry_lock(uri):
            held.set()
            done.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(timeout=30)
        with pytest.raises(TimeoutError, match=f"still held after 0 s by pid {os.getpid()} on {socket.gethostname()}"):
            with registry_lock(uri, timeout_s=0.3):
                pytest.fail("entered a lock another holds")
    finally:
        done.set()
        holder.join(timeout=30)


@pytest.mark.timeout(120)
def test_a_forged_lease_naming_a_live_process_of_this_host_is_taken_over(mlflow_server, monkeypatch):
    """Got through (issue 71): a lease tag naming "pid 1 on this host" with pid 1's real start time
    blocked every promote for 600 s, then failed: a store writer's denial of service. A holder on this
    host must also have its marker file, which the store cannot write; the wait is 120 s by default."""
    import psutil
    from routeforge.registry.lease import DEFAULT_WAIT_S, lease_wait_s

    client = MlflowClient(mlflow_server)
    me = ProcessIdentity.current()
    _plant(client, "forged", ProcessIdentity(me.host, 1, round(psutil.Process(1).create_time(), 2)), time.time())
    said = []
    started = time.monotonic()
    with release_lease(client, "forged", poll_s=0.1, timeout_s=30, log=said.append):
        pass
    assert time.monotonic() - started < 10 and "(pid 1 on" in said[0] and "died; taking it over" in said[0]
    assert lease_wait_s() == DEFAULT_WAIT_S == 120.0
    monkeypatch.setenv("ROUTEFORGE_LEASE_WAIT_S", "1e9")
    with pytest.raises(ValueError, match="ROUTEFORGE_LEASE_WAIT_S"):
        lease_wait_s()
    _plant(client, "held-elsewhere", ProcessIdentity("another-host", 4242, 1.0), time.time())
    monkeypatch.setenv("ROUTEFORGE_LEASE_WAIT_S", "1")
    with pytest.raises(LeaseTimeout, match="break it now.*delete_registered_model"):
        with release_lease(client, "held-elsewhere", poll_s=0.2, log=said.append):
            pytest.fail("entered a lease another live holder has")
