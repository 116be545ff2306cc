"""Temporary folders named for the process that made them, and a sweep of those whose process is gone.

Why: a `TemporaryDirectory` is removed on every exit path but one: a killed process (SIGKILL, the
OOM killer, a CI time-out) leaves it, and runs killed mid-verification left `/tmp/routeforge-verify-*`
folders of a bundle's size behind, run after run. Each folder here is
`<tmp>/routeforge-<kind>-<pid>-<random>`, and `sweep()` (run by every `routeforge` command and every
pipeline run) removes those of this user whose process no longer runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

NAME = re.compile(r"routeforge-(?P<kind>[a-z][a-z-]*?)-(?P<pid>[0-9]{1,10})-[A-Za-z0-9_]+")


def folder(kind: str) -> Path:
    """A new temporary folder of this process (`<tmp>/routeforge-<kind>-<pid>-…`); the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=f"routeforge-{kind}-{os.getpid()}-"))


def held(kind: str, owner: object | None = None) -> Path:
    """`folder(kind)`, removed when `owner` is collected, else when the process exits (either way at
    a normal exit; a killed process's is left to `sweep`)."""
    import atexit
    import weakref

    made = folder(kind)
    if owner is None:
        atexit.register(shutil.rmtree, made, True)
    else:
        weakref.finalize(owner, shutil.rmtree, made, True)
    return made


@contextlib.contextmanager
def scoped(kind: str) -> Iterator[str]:
    """`tempfile.TemporaryDirectory` named as `folder` names, so a killed run's is swept later."""
    with tempfile.TemporaryDirectory(prefix=f"routeforge-{kind}-{os.getpid()}-") as tmp:
        yield tmp


def _running(pid: int) -> bool:
    """Whether a process of this id runs (another user's counts as running: not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or not a pid: not ours to judge
    return True


def sweep(root: Path | None = None, names: re.Pattern = NAME) -> list[Path]:
    """Remove this user's folders in `root` (the temporary folder) named as `names` says (`folder`'s
    names; a group `pid`) whose process is gone; returns them. A folder of another user, a link, or a
    name of another shape is never touched."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        match = names.fullmatch(entry.name)
        if match is None or int(match["pid"]) == os.getpid():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _running(int(match["pid"])):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed
