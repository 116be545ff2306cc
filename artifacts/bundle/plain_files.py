"""Reads that refuse anything but a plain file inside the bundle: no symbolic link (followed or in the
path), no device, pipe or socket.

Why: a bundle folder can come from a store or a cache someone else can write to. Checking a path
with `is_symlink()` and then opening it leaves a window in which it can be swapped for a link, and
a pipe or a device blocks or streams forever. Here the file is opened with `O_NOFOLLOW`, checked
with `fstat` on that same descriptor, and read (or hashed) through it, so what was checked is what
is read. Plain Python, no third-party import: the runtime imports it alone.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotPlainFile(OSError):
    """A path that is a link, a special file, too large, or missing: `reason` says which, `missing`
    whether there is nothing at all."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.reason = reason
        self.missing = reason == "missing"


def _open(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise NotPlainFile(path, "missing") from None
    except OSError as exc:  # ELOOP: the last component is a symbolic link
        raise NotPlainFile(path, f"not a plain file ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a special file (device, pipe or socket)"
        raise NotPlainFile(path, f"{kind}, not a plain file")
    return fd


def read_plain(path: Path, limit: int) -> bytes:
    """The bytes of a plain file, read once through one descriptor; at most `limit` bytes."""
    with os.fdopen(_open(Path(path)), "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotPlainFile(path, f"larger than {limit:,} bytes")
    return data


def sha256_plain(path: Path) -> tuple[int, str]:
    """(size, sha256) of a plain file, read through one descriptor."""
    digest, size = hashlib.sha256(), 0
    with os.fdopen(_open(Path(path)), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def walk_plain(root: Path) -> tuple[list[str], list[str]]:
    """One walk of `root`, links never followed: (every plain file, every entry that is neither a
    plain file nor a folder, said as `<path>: a symbolic link` or `…: a special file`), as POSIX paths
    relative to `root`, sorted."""
    files, odd = [], []
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in (*dirs, *names):
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                odd.append(f"{rel}: a symbolic link")
            elif stat.S_ISREG(mode):
                files.append(rel)
            elif not stat.S_ISDIR(mode):
                odd.append(f"{rel}: a special file (device, pipe or socket)")
    return sorted(files), sorted(odd)


def copy_plain(path: Path, dst: Path, limit: int | None = None) -> tuple[int, str]:
    """Copy a plain file to `dst` (a new file, owner-only) through one descriptor, hashing the bytes
    as they are copied: (size, sha256) of exactly what `dst` now holds. What a caller then uses is
    the copy, so a file swapped or edited after this read cannot reach it."""
    digest, size = hashlib.sha256(), 0
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    with os.fdopen(_open(Path(path)), "rb") as f, os.fdopen(out, "wb") as w:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            w.write(chunk)
            size += len(chunk)
            if limit is not None and size > limit:
                raise NotPlainFile(path, f"larger than {limit:,} bytes")
    return size, digest.hexdigest()
