"""One pipeline run per storage root at a time.

Two runs of one fleet share its component, report and cache folders; run side by side, one deleted
what the other was reading (`FileNotFoundError: …/components/task_classifier/predictor.json`). A
file lock in the storage root's local folder (the root itself, or its mirror for an object store)
makes a second run wait for the first, up to a limit, or refuse in one line naming the holder.
Runs on different machines against one object-store root are not serialised by it: give each
machine its own root, or launch them through one Dagster deployment.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".routeforge-run.lock"


class RunLocked(RuntimeError):
    """Another run holds this storage root; the message names it."""


@contextmanager
def storage_root_lock(folder: Path, fleet: str, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the run lock of the storage root whose local folder is `folder` for the block; wait up to
    `wait_s` seconds for another run to finish (0: refuse at once)."""
    from filelock import FileLock, Timeout

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK_NAME)
    holder = folder / f"{LOCK_NAME}.holder"
    try:
        lock.acquire(timeout=max(wait_s, 0.0) if wait_s > 0 else 0)
    except Timeout:
        try:
            who = json.loads(holder.read_text())
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(who["since"]))
            named = f" (pid {who['pid']} on {who['host']}, fleet {who['fleet']}, since {since})"
        except (OSError, ValueError, KeyError):
            named = ""
        waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
        raise RunLocked(f"another run holds the storage root {folder}{named}{waited}; wait for it "
                        f"(--wait SECONDS) or give this run its own storage_root") from None
    try:
        holder.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "fleet": fleet,
                                      "since": time.time()}))
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()
