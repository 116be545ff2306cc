"""What `pip install .` puts into site-packages: one top-level package, `routeforge`, holding every
folder of the checkout that is a package (issue 36)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.conftest import REPO
from tools.package_view import package_dirs


def _checkout_packages() -> set[str]:
    """Every package folder under the mapped roots, as its installed dotted name."""
    names = set()
    for name, folder in package_dirs().items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            names.add(".".join((name, *rel)))
    return names


def test_every_package_folder_is_listed_for_the_wheel():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert listed == _checkout_packages(), "pyproject.toml [tool.setuptools] packages is out of date"


def test_the_wheel_installs_one_top_level_package(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(REPO)], check=True, capture_output=True, timeout=600)
    wheel = next(tmp_path.glob("routeforge-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top_level = zf.read(next(n for n in names if n.endswith(".dist-info/top_level.txt"))).decode().split() \
            if any(n.endswith("top_level.txt") for n in names) else []
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert roots == {"routeforge"}, roots
    assert top_level in ([], ["routeforge"]), top_level
    packages = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packages == _checkout_packages()
    assert "routeforge/artifacts/manifest.schema.json" in names
