"""The few registry reads a router service makes on every start, over MLflow's REST API with the
standard library: which version an alias points at, and the registered model's tags (the public
key the pipeline recorded). Why not MLflow's client: importing `mlflow` alone takes ~3.7 s on a
2-core machine, which made `predict models:/…@champion` cost 7 s with the bundle already cached.
Only for an `http(s)://` tracking server; `registry_sqlite` reads a local SQLite store the same way,
and any other store goes through MLflow (`registry.light_registry` picks).
Credentials as MLflow reads them: $MLFLOW_TRACKING_TOKEN (bearer), else $MLFLOW_TRACKING_USERNAME
and $MLFLOW_TRACKING_PASSWORD (basic)."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

TIMEOUT_ENV = "ROUTEFORGE_HTTP_TIMEOUT"


class NotFound(LookupError):
    """The server answered that the model, alias or version does not exist."""


def models_ref(uri: str) -> tuple[str, str | None, str | None]:
    """(name, alias, version) of `models:/<name>@<alias>` or `models:/<name>/<version>` (one of the two
    is None)."""
    ref = uri.removeprefix("models:/").rstrip("/")
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return name, alias, None
    name, _, version = ref.partition("/")
    return name, None, version or None


def is_http(tracking_uri: str | None) -> bool:
    return bool(tracking_uri) and tracking_uri.startswith(("http://", "https://"))


def _get(tracking_uri: str, path: str, params: dict[str, str]) -> dict[str, Any]:
    url = f"{tracking_uri.rstrip('/')}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(params)}"
    request = urllib.request.Request(url)
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        request.add_header("Authorization", f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}")
    elif os.environ.get("MLFLOW_TRACKING_USERNAME"):
        pair = f"{os.environ['MLFLOW_TRACKING_USERNAME']}:{os.environ.get('MLFLOW_TRACKING_PASSWORD', '')}"
        request.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    timeout = float(os.environ.get(TIMEOUT_ENV) or 10.0)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read().decode())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise NotFound(path) from None
        raise


def registered_model(tracking_uri: str, name: str) -> dict[str, Any]:
    """{name, tags: {key: value}, aliases: {alias: version}} of a registered model."""
    model = _get(tracking_uri, "registered-models/get", {"name": name})["registered_model"]
    return {"name": model["name"], "tags": {t["key"]: t.get("value", "") for t in model.get("tags", [])},
            "aliases": {a["alias"]: str(a["version"]) for a in model.get("aliases", [])}}


def resolve_version(uri: str, aliases: Callable[[str], dict[str, str]],
                    check_version: Callable[[str, str], None]) -> tuple[str, str]:
    """(name, version) of `models:/<name>@<alias>` or `models:/<name>/<version>`, from a store's
    `aliases(name)` and `check_version(name, version)` (which raises NotFound); NotFound when the model,
    alias or version does not exist (the caller then asks MLflow, which names what does)."""
    name, alias, version = models_ref(uri)
    if alias is not None:
        known = aliases(name)
        if alias not in known:
            raise NotFound(alias)
        return name, known[alias]
    check_version(name, str(version))
    return name, str(version)


def version_of(tracking_uri: str, uri: str) -> tuple[str, str]:
    """`resolve_version` over the server's REST API."""
    return resolve_version(uri, lambda name: registered_model(tracking_uri, name)["aliases"],
                           lambda name, v: _get(tracking_uri, "model-versions/get", {"name": name, "version": v}))
