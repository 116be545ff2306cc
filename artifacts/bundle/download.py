"""Fetching a bundle: a registered version downloaded (once, through the local bundle cache), its shared
components fetched by digest, and a cached copy that fails verification downloaded again.

`registry` reads MLflow; `bundle_cache` keeps downloaded folders; `shared_components` completes a
version whose large components live once in the registry; this module puts them in order, and
`verification` is asked before any component is fetched or linked.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from routeforge.artifacts.bundle import registry, registry_rest, shared_components
from routeforge.artifacts.bundle.bundle_cache import BundleCache, cache_root
from routeforge.artifacts.bundle.manifest import Manifest
from routeforge.artifacts.bundle.verification import BundleVerificationError, verified_manifest, verify_bundle
from routeforge.artifacts.common import temporary


def fetch(ref: str, dst: Path | None = None, tracking_uri: str | None = None, public_key=None) -> Path:
    """A local folder for `ref`: a folder as it is; a `models:/` URI without `dst` through the local
    bundle cache (`artifacts.bundle.bundle_cache`: a registry version is downloaded once); any other MLflow
    URI, or one with `dst`, downloaded there (a fresh temporary folder without `dst`). With
    `public_key`, a download's signature is checked before its shared components are fetched."""
    if not registry.is_remote_uri(ref):
        return Path(ref)
    if dst is None and ref.startswith("models:/"):
        return cached_download(ref, tracking_uri, public_key)
    return download_bundle(ref, dst, tracking_uri, public_key)


def fetch_verified(ref: str | Path, dst: Path | None, tracking_uri: str | None, key,
                   allow_unsigned: bool = False) -> tuple[Path, Manifest]:
    """`fetch` then `verify_bundle`; a cached copy of a `models:/` bundle that fails is dropped from the
    cache and downloaded once more before the failure stands (a damaged entry never fails forever)."""
    root = fetch(str(ref), dst, tracking_uri, key)
    try:
        return root, verify_bundle(root, key, allow_unsigned)
    except BundleVerificationError:
        if dst is not None or not str(ref).startswith("models:/"):  # only a cached copy is fetched again
            raise
        BundleCache().forget(root)  # a cached copy damaged since: downloaded again, then verified again
        root = cached_download(str(ref), tracking_uri, key, fresh=True)
        return root, verify_bundle(root, key, allow_unsigned)


def download_bundle(uri: str, dst: Path | None = None, tracking_uri: str | None = None, public_key=None,
                    components_root: Path | None = None) -> Path:
    """Download the bundle of `models:/name@alias` (or runs:/…) into `dst` (a fresh temp folder by
    default; an existing `dst` must be empty or an earlier download, which is replaced) and return
    `dst`, which then holds the bundle's files (the MLflow model's other files, MLmodel and the
    environment, are not kept)."""
    registry._use_tracking(uri, tracking_uri)
    found = registry.registered_version(uri)
    if found is not None:
        registry.check_version_location(*found)
    dst = Path(dst) if dst else temporary.folder("bundle")
    if dst.exists() and any(dst.iterdir()) and not (dst / "manifest.json").is_file():
        raise ValueError(f"{dst} is not empty and holds no bundle; download into a new or empty folder")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=dst.parent) as tmp:
        inner = bundle_folder(registry.download_artifacts(uri, Path(tmp)))
        with_shared_components(inner, public_key=public_key, components_root=components_root)
        if dst.exists():  # empty, or an earlier download: replaced only once the new one is complete
            shutil.rmtree(dst)
        shutil.move(str(inner), str(dst))
    return dst


def with_shared_components(inner: Path, in_place: bool = True, public_key=None,
                           components_root: Path | None = None) -> Path:
    """A complete bundle folder for a downloaded one whose version references components by digest
    (`artifacts.bundle.shared_components`; each fetched once into the bundle cache): `inner` itself,
    completed, when `in_place` (a download of our own), else a folder assembled in the cache (a
    model folder that may be the registry's store). A version that holds all its files is returned
    as it is. With `public_key`, the manifest's signature is checked on the bytes read before any
    component is fetched or linked (`verification.verified_manifest`); without, its paths are still
    confined first and the caller's `load_bundle` checks the signature of the result."""
    refs = shared_components.read_refs(inner.parent)
    if not refs:
        return inner
    manifest = None
    if public_key is not None:
        manifest = verified_manifest(inner, public_key)
    log = lambda line: print(f"routeforge: {line}", file=sys.stderr)  # noqa: E731
    if in_place:  # `components_root`: where fetched components go when the cache is read-only
        shared_components.fill(inner, refs, components_root or cache_root(), log, manifest)
        return inner
    return shared_components.assemble(inner, refs, cache_root(), log, manifest)


def bundle_folder(downloaded: Path) -> Path:
    """The bundle inside a downloaded MLflow model (`<data folder>/<folder>/`, `registry.MODEL_DATA_FOLDERS`),
    or the folder itself for versions registered before bundles were pyfunc models."""
    downloaded = Path(downloaded)
    if (downloaded / "manifest.json").is_file():
        return downloaded
    inner = sorted(p.parent for parent in registry.MODEL_DATA_FOLDERS
                   for p in downloaded.glob(f"{parent}/*/manifest.json"))
    if len(inner) > 1:
        raise ValueError(f"{downloaded}: {len(inner)} bundles in one model ({[p.name for p in inner]})")
    return inner[0] if inner else downloaded


def cached_download(uri: str, tracking_uri: str | None, public_key=None, fresh: bool = False) -> Path:
    """A `models:/<name>@<alias>` or `models:/<name>/<version>` bundle through the cache: the alias
    resolved to its version (without MLflow where it can be: over REST for a server, with sqlite3 for
    a local store; `registry.light_registry`), that version's bundle downloaded once. `fresh`: the cached copy
    failed verification; a writable cache downloads it again in its place, a read-only one into a
    temporary folder (removed at exit), so a damaged read-only entry never fails every load."""
    cache = BundleCache()
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    light = registry.light_registry(tracking_uri)
    if light is not None and not fresh:  # a warm start without MLflow (a server over REST, a local SQLite file)
        try:
            found = cache.lookup(tracking_uri, *light.version_of(tracking_uri, uri))
        except (registry_rest.NotFound, *registry.LIGHT_READ_FAILURES):
            found = None  # not there, refused, or an odd answer: MLflow's client below says what it is
        if found is not None:
            return found
    import mlflow

    registry._use_tracking(uri, tracking_uri)
    name, version = registry.registered_version(uri)
    store = mlflow.get_tracking_uri()
    if not fresh:
        found = cache.lookup(store, name, version)
        if found is not None:
            return found
    if not cache.writable():  # a read-only cache: this version goes to a temporary folder, uncached
        why = "holds a damaged copy of" if fresh else "lacks"
        print(f"routeforge: the bundle cache {cache.root} is read-only and {why} {name} version {version}: "
              "downloading it to a temporary folder, removed when this process exits", file=sys.stderr)
        downloaded = temporary.held("bundle")
        components = temporary.folder("components")
        try:
            return download_bundle(f"models:/{name}/{version}", downloaded, tracking_uri, public_key, components)
        finally:
            shutil.rmtree(components, ignore_errors=True)  # its files are linked or copied into the bundle
    cache.sweep_scratch()  # what a download killed half-way left
    scratch = cache.root / "scratch" / f"{os.getpid()}-{time.monotonic_ns()}"
    try:
        download_bundle(f"models:/{name}/{version}", scratch, tracking_uri, public_key)
        return cache.add(store, name, version, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
