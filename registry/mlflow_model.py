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

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
from routeforge.artifacts.loader import RouterBundle, read_manifest

SKIP_SIGNATURE_ENV = "ROUTEFORGE_INSECURE_SKIP_SIGNATURE"
MODEL_NAME_IN_RUN = "router_bundle"
LOADER_MODULE = "routeforge.registry.pyfunc_loader"
DATA_FOLDER = "artifacts"  # MLflow keeps it as <model>/data/artifacts/<folder>/ (artifacts.registry.MODEL_DATA_FOLDERS)
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


def _stage(bundle_dir: Path, root: Path) -> Path:
    """`root/artifacts/<bundle folder>`: hard links of the bundle's files where the file system
    allows (a bundle is ~140 MB), copies elsewhere. MLflow copies `data_path` by its own name."""
    staged = root / DATA_FOLDER
    staged.mkdir()

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(bundle_dir, staged / Path(bundle_dir).name, copy_function=link)
    return staged


def log_bundle_model(bundle_dir: Path):
    """Log `bundle_dir` as a code-free pyfunc model into the active run; returns MLflow's ModelInfo."""
    import pandas as pd

    bundle = RouterBundle(Path(bundle_dir), read_manifest(Path(bundle_dir)))  # just written by the publisher
    with tempfile.TemporaryDirectory(prefix="routeforge-pyfunc-") as tmp:
        return mlflow.pyfunc.log_model(
            name=MODEL_NAME_IN_RUN, loader_module=LOADER_MODULE, data_path=str(_stage(Path(bundle_dir), Path(tmp))),
            signature=signature(bundle), input_example=pd.DataFrame({"prompt": EXAMPLE_PROMPTS}),
            pip_requirements=requirements())
