"""The one folder routeforge keeps its local state in: `$ROUTEFORGE_STATE`, else `.state` in the
working directory (the Makefile sets it to the checkout's `.state`).

Everything a run or a command keeps between invocations lives under it, so moving it moves all of
it: the Dagster instance (`dagster/`, the same for `make ui`, `make demo` and `python -m
routeforge.pipelines.run`), the local MLflow store (`mlflow.db`, `mlartifacts/`), the shipped
fleets' storage roots (`${ROUTEFORGE_STATE}/<fleet>` in their files), the bundle cache
(`cache/bundles/`), exported encoders (`encoders/`) and the runs' logs (`logs/`)."""

from __future__ import annotations

import os
from pathlib import Path

STATE_ENV = "ROUTEFORGE_STATE"


def state_root() -> Path:
    """The state folder, absolute (a relative `$ROUTEFORGE_STATE` is taken from the working directory)."""
    return Path(os.environ.get(STATE_ENV) or ".state").resolve()
