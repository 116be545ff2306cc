"""The one folder routeforge keeps its local state in: `$ROUTEFORGE_STATE`, else `.state` in the
working directory (the Makefile sets it to the checkout's `.state`).

Everything a run or a command keeps between invocations lives under it, so moving it moves all of
it: the Dagster instance (`dagster/`, the same for `make ui`, `make demo` and `python -m
routeforge.pipelines.run`), the local MLflow store (`mlflow.db`, `mlartifacts/`), the shipped
fleets' storage roots (`${ROUTEFORGE_STATE}/<fleet>` in their files), the bundle cache
(`cache/bundles/`), exported encoders (`encoders/`), the runs' logs (`logs/`) and `registries.json`:
the registry each fleet run registered its model in, which the CLI looks in first for that model's
`models:/` references (a fleet with its own store needs no `--tracking-uri` afterwards)."""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE_ENV = "ROUTEFORGE_STATE"


def state_root() -> Path:
    """The state folder, absolute (a relative `$ROUTEFORGE_STATE` is taken from the working directory)."""
    return Path(os.environ.get(STATE_ENV) or ".state").resolve()


REGISTRIES = "registries.json"


def sqlite_file(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///…` tracking URI (None for any other store): the one parse
    that the light reader, the store check and MLflow's client all get. A percent-encoded path is
    refused: SQLAlchemy decodes it and sqlite3 does not, so one URI would name two files."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    path = tracking_uri.removeprefix("sqlite:///").split("?", 1)[0]
    if "%" in path:
        raise ValueError(f"{tracking_uri}: a percent-encoded path in a sqlite tracking URI is read as one file by "
                         "sqlite3 and as another by MLflow; write the path as it is")
    return Path(path)


SQLITE_HEADER = b"SQLite format 3\x00"


def is_sqlite_database(path: Path) -> bool:
    """Whether `path` is a plain file that starts with SQLite's header (a 0-byte file is not: MLflow
    would write its whole schema into it)."""
    try:
        with open(path, "rb") as f:
            return Path(path).is_file() and f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def record_registry(model_name: str, tracking_uri: str) -> None:
    """Remember that `model_name` is registered at `tracking_uri` (written by every pipeline run that
    registers; the newest run wins), atomically."""
    if not state_root().is_dir():  # a run whose state is all elsewhere (S3, PostgreSQL) leaves no folder
        return
    path = state_root() / REGISTRIES
    known = _registries(path)
    if known.get(model_name) == tracking_uri:
        return
    tmp = path.with_name(f".{REGISTRIES}.{os.getpid()}")
    tmp.write_text(json.dumps({**known, model_name: tracking_uri}, indent=2, sort_keys=True))
    tmp.replace(path)


def recorded_registry(model_name: str) -> str | None:
    """The tracking URI a pipeline run of this state folder registered `model_name` at, if it is still
    there (a SQLite store whose file is gone is not offered)."""
    uri = _registries(state_root() / REGISTRIES).get(model_name)
    database = sqlite_file(uri) if uri else None
    return None if database is not None and not database.is_file() else uri


def default_tracking_uri(model_name: str | None) -> str | None:
    """Where a `models:/` reference is looked up when neither a tracking URI nor `$MLFLOW_TRACKING_URI`
    is given (the CLI's option and `load_bundle` read those first): the store a pipeline run of this
    state folder registered `model_name` at, else the state folder's own `mlflow.db` where it exists
    (`make demo`'s)."""
    recorded = recorded_registry(model_name) if model_name else None
    if recorded:
        return recorded
    return f"sqlite:///{local_store()}" if local_store().is_file() else None


def local_store() -> Path:
    """The state folder's own MLflow store, `make demo`'s: `<state folder>/mlflow.db`."""
    return state_root() / "mlflow.db"


def where_looked(model_name: str | None) -> str:
    """What `default_tracking_uri` looked at, in words, for the error that it found nothing."""
    return (f"$MLFLOW_TRACKING_URI is unset, no pipeline run recorded {model_name or 'the model'}'s registry in "
            f"{state_root() / REGISTRIES}, and there is no {local_store()}")


def _registries(path: Path) -> dict[str, str]:
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict):
        return {}
    return {k: v for k, v in known.items() if isinstance(k, str) and isinstance(v, str)}

