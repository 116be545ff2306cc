"""Where a fleet's state lives: a local folder or any fsspec URI (`s3://`, `gs://`, `memory://`, ...).

Stage tables, the response and quality caches, quarantine files and Dagster's IO-manager outputs
are written to the root itself (`StorageRoot.path`). FAISS, the ONNX exporter, XGBoost, safetensors
and matplotlib need real files, so component, report and profile folders are written in a local
*mirror* and **pushed** to the root when the asset that writes them is done; a consumer that lacks
them (another machine, a Ray worker, a fresh container) **pulls** them. With a local root the mirror
is the root itself and both are no-ops, so a laptop run copies nothing.

Object stores have no atomic rename, so a pushed folder is committed by its listing object
(`.routeforge-files.json`, every file's size and sha256), written after the files: a reader trusts a
folder only when its listing exists, and only the files the listing names. The mirror of a remote
root is a cache under `$ROUTEFORGE_MIRROR` (default: `<tmp>/routeforge-mirror/<hash of the URI>`):
safe to delete, never the record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routeforge.artifacts.bundle.writer import sha256_file
from upath import UPath

LISTING = ".routeforge-files.json"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class StorageError(ValueError):
    """The storage root cannot be used; the message names `storage_root` and what is wrong."""


def is_uri(value: str) -> bool:
    return bool(_SCHEME.match(value))


def is_remote(path: Any) -> bool:
    """Whether `path` lives on a filesystem other than the local one (no atomic rename there)."""
    return getattr(path, "protocol", "") not in ("", "file", "local")


@dataclass(frozen=True)
class StorageRoot:
    """A fleet's `storage_root` (a local absolute path or a URI) with its fsspec `storage_options`."""

    uri: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        return not is_uri(self.uri)

    def path(self, *parts: str) -> UPath:
        """A location under the root: a `pathlib.Path` subclass when local, an fsspec path otherwise."""
        root = UPath(self.uri, **self.options) if not self.is_local else UPath(self.uri)
        return root.joinpath(*parts) if parts else root

    @property
    def mirror(self) -> Path:
        """Local folder where libraries read and write files: the root itself when it is local."""
        if self.is_local:
            return Path(self.uri)
        base = Path(os.environ.get("ROUTEFORGE_MIRROR") or Path(tempfile.gettempdir()) / "routeforge-mirror")
        return base / hashlib.sha256(self.uri.rstrip("/").encode()).hexdigest()[:16]

    def relative(self, local: Path) -> str:
        try:
            return Path(local).resolve().relative_to(self.mirror.resolve()).as_posix()
        except ValueError as exc:
            raise StorageError(f"{local} is not inside the storage mirror {self.mirror}") from exc

    # -- folders through the mirror ------------------------------------------------------------

    def push(self, folder: Path) -> None:
        """Upload a mirror folder to the root: changed files first, the listing last (the commit),
        then files the listing no longer names are removed."""
        if self.is_local:
            return
        folder = Path(folder)
        remote = self.path(self.relative(folder))
        listing = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
                   for p in sorted(folder.rglob("*")) if p.is_file()}
        before = self._remote_listing(remote) or {}
        fs = remote.fs
        for name, entry in listing.items():
            if before.get(name) != entry:
                fs.put_file(str(folder / name), f"{remote.path}/{name}")
        text = json.dumps(listing, indent=1, sort_keys=True)
        (remote / LISTING).write_text(text)
        self._local_listing(folder).write_text(text)
        for stale in set(before) - set(listing):
            fs.rm(f"{remote.path}/{stale}")

    def pull(self, path: Path, missing_ok: bool = False) -> Path:
        """Make the mirror hold what the root has committed for `path` (a pushed folder, or a file
        or folder inside one: the nearest committed ancestor is fetched whole); returns `path`.
        Nothing committed: StorageError, or with `missing_ok` the path as it is."""
        if self.is_local:
            return Path(path)
        parts = self.relative(Path(path)).split("/")
        for depth in range(len(parts), 0, -1):
            name = "/".join(parts[:depth])
            remote = self.path(name)
            listing = self._remote_listing(remote)
            if listing is not None:
                self._fetch(self.mirror / name, remote, listing)
                return Path(path)
        if missing_ok:
            return Path(path)
        raise StorageError(f"storage_root {self.uri}: {'/'.join(parts)} was never committed (no {LISTING} "
                           f"in it or above it: the asset that writes it did not finish)")

    def holds(self, path: Path) -> bool:
        """Whether the root has `path` (a local path; under the mirror for an object store, where a
        committed folder at it or above it counts), without fetching anything."""
        if self.is_local:
            return Path(path).exists()
        parts = self.relative(Path(path)).split("/")
        return any(self._remote_listing(self.path("/".join(parts[:depth]))) is not None
                   for depth in range(len(parts), 0, -1))

    def _fetch(self, folder: Path, remote: UPath, listing: dict) -> None:
        local_listing = self._local_listing(folder)
        if local_listing.exists() and json.loads(local_listing.read_text()) == listing:
            return
        for name, entry in listing.items():
            target = folder / name
            if target.exists() and target.stat().st_size == entry["size"] and sha256_file(target) == entry["sha256"]:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            remote.fs.get_file(f"{remote.path}/{name}", str(target))
            if sha256_file(target) != entry["sha256"]:
                raise StorageError(f"storage_root {self.uri}: {self.relative(target)} does not match its listing")
        local_listing.write_text(json.dumps(listing, indent=1, sort_keys=True))

    def _local_listing(self, folder: Path) -> Path:
        """The mirror's copy of a folder's listing: kept outside the folder, which the libraries and
        the bundle writer read whole."""
        path = self.mirror / ".listings" / f"{self.relative(folder)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _remote_listing(self, remote: UPath) -> dict | None:
        remote.fs.invalidate_cache(remote.path)  # another machine may have pushed since we last looked
        try:
            return json.loads((remote / LISTING).read_text())
        except (FileNotFoundError, NotADirectoryError, FileExistsError):  # nothing there, or `remote` is a file
            return None

    # -- start-up check ------------------------------------------------------------------------

    def check(self) -> None:
        """Write, read back and delete a probe object, so a missing bucket or wrong credentials stop
        a run before any work, with one error naming the setting."""
        if self.is_local:
            try:
                Path(self.uri).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"storage_root {self.uri}: cannot create the folder ({exc.strerror})") from exc
            return
        probe = self.path(f".routeforge-probe-{uuid.uuid4().hex}")
        try:
            probe.write_text("probe")
            probe.read_text()
            probe.unlink()
        except ImportError as exc:
            raise StorageError(f"storage_root {self.uri}: the filesystem for this scheme is not installed "
                               f"({exc})") from exc
        except Exception as exc:  # noqa: BLE001 - every backend raises its own types; one message for all
            raise StorageError(f"storage_root {self.uri}: {_explain(exc)}") from exc


_DENIED = ("AccessDenied", "InvalidAccessKeyId", "Access Key Id", "SignatureDoesNotMatch", "signature",
           "Forbidden", "credentials", "ExpiredToken")


def _explain(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, PermissionError) or any(s in text for s in _DENIED):
        return (f"access denied: check the credentials (`storage_options` or the AWS_* / cloud environment "
                f"variables) ({text})")
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in text or "does not exist" in text:
        return f"the bucket or container does not exist ({text})"
    return f"cannot write there ({type(exc).__name__}: {text})"
