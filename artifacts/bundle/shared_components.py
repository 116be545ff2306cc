"""Large bundle components stored once in the registry and referenced by digest from every version.

Why: a router service downloads a bundle at every promotion, and most of a bundle is components
that did not change between versions (the 87 MB sentence encoder, the DistilBERT predictors). A
registered version holds its small files as before; each component of at least `SHARED_MIN_BYTES`
is stored once under `<store>/<digest>/` (the store is a folder of the experiment's artifact
location, `routeforge.registry.mlflow_model.component_store`) and named in `shared_components.json`
beside the bundle folder in the MLflow model:

    {"format": 1, "store": "<artifact URI>", "components": {"<component name>": "<digest>"}}

A component's digest is the sha256 of its files' paths and checksums as the manifest lists them, so
the same content gets the same digest whichever run built it. Trust does not move: the signed
manifest still lists every file of every component with its checksum, the files fetched from the
store are checked against it before they enter the local cache, and `load_bundle` verifies the
assembled folder as it verifies any other. The references file is outside the signature; a wrong
store or digest in it can make a load fail, never make it accept other content.

Fetched components are kept in the bundle cache (`<cache root>/components/<digest>/`,
`artifacts.bundle.bundle_cache`) and hard-linked into each bundle folder that uses them, so moving to a
version whose encoder did not change downloads only what did change.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from routeforge.artifacts.bundle.bundle_cache import DIGEST
from routeforge.artifacts.bundle.manifest import Component, Manifest
from routeforge.artifacts.bundle.registry import download_artifacts, location_problem
from routeforge.artifacts.bundle.verification import confinement_problems, read_manifest
from routeforge.artifacts.bundle.writer import sha256_file

REFS_FILE = "shared_components.json"
REFS_FORMAT = 1
SHARED_MIN_BYTES = 1 << 20  # smaller components stay in the version: one download each is not worth it


def component_digest(component: Component) -> str:
    """sha256 over the component's (path, sha256) file list, as the manifest records it."""
    lines = sorted(f"{f.path}\t{f.sha256}\t{f.bytes}" for f in component.files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def shareable(manifest: Manifest) -> list[Component]:
    """The components stored by digest rather than in each version."""
    return [c for c in manifest.components if sum(f.bytes for f in c.files) >= SHARED_MIN_BYTES]


def read_refs(model_data: Path) -> dict | None:
    """The references file in a downloaded model's data folder (the bundle folder's parent), or None
    for a version that holds all its files."""
    path = Path(model_data) / REFS_FILE
    if not path.is_file():
        return None
    refs = json.loads(path.read_text())
    if refs.get("format") != REFS_FORMAT or not isinstance(refs.get("components"), dict) or not refs.get("store"):
        raise ValueError(f"{path}: not a routeforge shared-components file of format {REFS_FORMAT}")
    return refs


def link_files(paths, src_root: Path, dst_root: Path) -> None:
    """Hard-link (else copy, where the file system cannot link) each of `paths`, relative to
    `src_root`, to the same relative path under `dst_root`: no second copy of a component on disk.
    A path that is not relative and inside, or whose folder resolves outside `dst_root` (through a
    link in a folder someone else wrote), is refused before anything is removed or written."""
    base = os.path.realpath(dst_root)
    for rel in paths:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"{rel}: not a path inside the bundle; nothing was linked")
        target = Path(dst_root) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.commonpath([base, os.path.realpath(target.parent)]) != base:
            raise ValueError(f"{rel}: its folder leads outside {dst_root} (a symbolic link); nothing was linked")
        if target.is_symlink() or target.exists():
            target.unlink()
        try:
            os.link(Path(src_root) / rel, target)
        except OSError:
            shutil.copy2(Path(src_root) / rel, target)


def _link_tree(src: Path, dst_root: Path) -> None:
    """`link_files` for every file under `src`."""
    link_files(sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file()), src, dst_root)


def _verified(folder: Path, component: Component) -> bool:
    for entry in component.files:
        path = folder / entry.path
        if not path.is_file() or path.stat().st_size != entry.bytes or sha256_file(path) != entry.sha256:
            return False
    return True


def _place(folder: Path, cached: Path, component: Component) -> None:
    """Move a complete component folder to its cache entry by a rename (atomic on one file system).
    Another process may have placed the same digest meanwhile: its entry is kept when it verifies
    (ours is dropped), replaced when it does not (a damaged entry)."""
    cached.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.rename(cached)
        return
    except OSError:
        if _verified(cached, component):
            shutil.rmtree(folder, ignore_errors=True)
            return
    shutil.rmtree(cached, ignore_errors=True)
    folder.rename(cached)


def seed(bundle_dir: Path, cache_root: Path) -> None:
    """Put the shareable components of a complete local bundle into the cache (hard links where the
    file system allows): the process that registers a bundle then loads it without a download."""
    for component in shareable(read_manifest(Path(bundle_dir))):
        cached = Path(cache_root) / "components" / component_digest(component)
        if _verified(cached, component):
            continue
        scratch = Path(cache_root) / "scratch" / f"component-{os.getpid()}-{time.monotonic_ns()}"
        link_files([f.path for f in component.files], bundle_dir, scratch)
        _place(scratch, cached, component)


def assemble(model_bundle: Path, refs: dict, cache_root: Path, log=None, manifest: Manifest | None = None) -> Path:
    """A complete bundle folder for a model folder that references components (what MLflow's pyfunc
    loader hands over; it may be the registry's own store, so nothing is written into it): the
    bundle's files and its components linked into `<cache root>/by-digest/<version>/`. `manifest`:
    the bundle's, already verified by the caller (else read, and its paths checked, here)."""
    manifest = manifest or read_manifest(Path(model_bundle))
    _confined(manifest, model_bundle)

    version = manifest.version
    if not isinstance(version, str) or not DIGEST.fullmatch(version):
        raise ValueError(f"{model_bundle}: manifest version {version!r} is not a digest")
    folder = Path(cache_root) / "by-digest" / version
    if (folder / "manifest.json").is_file():  # assembled before; the caller's load verifies every file
        os.utime(folder)
        return folder
    scratch = Path(cache_root) / "scratch" / f"bundle-{os.getpid()}-{time.monotonic_ns()}"
    try:
        _link_tree(Path(model_bundle), scratch)
        fill(scratch, refs, cache_root, log, manifest)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            scratch.rename(folder)
        except OSError:  # another process assembled it meanwhile
            pass
        return folder
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _confined(manifest: Manifest, where: Path) -> None:
    """Refuse a manifest naming a component or file outside the bundle before any file is touched."""
    problems = confinement_problems(manifest)
    if problems:
        raise ValueError(f"bundle at {where} refused before any file was linked: " + "; ".join(problems))


def fill(bundle_dir: Path, refs: dict, cache_root: Path, log=None, manifest: Manifest | None = None) -> list[str]:
    """Put each referenced component's files into `bundle_dir`, from the local cache when it holds
    them, else downloaded from the store (checked against the manifest, then cached). Returns the
    names of the components that were downloaded. Raises naming the component whose files the store
    lacks or that do not match the manifest. `manifest`: the bundle's, already verified by the caller
    (`verification.verified_manifest`: its signature checked on the bytes read); else it is read here. Either
    way every path it names is checked to stay inside the bundle before any file is linked."""
    manifest = manifest or read_manifest(Path(bundle_dir))
    _confined(manifest, bundle_dir)
    store = str(refs["store"]).rstrip("/")
    problem = location_problem(store)  # the references file is unsigned: its store may name any host
    if problem is not None:
        raise ValueError(f"{REFS_FILE}: {problem}")
    fetched = []
    for name, digest in sorted(refs["components"].items()):
        component = manifest.component(name)
        if component_digest(component) != digest:
            raise ValueError(f"{REFS_FILE}: component {name!r} is referenced as {digest[:12]}, but the manifest's "
                             f"files give {component_digest(component)[:12]}")
        cached = Path(cache_root) / "components" / digest
        if not _verified(cached, component):
            scratch = Path(cache_root) / "scratch" / f"component-{os.getpid()}-{time.monotonic_ns()}"
            try:
                started = time.monotonic()
                downloaded = download_artifacts(f"{store}/{digest}", scratch)
                if not _verified(downloaded, component):
                    raise ValueError(f"{store}/{digest}: the stored files of component {name!r} do not match the "
                                     "bundle's manifest")
                _place(downloaded, cached, component)
                fetched.append(name)
                if log:
                    size = sum(f.bytes for f in component.files) / 1e6
                    log(f"component {name}: {size:.1f} MB downloaded in {time.monotonic() - started:.1f} s")
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        os.utime(cached)
        link_files([f.path for f in component.files], cached, bundle_dir)
    return fetched
