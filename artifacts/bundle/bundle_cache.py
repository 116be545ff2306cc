"""One local cache of downloaded bundles, so that `predict`, `verify`, `load_bundle("models:/…")` and
the other commands do not download a registered bundle again each time (a demo bundle is ~140 MB)
nor leave it behind in a temporary folder.

Layout under the cache root (`$ROUTEFORGE_CACHE`, else `$ROUTEFORGE_STATE/cache/bundles`, else
`./.state/cache/bundles`, beside the local registry the CLI already defaults to):

    by-digest/<manifest version>/      a bundle, as downloaded (its manifest's content digest)
    registry/<store>/<model>/<version>  a text file: the digest registry version <version> holds
    components/<component digest>/      a component stored by digest in the registry
                                        (`artifacts.bundle.shared_components`), hard-linked into the bundles

A registered model version never changes in MLflow, so (tracking store, model, version) → digest is
recorded once; an alias is resolved with one registry call every time (it moves). Nothing in the
cache is trusted as it is: `load_bundle` verifies every file's checksum and the signature of what
the cache returns, as of a fresh download, and an entry that fails is downloaded again. Size: after
each new entry the least recently used are removed beyond `max_bytes` (`$ROUTEFORGE_CACHE_MAX_BYTES`,
default 4 GiB), then the components no remaining bundle links to; `routeforge cache list` /
`cache prune` show and trim it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from routeforge.artifacts.common import temporary
from routeforge.artifacts.common.state_folder import state_root

DEFAULT_MAX_BYTES = 4 << 30
MANIFEST_FILE = "manifest.json"
DIGEST = re.compile(r"[0-9a-f]{12,64}")  # a manifest's content digest: the only name an entry may have
SCRATCH_NAME = re.compile(r"(?:component-|bundle-)?(?P<pid>[0-9]{1,10})-[0-9]+")  # a download's scratch folder


def cache_root() -> Path:
    if os.environ.get("ROUTEFORGE_CACHE"):
        return Path(os.environ["ROUTEFORGE_CACHE"])

    return state_root() / "cache" / "bundles"


def max_bytes() -> int:
    value = os.environ.get("ROUTEFORGE_CACHE_MAX_BYTES")
    return int(value) if value else DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Entry:
    digest: str
    path: Path
    bytes: int
    last_used: float


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink() and p.is_file())


def _no_link_below(root: Path, path: Path) -> bool:
    """Whether no part of `path` below `root` (itself included) is a symbolic link: what every cache
    operation checks before it reads, writes or removes there (the root itself is the operator's)."""
    try:
        rel = Path(path).relative_to(root)
    except ValueError:
        return False
    here = Path(root)
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            return False
    return True


class BundleCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_root()

    def _confined(self, path: Path) -> bool:
        """Whether nothing between the cache root and `path` is a symbolic link."""
        return _no_link_below(self.root, Path(path))

    def _index(self, tracking_uri: str, name: str, version: str) -> Path:
        store = hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]
        return self.root / "registry" / store / name.replace("/", "_") / version

    def lookup(self, tracking_uri: str, name: str, version: str) -> Path | None:
        """The cached folder of a registry version, touched as used; None when not cached, or when the
        index entry does not name a digest (a poisoned entry is ignored: nothing outside
        `by-digest/` is ever returned). A read-only cache is read as it is."""
        index = self._index(tracking_uri, name, version)
        if not self._confined(index) or not index.is_file():
            return None
        try:
            digest = index.read_text()[:200].strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not DIGEST.fullmatch(digest):
            print(f"routeforge: ignoring the bundle cache's entry {index}: {digest[:40]!r} is not a digest",
                  file=sys.stderr)
            return None
        folder = self.root / "by-digest" / digest
        if not self._confined(folder / MANIFEST_FILE) or not (folder / MANIFEST_FILE).is_file():
            return None
        try:
            os.utime(folder)  # least recently used is what prune removes first
        except OSError:
            pass  # a read-only cache (a pre-warmed one shipped in an image) is used as it is
        return folder

    def writable(self) -> bool:
        """Whether new entries can be written (a pre-warmed cache may be mounted read-only)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        return os.access(self.root, os.W_OK)

    def _inside(self, folder: Path) -> bool:
        """Whether `folder` is an entry of this cache (`by-digest/<digest>`, not through a link)."""
        folder = Path(folder)
        return (DIGEST.fullmatch(folder.name) is not None and folder.parent == self.root / "by-digest"
                and self._confined(folder))

    def add(self, tracking_uri: str, name: str, version: str, downloaded: Path) -> Path:
        """Move a downloaded bundle folder into the cache under its digest; record the version; trim."""
        import json

        digest = json.loads((downloaded / MANIFEST_FILE).read_text())["version"]
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise ValueError(f"{downloaded}: manifest version {digest!r} is not a digest")
        folder = self.root / "by-digest" / digest
        index = self._index(tracking_uri, name, version)
        for path in (folder, index.parent):  # the index file itself may be a link: replaced below
            if not self._confined(path):
                raise ValueError(f"the bundle cache {self.root}: {path.relative_to(self.root)} passes through a "
                                 "symbolic link; nothing is written there (remove the link)")
        if folder.exists():
            shutil.rmtree(downloaded, ignore_errors=True)
        else:
            folder.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(downloaded), str(folder))
        index.parent.mkdir(parents=True, exist_ok=True)
        tmp = index.with_name(f".{index.name}.{os.getpid()}.tmp")
        tmp.write_text(digest)
        tmp.replace(index)  # replaces a link put there, never writes through it
        os.utime(folder)
        self.prune(max_bytes(), keep=digest)
        self.prune_components()
        return folder

    def forget(self, folder: Path) -> None:
        """Remove an entry that failed verification (the next call downloads it again). Only an entry
        of this cache is ever removed; any other folder (a poisoned index entry's, a temporary
        download) is left alone, and a read-only cache is left as it is."""
        if self._inside(folder) and self.writable():
            shutil.rmtree(folder, ignore_errors=True)

    def entries(self) -> list[Entry]:
        """The cached bundles, most recently used first; a `by-digest/` that is a link, and links in
        it, are not entries (prune and forget would act outside the cache)."""
        base = self.root / "by-digest"
        if not self._confined(base) or not base.is_dir():
            return []
        return sorted((Entry(p.name, p, _size(p), p.stat().st_mtime) for p in base.iterdir()
                       if not p.is_symlink() and p.is_dir()), key=lambda e: e.last_used, reverse=True)

    def prune(self, limit: int, keep: str | None = None) -> list[Entry]:
        """Remove the least recently used entries until the cache holds at most `limit` bytes (the
        entry `keep` stays whatever its size); returns what was removed."""
        removed, total = [], 0
        for entry in self.entries():  # most recently used first
            total += entry.bytes
            if total > limit and entry.digest != keep:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry)
                total -= entry.bytes
        return removed

    def sweep_scratch(self) -> int:
        """Remove the cache's own scratch folders (`scratch/[component-|bundle-]<pid>-<n>`) whose process
        is gone (a download killed half-way; `temporary.sweep`); returns how many. Links are never followed."""
        base = self.root / "scratch"
        if not self._confined(base) or not base.is_dir():
            return 0
        return len(temporary.sweep(base, SCRATCH_NAME))

    def prune_components(self) -> int:
        """Remove the cached components that no cached bundle links to (every file of theirs has one
        link: their own); returns how many. Where hard links are impossible the bundles hold copies,
        so a component there is kept only until the next prune."""
        base, removed = self.root / "components", 0
        if not self._confined(base) or not base.is_dir():
            return 0
        for folder in base.iterdir():
            if folder.is_symlink() or not folder.is_dir():
                continue
            files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
            if all(p.stat().st_nlink == 1 for p in files):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        return removed


