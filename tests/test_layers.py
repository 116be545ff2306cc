"""The import-linter contracts in pyproject.toml hold on the tree, and catch the breaches they exist for.

Each breach is written into a copy of the installed layout (`tools.package_view`, never the checkout),
and `lint-imports` runs there with the copy first on the path, so the check reads exactly the modules
it was given.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools.package_view import build_view, lint


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The installed layout (`routeforge/<folder>/...`) as copies the test may edit."""
    return build_view(tmp_path, copy=True)


def _lint(view: Path) -> subprocess.CompletedProcess:
    return lint(view)


def test_contracts_hold_on_the_tree(tree_copy: Path):
    result = _lint(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("module, line, broken", [
    ("routeforge/core/schemas.py", "import dagster  # noqa", "Dagster lives in pipelines/ and assets/ only"),
    ("routeforge/core/schemas.py", "import routeforge.pipelines.definitions  # noqa", "routeforge.core is not allowed to import routeforge.pipelines"),
    ("routeforge/artifacts/deciding/knn.py", "import routeforge.core.schemas  # noqa", "routeforge.artifacts is not allowed to import routeforge.core"),
    ("routeforge/artifacts/deciding/knn.py", "import routeforge.artifacts.bundle.loader  # noqa",
     "routeforge.artifacts.deciding is not allowed to import"),
    ("routeforge/artifacts/bundle/manifest.py", "import routeforge.artifacts.bundle.writer  # noqa",
     "No cycles are allowed in routeforge.artifacts.bundle"),
    ("routeforge/training/predictors/knn.py", "import routeforge.assets.routing  # noqa", "routeforge.training is not allowed to import routeforge.assets"),
])
def test_a_breach_fails_the_lint(tree_copy: Path, module: str, line: str, broken: str):
    path = tree_copy / module
    path.write_text(path.read_text() + f"\n{line}\n")
    result = _lint(tree_copy)
    assert result.returncode != 0
    assert broken in result.stdout.replace("\n", " "), result.stdout
