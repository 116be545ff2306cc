"""What MLflow imports to load a registered bundle (`loader_module` of its `python_function`
flavour, `registry.mlflow_model`): installed package code, never a file stored with the model.

`_load_pyfunc` first checks that the model folder carries no code (no Python file, no code path in
MLmodel): a model that does was not written by routeforge, or was changed after it was, and is
refused before anything in it could run. A version whose large components are stored by digest
(`artifacts.bundle.shared_components`) is assembled in the bundle cache, never in the model folder (which
may be the registry's own store). Then it loads the bundle as `load_bundle` does: every checksum and
the signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from routeforge.artifacts.bundle.bundle_cache import BundleCache
from routeforge.artifacts.bundle.download import bundle_folder, with_shared_components
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.verification import BundleVerificationError, trusted_key

CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pth")


class UnsignedCode(RuntimeError):
    """A registered model carries code outside the bundle's signature."""


def check_no_code(model_dir: Path) -> None:
    """Refuse a model folder with a code path in MLmodel or any executable Python file in it."""
    import yaml

    model_dir = Path(model_dir)
    mlmodel = model_dir / "MLmodel"
    if mlmodel.is_file():
        flavor = (yaml.safe_load(mlmodel.read_text()) or {}).get("flavors", {}).get("python_function", {})
        code = flavor.get("code") or flavor.get("model_code_path")
        if code:
            raise UnsignedCode(f"{model_dir}: MLmodel names code ({code}) that the bundle's signature does not "
                               "cover; refusing to load it")
    found = sorted(str(p.relative_to(model_dir)) for p in model_dir.rglob("*") if p.suffix in CODE_SUFFIXES)
    if found:
        raise UnsignedCode(f"{model_dir}: holds code the bundle's signature does not cover ({', '.join(found[:3])}"
                           f"{' …' if len(found) > 3 else ''}); refusing to load it")


class BundleModel:
    """The loaded model: `predict(frame, params)` routes the `prompt` column."""

    def __init__(self, bundle):
        self.bundle = bundle

    def predict(self, model_input, params: dict[str, Any] | None = None):
        import pandas as pd
        from routeforge.registry.mlflow_model import route  # lazy: mlflow, pandas on first use

        if isinstance(model_input, pd.DataFrame):
            if "prompt" not in model_input.columns:
                raise ValueError(f"input needs a 'prompt' column (got {list(model_input.columns)})")
            prompts = model_input["prompt"].astype(str).tolist()
        else:
            prompts = [str(p) for p in model_input]
        return pd.DataFrame(route(self.bundle, prompts, float((params or {}).get("lam", 0.0))))


def _load_pyfunc(data_path: str) -> BundleModel:
    from routeforge.registry.mlflow_model import skip_signature  # lazy: mlflow, pandas on first use

    data = Path(data_path).resolve()
    model_dir = next((p for p in (data, *data.parents) if (p / "MLmodel").is_file()), data)
    check_no_code(model_dir)
    inner = bundle_folder(model_dir)
    key = None if skip_signature() else trusted_key(None)  # checked before any component is linked
    folder = with_shared_components(inner, in_place=False, public_key=key)
    try:
        return BundleModel(load_bundle(str(folder), allow_unsigned=skip_signature()))
    except BundleVerificationError:
        if folder == inner:
            raise
        BundleCache().forget(folder)  # a cached assembly damaged since: assembled again, verified again
        folder = with_shared_components(inner, in_place=False, public_key=key)
        return BundleModel(load_bundle(str(folder), allow_unsigned=skip_signature()))
