"""The bundle as an MLflow model: a `python_function` flavour around the runtime, no pickle, no code.

Registered this way, a version answers the tools MLflow users already have:
`mlflow.pyfunc.load_model("models:/<name>@champion").predict(frame)` and `mlflow models serve`.

Why a loader module: a model logged "from code" or as a `PythonModel` stores a Python file beside
the bundle, and MLflow executes it on `load_model`. That file sat outside the bundle's signature, so
a line appended to it ran in every router service while the bundle still verified. Logged with
`loader_module=routeforge.registry.pyfunc_loader`, the model holds data only (the signed bundle
folder under `data/artifacts/<folder>/`, MLmodel and the environment files): what runs on load is the
installed package's code, and the loader refuses a model folder that carries Python files or code
paths all the same (`pyfunc_loader.check_no_code`).

Input: a frame with a `prompt` column of strings; optional param `lam` (λ in quality − λ·cost).
Output, one row per prompt: `route_to` (the chosen model), `estimator` (router, or the KNN estimator
for a bundle trained without router selection) and per model `quality/<m>`, `cost/<m>` and
`output_tokens/<m>` (NaN where the training data had none).

Loading verifies the bundle as `load_bundle` does: every checksum, and the signature against the
trusted key in $ROUTEFORGE_PUBLIC_KEY; without one the model refuses to load unless
$ROUTEFORGE_INSECURE_SKIP_SIGNATURE=1 says to skip the signature (which is printed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import mlflow.pyfunc
import numpy as np
from routeforge.artifacts.bundle import shared_components
from routeforge.artifacts.bundle.bundle_cache import cache_root
from routeforge.artifacts.bundle.keyring import PUBLIC_KEY_ENV
from routeforge.artifacts.bundle.loader import RouterBundle
from routeforge.artifacts.bundle.manifest import MANIFEST_FILE
from routeforge.artifacts.bundle.signing import SIGNATURE_FILE
from routeforge.artifacts.bundle.verification import read_manifest
from routeforge.artifacts.common import temporary

SKIP_SIGNATURE_ENV = "ROUTEFORGE_INSECURE_SKIP_SIGNATURE"
MODEL_NAME_IN_RUN = "router_bundle"
LOADER_MODULE = "routeforge.registry.pyfunc_loader"
# MLflow keeps it as <model>/data/artifacts/<folder>/ (artifacts.bundle.registry.MODEL_DATA_FOLDERS)
DATA_FOLDER = "artifacts"
EXAMPLE_PROMPTS = ["What is 15 plus 27?", "Translate to French: good morning"]


def route(bundle: RouterBundle, prompts: list[str], lam: float = 0.0) -> dict[str, list[Any]]:
    """The model's output columns for `prompts` (what `predict` returns, as a dict of columns)."""
    routing = bundle.route(prompts, lam)
    columns: dict[str, list[Any]] = {"route_to": list(routing.choice), "estimator": [routing.estimator] * len(prompts)}
    for measure in ("quality", "cost", "output_tokens"):
        values = np.asarray(getattr(routing.prediction, measure), dtype=np.float64)
        for j, model in enumerate(routing.prediction.models):
            columns[f"{measure}/{model}"] = values[:, j].tolist()
    return columns


def skip_signature() -> bool:
    return os.environ.get(SKIP_SIGNATURE_ENV, "").strip().lower() in ("1", "true", "yes")


def signature(bundle: RouterBundle):
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

    outputs = [ColSpec("string", "route_to"), ColSpec("string", "estimator")]
    outputs += [ColSpec("double", f"{measure}/{m}") for measure in ("quality", "cost", "output_tokens")
                for m in bundle.models]
    return ModelSignature(inputs=Schema([ColSpec("string", "prompt")]), outputs=Schema(outputs),
                          params=ParamSchema([ParamSpec("lam", "double", 0.0)]))


def requirements() -> list[str]:
    """What a serving environment installs: this package's runtime and the MLflow client."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pinned = f"routeforge=={version('routeforge')}"
    except PackageNotFoundError:
        pinned = "routeforge"
    return [pinned, f"mlflow-skinny=={mlflow.__version__}", "pandas"]


def _stage(bundle_dir: Path, root: Path, refs: dict | None = None) -> Path:
    """`root/artifacts/<bundle folder>`: the manifest, its signature and the files of every component
    `refs` does not store by digest (whose references file goes beside the bundle folder), hard-linked
    where the file system allows (a bundle is ~140 MB). MLflow copies `data_path` by its own name."""
    staged = root / DATA_FOLDER
    staged.mkdir()
    shared = set(refs["components"]) if refs else set()
    if refs:
        (staged / shared_components.REFS_FILE).write_text(json.dumps(refs, indent=2, sort_keys=True))
    manifest = read_manifest(Path(bundle_dir))
    kept = [name for name in (MANIFEST_FILE, SIGNATURE_FILE) if (Path(bundle_dir) / name).is_file()]
    kept += [f.path for c in manifest.components if c.name not in shared for f in c.files]
    shared_components.link_files(kept, bundle_dir, staged / Path(bundle_dir).name)
    return staged


COMPONENT_STORE_FOLDER = "routeforge-components"


def component_store(run) -> str:
    """Where the active run's experiment keeps components by digest, so it lives wherever the
    experiment's artifacts do (local, S3, an `mlflow server`): beside the experiments of a tracking
    server's default layout (`<root>/<experiment id>`: `<root>/routeforge-components`, one encoder for
    every experiment of the server), else a folder of the experiment's own artifact location (which
    the shipped fleets and the local default share between experiments too)."""
    experiment = mlflow.get_experiment(run.info.experiment_id)
    location = experiment.artifact_location.rstrip("/")
    root, _, leaf = location.rpartition("/")
    if leaf == str(experiment.experiment_id) and root and not root.endswith("/"):
        return f"{root}/{COMPONENT_STORE_FOLDER}"  # s3://b/artifacts/3 → s3://b/artifacts/…; mlflow-artifacts:/3
    return f"{location}/{COMPONENT_STORE_FOLDER}"


def _stored(repo, prefix: str, component) -> bool:
    """Whether the store already holds every file of `component` under `prefix` at its size (an
    upload cut short is uploaded again, not referenced)."""
    want = {f"{prefix}/{f.path}": f.bytes for f in component.files}
    have, folders = {}, [prefix]
    while folders:
        for info in repo.list_artifacts(folders.pop()):
            if info.is_dir:
                folders.append(info.path)
            else:
                have[info.path] = info.file_size
    return all(have.get(path) == size for path, size in want.items())


def share_components(bundle_dir: Path, store: str) -> dict:
    """Upload each shareable component the store lacks to `<store>/<digest>/`; the references
    file's content for this bundle (`artifacts.bundle.shared_components`)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    bundle_dir = Path(bundle_dir)
    repo = get_artifact_repository(store)
    components = {}
    for component in shared_components.shareable(read_manifest(bundle_dir)):
        digest = shared_components.component_digest(component)
        components[component.name] = digest
        if _stored(repo, digest, component):
            continue
        with temporary.scoped("component") as tmp:
            shared_components.link_files([f.path for f in component.files], bundle_dir, tmp)
            repo.log_artifacts(tmp, digest)
    shared_components.seed(bundle_dir, cache_root())  # MLflow loads the model it logs (the input example)
    return {"format": shared_components.REFS_FORMAT, "store": store, "components": components}


def log_bundle_model(bundle_dir: Path, public_key_pem: str | None = None):
    """Log `bundle_dir` as a code-free pyfunc model into the active run, its large components stored
    once by digest (`share_components`); returns MLflow's ModelInfo. MLflow loads the model it logs to
    check the input example; `public_key_pem` (the signer's) is the key that load trusts, so the check
    runs on the verified bundle instead of warning that the load was refused."""
    import pandas as pd

    bundle = RouterBundle(Path(bundle_dir), read_manifest(Path(bundle_dir)))  # just written by the publisher
    refs = share_components(Path(bundle_dir), component_store(mlflow.active_run()))
    with temporary.scoped("pyfunc") as tmp:
        trusted = {}
        if public_key_pem and not os.environ.get(PUBLIC_KEY_ENV):
            (Path(tmp) / "signer.pub").write_text(public_key_pem)
            trusted = {PUBLIC_KEY_ENV: str(Path(tmp) / "signer.pub")}
        with mock.patch.dict(os.environ, trusted):  # restored after, whatever was there
            return mlflow.pyfunc.log_model(
                name=MODEL_NAME_IN_RUN, loader_module=LOADER_MODULE,
                data_path=str(_stage(Path(bundle_dir), Path(tmp), refs)),
                signature=signature(bundle), input_example=pd.DataFrame({"prompt": EXAMPLE_PROMPTS}),
                pip_requirements=requirements())
