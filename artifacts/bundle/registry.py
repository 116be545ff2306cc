"""Reading the MLflow registry: download a registered bundle (`models:/<name>@<alias>`, `runs:/…`).

The runtime's only use of MLflow, imported when a remote reference is given, so a router service
that loads bundles from folders never imports it (and one that reads the registry needs only the
`mlflow` extra, `mlflow-skinny`). Registering and gating live in `routeforge.registry`.
A registered bundle is an MLflow model (`routeforge.registry.mlflow_model`) whose artifacts hold the
bundle folder under `data/artifacts/<folder>/` (`artifacts/<folder>/` in versions registered before
the model held no code); `download_bundle` returns that folder, completed with the large components
the version references by digest (`artifacts.bundle.shared_components`).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from routeforge.artifacts.bundle import registry_rest, registry_sqlite
from routeforge.artifacts.bundle.registry_rest import models_ref
from routeforge.artifacts.bundle.registry_sqlite import schema_revision
from routeforge.artifacts.common import temporary
from routeforge.artifacts.common.state_folder import default_tracking_uri, is_sqlite_database, sqlite_file, where_looked


def is_remote_uri(ref: str) -> bool:
    return ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/"))


TIMEOUT_ENV = "ROUTEFORGE_HTTP_TIMEOUT"  # seconds; `routeforge --timeout` sets it
DEFAULT_TIMEOUT_S = 10.0


class RegistryUnreachable(ConnectionError):
    """The tracking server did not answer; the message is one line naming it and the timeout."""


def check_reachable(tracking_uri: str | None) -> None:
    """Fail fast, in one line, when an HTTP tracking server does not answer within the timeout
    ($ROUTEFORGE_HTTP_TIMEOUT, default 10 s): MLflow's client retries a refused connection with
    backoff for minutes before it gives up. Any HTTP answer counts as reachable (a server without
    /health, or one asking for credentials, is there); other tracking URIs are not checked."""
    import time
    import urllib.error
    import urllib.request

    if not tracking_uri or not tracking_uri.startswith(("http://", "https://")):
        return
    timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    start = time.monotonic()
    try:
        with urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=timeout):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RegistryUnreachable(f"tracking server {tracking_uri} unreachable after {time.monotonic() - start:.1f} s "
                                  f"({reason}; timeout {timeout:g} s: --timeout or ${TIMEOUT_ENV})") from None


PROXIED_DOWNLOAD = "MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD"
PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def _use_tracking(uri: str, tracking_uri: str | None) -> None:
    """Point MLflow at the given tracking URI, else where the CLI looks (`state_folder.default_tracking_uri`:
    the environment's, the store a pipeline run recorded, the state folder's own; never one an earlier
    call left set in this process), after checking the server answers."""
    import mlflow

    name = models_ref(uri)[0] if uri.startswith("models:/") else None
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(name)
    if not tracking_uri:
        raise ValueError(f"cannot resolve {uri}: {where_looked(name)}: pass a tracking URI or set "
                         "MLFLOW_TRACKING_URI")
    check_reachable(tracking_uri)
    check_store_exists(uri, tracking_uri)
    mlflow.set_tracking_uri(tracking_uri)


def check_store_exists(uri: str, tracking_uri: str) -> None:
    """A SQLite registry that is not there is an error naming it: MLflow's client would create an empty
    store at a mistyped path and then say the model does not exist. Every read calls this first."""
    database = sqlite_file(tracking_uri)
    if database is not None and not database.is_file():
        raise ValueError(f"cannot resolve {uri}: no registry at {tracking_uri} ({database.resolve()} does not "
                         "exist; a read never creates one: check the path, or pass --tracking-uri)")
    if database is not None and not is_sqlite_database(database):
        raise ValueError(f"cannot resolve {uri}: {database.resolve()} is not an SQLite database (empty, or another "
                         "kind of file); a read never creates or writes one")
    problem = schema_problem(tracking_uri) if database is not None else None
    if problem:
        raise ValueError(f"cannot resolve {uri}: {problem}")


_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(.+)$", re.M)


@functools.lru_cache(maxsize=1)
def _mlflow_schema() -> tuple[str, frozenset[str], str] | None:
    """(this process's MLflow's schema head, every revision it knows, its version), read from its
    migration scripts as text (importing them through Alembic took seconds per process); None without
    MLflow's database support (the light readers then read the store, and nothing here could migrate it)."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    spec = importlib.util.find_spec("mlflow")
    if spec is None or spec.origin is None or importlib.util.find_spec("sqlalchemy") is None:
        return None
    revisions, parents = set(), set()
    for script in (Path(spec.origin).parent / "store" / "db_migrations" / "versions").glob("*.py"):
        for kind, value in _REVISION.findall(script.read_text()):
            names = set(re.findall(r"[\"']([0-9a-f]+)[\"']", value))
            (revisions if kind == "revision" else parents).update(names)
    heads = revisions - parents
    if len(heads) != 1:
        return None  # not a layout this reads: leave the check to MLflow
    try:
        release = version("mlflow-skinny")
    except PackageNotFoundError:
        release = version("mlflow")
    return next(iter(heads)), frozenset(revisions), release


def schema_problem(tracking_uri: str) -> str | None:
    """Why this process's MLflow must not open a SQLite registry, or None. MLflow migrates a store whose
    schema is older than its own on open; the MLflow that wrote it (the pipeline's) then refuses it as
    "out-of-date": a router service with a newer mlflow-skinny broke the pipeline's store by reading it."""
    revision = schema_revision(tracking_uri)  # None: no schema recorded, nothing a read could migrate
    schema = _mlflow_schema() if revision is not None else None
    if schema is None:
        return None
    head, known, release = schema
    database = sqlite_file(tracking_uri)
    if revision == head:
        return None
    if revision in known:
        return (f"{database} holds an older MLflow schema ({revision}) than this process's MLflow {release} ({head}): "
                "opening it would migrate it, and the MLflow that wrote it would then refuse it; install that MLflow "
                "here (mlflow-skinny==<the pipeline's mlflow version>), or read the registry through an mlflow server")
    return (f"{database} holds a schema ({revision}) newer than this process's MLflow {release} knows: upgrade "
            "mlflow-skinny to the pipeline's mlflow version")


def mlflow_tracking_uri() -> str:
    """The tracking URI MLflow is pointed at (what a `models:/` error names as the store searched)."""
    import mlflow

    return mlflow.get_tracking_uri()


def registered_version(uri: str) -> tuple[str, str] | None:
    """(model name, registry version) of `models:/<name>@<alias>` or `models:/<name>/<version>`, the
    alias read from the registry (it moves); None for other URIs. A model, alias or version the
    registry lacks is one line naming it and what the registry has (MLflow's own answer comes later,
    as an artifact that is not there). Call after `_use_tracking`."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    if not uri.startswith("models:/"):
        return None
    name, alias, version = models_ref(uri)
    client = MlflowClient()
    try:
        model = client.get_registered_model(name)
    except MlflowException:
        names = sorted(m.name for m in client.search_registered_models(max_results=100))
        raise ValueError(f"{uri}: the registry at {mlflow_tracking_uri()} has no model {name!r} "
                         f"(it has {names or 'none'})") from None
    aliases = {a: str(v) for a, v in sorted(model.aliases.items())} if model.aliases else {}
    if alias is not None:
        if alias not in aliases:
            held = ", ".join(f"{a} → version {v}" for a, v in aliases.items()) or "none"
            raise ValueError(f"{uri}: model {name!r} has no alias {alias!r} (its aliases: {held})")
        return name, aliases[alias]
    held = ", ".join(f"{a} → version {v}" for a, v in aliases.items()) or "none"
    if version is None:  # `models:/name` alone names nothing to load
        versions = sorted((int(v.version) for v in client.search_model_versions(f"name='{name}'")), reverse=True)
        raise ValueError(f"{uri}: name an alias or a version: models:/{name}@<alias> or models:/{name}/<version> "
                         f"(its aliases: {held}; versions: {', '.join(map(str, versions[:20])) or 'none'})")
    try:
        client.get_model_version(name, str(version))
    except MlflowException:
        raise ValueError(f"{uri}: model {name!r} has no version {version} (its aliases: {held})") from None
    return name, str(version)


def location_problem(uri: str, tracking_uri: str | None = None) -> str | None:
    """Why fetching `uri` could send the tracking server's credentials to another host, or None.
    MLflow sends `$MLFLOW_TRACKING_USERNAME`/`PASSWORD` (or its token) with every HTTP artifact
    request, so an `http(s)://` or `mlflow-artifacts://host/` location must be the configured tracking
    server itself; object stores (s3, gs, …) use their own credentials and local paths none."""
    from urllib.parse import urlsplit

    import mlflow

    tracking_uri = tracking_uri or mlflow.get_tracking_uri()
    where = urlsplit(uri)
    if where.scheme not in ("http", "https", "mlflow-artifacts") or (where.scheme == "mlflow-artifacts"
                                                                    and not where.netloc):
        return None
    server = urlsplit(tracking_uri or "")
    if server.scheme in ("http", "https") and where.netloc.lower() == server.netloc.lower():
        return None
    return (f"{uri} is not on the configured tracking server ({tracking_uri}): refused before any request, so no "
            "credential goes to another host")


def check_version_location(name: str, version: str) -> None:
    """Refuse a registered version whose files are not under its experiment's artifact location (a
    store writer pointing a version at another folder or host), before anything is downloaded."""
    from mlflow import MlflowClient

    client = MlflowClient()
    where = client.get_model_version_download_uri(name, str(version))
    run_id = client.get_model_version(name, str(version)).run_id
    root = client.get_experiment(client.get_run(run_id).info.experiment_id).artifact_location if run_id else None
    problem = location_problem(where) or (location_problem(root) if root else None)
    if problem is None and root is not None and not _under(where, root):
        problem = (f"its storage location {where} is outside its experiment's artifact location {root}; refused, "
                   "nothing downloaded")
    if problem is not None:
        raise ValueError(f"{name} version {version}: {problem}")


def _under(uri: str, root: str) -> bool:
    """Whether artifact URI `uri` lies inside `root` (same scheme and host, path below; no `..`)."""
    import posixpath
    from urllib.parse import urlsplit

    a, b = urlsplit(uri), urlsplit(root)
    if (a.scheme or "file") != (b.scheme or "file") or a.netloc != b.netloc or ".." in a.path.split("/"):
        return False
    base = posixpath.normpath(b.path) if b.path else "/"
    return posixpath.commonpath([posixpath.normpath(a.path or "/"), base]) == base


def download_artifacts(uri: str, dst: Path | None = None) -> Path:
    """`mlflow.artifacts.download_artifacts`, streamed through the tracking server. MLflow 3 clients
    otherwise fetch large files straight from the server's object store by presigned URLs, so a
    router service would need a route to that store; set $MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD=true
    to opt in to those direct downloads. A location on another HTTP host than the tracking server is
    refused before any request (`location_problem`)."""
    import mlflow

    problem = location_problem(uri)
    if problem is not None:
        raise ValueError(problem)

    # MLflow's own progress bar is off unless the caller set it: a router service loading a bundle, and
    # every CLI command, printed it on each call (the CLI says what it fetched in one line)
    defaults = {PROXIED_DOWNLOAD: "false", PROGRESS_BAR: "false"}
    forced = [k for k in defaults if k not in os.environ]
    os.environ.update({k: defaults[k] for k in forced})
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst) if dst else None))
    finally:
        for key in forced:
            os.environ.pop(key, None)


def download_manifest(uri: str, tracking_uri: str | None = None) -> Path:
    """A local folder holding only the manifest (and its signature, when the bundle has one) of a
    registered bundle: `inspect` needs nothing else, and a bundle with its encoder is 140 MB."""

    import mlflow
    from mlflow.exceptions import MlflowException

    _use_tracking(uri, tracking_uri)
    registered_version(uri)
    dst = temporary.folder("manifest")
    base = uri.rstrip("/")
    inner = []
    for parent in MODEL_DATA_FOLDERS:  # a pyfunc model keeps the bundle in <parent>/<the staged folder's name>/
        try:
            inner += [f"{a.path}/" for a in mlflow.artifacts.list_artifacts(artifact_uri=f"{base}/{parent}")
                      if a.is_dir]
        except (MlflowException, OSError):
            continue
    for folder in (*inner, ""):  # "": a version registered before bundles were pyfunc models
        try:
            found = download_artifacts(f"{base}/{folder}manifest.json", dst)
        except (MlflowException, OSError):
            continue
        try:
            download_artifacts(f"{base}/{folder}manifest.sig", dst)
        except (MlflowException, OSError):
            pass  # an unsigned bundle: inspect says so, verify refuses it
        return found.parent
    raise ValueError(f"{uri}: no manifest.json in the registered model's artifacts")


# where a registered MLflow model keeps the bundle folder: its loader-module data (`data/artifacts/`,
# current), or its PythonModel artifact (`artifacts/`, versions registered before the model held no code)
MODEL_DATA_FOLDERS = ("data/artifacts", "artifacts")


PUBLIC_KEY_TAG = "routeforge.public_key"  # on the registered model: the PEM its versions are signed with


# what a light read may fail with besides NotFound (refused, unreachable, a store it cannot read, an odd
# answer): the caller then asks MLflow's client, which says what it is
LIGHT_READ_FAILURES = (OSError, ValueError, KeyError)


def light_registry(tracking_uri: str | None):
    """The module that reads `tracking_uri`'s aliases and tags without MLflow's client: `registry_rest`
    for a server, `registry_sqlite` for a local file; None for any other store. Both answer
    `registered_model` and `version_of` alike, and say `NotFound` or fail (then MLflow's client asks)."""
    if registry_rest.is_http(tracking_uri):
        return registry_rest
    if registry_sqlite.is_sqlite(tracking_uri):
        return registry_sqlite
    return None


def recorded_public_key(uri: str, tracking_uri: str | None = None) -> bytes | None:
    """The signing key's public PEM the pipeline recorded on the registered model of `models:/<name>…`,
    or None. Trusting it is trusting whoever may tag that model: with an authenticated MLflow server
    (deploy/), the pipeline's writer account only."""
    name = registry_rest.models_ref(uri)[0]
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not tracking_uri:
        return None
    check_reachable(tracking_uri)
    check_store_exists(uri, tracking_uri)
    light = light_registry(tracking_uri)
    if light is not None:  # without importing MLflow
        try:
            pem = light.registered_model(tracking_uri, name)["tags"].get(PUBLIC_KEY_TAG)
            return pem.encode() if pem else None
        except registry_rest.NotFound:
            return None
        except LIGHT_READ_FAILURES:
            pass  # asked again through MLflow's client below
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        pem = mlflow.MlflowClient(tracking_uri).get_registered_model(name).tags.get(PUBLIC_KEY_TAG)
    except MlflowException:
        return None
    return pem.encode() if pem else None
