"""A fresh virtual environment holding routeforge's runtime alone: `pip install routeforge` as a
router service would run it (this checkout's wheel, its declared dependencies from the index, no
extras), for the runtime test and `benchmarks/runtime_footprint.py`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def clean_env() -> dict[str, str]:
    """This process's environment without what would leak the current interpreter's packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def build_wheel(dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dst),
                    str(REPO)], check=True, capture_output=True, timeout=600)
    return next(dst.glob("routeforge-*.whl"))


def make_runtime_venv(folder: Path, extras: str = "") -> Path:
    """Create `folder` as a venv with the runtime (plus `extras`, e.g. "[mlflow]") installed; returns
    its python. Raises with pip's own message when the index cannot be reached."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    build_wheel(folder.parent / f"{folder.name}-wheel")
    _pip_install(folder, extras)
    return folder / "bin" / "python"


def _pip_install(folder: Path, extras: str, pins: tuple[str, ...] = ()) -> None:
    """`pip install <the checkout's wheel><extras> <pins>` into the venv at `folder`."""
    wheel = next((folder.parent / f"{folder.name}-wheel").glob("routeforge-*.whl"))
    result = subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q",
                             "--disable-pip-version-check", f"{wheel}{extras}", *pins], capture_output=True,
                            text=True, timeout=1200, env=clean_env())
    if result.returncode != 0:
        raise RuntimeError(f"pip install of the runtime{extras} failed: {result.stderr.strip()[-2000:]}")


def install_extras(folder: Path, extras: str, pins: tuple[str, ...] = ()) -> None:
    """Add `extras` (e.g. "[mlflow]") to the runtime `make_runtime_venv(folder)` installed, from the same
    wheel, as a router service's `pip install 'routeforge[mlflow]'` would; `pins` ("mlflow-skinny==3.7.0")
    hold packages at the versions given."""
    _pip_install(folder, extras, pins)


def site_packages_bytes(python: Path) -> int:
    """Bytes of every file under the environment's site-packages (what the install added)."""
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, env=clean_env()).stdout.strip()
    return sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file() and not p.is_symlink())


def installed(python: Path) -> list[str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True, env=clean_env()).stdout
    return sorted(line.split("==")[0].lower() for line in out.split())
