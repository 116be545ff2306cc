"""The import-linter contracts in pyproject.toml hold on the tree, and catch the breaches they exist for.

Each breach is written into a copy of the source tree (never the checkout), and `lint-imports` runs
there with the copy first on the path, so the check reads exactly the modules it was given.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("pipelines", "assets", "training", "profiling", "scoring", "generation", "prompts", "core", "artifacts")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_contracts_hold_on_the_tree(tree_copy: Path):
    result = _lint(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("module, line, broken", [
    ("core/schemas.py", "import dagster  # noqa", "Dagster lives in pipelines/ and assets/ only"),
    ("core/schemas.py", "import pipelines.definitions  # noqa", "core is not allowed to import pipelines"),
    ("artifacts/knn.py", "import core.schemas  # noqa", "artifacts is not allowed to import core"),
    ("training/predictors/knn.py", "import assets.routing  # noqa", "training is not allowed to import assets"),
])
def test_a_breach_fails_the_lint(tree_copy: Path, module: str, line: str, broken: str):
    path = tree_copy / module
    path.write_text(path.read_text() + f"\n{line}\n")
    result = _lint(tree_copy)
    assert result.returncode != 0
    assert broken in result.stdout.replace("\n", " "), result.stdout
