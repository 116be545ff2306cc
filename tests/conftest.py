"""Shared fixtures. Everything runs offline: hub access is disabled before any HF import."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = Path(os.environ.get("ROUTEFORGE_DATA", REPO.parent / "shared" / "data"))
    assert (path / "responses").is_dir(), f"shared data not found at {path}; set ROUTEFORGE_DATA"
    return path


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    """Point every config's storage and MLflow store at a fresh temporary folder."""
    state = tmp_path / "state"
    monkeypatch.setenv("ROUTEFORGE_STATE", str(state))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return state


def write_config(directory: Path, base: str, **overrides) -> Path:
    """A copy of configs/<base>.yaml in `directory` with top-level keys replaced.

    Dataset paths are made absolute so the copy reads the same files as the original.
    """
    raw = yaml.safe_load((CONFIGS / f"{base}.yaml").read_text())
    for ds in raw.get("datasets", []):
        if "path" in ds and not str(ds["path"]).startswith(("/", "$")):
            ds["path"] = str(CONFIGS / ds["path"])
    raw.update(overrides)
    target = directory / f"{base}.yaml"
    target.write_text(yaml.safe_dump(raw, sort_keys=False))
    return target


@pytest.fixture
def config_copy(tmp_path, shared_data, monkeypatch):
    """Factory for modified copies of a shipped config (RouterBench files from `shared_data`)."""
    monkeypatch.setenv("ROUTEFORGE_DATA", str(shared_data))
    folder = tmp_path / "configs"
    folder.mkdir()
    return lambda base, **overrides: write_config(folder, base, **overrides)
