"""The bundle as an MLflow model: a `python_function` flavour around the runtime, no pickle.

Registered this way, a version answers the tools MLflow users already have:
`mlflow.pyfunc.load_model("models:/<name>@champion").predict(frame)` and `mlflow models serve`.
The model is logged "from code" (`pyfunc_entry.py` beside this file names the class; MLflow stores
that file, not a pickled object) with the signed bundle folder as its one artifact, `bundle`.

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
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
from routeforge.artifacts.loader import RouterBundle, load_bundle, read_manifest

BUNDLE_ARTIFACT = "bundle"
SKIP_SIGNATURE_ENV = "ROUTEFORGE_INSECURE_SKIP_SIGNATURE"
MODEL_NAME_IN_RUN = "router_bundle"
ENTRY = Path(__file__).with_name("pyfunc_entry.py")
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


class RouterModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: `load_context` verifies and loads the bundle, `predict` routes prompts."""

    def load_context(self, context) -> None:
        skip = os.environ.get(SKIP_SIGNATURE_ENV, "").strip().lower() in ("1", "true", "yes")
        self.bundle = load_bundle(context.artifacts[BUNDLE_ARTIFACT], allow_unsigned=skip)

    def predict(self, context, model_input, params: dict[str, Any] | None = None):
        import pandas as pd

        if isinstance(model_input, pd.DataFrame):
            if "prompt" not in model_input.columns:
                raise ValueError(f"input needs a 'prompt' column (got {list(model_input.columns)})")
            prompts = model_input["prompt"].astype(str).tolist()
        else:
            prompts = [str(p) for p in model_input]
        lam = float((params or {}).get("lam", 0.0))
        return pd.DataFrame(route(self.bundle, prompts, lam))


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


def log_bundle_model(bundle_dir: Path):
    """Log `bundle_dir` as a pyfunc model into the active run; returns MLflow's ModelInfo."""
    import pandas as pd

    bundle = RouterBundle(Path(bundle_dir), read_manifest(Path(bundle_dir)))  # just written by the publisher
    return mlflow.pyfunc.log_model(
        name=MODEL_NAME_IN_RUN, python_model=str(ENTRY), artifacts={BUNDLE_ARTIFACT: str(bundle_dir)},
        signature=signature(bundle), input_example=pd.DataFrame({"prompt": EXAMPLE_PROMPTS}),
        pip_requirements=requirements())
