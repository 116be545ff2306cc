"""Reading the MLflow registry: download a registered bundle (`models:/<name>@<alias>`, `runs:/…`).

The runtime's only use of MLflow, imported when a remote reference is given, so a router service
that loads bundles from folders never imports it (and one that reads the registry needs only the
`mlflow` extra, `mlflow-skinny`). Registering and gating live in `routeforge.registry`.
A registered bundle is an MLflow model (`routeforge.registry.mlflow_model`) whose artifacts hold the
bundle folder under `artifacts/bundle`; `download_bundle` returns that folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def is_remote_uri(ref: str) -> bool:
    return ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/"))


PROXIED_DOWNLOAD = "MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD"


def download_artifacts(uri: str, dst: Path | None = None) -> Path:
    """`mlflow.artifacts.download_artifacts`, streamed through the tracking server. MLflow 3 clients
    otherwise fetch large files straight from the server's object store by presigned URLs, so a
    router service would need a route to that store; set $MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD=true
    to opt in to those direct downloads."""
    import mlflow

    forced = PROXIED_DOWNLOAD not in os.environ
    if forced:
        os.environ[PROXIED_DOWNLOAD] = "false"
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst) if dst else None))
    finally:
        if forced:
            os.environ.pop(PROXIED_DOWNLOAD, None)


def download_bundle(uri: str, dst: Path | None = None, tracking_uri: str | None = None) -> Path:
    """Download the bundle of `models:/name@alias` (or runs:/…) into `dst` (a fresh temp folder by
    default; an existing `dst` must be empty or an earlier download, which is replaced) and return
    `dst`, which then holds the bundle's files (the MLflow model's other files, MLmodel and the
    environment, are not kept)."""
    import shutil
    import tempfile

    import mlflow

    # the given URI, else the environment's: never a URI an earlier call left set in this process
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not tracking_uri:
        raise ValueError(f"cannot resolve {uri}: pass a tracking URI or set MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri)
    dst = Path(dst) if dst else Path(tempfile.mkdtemp(prefix="routeforge-bundle-"))
    if dst.exists() and any(dst.iterdir()) and not (dst / "manifest.json").is_file():
        raise ValueError(f"{dst} is not empty and holds no bundle; download into a new or empty folder")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=dst.parent) as tmp:
        inner = bundle_folder(download_artifacts(uri, Path(tmp)))
        if dst.exists():  # empty, or an earlier download: replaced only once the new one is complete
            shutil.rmtree(dst)
        shutil.move(str(inner), str(dst))
    return dst


def bundle_folder(downloaded: Path) -> Path:
    """The bundle inside a downloaded MLflow model (its one pyfunc artifact, `artifacts/<folder>/`),
    or the folder itself for versions registered before bundles were pyfunc models."""
    downloaded = Path(downloaded)
    if (downloaded / "manifest.json").is_file():
        return downloaded
    inner = sorted(p.parent for p in downloaded.glob("artifacts/*/manifest.json"))
    if len(inner) > 1:
        raise ValueError(f"{downloaded}: {len(inner)} bundles in one model ({[p.name for p in inner]})")
    return inner[0] if inner else downloaded


PUBLIC_KEY_TAG = "routeforge.public_key"  # on the registered model: the PEM its versions are signed with


def recorded_public_key(uri: str, tracking_uri: str | None = None) -> bytes | None:
    """The signing key's public PEM the pipeline recorded on the registered model of `models:/<name>…`,
    or None. Trusting it is trusting whoever may tag that model: with an authenticated MLflow server
    (deploy/), the pipeline's writer account only."""
    import mlflow
    from mlflow.exceptions import MlflowException

    name = uri.removeprefix("models:/").split("@", 1)[0].split("/", 1)[0]
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not tracking_uri:
        return None
    try:
        pem = mlflow.MlflowClient(tracking_uri).get_registered_model(name).tags.get(PUBLIC_KEY_TAG)
    except MlflowException:
        return None
    return pem.encode() if pem else None
