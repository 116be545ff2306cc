"""Who may change a registered model's release state, one writer at a time, on any MLflow store.

Why: the release gate reads the champion and the frozen evaluation set, then moves aliases and
writes tags. Two pipelines gating into one `mlflow server` at once both saw no frozen evaluation set
and both wrote it; one died on the server's unique constraint (CI, stop 54), and had it not died,
each would have gated against its own set and both could have moved `@champion`. A SQLite store is
serialised by the file lock beside it (`store.registry_lock`); a server store needs a lock that
every machine sharing the server sees, so the lease is kept in the registry itself:
`create_registered_model` is the one write MLflow makes atomic (its name is unique), so creating
`<model>.release-lease` is taking the lease and deleting it is giving it back. The lease names its
holder (host, pid, the pid's start time): a holder that died on this host is taken over at once,
one on another host once its lease is stale.

A lease cannot be held forever: its holder renews `since` every `RENEW_EVERY_S` while it works, and
a lease is stale when `since` is older than `stale_after_s` (default 5 minutes), not a finite
number, or later than now by more than `MAX_CLOCK_SKEW_S` (a `since` in the future never aged). A
stale lease is taken over, and that is said.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from routeforge.registry.store import registry_lock, sqlite_file

LEASE_SUFFIX = ".release-lease"
HOLDER_TAG = "routeforge.lease_holder"
RENEW_EVERY_S = 60.0  # how often a holder says it is still at work
STALE_AFTER_S = 300.0  # a lease not renewed for this long is stale (five renewals missed)
MAX_CLOCK_SKEW_S = 60.0  # a `since` further than this in the future is not trusted


def stale_reason(since: float, stale_after_s: float, now: float | None = None) -> str | None:
    """Why a lease taken or renewed at `since` is stale, or None while it is current."""
    import math

    now = time.time() if now is None else now
    if not isinstance(since, (int, float)) or not math.isfinite(since):
        return f"gave a start time, {since!r}, that is not a time"
    if since > now + MAX_CLOCK_SKEW_S:
        return f"gave a start time {since - now:.0f} s in the future"
    if now - since > stale_after_s:
        return f"has not renewed it for {now - since:.0f} s"
    return None


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError, OverflowError, ValueError):
        return None


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as another process can recognise it later: a pid alone is reused, a pid with its
    start time is not."""

    host: str
    pid: int
    started: float
    token: str = ""  # names the holder's marker file on its host (`marker`)

    @classmethod
    def current(cls) -> ProcessIdentity:
        import secrets

        return cls(socket.gethostname(), os.getpid(), round(_start_time(os.getpid()) or 0.0, 2),
                   secrets.token_hex(16))

    def marker(self) -> Path:
        """The file a holder keeps on its own host while it holds a lease: a tag naming a live pid
        and its start time (anyone who can write the store can copy pid 1's) is this project's
        process only if this file, which the store cannot write, names the same process."""
        import tempfile

        safe = "".join(c for c in self.token if c in "0123456789abcdef")[:32] or "none"
        return Path(tempfile.gettempdir()) / f"routeforge-lease-{safe}"

    def running(self) -> bool | None:
        """Whether this pid runs with this start time on this host; None on another host."""
        if self.host != socket.gethostname():
            return None
        started = _start_time(self.pid)
        return started is not None and abs(started - self.started) < 1.0

    @contextmanager
    def marked(self, model_name: str) -> Iterator[None]:
        """This process's marker file (`marker`) for the duration of the block, removed on every exit."""
        marker = self.marker()
        marker.write_text(json.dumps({"pid": self.pid, "model": model_name}))
        try:
            yield
        finally:
            marker.unlink(missing_ok=True)

    def alive(self) -> bool | None:
        """True / False for a lease holder of this host (`running` and its marker file names it);
        None when it cannot be told (another host)."""
        running = self.running()
        if not running:
            return running
        try:
            mark = json.loads(self.marker().read_text())
        except (OSError, ValueError):
            return False  # a live process, but not one holding a lease of ours
        return isinstance(mark, dict) and mark.get("pid") == self.pid

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


class LeaseTimeout(TimeoutError):
    pass


def lease_name(model_name: str) -> str:
    return f"{model_name}{LEASE_SUFFIX}"


def _holder(client, name: str) -> tuple[ProcessIdentity, float] | None:
    from mlflow.exceptions import MlflowException

    try:
        tags = client.get_registered_model(name).tags or {}
    except MlflowException:
        return None  # given back meanwhile
    try:
        spec = json.loads(tags[HOLDER_TAG])
        identity = ProcessIdentity(str(spec["host"]), int(spec["pid"]), float(spec["started"]),
                                   str(spec.get("token", "")))
        return identity, float(spec["since"])
    except (KeyError, ValueError, TypeError):
        return ProcessIdentity("?", -1, 0.0), float("nan")  # a lease without a readable holder is stale


def _already_exists(error: Exception) -> bool:
    return getattr(error, "error_code", None) == "RESOURCE_ALREADY_EXISTS" or "already exists" in str(error)


def _given_back_meanwhile(error: Exception) -> bool:
    """A create that met the holder's lease, which the holder then gave back: on a unique-constraint
    conflict MLflow's SQL store looks the existing model up again, and answers RESOURCE_DOES_NOT_EXIST
    when it is gone by then. The lease is free: try again (a CI run's waiting thread died of this)."""
    return getattr(error, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"


WAIT_ENV = "ROUTEFORGE_LEASE_WAIT_S"
DEFAULT_WAIT_S = 120.0  # a gate takes about a minute; a store writer's forged lease must not hold one for long


def lease_wait_s() -> float:
    """How long a gate waits for another holder: `$ROUTEFORGE_LEASE_WAIT_S`, else 120 s."""
    value = os.environ.get(WAIT_ENV)
    try:
        wait = float(value) if value else DEFAULT_WAIT_S
    except ValueError:
        raise ValueError(f"${WAIT_ENV}: {value!r} is not a number of seconds") from None
    if not 0 <= wait <= 86_400:
        raise ValueError(f"${WAIT_ENV}: {value!r} is not between 0 and 86400 seconds")
    return wait


@contextmanager
def release_lease(client, model_name: str, *, timeout_s: float | None = None, stale_after_s: float = STALE_AFTER_S,
                  poll_s: float = 1.0, log: Callable[[str], None] = print,
                  renew_every_s: float = RENEW_EVERY_S) -> Iterator[None]:
    """Hold `<model_name>.release-lease` in `client`'s registry for the duration of the block,
    renewing it every `renew_every_s`.

    Waits (polling, at most `timeout_s`, saying once who holds it) while another live process
    holds it; takes over a lease whose holder died on this host or that is stale (`stale_reason`),
    saying so. Raises `LeaseTimeout` naming the holder when the wait runs out. `timeout_s`: None
    waits `lease_wait_s()`. While held, this process's marker file says the lease is its own."""
    from mlflow.exceptions import MlflowException

    name, me = lease_name(model_name), ProcessIdentity.current()
    timeout_s = lease_wait_s() if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    with me.marked(model_name):
        said = False
        while True:
            holder = {"host": me.host, "pid": me.pid, "started": me.started, "token": me.token, "since": time.time()}
            try:
                client.create_registered_model(name, tags={HOLDER_TAG: json.dumps(holder)}, description=(
                    f"routeforge's release lease for {model_name}: held while a pipeline gates a version; "
                    "deleted when it is done (registry/lease.py). Not a model."))
                break
            except MlflowException as error:
                if _given_back_meanwhile(error):
                    continue
                if not _already_exists(error):
                    raise
            found = _holder(client, name)
            if found is None:
                continue
            other, since = found
            stale = stale_reason(since, stale_after_s)
            if other.alive() is False or stale is not None:
                why = "died" if other.alive() is False else stale
                log(f"release lease of {model_name}: its holder ({other.describe()}) {why}; taking it over")
                _delete(client, name)
                continue
            if time.monotonic() > deadline:
                raise LeaseTimeout(f"release lease of {model_name} still held by {other.describe()} after "
                                   f"{timeout_s:.0f} s (${WAIT_ENV} to wait longer); it goes stale "
                                   f"{stale_after_s:.0f} s after its last renewal, or break it now, once that process "
                                   f"is gone, by deleting the registered model {name!r} "
                                   "(MlflowClient().delete_registered_model)")
            if not said:
                log(f"waiting for the release lease of {model_name}, held by {other.describe()}")
                said = True
            time.sleep(poll_s)
        stop = threading.Event()

        def renew() -> None:  # says the holder is still at work, so a live holder's lease never goes stale
            while not stop.wait(renew_every_s):
                try:
                    client.set_registered_model_tag(name, HOLDER_TAG, json.dumps({**holder, "since": time.time()}))
                except Exception as exc:  # noqa: BLE001 - a missed renewal only ages the lease
                    log(f"release lease of {model_name}: could not renew it ({type(exc).__name__}: {exc})")

        renewer = threading.Thread(target=renew, name="release-lease-renewal", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join(timeout=10)
            _delete(client, name)


def _delete(client, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.delete_registered_model(name)
    except MlflowException:
        pass  # another process took over a lease it judged stale and gave it back already


@contextmanager
def release_lock(tracking_uri: str, model_name: str, log: Callable[[str], None] = print) -> Iterator[None]:
    """One release-state writer at a time: the SQLite store's file lock, a server's lease."""
    import mlflow

    if sqlite_file(tracking_uri) is not None:
        with registry_lock(tracking_uri):
            yield
        return
    with release_lease(mlflow.MlflowClient(tracking_uri), model_name, log=log):
        yield
